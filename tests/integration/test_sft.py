"""`hybridrl sft` learns the response tokens and writes a loadable HuggingFace folder."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from hybridrl.config.loader import load_config
from hybridrl.config.sft import SFTConfig
from hybridrl.trainer.sft import run_sft

pytestmark = pytest.mark.slow


def test_sft_lowers_the_loss_and_saves_a_hf_folder(random_model_dir, arith_data, tmp_path):
    out = tmp_path / "sft"
    cfg = load_config(SFTConfig, None, [
        f"model.partial_pretrain={random_model_dir}", f"data.train_files={arith_data['train']}",
        f"data.val_files={arith_data['val']}", "data.train_batch_size=32", "data.micro_batch_size_per_gpu=16",
        "trainer.total_training_steps=30", "trainer.test_freq=15", "trainer.save_freq=20", "optim.lr=3e-3",
        f"trainer.default_local_dir={out}"])
    final = run_sft(cfg, log=lambda *_: None)
    records = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert len(records) == 30
    assert records[-1]["train/loss"] < 0.6 * records[0]["train/loss"]  # starts near ln(vocab) = 5.8
    assert "val-core/arithmetic/reward/mean@1" in records[14] and "val-core/arithmetic/reward/mean@1" in final
    for folder in (out, out / "global_step_20"):  # the final model and the save_freq checkpoint
        model = AutoModelForCausalLM.from_pretrained(folder)
        tok = AutoTokenizer.from_pretrained(folder)
        assert model.config.model_type == "qwen2" and tok.chat_template
    assert not (out / "global_step_30").exists()


def test_sft_starts_over_beside_damaged_checkpoints_and_keeps_them(random_model_dir, arith_data, tmp_path):
    """sft never resumes (each run starts from model.partial_pretrain), so damaged checkpoints in its folder
    refuse nothing; but no run deletes them: the ones whose step it saves again are set aside whole."""
    out = tmp_path / "sft"
    args = [f"model.partial_pretrain={random_model_dir}", f"data.train_files={arith_data['train']}",
            "data.val_files=[]", "data.train_batch_size=8", "trainer.total_training_steps=2", "trainer.save_freq=1",
            "trainer.logger=[file]", f"trainer.default_local_dir={out}"]
    run_sft(load_config(SFTConfig, None, args), log=lambda *_: None)
    damaged = {}
    for step in (1, 2):
        weights = out / f"global_step_{step}" / "model.safetensors"
        with open(weights, "r+b") as f:
            f.truncate(weights.stat().st_size // 2)
        damaged[step] = {p.name: p.read_bytes() for p in weights.parent.iterdir()}
    run_sft(load_config(SFTConfig, None, args), log=lambda *_: None)
    for step in (1, 2):
        assert {p.name: p.read_bytes() for p in (out / f"global_step_{step}.damaged").iterdir()} == damaged[step]
        assert AutoModelForCausalLM.from_pretrained(out / f"global_step_{step}").config.model_type == "qwen2"
