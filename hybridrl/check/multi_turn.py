"""The `multi-turn` check: the token sequence a run trains on is the one the model's chat template renders
for the same conversation, so the model learns on the context it is served with.

The rollout never re-renders a conversation (token-in/token-out, rollout/multi_turn.py): the prompt is
rendered once with the generation prompt, each model turn is kept as sampled, and each tool answer is
appended as the template's tokens for "end of turn, tool message, next assistant header" (ChatDelta).
That equals the template's rendering of the whole conversation only if the template is append-only:
rendering a longer conversation never changes how earlier messages render. Qwen3's template is not: it
drops earlier turns' <think> reasoning from the history. A run with such a template trains on contexts
the served model never sees (verl #6501, #6854).

The conversations are built from the run's first prompts with a scripted model (an assistant turn that
thinks and calls each configured tool, the tool's real answer, a final answer) driven through the
rollout's own MultiTurnEngine; no model is sampled, so the verdict is about the template and the
rollout's token bookkeeping alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Optional

import torch

from hybridrl.check.context import CheckContext
from hybridrl.check.registry import check
from hybridrl.check.result import Result, failed, passed
from hybridrl.errors import HybridRLError
from hybridrl.rollout.base import Generation, RolloutEngine, SamplingParams
from hybridrl.rollout.tools.base import Tool

PROMPTS = 3  # the run's first good prompts, each the start of one conversation
TOOL_TURNS = 2  # at most: two calls give an earlier assistant turn that a later rendering must keep
BUDGET = 8192  # response tokens of the scripted rollout: no conversation is cut short
ANSWER = "The answer is 3."
FALLBACK_PROMPT = [{"role": "user", "content": "What is 1+2?"}]
CONTEXT = 40  # characters of text shown before and after a divergence


class _Unrenderable(Exception):
    """The rollout cannot read the template's layout of a tool turn."""


@dataclass
class Tokens:
    """One conversation's token sequence as the rollout holds it, with where each turn starts."""

    ids: list[int]  # prompt + response
    turns: list[tuple[int, str]]  # (first position, "the prompt" | "model turn k" | "tool turn k"), in order

    def turn_at(self, position: int) -> tuple[str, int]:
        """The turn holding `position` and the position within it."""
        start, label = max((s, lab) for s, lab in self.turns if s <= position)
        return label, position - start


@check("multi-turn")
def multi_turn_check(ctx: CheckContext) -> Result:
    """The tokens the rollout accumulates turn by turn (prompt, model turns, the configured tools' answers)
    equal what the chat template renders for the same conversation, and every assistant turn ends with a
    token the rollout stops at; else the first divergence (turn, position, both tokens). With
    multi_turn.enable off it proves the same for one turn (prompt with the generation prompt + response +
    EOS): ✓, not n/a, since SFT data, serving and `hybridrl eval` all render with the template.

    Conversations start from the run's first prompts; the model's turns are scripted (a <think> block and a
    tool call per turn), so the verdict depends on the template and the rollout's bookkeeping alone."""
    from jinja2.exceptions import TemplateError

    tokenizer, mt = ctx.tokenizer, ctx.cfg.actor_rollout_ref.rollout.multi_turn
    eos = _eos_ids(ctx.model_path, tokenizer)
    prompts, source = _prompts(ctx)
    tools = _tools(mt) if mt.enable else {}
    turns = min(mt.max_assistant_turns - 1, TOOL_TURNS) if mt.enable else 0
    for messages in prompts:
        try:
            conversation, tokens = _rollout(tokenizer, messages, tools, turns, mt.max_tool_response_length)
            problem, end = _compare(tokenizer, conversation, tokens, eos, bool(tools))
        except (TemplateError, _Unrenderable) as e:
            return _unrenderable(e, bool(tools))
        if problem is not None:
            return problem
    what = (f"{turns + 1} model turns and {turns} tool turn{'s' if turns > 1 else ''} ({', '.join(sorted(tools))})"
            if turns else "one prompt and response")
    notes = [] if mt.enable else ["multi-turn is off: proved for single-turn responses"]
    if turns and _wraps(tokenizer):
        notes.append("the template does not wrap tool answers: the rollout writes them as <tool_response>\\n…\\n"
                     "</tool_response> (wrap tool messages the same way when serving the trained model)")
    return passed(f"the chat template renders exactly the rollout's tokens ({len(prompts)} conversations of {what}); "
                  f"assistant turns end with {tokenizer.convert_ids_to_tokens(end)!r}, an EOS", f"prompts: {source}",
                  *notes)


# ---- the conversations --------------------------------------------------------------------------------------
def _prompts(ctx: CheckContext) -> tuple[list[list[dict]], str]:
    """The chat messages of the run's first good train rows (a stand-in question when there are none: the
    data check reports bad rows), and where they come from."""
    from hybridrl.data.dataset import is_message

    key = ctx.cfg.data.prompt_key
    try:
        rows = ctx.rows("train", limit=50)
    except HybridRLError:
        rows = []
    found = [r[key] for r in rows if isinstance(r.get(key), list) and r[key] and all(is_message(m) for m in r[key])]
    if not found:
        return [FALLBACK_PROMPT], "a stand-in question (no readable prompt in data.train_files)"
    return [list(m) for m in found[:PROMPTS]], f"the first {min(len(found), PROMPTS)} of data.train_files"


