"""`hybridrl rm` end to end on tiny models: it learns a separable preference, the RL trainer's reward-model
path reads the same scores as the training eval, a crashed run resumes to the uninterrupted result, and the
output folder is what `reward_model.model.path` takes."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
from run_helpers import metrics, overrides, train  # tests/integration/run_helpers.py
from safetensors.torch import load_file

from hybridrl.batch import PromptBatch, Rollout
from hybridrl.config.loader import load_config
from hybridrl.config.rm import RMConfig
from hybridrl.data.preference import PreferenceColumns, PreferenceDataset
from hybridrl.models.loading import (
    load_reward_model,
    load_tokenizer,
    reward_model_to_train,
)
from hybridrl.trainer import rm as rm_trainer
from hybridrl.trainer.rm import evaluate, run_rm, score_pairs
from hybridrl.workers.reward_model import RewardModel

pytestmark = pytest.mark.slow


def write_pairs(path, n: int, seed: int, layout: str) -> str:
    """Trivially separable pairs: the chosen answer starts with "yes", the rejected one with "no"."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            a, b = rng.randint(1, 50), rng.randint(1, 50)
            q, good, bad = f"Is {a} plus {b} nice?", f"yes {a}", f"no {b}"
            if layout == "chat":
                row = {"prompt": [{"role": "user", "content": q}], "chosen": [{"role": "assistant", "content": good}],
                       "rejected": [{"role": "assistant", "content": bad}]}
            else:
                row = {"prompt": q, "chosen": good, "rejected": bad}
            f.write(json.dumps(row) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("pairs")
    return {"train": write_pairs(folder / "train.jsonl", 64, 0, "chat"),
            "val": write_pairs(folder / "val.jsonl", 32, 1, "plain")}


def rm_args(model_dir, pairs, out, steps: int, *extra: str) -> list[str]:
    return [f"model.partial_pretrain={model_dir}", f"data.train_files=[{pairs['train']}]",
            f"data.val_files=[{pairs['val']}]", "data.train_batch_size=16", "data.micro_batch_size_per_gpu=8",
            f"trainer.total_training_steps={steps}", "optim.lr=3e-3", "trainer.logger=[file]",
            f"trainer.default_local_dir={out}", *extra]


def val_data(pairs, tok) -> PreferenceDataset:
    return PreferenceDataset([pairs["val"]], tok, PreferenceColumns(), 128, "data.val_files")


def as_rollout(data: PreferenceDataset, which: str, pad_id: int) -> Rollout:
    """The val pairs' responses as the RL trainer hands them to its reward model: left-padded prompt ids,
    right-padded response ids (EOS included)."""
    prompts = [p.prompt_ids for p in data.pairs]
    responses = [p.chosen_ids if which == "chosen" else p.rejected_ids for p in data.pairs]
    n, wp, wr = len(prompts), max(map(len, prompts)), max(map(len, responses))
    p_ids, p_mask = torch.full((n, wp), pad_id), torch.zeros((n, wp), dtype=torch.long)
    r_ids, r_mask = torch.full((n, wr), pad_id), torch.zeros((n, wr), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        p_ids[i, wp - len(p):], p_mask[i, wp - len(p):] = torch.tensor(p), 1
        r_ids[i, :len(r)], r_mask[i, :len(r)] = torch.tensor(r), 1
    batch = PromptBatch(p_ids, p_mask, ["toy"] * n, ["0"] * n, list(range(n)), [{}] * n, [None] * n)
    return Rollout(batch, r_ids, r_mask, torch.zeros(r_ids.shape), torch.arange(n))


def test_rm_learns_a_separable_preference_and_the_rl_reward_model_reads_the_same_scores(
        random_model_dir, pairs, tmp_path):
    out = tmp_path / "rm"
    tok = load_tokenizer(random_model_dir)
    val = val_data(pairs, tok)
    torch.manual_seed(0)  # trainer.seed: the same fresh head the run starts from
    start = reward_model_to_train(random_model_dir, tok)
    before = evaluate(start, val, 8, tok.pad_token_id, 0.0)
    final = run_rm(load_config(RMConfig, None, rm_args(random_model_dir, pairs, out, 16, "trainer.test_freq=8")),
                   log=lambda *_: None)

    records = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert [r["step"] for r in records] == list(range(1, 17))
    assert all(isinstance(v, float) and math.isfinite(v) for r in records for k, v in r.items() if k != "step")
    assert "val/pair_accuracy" in records[7] and "val/pair_accuracy" not in records[8]
    assert before["val/pair_accuracy"] < 0.8 and final["val/pair_accuracy"] == 1.0, (before, final)
    assert final["val/margin_mean"] > before["val/margin_mean"] + 1.0
    assert records[-1]["train/loss"] < 0.5 * records[0]["train/loss"]
    trained = load_file(str(out / "model.safetensors"))
    unchanged = [k for k, v in start.state_dict().items() if k in trained and torch.equal(v, trained[k])]
    assert not unchanged and "score.weight" in trained  # every weight moved, backbone and head

    # the RL trainer's reward-model role (token-in: the same tokenizer) scores what the eval scored
    module = load_reward_model(str(out))
    role = RewardModel(module, load_tokenizer(str(out)), tok, micro_batch_size=5)
    r_c_eval, r_r_eval = score_pairs(module, val, 8, tok.pad_token_id)
    r_c = role.scores(as_rollout(val, "chosen", tok.pad_token_id), [])
    r_r = role.scores(as_rollout(val, "rejected", tok.pad_token_id), [])
    torch.testing.assert_close(r_c, r_c_eval, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(r_r, r_r_eval, atol=1e-5, rtol=1e-5)
    assert math.isclose((r_c - r_r).mean().item(), final["val/margin_mean"], rel_tol=1e-4)
    assert (r_c > r_r).float().mean().item() == final["val/pair_accuracy"]


def test_a_crashed_run_resumes_to_the_uninterrupted_result(random_model_dir, pairs, tmp_path, monkeypatch):
    steps, straight, crashed = 8, tmp_path / "straight", tmp_path / "crashed"
    args = lambda d: rm_args(random_model_dir, pairs, d, steps, "trainer.save_freq=3", "trainer.test_freq=2",  # noqa: E731
                             "optim.lr_warmup_steps=2")  # warm-up and cosine: the scheduler's state must come back
    run_rm(load_config(RMConfig, None, args(straight)), log=lambda *_: None)

    real_step, calls = rm_trainer.train_step, []

    def dies_in_step_6(*a, **k):  # after the checkpoint of step 3 and the logged steps 4 and 5
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt("killed")
        return real_step(*a, **k)

    monkeypatch.setattr(rm_trainer, "train_step", dies_in_step_6)
    with pytest.raises(KeyboardInterrupt):
        run_rm(load_config(RMConfig, None, args(crashed)), log=lambda *_: None)
    monkeypatch.setattr(rm_trainer, "train_step", real_step)
    assert [r["step"] for r in metrics(crashed)] == [1, 2, 3, 4, 5]
    lines = []
    run_rm(load_config(RMConfig, None, args(crashed)), log=lines.append)
    assert any(line.startswith("resumed from step 3") for line in lines), lines

    assert metrics(crashed) == metrics(straight)  # every step's loss, accuracy, grad norm, lr and val metrics
    a, b = load_file(str(straight / "model.safetensors")), load_file(str(crashed / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_changed_config_is_not_resumed(random_model_dir, pairs, tmp_path):
    from hybridrl.errors import ConfigError

    out = tmp_path / "rm"
    run_rm(load_config(RMConfig, None, rm_args(random_model_dir, pairs, out, 2, "trainer.save_freq=2")),
           log=lambda *_: None)
    with pytest.raises(ConfigError, match=r"cannot resume from .*global_step_2: the config differs .*optim.lr"):
        run_rm(load_config(RMConfig, None, rm_args(random_model_dir, pairs, out, 4, "optim.lr=1e-3")),
               log=lambda *_: None)


def test_the_output_is_a_reward_model_the_rl_trainer_runs_with(random_model_dir, pairs, arith_data, tmp_path):
    out = tmp_path / "rm"
    run_rm(load_config(RMConfig, None, rm_args(random_model_dir, pairs, out, 2)), log=lambda *_: None)
    run_dir = tmp_path / "rl"
    train(overrides(arith_data, run_dir, 2, f"actor_rollout_ref.model.path={random_model_dir}",
                    "reward_model.enable=true", f"reward_model.model.path={out}"))
    rows = metrics(run_dir)
    assert [r["step"] for r in rows][-2:] == [1, 2]
    scores = [r["critic/score/mean"] for r in rows if "critic/score/mean" in r]
    # rule scores of arithmetic are 0 or 1 per response; the reward model's are unbounded reals
    assert len(scores) == 2 and all(math.isfinite(s) for s in scores) and any(s not in (0.0, 1.0) for s in scores)


def test_sigkill_then_the_same_command_resumes_to_the_uninterrupted_run(random_model_dir, pairs, tmp_path):
    """The real thing, through the CLI: SIGKILL at a random moment after the first checkpoint (mid-step,
    mid-save or mid-validation), then the same command again."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from hybridrl.trainer.checkpoint import LATEST

    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the same thread count in every process: the same float sums
    cmd = lambda d: [sys.executable, "-m", "hybridrl", "rm", *rm_args(random_model_dir, pairs, d, 12,  # noqa: E731
                                                                      "trainer.save_freq=2", "trainer.test_freq=3")]
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(cmd(straight), check=True, capture_output=True, env=env, timeout=300)
    seed = random.randrange(10**6)
    proc = subprocess.Popen(cmd(killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 120
    while not (killed / LATEST).exists():
        assert proc.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.02)
    time.sleep(random.Random(seed).uniform(0.0, 1.0))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = subprocess.run(cmd(killed), capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from step" in resumed.stdout + resumed.stderr or "already finished" in resumed.stdout + resumed.stderr
    assert metrics(killed) == metrics(straight), f"seed {seed}"
    a, b = load_file(str(straight / "model.safetensors")), load_file(str(killed / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a), f"seed {seed}"


def test_sigterm_saves_a_checkpoint_that_scores_and_resumes(random_model_dir, pairs, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = tmp_path / "rm"
    cmd = lambda steps: [sys.executable, "-m", "hybridrl", "rm", *rm_args(random_model_dir, pairs, run, steps)]  # noqa: E731
    proc = subprocess.Popen(cmd(1000), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    while not (run / "metrics.jsonl").exists() or len(open(run / "metrics.jsonl").readlines()) < 2:
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1]
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # a scheduler's stop: the step in progress ends, then a checkpoint
    out, err = proc.communicate(timeout=120)
    step = json.loads(open(run / "metrics.jsonl").readlines()[-1])["step"]
    assert proc.returncode == 130 and "Traceback" not in out + err, err
    assert f"interrupted at step {step} (SIGTERM); checkpoint saved in {run}/global_step_{step}" in err
    load_reward_model(str(run / f"global_step_{step}"))  # the checkpoint is itself a reward-model folder
    resumed = subprocess.run(cmd(step + 2), capture_output=True, text=True, env=env, timeout=120)
    assert resumed.returncode == 0 and f"resumed from step {step}" in resumed.stdout + resumed.stderr, resumed.stderr
    assert [r["step"] for r in metrics(run)] == list(range(1, step + 3))


def test_max_length_beyond_the_models_positions_is_refused(random_model_dir, pairs, tmp_path):
    from hybridrl.errors import ConfigError

    with pytest.raises(ConfigError, match=r"data.max_length=100000 exceeds the model's max_position_embeddings="):
        run_rm(load_config(RMConfig, None, rm_args(random_model_dir, pairs, tmp_path / "rm", 1,
                                                   "data.max_length=100000")), log=lambda *_: None)


def tree(folder) -> dict[str, tuple[int, int]]:
    """The folder and everything in it, with sizes and modification times: equal trees, nothing written."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in [folder, *sorted(folder.rglob("*"))]}


def test_every_checkpoint_damaged_is_refused_then_disable_starts_over_beside_them(random_model_dir, pairs, tmp_path):
    from hybridrl.errors import ConfigError

    out = tmp_path / "rm"
    args = lambda *extra: rm_args(random_model_dir, pairs, out, 2, "trainer.save_freq=1", *extra)  # noqa: E731
    run_rm(load_config(RMConfig, None, args()), log=lambda *_: None)
    for step in (1, 2):
        state = out / f"global_step_{step}" / "rm_state.pt"
        with open(state, "r+b") as f:
            f.truncate(state.stat().st_size // 2)
    before, damaged = tree(out), {step: tree(out / f"global_step_{step}") for step in (1, 2)}
    with pytest.raises(ConfigError, match=r"^trainer\.resume_mode=auto: every checkpoint in .* is damaged "
                                          r"\(global_step_2: rm_state\.pt has \d+ bytes, .*; global_step_1: rm_state\.pt "
                                          r".*\); nothing was written\. Set trainer\.resume_mode=disable to start over"):
        run_rm(load_config(RMConfig, None, args()), log=lambda *_: None)
    assert tree(out) == before  # not the lock file, metrics.jsonl, the final model or any checkpoint
    run_rm(load_config(RMConfig, None, args("trainer.resume_mode=disable")), log=lambda *_: None)
    assert sorted(p.name for p in out.glob("global_step_*")) == ["global_step_1", "global_step_1.damaged",
                                                                 "global_step_2", "global_step_2.damaged"]
    for step in (1, 2):  # moved aside whole: the same files, sizes and times
        assert tree(out / f"global_step_{step}.damaged") == damaged[step]
