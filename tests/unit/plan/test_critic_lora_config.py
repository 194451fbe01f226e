"""critic.model.lora_*: LoRA on PPO's value model, validated like the policy's (errors name the key and
the fix) and counted by `hybridrl plan` as adapters plus a trained head."""

from __future__ import annotations

import importlib.util
import re

import pytest

from hybridrl.config.loader import load_config
from hybridrl.plan.memory import read_model_dims, value_model_dims
from hybridrl.plan.memory_fixes import check_memory
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import validate_rl_config
from hybridrl.errors import ConfigError
from hybridrl.models.loading import resolve_model_path
from hybridrl.workers.build import critic_lora_settings

from test_memory import fake_model, fake_overrides  # noqa: F401  (tests/unit/plan/test_memory.py, beside this file)

C = "critic.model."
GAE = "algorithm.adv_estimator=gae"


def check(*overrides: str) -> RLConfig:
    cfg = load_config(RLConfig, None, list(overrides))
    validate_rl_config(cfg)
    return cfg


def test_verl_spellings_parse_into_value_model_lora_settings():
    s = critic_lora_settings(check(GAE, f"{C}lora_rank=8", f"{C}lora_alpha=32"))
    assert (s.rank, s.alpha, s.target_modules, s.exclude_modules) == (8, 32.0, "all-linear", None)
    assert (s.task_type, s.key, s.adapter_path) == ("TOKEN_CLS", "critic.model", None)
    s = critic_lora_settings(check(GAE, f"{C}lora_rank=4", f"{C}target_modules=[q_proj,v_proj]",
                                   f"{C}exclude_modules=[v_proj]"))
    assert s.target_modules == ["q_proj", "v_proj"] and s.exclude_modules == ["v_proj"]


RAY2 = ["trainer.backend=ray", "trainer.n_gpus_per_node=2"]


@pytest.mark.parametrize("overrides, fragments", [
    ([f"{C}lora_rank=-1"], [f"{C}lora_rank=-1 must be >= 0"]),
    ([f"{C}lora_rank=8", f"{C}lora_alpha=0"], [f"{C}lora_alpha=0.0 must be > 0"]),
    ([f"{C}lora_rank=8", f"{C}lora_alpha=-2"], [f"{C}lora_alpha=-2.0 must be > 0"]),
    ([f"{C}lora_alpha=32"], [f"{C}lora_alpha only apply to LoRA, which is off ({C}lora_rank=0)",
                             f"set {C}lora_rank"]),
    ([f"{C}target_modules=[q_proj]", f"{C}exclude_modules=[v_proj]"],
     [f"{C}target_modules, {C}exclude_modules only apply to LoRA"]),
    ([f"{C}lora_rank=8", f"{C}target_modules=[all-linear,q_proj]"],
     [f"{C}target_modules=['all-linear', 'q_proj'] must be all-linear alone"]),
    ([f"{C}lora_rank=8", f"{C}target_modules=[]"], [f"{C}target_modules=[] must be"]),
    ([f"{C}lora_rank=8", "critic.strategy=fsdp2", *RAY2],
     [f"{C}lora_rank > 0 with critic.strategy=fsdp2 is not supported yet", "use critic.strategy=ddp"]),
    # a critic pool of its own: the world is critic.n_workers (2), not the policy's one worker
    ([f"{C}lora_rank=8", "critic.strategy=fsdp", "trainer.backend=ray", "critic.n_workers=2"],
     ["critic.strategy=fsdp is not supported yet"]),
])
def test_bad_critic_lora_settings_name_the_key_and_the_fix(overrides, fragments):
    with pytest.raises(ConfigError) as e:
        check(GAE, *overrides)
    for fragment in fragments:
        assert fragment in str(e.value)
    assert "actor_rollout_ref" not in str(e.value)  # the critic's keys, never the policy's


