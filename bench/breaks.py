"""Deliberate breaks (hand-made mutation testing): does the fast tier catch the bugs RL frameworks really ship?

Each break is a one-line bug a developer might make (a flipped sign, a wrong normaliser, a forgotten line of
resume), applied as an exact text replacement in a separate git worktree, never in this checkout. For each:
apply it, run the fast-tier tests named for it, record caught (the run failed) or missed and the seconds, put
the file back. A break is worth something only against tests that pass without it, so the named tests are run
unmutated first and the harness stops if they fail.

    git worktree add --detach /work/brk HEAD      # once; the harness makes it when it is missing
    .venv/bin/python bench/breaks.py              # every break against its narrow test files
    .venv/bin/python bench/breaks.py --full --only 9,16b,17   # the whole fast tier, for what the files missed
    .venv/bin/python bench/breaks.py --slow-files tests/integration/test_resume.py --only 9

--full runs the whole fast tier (`make test`'s `-m "not slow" -n 2 --dist loadfile`) per break; --slow-files runs
the named slow-tier files, by default for the breaks the fast tier missed. Results of every mode are merged into
bench/results/breaks.{json,md} (one record per break and mode), with the date, the CPU and the commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
ALGOS, TRAINER = "tests/unit/algos", "tests/unit/trainer"
RESUME = f"{TRAINER}/test_resume_exact.py"


@dataclass(frozen=True)
class Break:
    id: str
    what: str
    path: str  # relative to the repository root
    old: str  # must occur exactly once in `path`
    new: str
    tests: tuple[str, ...]  # the narrowest fast-tier files (or node ids) meant to catch it


def dropped(line: str) -> tuple[str, str]:
    """(old, new) for a forgotten line: the whole line, with its indent and newline, removed."""
    return line + "\n", ""


BREAKS = [
    Break("1", "GRPO advantage sign flipped", "hybridrl/algos/advantages.py",
          "adv = scores - mean", "adv = mean - scores", (f"{ALGOS}/test_advantages.py",)),
    Break("2", "GRPO group std with n instead of n-1", "hybridrl/algos/advantages.py",
          "var = group_sum((values - mean) ** 2, uid) / (count - 1).clamp(min=1)",
          "var = group_sum((values - mean) ** 2, uid) / count", (f"{ALGOS}/test_advantages.py",)),
    Break("3", "GRPO: the batch mean instead of the group mean", "hybridrl/algos/advantages.py",
          "adv = scores - mean", "adv = scores - scores.mean()", (f"{ALGOS}/test_advantages.py",)),
    Break("4", "PPO upper clip bound 1+eps_low instead of 1+eps_high", "hybridrl/algos/policy_losses.py",
          "clipped = -advantages * ratio.clamp(1.0 - params.clip_ratio_low, 1.0 + params.clip_ratio_high)",
          "clipped = -advantages * ratio.clamp(1.0 - params.clip_ratio_low, 1.0 + params.clip_ratio_low)", (f"{ALGOS}/test_policy_losses.py",)),
    Break("5", "k3 KL estimator: x = log π - log π_ref (sign flipped)", "hybridrl/algos/kl.py",
          "x = ref_log_probs - log_probs", "x = log_probs - ref_log_probs", (f"{ALGOS}/test_kl.py",)),
    Break("6", "seq-mean-token-mean divides by the padded length T", "hybridrl/algos/reduce.py",
          "per_seq = _masked(values, mask).sum(-1) / mask.sum(-1).clamp(min=1)",
          "per_seq = _masked(values, mask).sum(-1) / mask.shape[-1]", (f"{ALGOS}/test_reduce.py",)),
    # the per-micro-batch normaliser is this project's "divide by the number of micro-batches": each micro-batch
    # reduced over itself, k accumulated micro-batches give k times the mini-batch loss
    Break("7", "micro-batch loss normalised per micro-batch, not by the mini-batch", "hybridrl/workers/policy.py",
          "pg_loss = reduce_loss(token_loss, mask, s.loss_agg_mode, scale)",
          "pg_loss = reduce_loss(token_loss, mask, s.loss_agg_mode)", ("tests/unit/workers/test_policy.py",)),
    Break("8", "token-mean divides by numel, not the mask sum", "hybridrl/algos/reduce.py",
          "return _masked(values, mask).sum() / max(scale.num_tokens, 1.0)",
          "return _masked(values, mask).sum() / values.numel()", (f"{ALGOS}/test_reduce.py",)),
    Break("9", "resume forgets the RNG states (_restore's set_rng_state line)", "hybridrl/trainer/checkpoint.py",
          *dropped('    set_rng_state(state["rng"], torch.load(os.path.join(folder, "rng_state.pt"), weights_only=True))'),
          (f"{TRAINER}/test_checkpoint.py", RESUME)),
    Break("9b", "set_rng_state skips the torch RNG", "hybridrl/trainer/checkpoint.py",
          *dropped('    torch.set_rng_state(tensors["torch"])'), (f"{TRAINER}/test_checkpoint.py", RESUME)),
    Break("10", "resume off by one: retrains the checkpoint's step", "hybridrl/trainer/rl.py",
          "first = p.step + 1", "first = p.step", (RESUME,)),
    Break("11", "resume forgets the sampler state", "hybridrl/trainer/checkpoint.py",
          *dropped('    run.sampler.load_state_dict(state["sampler"])'), (RESUME,)),
    Break("12", "resume forgets the LR scheduler state", "hybridrl/workers/update_loop.py",
          *dropped('        self.scheduler.load_state_dict(state["scheduler"])'), (RESUME,)),
    Break("13", "resume forgets the mini-batch shuffle generator", "hybridrl/workers/update_loop.py",
          *dropped('        self.shuffle_generator.set_state(state["shuffle_generator"])'), (RESUME,)),
    Break("14", "resume forgets the adaptive KL coefficient", "hybridrl/trainer/checkpoint.py",
          'run.kl_ctrl.value = state["kl_coef"]', "pass", (RESUME,)),
    Break("15", "async: no push after the step that lets the last batch start", "hybridrl/trainer/async_schedule.py",
          "return self.next_step <= self.total_steps or", "return self.next_step < self.total_steps or",
          (f"{TRAINER}/test_async_schedule.py",)),
    Break("16", "resume forgets the rollout engine's sampling counters", "hybridrl/workers/policy.py",
          *dropped('        self.engine.load_state_dict(state["engine"])'), (RESUME,)),
    Break("16b", "sampling keys ignore the call counter (not advanced per call)", "hybridrl/rollout/keyed.py",
          "response_keys(self.seed, stream, self.calls[stream], sample_ids)",
          "response_keys(self.seed, stream, 0, sample_ids)", ("tests/unit/rollout/test_hf.py",)),
    Break("17", "weight sync to an engine with its own copy skipped (condition inverted)", "hybridrl/workers/policy.py",
          "if self.engine is not None and not self.engine.shares_weights:",
          "if self.engine is not None and self.engine.shares_weights:",
          ("tests/unit/workers/test_policy.py", "tests/unit/models/test_lora.py")),
    Break("17b", "async: the weights never pushed to the rollout pool", "hybridrl/trainer/async_rollout.py",
          "self.pushes += self.pool.push_weights(self.policy.engine_weights(), version)", "pass",
          (f"{TRAINER}/test_async_rollout.py",)),
]

PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x", "-rfE"]
NARROW = ["-n", "0", "-m", "not slow"]
FULL = ["-n", "2", "--dist", "loadfile", "-m", "not slow"]  # `make test`'s tier and split
SLOW = ["-n", "0"]  # the named slow files whole


def sh(*cmd: str, cwd: str = ROOT) -> str:
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def ensure_worktree(wt: str) -> None:
    """A detached worktree at this checkout's HEAD, clean; models/ (ignored, `make smollm2`) linked in, so the
    tests that use it run there as here."""
    if not os.path.isdir(wt):
        sh("git", "worktree", "add", "--detach", wt, "HEAD")
    if os.path.isdir(os.path.join(ROOT, "models")) and not os.path.exists(os.path.join(wt, "models")):
        os.symlink(os.path.join(ROOT, "models"), os.path.join(wt, "models"))
    if sh("git", "status", "--porcelain", "--untracked-files=no", cwd=wt):
        sys.exit(f"{wt} has changes: a leftover break? `git -C {wt} checkout -- .`")


def env_for(wt: str) -> dict[str, str]:
    """PYTHONPATH puts the worktree's package before the venv's editable install of this checkout (checked).
    The suite's time budget (tests/budget_plugin.py) is lifted: it fails a run whose test took over 20 s, which on
    a busy machine says nothing about a break."""
    return {**os.environ, "PYTHONPATH": wt, "HYBRIDRL_TEST_BUDGET_S": "1e9"}


def check_import(wt: str) -> str:
    where = subprocess.run([sys.executable, "-c", "import hybridrl; print(hybridrl.__file__)"], cwd=wt,
                           env=env_for(wt), check=True, capture_output=True, text=True).stdout.strip()
    if not where.startswith(os.path.join(wt, "")):
        sys.exit(f"the tests would import {where}, not the worktree's package")
    return where


def run_tests(wt: str, args: list[str], timeout: float) -> dict:
    """One pytest run in the worktree: rc, failing node ids, seconds. Its own process group, so a timeout
    ends the xdist workers too."""
    start = time.perf_counter()
    p = subprocess.Popen(PYTEST + args, cwd=wt, env=env_for(wt), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, rc = p.communicate()[0], None
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.M)
    return {"rc": rc, "failed": failed, "seconds": round(time.perf_counter() - start, 1), "tail": out[-1500:]}


def apply(wt: str, b: Break) -> None:
    path = os.path.join(wt, b.path)
    text = open(path).read()
    count = text.count(b.old)
    assert count == 1, f"break {b.id}: its old text occurs {count} times in {b.path}"
    with open(path, "w") as f:
        f.write(text.replace(b.old, b.new))


def verdict(rc) -> str:
    # rc 1: a test failed; 2-4: interrupted, internal or usage error (a break that stops collection is caught,
    # but it is flagged); 5: nothing collected, which says nothing
    return {0: "missed", 1: "caught", None: "timeout", 5: "no tests"}.get(rc, f"caught (rc {rc})")


def confirmed(wt: str, r: dict) -> str:
    """A catch must be the break's: the first failing test, run again alone with the break still applied, must
    fail again. Measured: a timing test of the whole tier (close() returns within 5 s) failed on a loaded
    machine with a break that cannot reach it, and passed alone."""
    again = run_tests(wt, ["-n", "0", r["failed"][0]], 600)
    return r["verdict"] if again["rc"] != 0 else "flaky (passed alone)"


def machine() -> dict:
    cpu = re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M)
    return {"date": datetime.date.today().isoformat(), "cpu": cpu.group(1) if cpu else "unknown",
            "cores": os.cpu_count(), "commit": sh("git", "rev-parse", "--short", "HEAD")}


def load() -> dict:
    path = os.path.join(RESULTS, "breaks.json")
    return json.load(open(path)) if os.path.exists(path) else {"runs": {}, "results": {}}


def fast_verdict(results: dict, bid: str) -> str | None:
    """The fast tier's last word on a break: the whole tier's if it ran, else the narrow files'."""
    for mode in ("full", "narrow"):
        if f"{bid}/{mode}" in results:  # a flaky catch is a miss
            return results[f"{bid}/{mode}"]["verdict"].replace("flaky (passed alone)", "missed")
    return None


