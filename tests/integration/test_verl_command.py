"""Issue #21's verl command, scaled as examples/gsm8k_verl_command/run.sh scales it, trains one step end to
end on the bundled tiny model: every key of the command goes through the loader as a user's would, with
the vLLM rollout where vLLM is installed (the hf one otherwise) and wandb offline."""

from __future__ import annotations

import glob
import importlib.util
import json
import math
import os
import re
import shlex

import pytest

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import resolve
from hybridrl.trainer.build import build_run
from hybridrl.trainer.rl import RLTrainer

pytestmark = pytest.mark.slow
RUN_SH = os.path.join(os.path.dirname(__file__), "../../examples/gsm8k_verl_command/run.sh")


def example_overrides(model: str, data: dict[str, str]) -> list[str]:
    """The run.sh command's key=value items, shell-unquoted, with its model and data folders replaced."""
    items = re.findall(r"^\s+([\w.+]+=\S+?)\s*\\?$", open(RUN_SH).read(), flags=re.M)
    text = [shlex.split(i.replace("$MODEL", model))[0] for i in items]
    return [t.replace("$DATA/train.parquet", data["train"]).replace("$DATA/test.parquet", data["val"]) for t in text]


def test_scaled_reference_command_trains_one_step(arith_data, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    engine = "vllm" if importlib.util.find_spec("vllm") else "hf"
    command = example_overrides("tiny-arith", arith_data) + [
        # the tiny model's context is 256 tokens and its answers are a few digits
        "data.max_prompt_length=64", "data.max_response_length=16", "data.val_max_samples=8",
        f"actor_rollout_ref.rollout.name={engine}", 'trainer.logger=["console","wandb"]',
        "++trainer.total_training_steps=1", f"+trainer.default_local_dir={tmp_path}"]
    cfg = load_config(RLConfig, None, command)
    assert cfg.actor_rollout_ref.rollout.n == 5 and cfg.actor_rollout_ref.actor.use_kl_loss
    run = build_run(resolve(cfg), log=lambda *_: None)
    RLTrainer(run, log=lambda *_: None).fit()
    records = [json.loads(line) for line in open(os.path.join(tmp_path, "metrics.jsonl"))]
    assert [r["step"] for r in records] == [0, 1]
    step = records[1]
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/score/mean",
                "training/rollout_probs_diff_mean", "timing_s/gen", "timing_s/ref"):
        assert math.isfinite(step[key]), key
    assert "val-core/arithmetic/reward/mean@1" in records[0] and "val-core/arithmetic/reward/mean@1" in step
    assert glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
