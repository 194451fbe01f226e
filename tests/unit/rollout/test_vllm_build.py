"""What build_llm hands vLLM (rollout/vllm.py), seen by a stand-in `vllm.LLM` that records its arguments and the
environment it was built in: a worker's own cores, the tensor-parallel launcher, the variables set for the build
only, the user's own binding kept. No vLLM needed."""

from __future__ import annotations

import os
import sys
import types

import pytest

from hybridrl.errors import HybridRLError
from hybridrl.rollout.vllm import VLLMSettings, build_llm

VARS = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "RANK", "LOCAL_RANK")


class FakeLLM:
    fail_with: Exception | None = None

    def __init__(self, **kwargs):
        if self.fail_with is not None:
            raise self.fail_with
        self.kwargs = kwargs
        self.env = {k: os.environ.get(k) for k in VARS}


@pytest.fixture
def fake_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM))
    for k in VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(FakeLLM, "fail_with", None)


def settings(**kw) -> VLLMSettings:
    return VLLMSettings("/model", max_model_len=64, max_num_seqs=8, cpu_kv_cache_gb=0.25, **kw)


def test_a_workers_engine_binds_to_its_own_cores_for_the_build_only(fake_vllm):
    llm = build_llm(settings(cpu_cores=(1,)), seed=0)
    assert llm.env["VLLM_CPU_OMP_THREADS_BIND"] == "1" and llm.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert llm.kwargs["kv_cache_memory_bytes"] == 2 ** 28 and "distributed_executor_backend" not in llm.kwargs
    # gone afterwards: a driver that built an engine must not pass its binding on to the Ray workers it starts
    assert all(k not in os.environ for k in VARS)
    assert build_llm(settings(cpu_cores=(2, 0, 3)), seed=0).env["VLLM_CPU_OMP_THREADS_BIND"] == "0,2,3"


def test_one_process_binds_to_every_core_it_may_use(fake_vllm):
    cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    assert build_llm(settings(), seed=0).env["VLLM_CPU_OMP_THREADS_BIND"] == cores


def test_an_explicit_binding_wins_and_stays(fake_vllm, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    assert build_llm(settings(cpu_cores=(1,)), seed=0).env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"


def test_a_tensor_parallel_engine_joins_the_pools_group_through_the_external_launcher(fake_vllm):
    llm = build_llm(settings(tensor_parallel_size=2, rank=3, local_rank=1, cpu_cores=(1,)), seed=0)
    assert llm.kwargs["tensor_parallel_size"] == 2 and llm.kwargs["distributed_executor_backend"] == "external_launcher"
    assert llm.env["RANK"] == "3" and llm.env["LOCAL_RANK"] == "1"
    assert llm.env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"  # in this process, on its own torch threads
    assert all(k not in os.environ for k in VARS)


def test_leftover_tensor_parallel_shared_memory_is_one_line_naming_the_files(fake_vllm, monkeypatch):
    monkeypatch.setattr(FakeLLM, "fail_with", RuntimeError("create shm in SHMManager failed. errno: 17"))
    with pytest.raises(HybridRLError, match=r"^actor_rollout_ref\.rollout\.tensor_model_parallel_size=2: vLLM could "
                                            r"not create its shared memory .*/dev/shm/\*-cpushm_\* files"):
        build_llm(settings(tensor_parallel_size=2), seed=0)
    monkeypatch.setattr(FakeLLM, "fail_with", RuntimeError("something else"))
    with pytest.raises(RuntimeError, match="something else"):
        build_llm(settings(), seed=0)
