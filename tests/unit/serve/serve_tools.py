"""Tool-call fixtures of the serve tests: a chat template that renders tools (the bundled model's does not), the
tools of a calculator, and a backend that answers every job with a scripted text (what a model that calls
tools would write), so the server's parsing is tested whatever the tiny model would sample."""

from __future__ import annotations

import copy

from hybridrl.serve.backend import Backend
from hybridrl.serve.jobs import Inbox

# Hermes-style (Qwen2.5's layout, reduced): tools in a system turn, calls as <tool_call> JSON, results as tool turns
TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTools:\n{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}"
    "<|im_end|>\n{% endif %}"
    "{%- for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "{%- for call in message.get('tool_calls', []) %}<tool_call>{\"name\": \"{{ call.function.name }}\", "
    "\"arguments\": {{ call.function.arguments | tojson }}}</tool_call>{%- endfor %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "Evaluate an expression",
                                           "parameters": {"type": "object",
                                                          "properties": {"expression": {"type": "string"}}}}}]
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12+30"}}</tool_call>'


def scripted_tokenizer(tok):
    """A copy of the tokenizer whose chat template renders tools."""
    tok = copy.deepcopy(tok)
    tok.chat_template = TOOLS_TEMPLATE
    return tok


class ScriptedBackend(Backend):
    """Answers every job with the tokens of `script` and then EOS, one token per step (as a model streams)."""

    name = "scripted"

    def __init__(self, tok, eos: list[int]):
        self.tok, self.eos, self.script = tok, eos, ""

    def serve(self, inbox: Inbox) -> None:
        while (jobs := inbox.take(lambda queued: queued)) is not None:
            ids = self.tok(self.script, add_special_tokens=False)["input_ids"] + self.eos[:1]
            for job in jobs:
                for tok in ids:
                    if job.push([tok]):
                        break
                job.end("length")
