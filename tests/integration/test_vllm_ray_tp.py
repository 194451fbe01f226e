"""Rollout tensor parallelism with several engines (issue #24): 4 Ray workers, tensor_model_parallel_size=2, so
two vLLM engines of two ranks each (rollout/tp_layout.py). Each engine generates its half of the prompts on both
of its ranks; the pool keeps each engine's leader's responses once, in prompt order, and their log-probs are
the trainer's. Its own module: it needs a 4-CPU Ray instance. Skipped where vLLM or Ray is not installed."""

from __future__ import annotations

import sys

import pytest
import torch

ray = pytest.importorskip("ray")
pytest.importorskip("vllm")

from hybridrl.config.loader import load_config  # noqa: E402
from hybridrl.config.schema import RLConfig  # noqa: E402
from hybridrl.plan.resolve import validate_rl_config  # noqa: E402
from hybridrl.data.dataset import RLDataset  # noqa: E402
from hybridrl.distributed.group import RayRoles  # noqa: E402
from hybridrl.models.loading import load_tokenizer, resolve_model_path  # noqa: E402
from hybridrl.rollout.base import SamplingParams  # noqa: E402
from test_ray import overrides  # noqa: E402

pytestmark = pytest.mark.slow


RAY_CPUS = 4  # the `cluster` fixture's size (tests/conftest.py): four workers


def test_two_engines_of_two_workers_each_answer_every_prompt_once_in_order(arith_data, tmp_path, cluster):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cfg = load_config(RLConfig, None, overrides(
        arith_data, tmp_path, "trainer.backend=ray", "trainer.n_gpus_per_node=4", "trainer.worker_timeout_s=300",
        "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.cpu_kv_cache_gb=0.25",
        "actor_rollout_ref.rollout.dtype=float32", "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"))
    tok = load_tokenizer(resolve_model_path("tiny-arith"))
    roles = RayRoles(cfg, validate_rl_config(cfg), 3, tok.pad_token_id, log=lambda *_: None)
    try:
        assert roles.policy.layout.num_engines == 2
        data = RLDataset([arith_data["train"]], tok, "prompt", 64, "error", False, "data.train_files")
        prompts = data.collate(list(range(6)), tok.pad_token_id)  # 3 prompts per engine
        rollout = roles.policy.generate(prompts, 4, SamplingParams(8, temperature=1.0))
        assert rollout.response_ids.shape[0] == 24  # 6 prompts x 4, each once (not once per rank of an engine)
        assert torch.equal(rollout.prompts.input_ids, prompts.input_ids.repeat_interleave(4, dim=0))
        trainer = roles.policy.log_probs(rollout.sequences())  # [N, T] of the response tokens
        mask = rollout.response_mask.bool()
        assert float((trainer - rollout.rollout_log_probs).abs()[mask].max()) < 1e-4  # on-policy, fp32
    finally:
        roles.close()
