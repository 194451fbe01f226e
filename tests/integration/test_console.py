"""A run's console is hybridrl's lines and real errors (issue: 43 of a Ray + vLLM run's 64 console lines were
engine and Ray noise, a whole warm-up traceback among them). What the engines and Ray print goes to the run
folder's logs/ (hybridrl/library_logs.py), and the console says where. Real `hybridrl train` processes, as a
user runs them; skipped without vLLM (Ray is a test dependency)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow

# what the noise looked like: vLLM's log prefix, Ray's worker prefix and banner, triton, C++ and Python warnings
NOISE = re.compile(r"Traceback|WARNING \d\d-\d\d|\(RoleWorker pid=|\(\w+ pid=\d+\)|Token authentication|Triton|"
                   r"FutureWarning|DeprecationWarning|NUMA|^\[W\d|LD_PRELOAD|Writing model shards")
ENV = dict(os.environ, HYBRIDRL_AUTO_DTYPE="fp32", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")


def run_train(arith_data, run_dir, *extra: str) -> subprocess.CompletedProcess:
    args = [f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}",
            "data.val_max_samples=8", "data.train_batch_size=4", "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4", "trainer.total_training_steps=2",
            "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.cpu_kv_cache_gb=0.25",
            f"trainer.default_local_dir={run_dir}", *extra]
    return subprocess.run([sys.executable, "-m", "hybridrl", "train", *args], capture_output=True, text=True,
                          env=ENV, timeout=600)


@pytest.mark.parametrize("backend, log", [("local", "driver.log"), ("ray", "actor-rank0.log")])
def test_the_console_of_a_vllm_run_is_hybridrls_lines(arith_data, tmp_path, backend, log):
    out = run_train(arith_data, tmp_path / "run", f"trainer.backend={backend}", "ray_kwargs.ray_init.num_cpus=2")
    console = out.stdout + out.stderr
    assert out.returncode == 0, console[-3000:]
    noise = [line for line in console.splitlines() if NOISE.search(line)]
    assert noise == [], "\n".join(noise)
    lines = console.splitlines()
    assert out.stdout.splitlines()[-1].startswith("done: 2 steps") and len(lines) < 30, console
    logs = tmp_path / "run" / "logs"
    assert str(logs) in console  # the console says where the rest went
    kept = (logs / log).read_text()
    assert "Triton" in kept and "Chat template warmup failed" in kept  # kept, not dropped


def test_an_engine_that_does_not_start_names_its_log(arith_data, tmp_path):
    # a KV cache of one byte: vLLM's engine process fails at start-up and prints why into the log
    out = run_train(arith_data, tmp_path / "run", "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=1")
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    log = tmp_path / "run" / "logs" / "driver.log"
    assert last.startswith("hybridrl train: error: the vLLM engine did not start (") and last.endswith(
        f"its processes' output, with the cause, is in {log}"), out.stderr[-3000:]
    assert "Traceback" not in out.stdout + out.stderr
    assert log.stat().st_size > 0
