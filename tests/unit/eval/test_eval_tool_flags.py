"""`hybridrl eval`'s multi-turn flags: defaults taken from the trainer's config, and every bad value
refused in one line (exit code 2) before a model is loaded."""

from __future__ import annotations

import pytest

from hybridrl.cli import build_parser, main
from hybridrl.config.schema import MultiTurnConfig
from hybridrl.errors import ConfigError
from hybridrl.eval.evaluate import EvalSettings, check_settings, load_eval_tools
from hybridrl.rollout.multi_turn import MultiTurnSettings


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    """A data file (its existence is all the checks read) and tool configs, good and bad."""
    paths = {"data": tmp_path / "val.jsonl", "good": tmp_path / "tools.yaml", "bad_yaml": tmp_path / "bad_yaml.yaml",
             "no_list": tmp_path / "no_list.yaml", "unknown": tmp_path / "unknown.yaml"}
    paths["data"].write_text("{}\n")
    paths["good"].write_text("tools:\n  - class_name: calculator\n")
    paths["bad_yaml"].write_text("tools: [\n  - class_name: calculator\n")  # an unclosed flow list
    paths["no_list"].write_text("tool:\n  - class_name: calculator\n")  # `tool`, not `tools`
    paths["unknown"].write_text("tools:\n  - class_name: abacus\n")
    return {k: str(v) for k, v in paths.items()}


def test_the_limits_default_to_the_trainers_config(files):
    trainer = MultiTurnConfig()
    args = build_parser().parse_args(["eval", "--data", files["data"], "--tool-config", files["good"]])
    assert (args.max_assistant_turns, args.max_tool_response_length) == (None, None)  # "not given", see below
    s = EvalSettings(data=[files["data"]], tool_config=files["good"])
    assert s.multi_turn() == MultiTurnSettings(trainer.max_assistant_turns, trainer.max_tool_response_length)
    given = EvalSettings(data=[files["data"]], tool_config=files["good"], max_assistant_turns=2,
                         max_tool_response_length=7)
    assert given.multi_turn() == MultiTurnSettings(2, 7)
    assert EvalSettings(data=[files["data"]]).multi_turn() is None  # single turn
    check_settings(given)
    assert sorted(load_eval_tools(given)) == ["calculator"]
    assert load_eval_tools(EvalSettings(data=[files["data"]])) is None


@pytest.mark.parametrize("args, message", [
    (["--tool-config", "{missing}"], "--tool-config {missing}: file not found; give a tools YAML"),
    (["--tool-config", "{bad_yaml}"], "--tool-config {bad_yaml}: not valid YAML ("),
    (["--tool-config", "{no_list}"], "--tool-config {no_list}: expected a non-empty `tools:` list"),
    (["--tool-config", "{unknown}"], "'abacus' is not a known tool; valid values: calculator, python"),
    (["--tool-config", "{good}", "--max-assistant-turns", "0"], "--max-assistant-turns 0: give at least 1 model turn"),
    (["--tool-config", "{good}", "--max-tool-response-length", "0"],
     "--max-tool-response-length 0: give at least 1 character"),
    (["--max-assistant-turns", "3"], "--max-assistant-turns needs --tool-config"),
    (["--max-assistant-turns", "3", "--max-tool-response-length", "9"],
     "--max-assistant-turns and --max-tool-response-length need --tool-config"),
])
def test_bad_tool_flags_are_one_line_and_exit_2(args, message, files, tmp_path, capsys):
    paths = {**files, "missing": str(tmp_path / "missing.yaml")}
    argv = ["eval", "--data", files["data"], *[a.format(**paths) for a in args]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hybridrl eval: error: ") and message.format(**paths) in err and "\n" not in err


def test_a_bad_tools_file_fails_in_load_eval_tools_naming_the_flag(files):
    s = EvalSettings(data=[files["data"]], tool_config=files["no_list"])
    check_settings(s)  # the file exists; its content is read by load_eval_tools
    with pytest.raises(ConfigError, match=r"^--tool-config \S+no_list.yaml: expected .*examples/tool_calc/tools.yaml$"):
        load_eval_tools(s)
