"""A calculator tool: arithmetic expressions evaluated by walking Python's `ast`, never `eval`.

Numbers, + - * / // % **, unary signs, parentheses and a few functions (abs, round, min, max,
sqrt). Sizes are bounded so a hostile expression cannot take the trainer's time or memory:
the expression's length, exponents, and the digits of every intermediate integer.
"""

from __future__ import annotations

import ast
import math
import operator

from hybridrl.rollout.tools.base import TOOLS, Tool, ToolError, function_schema

MAX_CHARS = 256  # longest expression accepted
MAX_EXPONENT = 1000  # largest |b| in a ** b
MAX_INT_BITS = 4096  # about 1233 decimal digits: larger intermediate integers are refused

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"abs": abs, "round": round, "min": min, "max": max, "sqrt": math.sqrt}


def _check_size(value):
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolError("the result is too large")
    if isinstance(value, complex) or isinstance(value, float) and not math.isfinite(value):
        raise ToolError("the result is not a finite real number")
    return value


def _eval(node: ast.AST):
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponents are limited to {MAX_EXPONENT}")
        try:
            return _check_size(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise ToolError("division by zero") from None
        except OverflowError:
            raise ToolError("the result is too large") from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS \
            and not node.keywords:
        try:
            return _check_size(_FUNCTIONS[node.func.id](*[_eval(a) for a in node.args]))
        except (TypeError, ValueError) as e:
            raise ToolError(f"{node.func.id}(): {e}") from None
    raise ToolError(f"unsupported syntax: {ast.dump(node)[:60]}; use numbers, + - * / // % **, parentheses and "
                    f"{', '.join(_FUNCTIONS)}")


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression; ToolError when it is not one (or is too large)."""
    if len(expression) > MAX_CHARS:
        raise ToolError(f"the expression is longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ToolError(f"cannot parse the expression: {e.msg}") from None
    value = _eval(tree)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        return int(value)  # 10/2 reads as 5, the way a person writes it
    return value


@TOOLS.register("calculator", "evaluates an arithmetic expression (safe: an ast walk, no eval)")
class Calculator(Tool):
    default_schema = function_schema("calculator", "Evaluate an arithmetic expression, e.g. 1234*5678 or (2+3)**2/7.",
                                     "expression", "the arithmetic expression")

    def call(self, arguments: dict) -> str:
        expression = arguments.get("expression")
        if not isinstance(expression, str):
            raise ToolError('calculator needs {"expression": "<arithmetic>"}')
        return str(evaluate(expression))