def cell(r: dict | None) -> str:
    if r is None:
        return ""
    by = ", ".join(f"`{n.split('::')[-1]}`" for n in r["failed"][:1]) or "-"
    if r["verdict"].startswith("caught"):
        return f"{r['verdict']}: {by} ({r['seconds']:.0f} s)"
    return f"**{r['verdict']}**{': ' + by if r['failed'] else ''} ({r['seconds']:.0f} s)"


def write(data: dict) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "breaks.json"), "w") as f:
        json.dump(data, f, indent=1)
    lines = ["# Deliberate breaks (bench/breaks.py)", ""]
    for mode, m in sorted(data["runs"].items()):
        lines.append(f"- {mode}: {m['date']}, commit {m['commit']}, {m['cpu']} ({m['cores']} cores), "
                     f"baseline {m['baseline_s']:.0f} s")
    lines += ["", "| id | break | file | narrow files | whole fast tier | slow files |", "|---|---|---|---|---|---|"]
    res = data["results"]
    for b in BREAKS:
        lines.append(f"| {b.id} | {b.what} | `{b.path}` | " +
                     " | ".join(cell(res.get(f"{b.id}/{mode}")) for mode in ("narrow", "full", "slow")) + " |")
    with open(os.path.join(RESULTS, "breaks.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worktree", default="/work/brk", help="the git worktree that is mutated")
    ap.add_argument("--only", help="comma-separated break ids (default: all; with --slow-files: the fast tier's misses)")
    ap.add_argument("--full", action="store_true", help="run the whole fast tier per break")
    ap.add_argument("--slow-files", nargs="+", help="run these slow-tier files per break")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per pytest run")
    a = ap.parse_args()
    data, wt = load(), os.path.abspath(a.worktree)
    mode = "slow" if a.slow_files else "full" if a.full else "narrow"
    if a.only:
        chosen = [b for b in BREAKS if b.id in a.only.split(",")]
    elif mode == "slow":
        chosen = [b for b in BREAKS if fast_verdict(data["results"], b.id) == "missed"]
    else:
        chosen = BREAKS
    ensure_worktree(wt)
    print(f"importing {check_import(wt)}", flush=True)

    def args_for(b: Break | None) -> list[str]:
        if mode == "full":
            return FULL
        if mode == "slow":
            return SLOW + a.slow_files
        return NARROW + (list(dict.fromkeys(t for c in chosen for t in c.tests)) if b is None else list(b.tests))

    # A catch by a test that fails anyway proves nothing: the same tests, unmutated, must pass first.
    base = run_tests(wt, args_for(None), a.timeout)
    print(f"baseline: rc {base['rc']} in {base['seconds']} s", flush=True)
    if base["rc"] != 0:
        sys.exit(f"the tests fail without any break; fix that first:\n{base['tail']}")
    data["runs"][mode] = {**machine(), "baseline_s": base["seconds"], "args": args_for(chosen[0]) if chosen else []}
    for b in chosen:
        apply(wt, b)
        try:
            r = run_tests(wt, args_for(b), a.timeout)
            r["verdict"] = verdict(r["rc"])
            if r["verdict"].startswith("caught") and r["failed"]:
                r["verdict"] = confirmed(wt, r)
        finally:  # the next break, and the next run, start from a clean tree
            sh("git", "checkout", "--", b.path, cwd=wt)
        data["results"][f"{b.id}/{mode}"] = {k: v for k, v in r.items() if k != "tail"}
        print(f"{b.id:>4} {r['verdict']:<14} {r['seconds']:>7.1f} s  {b.what}  {r['failed'][:1]}", flush=True)
        write(data)  # after each break: an interrupted run keeps what it measured


if __name__ == "__main__":
    main()
