"""The calculator, tool loading from YAML, and how tool failures become messages."""

import time

import pytest

from hybridrl.errors import ConfigError
from hybridrl.rollout.tools.base import Tool, ToolError, run_calls
from hybridrl.rollout.tools.loading import load_tools
from hybridrl.rollout.tools.calculator import Calculator, evaluate


@pytest.mark.parametrize("expr, value", [("1234+5678", 6912), ("2*(3+4)", 14), ("10/4", 2.5), ("10/2", 5),
                                         ("-3**2", -9), ("7//2 + 7%2", 4), ("sqrt(16)", 4), ("max(1, 5, 3)", 5),
                                         ("123456789*987654321", 121932631112635269)])
def test_calculator_evaluates_arithmetic(expr, value):
    assert evaluate(expr) == value


@pytest.mark.parametrize("expr, message", [
    ("__import__('os').system('true')", "unsupported"), ("x + 1", "unsupported"), ("(1).real", "unsupported"),
    ("1/0", "division by zero"), ("2**100000", "exponents"), ("9**999*9**999*9**999", "too large"),
    ("10.0**400", "too large"), ("(-8)**0.5", "finite real"), ("1+", "cannot parse"), ("1" * 300, "longer"),
    ("'a'*3", "unsupported"), ("sqrt(-1)", "sqrt()")])
def test_calculator_refuses_what_is_not_bounded_arithmetic(expr, message):
    with pytest.raises(ToolError, match=message):
        evaluate(expr)


class Boom(Tool):
    default_schema = {"type": "function", "function": {"name": "boom"}}

    def call(self, arguments):
        raise RuntimeError("kaput")


class Sleepy(Tool):
    default_schema = {"type": "function", "function": {"name": "sleepy"}}

    def call(self, arguments):
        time.sleep(arguments["s"])
        return "woke"


def test_failures_become_messages_not_crashes():
    calc = Calculator()
    ok, bad, boom, slow, fast = run_calls([(calc, {"expression": "2+2"}), (calc, {"expr": 1}), (Boom(), {}),
                                           (Sleepy(timeout_s=0.3), {"s": 5}), (Sleepy(timeout_s=5), {"s": 0})])
    assert (ok.text, ok.error, ok.tool) == ("4", None, "calculator")
    assert bad.error == "bad_arguments" and "expression" in bad.text
    assert boom.error == "exception" and boom.text == "Error: RuntimeError: kaput"
    assert slow.error == "timeout" and "timed out after 0.3 s" in slow.text
    assert fast.text == "woke"


def test_calls_run_concurrently_against_one_clock():
    start = time.monotonic()
    results = run_calls([(Sleepy(timeout_s=0.5), {"s": 3})] * 4)
    assert all(r.error == "timeout" for r in results) and time.monotonic() - start < 1.5


def test_load_tools_from_yaml(tmp_path):
    module = tmp_path / "mytools.py"
    module.write_text("from hybridrl.rollout.tools.base import Tool\n"
                      "class Echo(Tool):\n    def call(self, arguments):\n        return arguments['text']\n")
    cfg = tmp_path / "tools.yaml"
    cfg.write_text(f"""tools:
  - class_name: calculator
  - class_name: python
    config: {{wall_s: 3}}
  - class_name: {module}:Echo
    tool_schema: {{type: function, function: {{name: echo, parameters: {{type: object}}}}}}
""")
    tools = load_tools(str(cfg))
    assert sorted(tools) == ["calculator", "echo", "python"]
    assert tools["python"].limits.wall_s == 3 and tools["echo"].call({"text": "hi"}) == "hi"
    assert tools["calculator"].schema["function"]["parameters"]["required"] == ["expression"]


def test_load_tools_errors_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_tools(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools:\n  - class_name: abacus\n")
    with pytest.raises(ConfigError, match="valid values: calculator, python"):
        load_tools(str(bad))
    bad.write_text("tools:\n  - class_name: calculator\n  - class_name: calculator\n")
    with pytest.raises(ConfigError, match="two tools"):
        load_tools(str(bad))
    bad.write_text("tools: [\n  - class_name: calculator\n")  # an unclosed flow list
    with pytest.raises(ConfigError, match=r"bad.yaml: not valid YAML \(.*line 2"):
        load_tools(str(bad))
    bad.write_text("tools:\n  - class_name: calculator\n    config: {timeout: 5}\n")  # the keyword is timeout_s
    with pytest.raises(ConfigError, match=r"tools\[0\] \(calculator\): bad config .*'timeout'"):
        load_tools(str(bad))


USER_TOOLS = '''
from hybridrl.rollout.tools.base import Tool

SCHEMA = {"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}


class Picky(Tool):
    def __init__(self, tool_schema=None, level=1, **kw):
        if level > 3:
            raise ValueError("level must be at most 3")
        super().__init__(tool_schema or SCHEMA, **kw)

    def call(self, arguments):
        return "ok"


class Quitter(Tool):
    def __init__(self, tool_schema=None, **kw):
        super().__init__(tool_schema or SCHEMA, **kw)

    def call(self, arguments):
        import sys
        sys.exit(3)


def not_a_class():
    return 1
'''


@pytest.mark.parametrize("entry, message", [
    ("{module}:Picky\n    config: {{level: 5}}", r"tools\[0\] \({module}:Picky\) could not be built: ValueError: level "
                                                  r"must be at most 3"),
    ("{module}:Picky\n    config: [1, 2]", r"tools\[0\] \({module}:Picky\): config must be a mapping"),
    ("{module}:not_a_class", r"tool class_name '{module}:not_a_class': {module} has a function, not a Tool subclass, "
                             r"as not_a_class"),
    ("{exits}:Anything", r"tool class_name '{exits}:Anything' failed to import: it called sys.exit\(7\)"),
    ("no_such_package_xyz.tools.Echo", r"tool class_name 'no_such_package_xyz.tools.Echo' failed to import: "
                                       r"ModuleNotFoundError"),
])
def test_user_tool_classes_that_fail_are_one_line(tmp_path, entry, message):
    """Each used to be a raw traceback (or, for sys.exit at import, a silent exit)."""
    import re

    module = tmp_path / "user_tools.py"
    module.write_text(USER_TOOLS)
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\nsys.exit(7)\n")
    cfg = tmp_path / "tools.yaml"
    cfg.write_text("tools:\n  - class_name: " + entry.format(module=module, exits=exits) + "\n")
    with pytest.raises(ConfigError, match=message.format(module=re.escape(str(module)), exits=re.escape(str(exits)))):
        load_tools(str(cfg))


def test_a_tool_that_calls_sys_exit_is_an_error_message_for_the_model(tmp_path):
    module = tmp_path / "user_tools.py"
    module.write_text(USER_TOOLS)
    cfg = tmp_path / "tools.yaml"
    cfg.write_text(f"tools:\n  - class_name: {module}:Quitter\n")
    (result,) = run_calls([(load_tools(str(cfg))["echo"], {})])
    assert (result.text, result.error) == ("Error: it called sys.exit(3)", "exception")


def test_tools_yaml_that_is_not_utf8_is_one_line(tmp_path):
    cfg = tmp_path / "tools.yaml"
    cfg.write_bytes(b"tools:\n  - class_name: calcul\xe9tor\n")
    with pytest.raises(ConfigError, match=r"tools.yaml: not UTF-8 text \(byte 0xe9 at offset 29\)"):
        load_tools(str(cfg))