def _tools(mt) -> dict[str, Tool]:
    from hybridrl.rollout.tools.loading import load_tools

    if not mt.tool_config_path:
        raise HybridRLError("actor_rollout_ref.rollout.multi_turn.enable=true needs "
                            "actor_rollout_ref.rollout.multi_turn.tool_config_path (a YAML file listing the tools)")
    return load_tools(mt.tool_config_path)


def _arguments(tool: Tool) -> dict:
    """Arguments for a call that fill the tool's required parameters with simple values of their type."""
    params = tool.schema["function"].get("parameters") or {}
    samples = {"string": "1+2", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}
    props = params.get("properties") or {}
    return {name: samples.get((props.get(name) or {}).get("type"), "1+2") for name in params.get("required") or []}


def _call_text(tool: Tool, limit: int) -> tuple[dict, str]:
    """A call's arguments and the tool's real answer to it as the model reads it (at most `limit` chars)."""
    from hybridrl.rollout.tools.base import run_calls

    arguments = _arguments(tool)
    return arguments, run_calls([(tool, arguments)])[0].text[:limit]


class _Replay(Tool):
    """A tool that answers with a text already obtained from the real tool (so the answer is known)."""

    def __init__(self, tool: Tool, text: str):
        super().__init__(tool.schema, tool.timeout_s)
        self.text = text

    def call(self, arguments: dict) -> str:
        return self.text


class _Scripted(RolloutEngine):
    """A rollout engine that 'samples' the given token lists, one per generate call, for a single row."""

    def __init__(self, turns: list[list[int]], pad_token_id: int):
        self.turns, self.pad_token_id = turns, pad_token_id

    def generate(self, prompt_ids, prompt_mask, sampling: SamplingParams, sample_ids, stream: str = "train"):
        ids = torch.tensor([self.turns.pop(0)], dtype=torch.long)  # [1, T]
        return Generation(ids, torch.ones_like(ids), torch.zeros(ids.shape))

    def skip(self, stream: str = "train") -> None:
        pass

    def load_weights(self, named_tensors: Iterable) -> None:
        pass


def _think(text: str) -> str:
    # Qwen3's own layout of a reasoning block, so a template that keeps it renders it unchanged
    return f"<think>\n{text}\n</think>\n\n"


def _rollout(tokenizer, messages: list[dict], tools: dict[str, Tool], turns: int,
             max_tool_chars: int) -> tuple[list[dict], Tokens]:
    """The conversation (messages) and the tokens the rollout accumulates for it: the prompt rendered as
    the dataset renders it, then, through MultiTurnEngine, `turns` model turns each thinking and calling a
    configured tool (in name order, cycling), ending with EOS, each followed by the tool's answer, then a
    final answer."""
    from hybridrl.data.dataset import encode_prompts
    from hybridrl.rollout.multi_turn import MultiTurnEngine, MultiTurnSettings

    prompt = encode_prompts(tokenizer, [messages])[0]
    if not turns:
        response = _encode(tokenizer, ANSWER)
        return messages + [{"role": "assistant", "content": ANSWER}], \
            Tokens(prompt + response, [(0, "the prompt"), (len(prompt), "the response")])
    conversation, script, replays = list(messages), [], {}
    names = sorted(tools)
    try:
        engine = MultiTurnEngine(_Scripted(script, tokenizer.pad_token_id), tokenizer, replays,
                                 MultiTurnSettings(turns + 1, max_tool_chars))
    except ValueError as e:  # ChatDelta finds no assistant or tool message content in the template's rendering
        raise _Unrenderable(str(e)) from None
    opening, closing = engine.delta.wrap  # <tool_response> tags the rollout adds where the template has none
    for k in range(turns):
        tool = tools[names[k % len(names)]]
        arguments, text = _call_text(tool, max_tool_chars)
        call = _think(f"Step {k + 1}: ask {tool.name}.") + \
            f"<tool_call>\n{json.dumps({'name': tool.name, 'arguments': arguments})}\n</tool_call>"
        conversation += [{"role": "assistant", "content": call}, {"role": "tool", "content": opening + text + closing}]
        script.append(_encode(tokenizer, call) + [tokenizer.eos_token_id])  # the model ends its turn; cut there
        replays[tool.name] = _Replay(tool, text)
    conversation.append({"role": "assistant", "content": ANSWER})
    script.append(_encode(tokenizer, ANSWER))
    out = engine.generate(torch.tensor([prompt]), torch.ones(1, len(prompt), dtype=torch.long),
                          SamplingParams(max_new_tokens=BUDGET), torch.tensor([0]))
    keep = out.attention_mask[0].bool()
    return conversation, Tokens(prompt + out.response_ids[0][keep].tolist(),
                                _turn_starts(len(prompt), out.response_mask[0][keep].tolist()))


