"""The `export` check passes on a correct setup (LoRA at verl's lr of 1e-6, where the trained weights differ from
the base by a few hundred fp32 rounding steps; full fine-tuning: test_check_resume.py), and reports ✗ "the export
equals the base model" for verl #7285's bug, seeded by patching our export's LoRA merge so that it drops the
adapter."""

from __future__ import annotations

import pytest

from hybridrl.check.result import FAIL, PASS
from hybridrl.trainer import export as export_module

from test_check_resume import context, run_check  # tests/unit/check/test_check_resume.py

pytestmark = pytest.mark.slow
LORA = ("actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8")


def test_lora_at_verl_lr_is_merged_not_dropped(tmp_path, arith_data):
    r = run_check("export", context(tmp_path, arith_data, *LORA, "actor_rollout_ref.actor.optim.lr=1e-6"))
    assert r.status == PASS, r
    text = "\n".join([r.summary, *r.details])
    assert "the export (merged with --merge-lora) reloads in plain transformers with the trained policy's" in text
    # lr 1e-6 moves each adapted weight by ~1e-6: far inside the logits' tolerance, but hundreds of fp32 steps
    assert "x fp32's resolution at its largest weight" in text
    assert float(text.split("the least-changed tensor moved ")[1].split("x")[0]) > 10


def test_a_merge_that_drops_the_adapter_fails_as_the_base_model(tmp_path, arith_data, monkeypatch):
    # seeded: --merge-lora writes the base model (peft's unload: the adapter removed, not merged)
    def dropping(src: str, out: str) -> None:
        from transformers import AutoTokenizer

        from hybridrl.models.lora import load_adapter_model

        load_adapter_model(src).unload().save_pretrained(out)
        AutoTokenizer.from_pretrained(src).save_pretrained(out)

    monkeypatch.setattr(export_module, "_write_merged", dropping)
    r = run_check("export", context(tmp_path, arith_data, *LORA))
    assert r.status == FAIL, r
    assert "the export equals the base model: the LoRA adapter was dropped, not merged" in r.summary
    assert "hybridrl export" in r.fix