def test_what_the_checks_let_through():
    if importlib.util.find_spec("ray") is not None:  # ddp over several workers holds the base weights on each
        check(GAE, f"{C}lora_rank=8", *RAY2)
    check(GAE, f"{C}lora_rank=8", "critic.strategy=fsdp2")  # one rank: fsdp2 is the plain model
    # a value outside its declared range is refused even where the key is unused (grpo has no critic):
    # config/constraints.py checks every key, as Hydra's structured configs and pydantic do
    with pytest.raises(ConfigError, match=re.escape(f"{C}lora_rank=-1 must be >= 0")):
        check(f"{C}lora_rank=-1")
    # both roles at once, each validated under its own key
    with pytest.raises(ConfigError, match="actor_rollout_ref.model.lora_alpha=0.0"):
        check(GAE, "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=0", f"{C}lora_rank=8")


def test_missing_peft_names_the_critic_key(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    with pytest.raises(ConfigError, match=rf"{C}lora_rank=8 needs the peft package: pip install 'hybridrl\[lora\]', "
                                          rf"or set {C}lora_rank=0"):
        check(GAE, f"{C}lora_rank=8")


def critic_resident(overrides: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """(the critic's resident states, its optimizer phase) in the actor pool it shares."""
    cfg = load_config(RLConfig, None, overrides)
    (pool,) = check_memory(cfg, validate_rl_config(cfg)).pools
    phases = {ph.name: ph.parts for ph in pool.phases}
    return {k: v for k, v in pool.resident.items() if k.startswith("critic")}, phases["critic optimizer step"]


def test_critic_lora_memory_by_hand(fake_model):  # noqa: F811
    pytest.importorskip("peft")
    # the value model: the fake model's 1448 parameters (tied head, none stored) + a Linear(8, 1) head,
    # 8 + 1 = 9 -> 1457; fully trained: weights, gradients 1457 x 4 B = 5828 each, AdamW 2 x 5828
    full, step = critic_resident(fake_overrides(fake_model, GAE))
    assert full == {"critic weights": 5828, "critic gradients": 5828, "critic AdamW moments": 11656}
    assert step == {}  # torch's fused AdamW (plain fp32 tensors, workers/optim.py) makes no temporaries
    # rank 2 on all-linear, r·(in + out): q 2·(8+8) = 32, k 2·(8+4) = 24, v 24, o 32, gate 2·(8+16) = 48, up 48,
    # down 48 -> 256 per layer, 512 for 2 layers; plus peft's trained copy of the head, 9 -> 521 trained.
    # weights (1457 + 521) x 4 B = 7912 (the frozen original head stays); gradients 521 x 4 = 2084, AdamW 4168
    lora, step = critic_resident(fake_overrides(fake_model, GAE, f"{C}lora_rank=2"))
    assert lora == {"critic weights": 7912, "critic gradients": 2084, "critic AdamW moments": 4168}
    assert step == {}
    # q_proj and down_proj named, down_proj excluded: 2 layers x 32 + 9 = 73 trained -> gradients 292
    only_q, _ = critic_resident(fake_overrides(fake_model, GAE, f"{C}lora_rank=2", f"{C}target_modules=[q_proj,down_proj]",
                                               f"{C}exclude_modules=[down_proj]"))
    assert only_q["critic gradients"] == 292


@pytest.mark.parametrize("targets, exclude", [("all-linear", None), (["q_proj", "v_proj", "down_proj"], None),
                                              ("all-linear", ["o_proj", "up_proj"])])
def test_critic_lora_count_equals_what_peft_trains(targets, exclude):
    pytest.importorskip("peft")
    from hybridrl.plan.memory import _critic_lora_trained
    from hybridrl.models.loading import load_value_model
    from hybridrl.models.lora import LoraSettings, apply_lora

    model = apply_lora(load_value_model("tiny-arith", "critic.model.path"),
                       LoraSettings(8, 16.0, targets, exclude, task_type="TOKEN_CLS", key="critic.model"))
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    as_list = ["all-linear"] if targets == "all-linear" else targets
    cfg = load_config(RLConfig, None, [GAE, f"{C}lora_rank=8", f"{C}target_modules=[{','.join(as_list)}]",
                                       f"{C}exclude_modules=[{','.join(exclude or [])}]"])
    dims = value_model_dims(read_model_dims(resolve_model_path("tiny-arith")))
    assert _critic_lora_trained(cfg, dims) == trained