def _turn_starts(offset: int, mask: list[int]) -> list[tuple[int, str]]:
    """Where each turn starts, from the rollout's response mask (1: the model's tokens, 0: a tool's)."""
    starts, counts = [(0, "the prompt")], {1: 0, 0: 0}
    for i, m in enumerate(mask):
        if i == 0 or m != mask[i - 1]:
            counts[m] += 1
            starts.append((offset + i, f"{'model' if m else 'tool'} turn {counts[m]}"))
    return starts


def _wraps(tokenizer) -> bool:
    """The rollout adds <tool_response> tags to tool answers (the template has none of its own)."""
    from hybridrl.rollout.multi_turn import ChatDelta

    return ChatDelta(tokenizer).wrap != ("", "")


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _render(tokenizer, conversation: list[dict]) -> list[int]:
    """The chat template's tokens for the whole conversation, tokenized as the dataset tokenizes prompts."""
    return _encode(tokenizer, tokenizer.apply_chat_template(conversation, tokenize=False))


# ---- the verdict --------------------------------------------------------------------------------------------
def _compare(tokenizer, conversation: list[dict], tokens: Tokens, eos: list[int],
             multi: bool) -> tuple[Optional[Result], int]:
    """(None, the EOS) when the rendering is the rollout's tokens and then an EOS; else (the ✗, -1)."""
    rendered = _render(tokenizer, conversation)
    ids = tokens.ids
    at = next((i for i, (a, b) in enumerate(zip(ids, rendered)) if a != b), None)
    if at is None and len(ids) > len(rendered):
        at = len(rendered)
    if at is not None:
        return _divergence(tokenizer, tokens, rendered, at, multi), -1
    if len(rendered) == len(ids) or rendered[len(ids)] not in eos:
        end = "nothing" if len(rendered) == len(ids) else repr(tokenizer.convert_ids_to_tokens(rendered[len(ids)]))
        names = ", ".join(repr(t) for t in tokenizer.convert_ids_to_tokens(eos))
        return failed(f"the chat template ends an assistant turn with {end}, which is not an EOS the rollout stops "
                      f"at ({names}): responses run on past the end of their turn",
                      fix="make the template close assistant turns with the EOS token, or add its id to "
                          "generation_config.json's eos_token_id in the model folder"), -1
    return None, rendered[len(ids)]


def _divergence(tokenizer, tokens: Tokens, rendered: list[int], at: int, multi: bool) -> Result:
    ids = tokens.ids
    label, offset = tokens.turn_at(min(at, len(ids) - 1))
    ours = _piece(tokenizer, ids, at)
    theirs = _piece(tokenizer, rendered, at)
    why = ("it renders earlier turns differently once the conversation goes on (e.g. drops <think> reasoning or "
           "earlier assistant turns from the history): the model trains on contexts it is never served")
    fix = "a chat template that renders every earlier message verbatim when the conversation grows"
    if not multi:
        why = "its generation prompt and the response differ from how it renders the assistant's turn"
        fix = "a chat template whose generation prompt opens the assistant's turn exactly as it renders it"
    return failed(
        f"the chat template does not render the tokens the rollout trains on: first divergence in {label}, token "
        f"{offset} (position {at} of the sequence)",
        f"both after …{tokenizer.decode(ids[max(0, at - CONTEXT):at])[-CONTEXT:]!r}",
        f"rollout : {ours}",
        f"template: {theirs}",
        f"the template is not append-only: {why}",
        fix=f"use {fix} (set chat_template in the model folder's tokenizer_config.json or chat_template.jinja)"
            + ("" if not multi else ", or turn multi-turn off (actor_rollout_ref.rollout.multi_turn.enable=false)"))


def _piece(tokenizer, ids: list[int], at: int) -> str:
    """The token at `at` and the text from there, or 'the end'."""
    if at >= len(ids):
        return "the end"
    return f"{tokenizer.convert_ids_to_tokens(ids[at])!r}, then {tokenizer.decode(ids[at:at + CONTEXT])[:CONTEXT]!r}…"


def _unrenderable(error: Exception, multi: bool) -> Result:
    what = "a conversation with tool turns" if multi else "a prompt and its response"
    return failed(f"the chat template cannot render {what}: {str(error).splitlines()[0][:200]}",
                  "the rollout reads its turns' layout off the template (rollout/multi_turn.py ChatDelta): every "
                  "message's content must render, in place",
                  fix="use a chat template that renders every message (user, assistant"
                      + (", tool" if multi else "") + ") verbatim (chat_template in the model folder's "
                      "tokenizer_config.json or chat_template.jinja)")


def _eos_ids(model_path: str, tokenizer) -> list[int]:
    """The tokens a rollout stops at, as the engines get them (models/loading.py eos_token_ids), read from the
    folder's generation config without loading weights."""
    from types import SimpleNamespace

    from transformers import AutoConfig, GenerationConfig

    from hybridrl.models.loading import eos_token_ids

    try:
        generation = GenerationConfig.from_pretrained(model_path)
    except OSError:  # no generation_config.json: transformers derives one from config.json
        generation = GenerationConfig.from_model_config(AutoConfig.from_pretrained(model_path))
    return eos_token_ids(SimpleNamespace(generation_config=generation), tokenizer)
