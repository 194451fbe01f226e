"""actor_rollout_ref.model.lora_*: parsed with verl's spellings, refused with errors naming the key and the fix."""

from __future__ import annotations

import json

import pytest

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import validate_rl_config
from hybridrl.errors import ConfigError
from hybridrl.workers.build import lora_settings

M = "actor_rollout_ref.model."


def check(*overrides: str):
    cfg = load_config(RLConfig, None, list(overrides))
    validate_rl_config(cfg)
    return cfg


def test_verl_spellings_parse_into_lora_settings():
    cfg = check(f"{M}lora_rank=8", f"{M}lora_alpha=32", f"{M}target_modules=all-linear")
    assert lora_settings(cfg).target_modules == "all-linear" and lora_settings(cfg).alpha == 32.0
    cfg = check(f"{M}lora_rank=8", f"{M}target_modules=[q_proj,v_proj]", f"{M}exclude_modules=o_proj")
    s = lora_settings(cfg)
    assert s.target_modules == ["q_proj", "v_proj"] and s.exclude_modules == ["o_proj"] and s.adapter_path is None


@pytest.mark.parametrize("overrides, fragments", [
    ([f"{M}lora_rank=-1"], [f"{M}lora_rank=-1 must be >= 0"]),
    ([f"{M}lora_rank=8", f"{M}lora_alpha=0"], [f"{M}lora_alpha=0.0 must be > 0"]),
    ([f"{M}lora_alpha=32"], [f"{M}lora_alpha only apply to LoRA", f"set {M}lora_rank"]),
    ([f"{M}target_modules=[q_proj]"], [f"{M}target_modules only apply to LoRA"]),
    ([f"{M}lora_rank=8", f"{M}target_modules=[all-linear,q_proj]"], ["all-linear alone"]),
    ([f"{M}lora_rank=8", f"{M}lora_adapter_path=/nonexistent"], [f"{M}lora_adapter_path='/nonexistent' is not a peft "
                                                                  "adapter folder"]),
    ([f"{M}lora_rank=8", "actor_rollout_ref.actor.strategy=fsdp2", "trainer.backend=ray",
      "trainer.n_gpus_per_node=2"], ["strategy=fsdp2 is not supported yet", "strategy=ddp"]),
])
def test_bad_lora_settings_name_the_key_and_the_fix(overrides, fragments):
    with pytest.raises(ConfigError) as e:
        check(*overrides)
    for fragment in fragments:
        assert fragment in str(e.value)


def test_adapter_path_must_match_rank_and_alpha(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8,
                                                              "target_modules": ["q_proj"]}))
    check(f"{M}lora_rank=4", f"{M}lora_alpha=8", f"{M}lora_adapter_path={tmp_path}")
    with pytest.raises(ConfigError, match=f"r=4, lora_alpha=8; set {M}lora_rank=4 {M}lora_alpha=8"):
        check(f"{M}lora_rank=8", f"{M}lora_adapter_path={tmp_path}")
    with pytest.raises(ConfigError, match="cannot change the modules"):
        check(f"{M}lora_rank=4", f"{M}lora_alpha=8", f"{M}lora_adapter_path={tmp_path}", f"{M}target_modules=[v_proj]")


def test_missing_peft_says_how_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'hybridrl\[lora\]'"):
        check(f"{M}lora_rank=8")
