"""The interrupt battery (issue #48 part 2): SIGINT and SIGTERM at random instants through the start-up and
first steps of every long-running command, each a fresh `python -m hybridrl` process.

For each command: one run without a signal measures its window (start to end, or for `serve` to its first
answer); then N runs get a signal at a uniformly random instant in that window, SIGINT to the process group
(as a terminal's Ctrl-C) and SIGTERM to the process (as `kill`), alternating. Each interrupted run must end
within 5 s of the signal (a training loop's first signal finishes its step and saves first: that time is
reported apart), with exit 130 (or 0 when it had just finished), no "Traceback" and no "Exception ignored"
anywhere in its output, and its last line saying it was interrupted; a training command's folder must
stay resumable (every 5th run is resumed to the end, which must exit 0). Writes bench/results/interrupts.{json,md}.

    .venv/bin/python bench/interrupt_battery.py                    # every command, 30 instants each
    .venv/bin/python bench/interrupt_battery.py --runs 4 --only train,eval
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
LIMIT_S = 5.0  # the most an interrupted command may take to end


def commands(work: str, data: dict, pairs: str) -> dict[str, dict]:
    """name -> {"argv": [...], "run_dir": folder that must stay resumable (or None), "ready": a line on stderr
    that ends the window for servers (else the run's end)}."""
    small = [f"data.train_files={data['train']}", f"data.val_files={data['val']}", "data.val_max_samples=8",
             "data.train_batch_size=8", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
             "trainer.total_training_steps=4", "trainer.save_freq=1", "trainer.test_freq=-1", "trainer.logger=[file]"]
    sweep = os.path.join(work, "sweep.yaml")
    with open(sweep, "w") as f:
        json.dump({"base": {"overrides": {"data.train_files": [data["train"]], "data.val_files": [data["val"]],
                                          "data.val_max_samples": 8, "data.train_batch_size": 8,
                                          "actor_rollout_ref.rollout.n": 4, "trainer.total_training_steps": 2,
                                          "trainer.logger": ["file"]}},
                   "space": {"actor_rollout_ref.actor.optim.lr": {"grid": [1e-4, 3e-4]}},
                   "metric": "val-core/arithmetic/reward/mean@1", "mode": "max", "output": "{run}/sweep"}, f)
    return {
        "train": {"argv": ["train", *small, "trainer.default_local_dir={run}"], "resume": True},
        "train-ray": {"argv": ["train", *small, "trainer.backend=ray", "trainer.n_gpus_per_node=2",
                               "trainer.default_local_dir={run}"], "resume": True},
        "train-vllm": {"argv": ["train", *small, "actor_rollout_ref.rollout.name=vllm",
                                "actor_rollout_ref.rollout.cpu_kv_cache_gb=0.25", "trainer.default_local_dir={run}"],
                       "resume": True},
        "sft": {"argv": ["sft", "model.partial_pretrain=tiny-arith", f"data.train_files=[{data['train']}]",
                         f"data.val_files=[{data['val']}]", "data.train_batch_size=16", "trainer.total_training_steps=6",
                         "trainer.test_freq=-1", "trainer.default_local_dir={run}"], "resume": False},
        "rm": {"argv": ["rm", "model.partial_pretrain=tiny-arith", f"data.train_files=[{pairs}]",
                        f"data.val_files=[{pairs}]", "data.train_batch_size=8", "trainer.total_training_steps=6",
                        "trainer.test_freq=-1", "trainer.default_local_dir={run}"], "resume": False},
        "eval": {"argv": ["eval", "--model", "tiny-arith", "--data", data["val"], "--n", "8"], "resume": False},
        "serve": {"argv": ["serve", "tiny-arith", "--port", "0"], "ready": "/v1", "resume": False},
        "sweep": {"argv": ["sweep", sweep], "resume": False},
        "check": {"argv": ["check", f"data.train_files={data['train']}", f"data.val_files={data['val']}",
                           "--work-dir", "{run}"], "resume": False},
    }


def start(argv: list[str], run: str) -> subprocess.Popen:
    args = [a.replace("{run}", run) for a in argv]
    if args[0] == "sweep":  # its output folder is in the file: one per run
        with open(args[1]) as f:
            spec = json.load(f)
        spec["output"] = os.path.join(run, "sweep")
        args[1] = os.path.join(run, "sweep.yaml")
        os.makedirs(run, exist_ok=True)
        with open(args[1], "w") as f:
            json.dump(spec, f)
    return subprocess.Popen([sys.executable, "-m", "hybridrl", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def window(spec: dict, work: str) -> float:
    """Seconds from start to the end (or, for a server, to its ready line) of an uninterrupted run."""
    run = tempfile.mkdtemp(dir=work)
    t0 = time.monotonic()
    proc = start(spec["argv"], run)
    if "ready" in spec:
        for line in proc.stdout:
            if spec["ready"] in line:
                break
        took = time.monotonic() - t0
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
        return took
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    return time.monotonic() - t0


def trial(name: str, spec: dict, work: str, at: float, sig: int, resume: bool) -> dict:
    run = tempfile.mkdtemp(dir=work)
    proc = start(spec["argv"], run)
    time.sleep(at)
    sent = time.monotonic()
    finished_first = proc.poll() is not None
    if not finished_first:
        (os.killpg if sig == signal.SIGINT else os.kill)(proc.pid, sig)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    took = time.monotonic() - sent
    lines = [x for x in out.splitlines() if x.strip()]
    last = lines[-1] if lines else ""
    record = {"command": name, "at_s": round(at, 2), "signal": signal.Signals(sig).name, "rc": proc.returncode,
              "exit_s": round(took, 2), "finished_before": finished_first,
              "traceback": "Traceback" in out or "Exception ignored" in out, "last": last[-160:]}
    ok_rc = proc.returncode in (0, 130, 143) if finished_first else proc.returncode in (130, 143)
    said = finished_first or "interrupted" in last
    # a training loop's first signal finishes the step in progress and saves (hybridrl/interrupt.py): its exit
    # time is that step's, reported as "graceful" and not held to LIMIT_S
    record["graceful"] = "interrupted at step" in last
    record["ok"] = ok_rc and said and not record["traceback"] and (finished_first or record["graceful"]
                                                                      or took <= LIMIT_S)
    if spec.get("resume") and resume and not finished_first:
        again = start(spec["argv"], run)
        rest, _ = again.communicate(timeout=900)
        record["resumed_rc"] = again.returncode
        record["ok"] = record["ok"] and again.returncode == 0
    if not record["ok"]:
        record["output_tail"] = out[-2500:]
    shutil.rmtree(run, ignore_errors=True)
    return record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30, help="instants per command (default: %(default)s)")
    ap.add_argument("--only", default="", help="comma-separated command names (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sys.path[:0] = [ROOT]
    from hybridrl.data.arithmetic import write_dataset

    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="hybridrl-interrupts-")
    data = write_dataset(os.path.join(work, "data"), train_size=64, val_size=16, seed=0)
    pairs = os.path.join(work, "pairs.jsonl")
    with open(pairs, "w") as f:
        for a in range(2, 30):
            prompt = [{"role": "user", "content": f"{a}+1="}]
            f.write(json.dumps({"prompt": prompt, "chosen": [{"role": "assistant", "content": str(a + 1)}],
                                "rejected": [{"role": "assistant", "content": str(a + 2)}]}) + "\n")
    specs = commands(work, data, pairs)
    names = [n for n in specs if not args.only or n in args.only.split(",")]
    records, windows = [], {}
    started = time.time()
    for name in names:
        windows[name] = round(window(specs[name], work), 2)
        print(f"{name}: window {windows[name]} s", flush=True)
        for i in range(args.runs):
            sig = signal.SIGINT if i % 2 == 0 else signal.SIGTERM
            r = trial(name, specs[name], work, rng.uniform(0.0, windows[name]), sig, resume=i % 5 == 4)
            records.append(r)
            print(f"  {name} #{i}: {r['signal']} at {r['at_s']} s -> rc {r['rc']} in {r['exit_s']} s"
                  f"{' (had finished)' if r['finished_before'] else ''}{'' if r['ok'] else ' FAILED: ' + r['last']}",
                  flush=True)
    shutil.rmtree(work, ignore_errors=True)
    write(records, windows, args, time.time() - started)


def write(records: list[dict], windows: dict, args, seconds: float) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    meta = {"date": datetime.date.today().isoformat(), "cpu": cpu, "cores": os.cpu_count(), "commit": commit,
            "command": "python bench/interrupt_battery.py " + " ".join(sys.argv[1:]), "wall_s": round(seconds)}
    with open(os.path.join(RESULTS, "interrupts.json"), "w") as f:
        json.dump({"meta": meta, "windows_s": windows, "records": records}, f, indent=1)
    lines = [f"# Interrupt battery ({meta['date']}, {cpu}, {os.cpu_count()} cores, commit {commit})", "",
             f"`{meta['command']}`, {meta['wall_s']} s in all. A signal at a random instant of each command's window "
             f"(its uninterrupted run); SIGINT to the group, SIGTERM to the process, alternating.", "",
             "| command | window s | runs | signalled | ok | worst exit s (stop at once) | worst graceful stop s | "
             "tracebacks | resumed ok |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, w in windows.items():
        rs = [r for r in records if r["command"] == name]
        hit = [r for r in rs if not r["finished_before"]]
        resumed = [r for r in rs if "resumed_rc" in r]
        at_once = [r["exit_s"] for r in hit if not r["graceful"]]
        graceful = [r["exit_s"] for r in hit if r["graceful"]]
        lines.append(f"| {name} | {w} | {len(rs)} | {len(hit)} | {sum(r['ok'] for r in rs)} | "
                     f"{max(at_once, default=0):.2f} | {max(graceful, default=0):.2f} | "
                     f"{sum(r['traceback'] for r in rs)} | {sum(r['resumed_rc'] == 0 for r in resumed)}/{len(resumed)} |")
    failed = [r for r in records if not r["ok"]]
    lines += ["", f"{len(failed)} run(s) failed." if failed else "Every run passed."]
    for r in failed:
        lines += ["", f"- {r['command']} {r['signal']} at {r['at_s']} s: rc {r['rc']}, {r['exit_s']} s, last line "
                      f"`{r['last']}`"]
    with open(os.path.join(RESULTS, "interrupts.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
