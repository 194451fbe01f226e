"""PPO (gae) with LoRA on the critic, end to end: only the value model's adapters and its new head train,
its checkpoint folder is peft's adapter folder, and resuming from it equals the uninterrupted run."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from run_helpers import metrics, overrides, train  # tests/integration/run_helpers.py

pytestmark = pytest.mark.slow
pytest.importorskip("peft")

# weight decay 0: an adapter or head tensor that changed was moved by its gradient, not by decay alone;
# no validation set: a step is then about half a second on 2 cores
PPO = ["algorithm.adv_estimator=gae", "critic.model.lora_rank=8", "critic.optim.lr=1e-3",
       "critic.optim.weight_decay=0", "trainer.save_freq=1", "actor_rollout_ref.actor.shuffle=true",
       "critic.shuffle=true", "data.val_files=[]"]
HEAD = "base_model.model.score."


@pytest.fixture(scope="module")
def straight(arith_data, tmp_path_factory):
    """An uninterrupted 2-step run (checkpoints at 1 and 2; 2 critic optimizer steps each): (its folder, the
    run, the critic's parameters before the first step)."""
    run_dir = tmp_path_factory.mktemp("critic-lora")
    seen = []
    run, _ = train(overrides(arith_data, run_dir, 2, *PPO),
                   before_fit=lambda r: seen.append({n: p.detach().clone() for n, p in r.critic.module.named_parameters()}))
    return run_dir, run, seen[0]


def test_only_the_adapters_and_the_value_head_change(straight):
    _, run, before = straight
    params = dict(run.critic.module.named_parameters())
    trained = [n for n, p in params.items() if p.requires_grad]
    base = [n for n in params if n not in trained]
    # all-linear on the 4 layers: 7 projections x (A, B); the head is trained whole (peft's modules_to_save)
    assert sorted(n for n in trained if ".lora_" not in n) == [f"{HEAD}modules_to_save.default.bias",
                                                               f"{HEAD}modules_to_save.default.weight"]
    assert len(trained) == 4 * 7 * 2 + 2
    assert base and all(torch.equal(params[n], before[n]) for n in base)  # bit-identical, original head included
    assert all(not torch.equal(params[n], before[n]) for n in trained)
    assert sum(len(g["params"]) for g in run.critic.optimizer.param_groups) == len(trained)  # no AdamW state for W


def test_the_critic_checkpoint_is_the_adapter_folder(straight):
    run_dir, _, _ = straight
    critic = run_dir / "global_step_2" / "critic"
    assert (critic / "adapter_config.json").is_file() and (critic / "adapter_model.safetensors").is_file()
    assert sorted(p.name for p in critic.glob("*.safetensors")) == ["adapter_model.safetensors"]  # no full weights
    saved = load_file(critic / "adapter_model.safetensors")
    assert {f"{HEAD}weight", f"{HEAD}bias"} <= set(saved)
    assert all(".lora_" in k or k.startswith(HEAD) for k in saved)
    config = json.loads((critic / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["task_type"]) == (8, 16.0, "TOKEN_CLS")
    state = torch.load(run_dir / "global_step_2" / "critic_state.pt", weights_only=True)
    assert state["optimizer"]["state"] and all(".lora_" in n or n.startswith(HEAD) for n in state["optimizer"]["state"])


def test_resume_from_the_critic_adapter_equals_the_uninterrupted_run(straight, arith_data, tmp_path):
    run_dir, _, _ = straight
    lines = []
    _, summary = train(overrides(arith_data, tmp_path, 2, *PPO, "trainer.resume_mode=resume_path",
                                 f"trainer.resume_from_path={run_dir / 'global_step_1'}"), log=lines.append)
    assert summary.steps == 1 and any("resumed from step 1" in x for x in lines)
    after = [row for row in metrics(run_dir) if row["step"] > 1]
    assert after and metrics(tmp_path) == after  # critic/vpred_mean, vf_loss ... depend on the loaded adapter and head
