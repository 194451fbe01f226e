"""The `multi-turn` check (hybridrl/check/multi_turn.py): an append-only chat template passes, with tools and
without; templates that re-render the history (drop earlier <think> reasoning or earlier assistant turns, as
Qwen3's does), whose generation prompt differs from the assistant's turn, or that close a turn with a token
the rollout does not stop at are each a ✗ naming the first divergence or the token."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hybridrl.check.context import CheckContext
from hybridrl.check.multi_turn import multi_turn_check
from hybridrl.check.registry import CHECKS
from hybridrl.models.loading import BUNDLED

REPO = Path(__file__).resolve().parents[3]
TOOLS = str(REPO / "examples/tool_calc/tools.yaml")
CHATML = (REPO / "hybridrl/assets/tiny-arith/chat_template.jinja").read_text()  # append-only ChatML

# ChatML, but an assistant turn that is not the last message loses its <think> block (Qwen3 drops the
# reasoning of turns before the last user query; here of every earlier turn)
DROPS_REASONING = """{% for message in messages %}<|im_start|>{{ message['role'] }}
{% if message['role'] == 'assistant' and not loop.last %}{{ message['content'].split('</think>')[-1].lstrip('\\n') }}\
{% else %}{{ message['content'] }}{% endif %}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
# ChatML that keeps only the latest assistant turn of the history
DROPS_TURNS = """{% set ns = namespace(last=-1) %}{% for message in messages %}{% if message['role'] == 'assistant' %}\
{% set ns.last = loop.index0 %}{% endif %}{% endfor %}{% for message in messages %}\
{% if message['role'] != 'assistant' or loop.index0 == ns.last %}<|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
# ChatML for user and assistant messages only (a template without tool support)
NO_TOOL_ROLE = CHATML.replace("{% for message in messages %}", "{% for message in messages %}{% if message['role'] "
                              "== 'tool' %}{{ raise_exception('tool messages are not supported') }}{% endif %}")
# the generation prompt opens an empty reasoning block that the rendered assistant turn does not have
EMPTY_THINK_PROMPT = CHATML.replace("{% if add_generation_prompt %}<|im_start|>assistant\n",
                                    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n\n</think>\n\n")
# assistant turns end with <|endoftext|> (the pad token), not <|im_end|> (the EOS)
WRONG_END = CHATML.replace("{{ message['content'] }}<|im_end|>", "{{ message['content'] }}<|endoftext|>")


@pytest.fixture
def model_with(tmp_path):
    """template -> a copy of tiny-arith whose chat template is `template`."""
    def make(template: str) -> str:
        out = tmp_path / "model"
        shutil.copytree(BUNDLED["tiny-arith"], out)
        (out / "chat_template.jinja").write_text(template)
        return str(out)
    return make


def context(tmp_path, model: str, data: dict, multi_turn: bool = True) -> CheckContext:
    overrides = [f"actor_rollout_ref.model.path={model}", f"data.train_files=[{data['train']}]",
                 f"data.val_files=[{data['val']}]"]
    if multi_turn:
        overrides += ["actor_rollout_ref.rollout.multi_turn.enable=true",
                      f"actor_rollout_ref.rollout.multi_turn.tool_config_path={TOOLS}"]
    return CheckContext(None, overrides, str(tmp_path / "work"), log=lambda line: None)


def test_it_is_registered_with_what_it_proves():
    import hybridrl.check.multi_turn  # noqa: F401  (registers it)

    assert "equal what the chat template renders" in CHECKS.entry("multi-turn").doc


def test_an_append_only_template_passes_with_the_configured_tools(tmp_path, model_with, arith_data):
    r = multi_turn_check(context(tmp_path, model_with(CHATML), arith_data))
    assert r.status == "pass", (r.summary, r.details)
    assert "3 conversations of 3 model turns and 2 tool turns (calculator)" in r.summary
    assert "end with '<|im_end|>', an EOS" in r.summary


def test_single_turn_is_proved_when_multi_turn_is_off(tmp_path, model_with, arith_data):
    r = multi_turn_check(context(tmp_path, model_with(CHATML), arith_data, multi_turn=False))
    assert r.status == "pass", (r.summary, r.details)
    assert "one prompt and response" in r.summary and "multi-turn is off" in r.details[-1]


def test_a_template_that_drops_earlier_reasoning_fails_at_the_first_divergence(tmp_path, model_with, arith_data):
    r = multi_turn_check(context(tmp_path, model_with(DROPS_REASONING), arith_data))
    assert r.status == "fail"
    # the first model turn starts with the <think> block the template no longer renders once turns follow it
    # (the tiny tokenizer spells "<think>" and "<tool_call>" letter by letter: they part at the third token)
    assert "first divergence in model turn 1, token 2" in r.summary, r.summary
    assert r.details[0].endswith("<|im_start|>assistant\\n<t'"), r.details
    assert r.details[1].startswith("rollout : 'h', then 'hink>\\nStep 1: ask calculator."), r.details
    assert r.details[2].startswith("template: 'o', then 'ool_call>"), r.details
    assert "not append-only" in r.details[3] and "drops <think> reasoning" in r.details[3]
    assert "chat_template" in r.fix and "multi_turn.enable=false" in r.fix


def test_a_template_that_drops_earlier_assistant_turns_fails(tmp_path, model_with, arith_data):
    r = multi_turn_check(context(tmp_path, model_with(DROPS_TURNS), arith_data))
    assert r.status == "fail"
    # the generation prompt opens the assistant's turn; the template skips it and goes on with the tool's
    assert "first divergence in the prompt" in r.summary, r.summary
    assert r.details[1].startswith("rollout : 'assistant', then 'assistant\\n<think>"), r.details
    assert r.details[2].startswith("template: 't', then 'tool\\n<tool_response>"), r.details


def test_a_template_without_tool_messages_fails_multi_turn(tmp_path, model_with, arith_data):
    r = multi_turn_check(context(tmp_path, model_with(NO_TOOL_ROLE), arith_data))
    assert r.status == "fail"
    assert r.summary == ("the chat template cannot render a conversation with tool turns: tool messages are not "
                         "supported")
    assert "tool" in r.fix


def test_a_generation_prompt_unlike_the_rendered_turn_fails_single_turn(tmp_path, model_with, arith_data):
    r = multi_turn_check(context(tmp_path, model_with(EMPTY_THINK_PROMPT), arith_data, multi_turn=False))
    assert r.status == "fail"
    # the prompt ends with an empty <think></think> that the rendered conversation lacks
    assert "first divergence in the prompt" in r.summary, r.summary
    assert r.details[1].startswith("rollout : '<', then '<think>"), r.details
    assert r.details[2].startswith("template: 'The', then 'The answer is 3.<|im_end|>"), r.details
    assert "generation prompt" in r.details[3] and "generation prompt opens the assistant's turn" in r.fix


def test_a_turn_closed_by_a_token_the_rollout_does_not_stop_at_fails(tmp_path, model_with, arith_data):
    r = multi_turn_check(context(tmp_path, model_with(WRONG_END), arith_data, multi_turn=False))
    assert r.status == "fail"
    assert r.summary.startswith("the chat template ends an assistant turn with '<|endoftext|>', which is not an EOS "
                                "the rollout stops at ('<|im_end|>')"), r.summary
    assert "eos_token_id" in r.fix
