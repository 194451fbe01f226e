"""A verl launch script read as config overrides without running it (vocab/verl_script.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from hybridrl.vocab.verl_script import script_items, split_script_items
from hybridrl.errors import HybridRLError

REPO = Path(__file__).resolve().parents[3]

# the structure of verl's examples/grpo_trainer/run_qwen2-7b.sh (variables, a list of files in a quoted
# string, set -x, the command over continued lines, "$@"), written here with a few of its keys
VERL_STYLE = textwrap.dedent("""\
    set -x

    gsm8k_train_path=$HOME/data/gsm8k/train.parquet
    gsm8k_test_path=$HOME/data/gsm8k/test.parquet
    math_train_path=$HOME/data/math/train.parquet
    math_test_path=$HOME/data/math/test.parquet

    train_files="['$gsm8k_train_path', '$math_train_path']"
    test_files="['$gsm8k_test_path', '$math_test_path']"
    export VLLM_ATTENTION_BACKEND=XFORMERS   # an environment setting, not a key

    python3 -m verl.trainer.main_ppo \\
        algorithm.adv_estimator=grpo \\
        data.train_files="$train_files" \\
        data.val_files="$test_files" \\
        data.train_batch_size=1024 \\
        data.truncation='error' \\
        actor_rollout_ref.model.path=${MODEL:-Qwen/Qwen2-7B-Instruct} \\
        actor_rollout_ref.rollout.n=5 \\
        trainer.logger='["console","wandb"]' \\
        trainer.total_epochs=15 $@
    """)


def write(tmp_path, text: str, name: str = "run.sh") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_items_other_than_a_script_pass_through():
    assert split_script_items(["a.b=1", "c.d=2"]) == (["a.b=1", "c.d=2"], None)
    assert split_script_items([]) == ([], None)


def test_a_verl_style_script_gives_its_command_items_and_the_command_line_wins(tmp_path):
    path = write(tmp_path, VERL_STYLE)
    items, source = split_script_items([path, "data.train_batch_size=8"], env={"HOME": "/home/u"})
    assert source == path
    assert items == [
        "algorithm.adv_estimator=grpo",
        "data.train_files=['/home/u/data/gsm8k/train.parquet', '/home/u/data/math/train.parquet']",
        "data.val_files=['/home/u/data/gsm8k/test.parquet', '/home/u/data/math/test.parquet']",
        "data.train_batch_size=1024",
        "data.truncation=error",
        "actor_rollout_ref.model.path=Qwen/Qwen2-7B-Instruct",
        "actor_rollout_ref.rollout.n=5",
        'trainer.logger=["console","wandb"]',
        "trainer.total_epochs=15",
        "data.train_batch_size=8",  # last: the loader's last value of a key wins
    ]


def test_the_environment_wins_over_a_default(tmp_path):
    path = write(tmp_path, VERL_STYLE)
    items, _ = split_script_items([path], env={"HOME": "/h", "MODEL": "/models/mine"})
    assert "actor_rollout_ref.model.path=/models/mine" in items


def test_our_gsm8k_example_reads_with_its_defaults():
    script = str(REPO / "examples/gsm8k_verl_command/run.sh")
    items, source = split_script_items([script, "trainer.total_training_steps=2"], env={"HOME": "/h"})
    assert source == script
    assert items[0] == "algorithm.adv_estimator=grpo"
    assert "data.train_files=data/gsm8k/train.parquet" in items
    assert "actor_rollout_ref.model.path=models/smollm2-135m-instruct" in items
    assert 'trainer.logger=["console","file"]' in items
    assert items[-1] == "trainer.total_training_steps=2"
    assert not any(i.startswith(("-m", "hybridrl", "$")) for i in items)  # the program and "$@" are dropped
    items, _ = split_script_items([script], env={"DATA": "/d", "MODEL": "/m"})
    assert "data.train_files=/d/train.parquet" in items and "actor_rollout_ref.model.path=/m" in items


def test_the_command_with_the_most_keys_is_the_training_command(tmp_path):
    text = ("python3 prep.py data.split=train\n"
            "A=1; B=$((A * 512 + 2)); C=${UNSET_X:=fallback}\n"
            "python3 -m verl.trainer.main_ppo data.max_prompt_length=$B trainer.project_name=$C "
            "data.x.y=\"a b\" 2>&1 | tee log.txt\n")
    items = [i.word.text for i in script_items(text, env={})]
    assert items == ["data.max_prompt_length=514", "trainer.project_name=fallback", "data.x.y=a b"]


def test_bash_arrays_of_items_as_verl_newer_scripts_write_them(tmp_path):
    text = textwrap.dedent("""\
        n=4
        DATA=(
            data.train_batch_size=$n   # a comment inside
            data.val_files="['x', 'y']"
        )
        ACTOR=(actor_rollout_ref.actor.ppo_mini_batch_size=2)
        python3 -m verl.trainer.main_ppo "${DATA[@]}" "${ACTOR[@]}" trainer.nnodes=1
        """)
    assert [i.word.text for i in script_items(text, env={})] == [
        "data.train_batch_size=4", "data.val_files=['x', 'y']", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "trainer.nnodes=1"]


def test_quotes_protect_and_comments_and_single_quotes_do_not_expand(tmp_path):
    text = "X=1\npython3 m a.b='$X' a.c=\"$X\" a.d=\\$X a.e=\"#not a comment\" # a.f=dropped\n"
    assert [i.word.text for i in script_items(text, env={})] == ["a.b=$X", "a.c=1", "a.d=$X", "a.e=#not a comment"]


@pytest.mark.parametrize("line, says", [
    ("python3 -m verl.trainer.main_ppo data.train_files=$DATA_DIR/x.parquet a.b=1",
     "line 2: data.train_files cannot be read without running the script: $DATA_DIR is not set and has no "
     "default (set DATA_DIR in the environment); pass data.train_files=... on the command line"),
    ("python3 -m verl.trainer.main_ppo trainer.experiment_name=run_$(date +%s) a.b=1",
     "line 2: trainer.experiment_name cannot be read without running the script: $(date +%s) is a command "
     "substitution, which check does not run; pass trainer.experiment_name=... on the command line"),
])
def test_what_cannot_be_known_without_running_the_script_names_the_line_and_the_remedy(tmp_path, line, says):
    path = write(tmp_path, "set -x\n" + line + "\n")
    with pytest.raises(HybridRLError) as e:
        split_script_items([path], env={})
    assert str(e.value).startswith(f"{path} {says}"), str(e.value)
    key = says.split(": ")[1].split(" ")[0]
    items, _ = split_script_items([path, f"{key}=given"], env={})  # the command line replaces it: no error
    assert items == ["a.b=1", f"{key}=given"]


def test_an_unknown_variable_outside_the_training_command_is_no_error(tmp_path):
    path = write(tmp_path, 'cd "$(dirname "$0")"\nNOW=$(date)\necho $UNSET\npython3 -m m a.b=1\n')
    assert split_script_items([path], env={}) == (["a.b=1"], path)


def test_a_missing_script_and_a_script_without_a_command_are_one_line_errors(tmp_path):
    with pytest.raises(HybridRLError, match=r"^\S+/nope\.sh: no such launch script; give the path") as e:
        split_script_items([str(tmp_path / "nope.sh")])
    assert "\n" not in str(e.value)
    with pytest.raises(HybridRLError, match="no command with dotted key=value items"):
        split_script_items([write(tmp_path, "set -x\necho hello\n")])
    with pytest.raises(HybridRLError, match="line 2: a double quote is never closed"):
        split_script_items([write(tmp_path, 'set -x\npython3 a.b="x\n')])


def test_a_space_after_a_continuing_backslash_is_refused(tmp_path):
    path = write(tmp_path, "python3 -m verl.trainer.main_ppo \\\n    a.b=1 \\ \n    a.c=2\n")
    with pytest.raises(HybridRLError, match="line 2: a space follows the line-continuing backslash"):
        split_script_items([path])
