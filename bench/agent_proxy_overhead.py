"""What the agent proxy costs over the built-in multi-turn rollout (issue #36): step 1's batch of the calculator
task (examples/tool_calc, 32 prompts x 8 samples, 2 turns, T=1) made three ways from the same weights and seed, back
to back in one process, `rounds` times each, interleaved:

- built_in: rollout.multi_turn with examples/tool_calc/tools.yaml;
- agent: examples/agent_calc/agent.py through the proxy (each agent's openai client with a plain-HTTP httpx client,
  rollout/agent/server.py);
- agent_tls_client: the same with the client the openai package makes by itself (an httpx client with a TLS
  context, what the proxy used before 2026-11-28).

The three sample the same tokens (tests/integration/test_agent_vs_multi_turn.py), so the difference is the
proxy's own work: HTTP, JSON, the chat template and tokenizer per request, the agents' Python. Wall and CPU
seconds (process_time: every thread of this process) of `next_batch`. Needs the warm start build/tool_calc/sft
(examples/tool_calc/run.sh) and data/tool_calc (its make_data.py).

    .venv/bin/python bench/agent_proxy_overhead.py [--model build/tool_calc/sft] [--rounds 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hybridrl.config.loader import load_config  # noqa: E402
from hybridrl.config.schema import RLConfig  # noqa: E402
from hybridrl.plan.resolve import resolve  # noqa: E402
from hybridrl.rollout.agent.server import ProxyServer  # noqa: E402
from hybridrl.trainer.build import build_run  # noqa: E402


def calc_agent():
    spec = importlib.util.spec_from_file_location("agent_calc", os.path.join(ROOT, "examples/agent_calc/agent.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.agent


def batch_seconds(model: str, way: str, run_dir: str) -> tuple[float, float, float]:
    """(wall, CPU seconds, mean reward) of step 1's next_batch made `way`."""
    extra = ["actor_rollout_ref.rollout.multi_turn.enable=false", "actor_rollout_ref.rollout.agent.max_turns=2"]
    if way == "built_in":
        extra = []
    cfg = load_config(RLConfig, os.path.join(ROOT, "examples/tool_calc/rl.yaml"), [
        f"actor_rollout_ref.model.path={model}", "data.val_files=[]", "trainer.logger=[file]", "trainer.save_freq=0",
        f"trainer.default_local_dir={run_dir}", *extra])
    plain = ProxyServer.__dict__["_agent_http"]  # the staticmethod itself
    if way == "agent_tls_client":
        ProxyServer._agent_http = staticmethod(lambda: None)  # openai makes its own httpx client
    try:
        run = build_run(resolve(cfg), log=lambda *_: None,
                        agent=None if way == "built_in" else calc_agent())
        run.source.start(1)
        wall, cpu = time.perf_counter(), time.process_time()
        batch = run.source.next_batch(1, {})
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        run.source.close()
        run.close()
    finally:
        ProxyServer._agent_http = plain
    return wall, cpu, float(batch.reward.scores.mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="build/tool_calc/sft")
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    os.chdir(ROOT)  # rl.yaml's data paths are relative to the checkout
    results: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for way in ("built_in", "agent", "agent_tls_client"):
                wall, cpu, reward = batch_seconds(a.model, way, os.path.join(tmp, f"{way}{r}"))
                results.setdefault(way, []).append({"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                                                    "reward": reward})
                print(f"round {r} {way:17s} wall {wall:6.2f} s  cpu {cpu:6.2f} s  reward {reward:.4f}", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
