"""The `scale` check: plan's placement and memory estimate for the real model on the declared cluster, from the
folder's config and safetensors headers alone. Seeded: a budget the run cannot fit, a 7B model on one worker."""

import importlib.util
import json

import pytest

from hybridrl.check.context import CheckContext
from hybridrl.check.result import FAIL, PASS
from hybridrl.check.scale import scale

# Qwen2-7B's dimensions (its config.json): sized from the config alone, as a folder without weights is
QWEN2_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 28, "vocab_size": 152064,
            "max_position_embeddings": 32768, "tie_word_embeddings": False, "rms_norm_eps": 1e-6}


def ctx(tmp_path, *overrides: str) -> CheckContext:
    c = CheckContext(None, list(overrides), str(tmp_path / "work"))
    assert c.runnable, c.config_errors  # the runner runs scale only on a config that trains as it is
    return c


def test_fits_with_the_numbers_and_never_loads_weights(tmp_path, random_model_dir, monkeypatch):
    def no_load(*args, **kwargs):
        raise AssertionError("the scale check loaded weights")

    import safetensors.torch
    import transformers

    import hybridrl.models.loading as loading

    monkeypatch.setattr(loading, "load_causal_lm", no_load)
    monkeypatch.setattr(safetensors.torch, "load_file", no_load)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_load)
    r = scale(ctx(tmp_path, f"actor_rollout_ref.model.path={random_model_dir}", "trainer.memory_per_worker_gb=4"))
    assert r.status == PASS and r.summary.startswith("fits: peak ") and "of 4.00 GiB in the actor pool" in r.summary
    assert r.details[0] == "placement: backend=local, one process holds policy (actor + hf rollout engine)"
    assert any("budget 4.00 GiB (trainer.memory_per_worker_gb=4.0)" in d for d in r.details)


def test_fails_on_a_budget_the_run_cannot_fit(tmp_path):
    """Seeded: 0.3 GiB per worker, less than the process itself takes."""
    r = scale(ctx(tmp_path, "trainer.memory_per_worker_gb=0.3"))
    assert r.status == FAIL and r.summary.startswith("does not fit: the actor pool needs about")
    assert "(trainer.memory_per_worker_gb=0.3)" in r.summary
    assert any("resident states" in d for d in r.details) and "more memory" in r.fix


def test_a_7b_model_on_one_worker_names_the_layout_that_fits(tmp_path):
    """Seeded: Qwen2-7B's full fine-tune (16 bytes a parameter in weights, gradients and AdamW) on one 80 GiB
    worker; the fix is the estimate's own: more workers, sharded."""
    folder = tmp_path / "qwen2-7b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN2_7B))
    r = scale(ctx(tmp_path, f"actor_rollout_ref.model.path={folder}", "trainer.memory_per_worker_gb=80",
                  "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"))
    assert r.status == FAIL and "more than its budget of 80.00 GiB" in r.summary
    assert r.fix.startswith("set ") and "trainer.n_gpus_per_node=" in r.fix and "strategy=fsdp2" in r.fix


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="a GPU cluster config needs ray to validate")
def test_fails_when_a_gpu_cluster_has_no_memory_size_here(tmp_path, monkeypatch):
    """Seeded: a 2-GPU config checked where torch sees no GPU and trainer.memory_per_worker_gb is not set."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = scale(ctx(tmp_path, "trainer.device=cuda", "trainer.n_gpus_per_node=2"))
    assert r.status == FAIL and r.summary.startswith("the memory estimate cannot be made")
    assert "trainer.memory_per_worker_gb" in r.fix
