"""Multi-turn rollouts with tools: model turns and tool turns alternate until the model answers
(a turn without a tool call), `max_assistant_turns` is reached, or the response budget
(data.max_response_length tokens, model and tool tokens together) is spent.

It wraps any RolloutEngine and calls its generate once per turn, with each conversation so far
(prompt + response tokens) as the new prompt, so it works with every backend. Token-in/token-out:
the model's tokens are kept exactly as sampled (a turn is cut right after its first
`</tool_call>`; later tokens were never part of the conversation), and each tool response is
appended as tokens built from the chat template once (ChatDelta), never by re-tokenizing the
conversation. The result is one response per row:

    [model turn 1 | tool turn 1 | model turn 2 | ... ]   response_mask 1 | 0 | 1 | ...

with log-probs 0 on tool tokens; the trainer attends to tool tokens (attention_mask) but never
trains on them. Every call of generate makes exactly max_assistant_turns engine calls (skip()
for turns with nothing left to generate), so the keyed sampling counters (rollout/keyed.py)
advance the same on every data-parallel rank and a row's draws depend only on its identity.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterable

import torch
from torch import Tensor

from hybridrl.openai_api.hermes import end_of_first_call, parse_tool_calls
from hybridrl.rollout.base import Generation, RolloutEngine, SamplingParams
from hybridrl.rollout.tools.base import ERROR_KINDS, CallResult, Tool, run_calls
from hybridrl.surrogates import replace_lone_surrogates

_MARK_A, _MARK_T = "\x00ASSISTANT\x00", "\x00TOOL\x00"


class ChatDelta:
    """The tokens that follow a model turn ending in a tool call: the template's end of the
    assistant turn, a tool message holding the tool's answer, and the next assistant header.
    For ChatML: `<|im_end|>\\n<|im_start|>tool\\n<tool_response>\\n{text}\\n</tool_response><|im_end|>\\n
    <|im_start|>assistant\\n`. Read once from the tokenizer's chat template (rendering marker strings)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "u"}, {"role": "assistant", "content": _MARK_A},
             {"role": "tool", "content": _MARK_T}], add_generation_prompt=True, tokenize=False)
        if _MARK_A not in text or _MARK_T not in text:
            raise ValueError("the chat template does not render assistant and tool messages' content")
        before, after = text.split(_MARK_A, 1)[1].split(_MARK_T, 1)
        # Qwen2.5's template wraps tool messages in <tool_response> itself; ChatML-only templates do not
        self.wrap = ("", "") if "<tool_response>" in before else ("<tool_response>\n", "\n</tool_response>")
        self.open_ids = self._encode(before)  # e.g. <|im_end|>\n<|im_start|>tool\n
        self.close_ids = self._encode(after)  # e.g. <|im_end|>\n<|im_start|>assistant\n

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def tool_turn(self, response: str) -> list[int]:
        """The token ids that carry one tool response to the model and open its next turn. A lone surrogate
        in the answer becomes U+FFFD, as undecodable bytes do (tools/sandbox.py): a tool may echo one the
        model wrote as a JSON escape ("\\ud83d"), and the tokenizer would raise on it and stop the run."""
        text = replace_lone_surrogates(self.wrap[0] + response + self.wrap[1])
        return self.open_ids + self._encode(text) + self.close_ids


@dataclass(frozen=True)
class MultiTurnSettings:
    max_assistant_turns: int  # model turns per conversation (the last one's tool call is not run)
    max_tool_response_length: int  # characters of a tool's answer shown to the model (the rest is cut)


@dataclass
class Conversation:
    """One row's response so far: the tokens after the prompt, in order."""

    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)  # 1: sampled by the model, 0: a tool turn
    log_probs: list[float] = field(default_factory=list)  # the engine's log-probs; 0.0 on tool tokens
    done: bool = False
    turns: int = 0  # model turns taken
    calls: dict[str, int] = field(default_factory=dict)  # tool -> calls run
    errors: dict[str, int] = field(default_factory=dict)  # ERROR_KINDS -> count

    def add(self, tokens: list[int], log_probs: list[float] | None) -> None:
        self.tokens += tokens
        self.mask += [0 if log_probs is None else 1] * len(tokens)
        self.log_probs += [0.0] * len(tokens) if log_probs is None else log_probs


class MultiTurnEngine(RolloutEngine):
    """A RolloutEngine whose responses are whole tool-using conversations (see the module docstring)."""

    def __init__(self, inner: RolloutEngine, tokenizer, tools: dict[str, Tool], settings: MultiTurnSettings):
        self.inner, self.tokenizer, self.tools, self.settings = inner, tokenizer, tools, settings
        self.delta = ChatDelta(tokenizer)
        self.pad_token_id = tokenizer.pad_token_id
        self._pieces: dict[int, str] = {}  # token id -> its text alone (for finding </tool_call>)

    @property
    def shares_weights(self) -> bool:  # type: ignore[override]
        return self.inner.shares_weights

    @property
    def draws(self):  # type: ignore[override]
        return self.inner.draws

    def load_weights(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        self.inner.load_weights(named_tensors)

    def close(self) -> None:
        self.inner.close()

    def skip(self, stream: str = "train") -> None:
        for _ in range(self.settings.max_assistant_turns):  # the calls a generate would have made
            self.inner.skip(stream)

    def generate(self, prompt_ids: Tensor, prompt_mask: Tensor, sampling: SamplingParams,
                 sample_ids: Tensor, stream: str = "train") -> Generation:
        """Conversations for prompts [N, P] (left-padded); the response budget is sampling.max_new_tokens.
        Returns a Generation whose attention_mask covers tool tokens and whose stats count turns,
        tool calls and errors per row."""
        prompts = [row[m.bool()].tolist() for row, m in zip(prompt_ids.cpu(), prompt_mask.cpu())]
        convs = [Conversation() for _ in prompts]
        budget = sampling.max_new_tokens
        for turn in range(self.settings.max_assistant_turns):
            active = [i for i, c in enumerate(convs) if not c.done and len(c.tokens) < budget]
            if not active:
                self.inner.skip(stream)
                continue
            ids, mask = _left_pad([prompts[i] + convs[i].tokens for i in active], self.pad_token_id)
            room = max(budget - len(convs[i].tokens) for i in active)
            out = self.inner.generate(ids.to(prompt_ids.device), mask.to(prompt_ids.device),
                                      dataclasses.replace(sampling, max_new_tokens=room), sample_ids[active], stream)
            last = turn + 1 == self.settings.max_assistant_turns
            pending = self._take_model_turns(convs, active, out, budget, last)
            self._add_tool_turns(convs, pending, budget)
        return self._generation(convs, budget, prompt_ids.device)

    def _piece(self, token: int) -> str:
        if token not in self._pieces:
            self._pieces[token] = self.tokenizer.decode([token])
        return self._pieces[token]

    def _take_model_turns(self, convs: list[Conversation], active: list[int], out: Generation, budget: int,
                          last: bool) -> list[tuple[int, CallResult | tuple[Tool, dict]]]:
        """Append each active row's sampled turn (up to its first </tool_call> and within the budget);
        the rows whose turn ends in a call, with the call to run or the error to report."""
        pending = []
        ids, masks, lps = out.response_ids.cpu(), out.response_mask.cpu().bool(), out.log_probs.cpu()
        for k, i in enumerate(active):
            c = convs[i]
            tokens = ids[k][masks[k]].tolist()[:budget - len(c.tokens)]
            log_probs = lps[k][masks[k]].tolist()[:len(tokens)]
            cut = end_of_first_call([self._piece(t) for t in tokens])
            c.turns += 1
            c.add(tokens[:cut], log_probs[:cut])  # cut None: the whole turn
            if cut is None or last:  # an answer, a truncated turn, or a call with no turn left to read it
                c.done = True
                continue
            pending.append((i, self._resolve(parse_tool_calls(self.tokenizer.decode(tokens[:cut]))[-1])))
        return pending

    def _resolve(self, call) -> CallResult | tuple[Tool, dict]:
        """The tool and arguments to call, or the error message a malformed or unknown call gets."""
        if call.name is not None and call.name not in self.tools:
            return CallResult(f"Error: unknown tool {call.name!r}; the tools are {', '.join(sorted(self.tools))}",
                              "unknown_tool", None)
        if call.error is not None:
            return CallResult(f"Error: {call.error}", "malformed", call.name)
        return self.tools[call.name], call.arguments

    def _add_tool_turns(self, convs: list[Conversation], pending: list, budget: int) -> None:
        """Run the pending calls (concurrently) and append each answer as a tool turn (mask 0). A
        conversation whose tool turn would not fit with room for one more model token ends here."""
        runnable = [(i, x) for i, x in pending if not isinstance(x, CallResult)]
        ran = dict(zip([i for i, _ in runnable], run_calls([x for _, x in runnable])))
        for i, x in pending:
            c, result = convs[i], ran.get(i, x)
            if result.tool is not None and result.error not in ("unknown_tool", "malformed"):
                c.calls[result.tool] = c.calls.get(result.tool, 0) + 1
            if result.error is not None:
                c.errors[result.error] = c.errors.get(result.error, 0) + 1
            text = result.text
            if len(text) > self.settings.max_tool_response_length:
                text = text[:self.settings.max_tool_response_length] + "...(truncated)"
            tokens = self.delta.tool_turn(text)
            if len(c.tokens) + len(tokens) + 1 > budget:
                c.done = True  # cut cleanly: no half tool message, the response ends with the call
                continue
            c.add(tokens, None)

    def _generation(self, convs: list[Conversation], budget: int, device) -> Generation:
        """The conversations as right-padded tensors [N, T], T = the longest response (<= budget)."""
        T = max(1, max(len(c.tokens) for c in convs))
        ids = torch.full((len(convs), T), self.pad_token_id, dtype=torch.long)
        mask, attn = torch.zeros((len(convs), T), dtype=torch.long), torch.zeros((len(convs), T), dtype=torch.long)
        log_probs = torch.zeros((len(convs), T), dtype=torch.float32)
        for i, c in enumerate(convs):
            n = len(c.tokens)
            ids[i, :n], mask[i, :n], attn[i, :n] = torch.tensor(c.tokens), torch.tensor(c.mask), 1
            log_probs[i, :n] = torch.tensor(c.log_probs)
        return Generation(ids.to(device), mask.to(device), log_probs.to(device), attention_mask=attn.to(device),
                          stats=self._stats(convs))

    def _stats(self, convs: list[Conversation]) -> dict[str, Tensor]:
        """Per-row counts [N] float: num_turns, tool_call_counts/<tool>, tool_errors/<kind> (every key
        always present, so data-parallel shards concatenate)."""
        stats = {"num_turns": torch.tensor([float(c.turns) for c in convs])}
        for name in sorted(self.tools):
            stats[f"tool_call_counts/{name}"] = torch.tensor([float(c.calls.get(name, 0)) for c in convs])
        for kind in ERROR_KINDS:
            stats[f"tool_errors/{kind}"] = torch.tensor([float(c.errors.get(kind, 0)) for c in convs])
        return stats


def _left_pad(rows: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Token lists as left-padded ids and attention mask [N, L]."""
    L = max(len(r) for r in rows)
    ids = torch.full((len(rows), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), L), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, L - len(r):], mask[i, L - len(r):] = torch.tensor(r, dtype=torch.long), 1
    return ids, mask


def with_tools(engine: RolloutEngine, tokenizer, multi_turn) -> RolloutEngine:
    """`engine` wrapped for tool-using rollouts when multi_turn.enable (the config's
    actor_rollout_ref.rollout.multi_turn section), else `engine` itself."""
    if not multi_turn.enable:
        return engine
    from hybridrl.rollout.tools.loading import load_tools

    settings = MultiTurnSettings(multi_turn.max_assistant_turns, multi_turn.max_tool_response_length)
    return MultiTurnEngine(engine, tokenizer, load_tools(multi_turn.tool_config_path), settings)
