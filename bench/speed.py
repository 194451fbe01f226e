"""GRPO speed, TRL's GRPOTrainer vs hybridrl, on two workloads (bench/workload.py), CPU.

    make bench                                   # = .venv/bin/python bench/speed.py
    .venv/bin/python bench/speed.py --quick --models tiny   # smoke test, a few minutes

Workloads: "fixed" (random-init models, 32 tokens per response always: the engine on fixed work) and
"learning" (SFT'd models on the arithmetic task, EOS on: varying lengths and a realistic share of
groups whose rewards are all equal, which carry no gradient). Each row is a configuration; TRL runs
like-for-like (fp32) and, where this CPU has fast bf16 (measured bf16 matmul peak above fp32's), in
bf16 too, and with its torch_compile option (fixed workload; optional rows, left out with their error
if they fail): speed-ups are given against TRL fp32 and against TRL's best (its fastest row).
Run it under ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 CPU to emulate an AVX2-only
one: the results are then filed as kind "avx2-emulated".

Method, all in one invocation so that every figure shares the machine's state:
- builds the random-init models once into a temp dir; the learning workload's "small" model gets a
  short SFT, cached in bench/.cache (the same seed and steps reuse it);
- measures this machine's matmul peaks (fp32 and bf16) at the benchmark's thread count: the floors;
- for each workload and model, runs the configurations alternately, A B C A B C ..., `--rounds`
  times, each a fresh process of `--steps` steps; alternating spreads any drift of the machine
  (thermal, a neighbour's load) over all configurations alike;
- pools each configuration's steps over its rounds, drops the first steps of every run (warm-up:
  allocator, thread pools, lazy init) and reports medians: seconds and process CPU-seconds per
  step, generation and training shares, token rates, peak RSS, speed-ups, MFU, the share of groups
  with equal rewards, and each step's compute floor (what it computes at the measured peak of its dtype).

Results of different CPU kinds (AVX2, AVX-512, AVX-512 with BF16) never share a table: this writes
bench/results/speed-<kind>.json (machine, versions, peaks, per-row statistics, raw step records,
command, date) and speed-<kind>.md (the tables, also printed), and puts the tables between the
`<!-- bench-<kind>:start -->` and `<!-- bench-<kind>:end -->` markers of docs/benchmarks/speed.md when it has them.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import workload  # noqa: E402

from hybridrl.plan.precision_auto import ONEDNN_ISA_ENV  # noqa: E402

TRL_PY = os.path.join(HERE, ".venv-trl", "bin", "python")
SEQS = workload.PROMPTS_PER_STEP * workload.SAMPLES_PER_PROMPT
SHARE_KEY = "actor_rollout_ref.model.share_prompt_prefix"
SKIP_KEY = "actor_rollout_ref.actor.skip_zero_advantage"
CACHE = os.path.join(HERE, ".cache")
TINY_ARITH = os.path.join(ROOT, "hybridrl", "assets", "tiny-arith")
SMALL_SFT_STEPS = 360  # tiny-arith's recipe (scripts/build_tiny_model.sh); 120 steps left it at 1.4 % accuracy


@dataclass(frozen=True)
class Config:
    name: str
    label: str
    runner: str  # "trl" or "hybridrl"
    overrides: list[str] = field(default_factory=list)  # hybridrl config overrides: the levers
    needs: str = ""  # a module the row needs (skipped, and said so, when it is not installed)
    bf16: bool = False  # bf16 compute (runs only where this CPU has fast bf16)
    compile: bool = False  # TRL's torch_compile=True
    optional: bool = False  # a failure drops the row (said in the results) instead of stopping the bench
    workloads: tuple[str, ...] = workload.WORKLOADS

    @property
    def shares_prompts(self) -> bool:
        """Whether each distinct prompt is computed once (hybridrl's default; TRL never does)."""
        if self.runner != "hybridrl":
            return False
        values = [o.split("=", 1)[1].lower() for o in self.overrides if o.startswith(SHARE_KEY + "=")]
        return not values or values[-1] == "true"


TARGETS = {"fixed": 1.5, "learning": 2.0}  # the speed-up targets over TRL's best, per workload
LIKE = [f"{SHARE_KEY}=false", "actor_rollout_ref.rollout.lean_decode=false"]
FIXED = ("fixed",)
CONFIGS = [  # the first row is the reference of every "vs TRL" speed-up; TRL's best is the faster TRL row
    Config("trl", "TRL GRPOTrainer (fp32)", "trl"),
    Config("trl-bf16", "TRL GRPOTrainer, bf16=True", "trl", bf16=True),
    # TRL's other CPU option (TrainingArguments.torch_compile). Fixed work only: with EOS on, every new
    # response length recompiles (measured on tiny-arith: 1.8-2.6 s/step for 8 steps, then 0.19 s once the
    # shapes repeat, against 0.17 s without compiling), so a short run would only time the compiler.
    # Optional: under ATEN_CPU_CAPABILITY=avx2 on an AVX-512 CPU its compiled generate sampled from NaN
    # probabilities (torch.multinomial refused), which is TRL's / inductor's failure, not a reason to lose the rest.
    Config("trl-compile", "TRL GRPOTrainer, torch_compile=True (fp32)", "trl", compile=True, workloads=FIXED,
           optional=True),
    Config("trl-bf16-compile", "TRL GRPOTrainer, bf16=True, torch_compile=True", "trl", bf16=True, compile=True,
           workloads=FIXED, optional=True),
    Config("hybridrl-allpasses", "hybridrl, every pass (old log-probs and reference recomputed, as verl does)",
           "hybridrl", [*LIKE, "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.kl_coef=0.0"], workloads=FIXED),
    Config("hybridrl-like", "hybridrl, like-for-like (hf rollout, fp32, only the passes GRPO needs)", "hybridrl",
           [*LIKE, f"{SKIP_KEY}=false"]),
    Config("hybridrl-lean", "+ lean decode steps (rollout.lean_decode)", "hybridrl", [f"{SHARE_KEY}=false",
                                                                                         f"{SKIP_KEY}=false"],
           workloads=FIXED),
    Config("hybridrl-share", "+ prompt-prefix sharing", "hybridrl", [f"{SKIP_KEY}=false"]),
    Config("hybridrl-best", "+ skip zero-advantage responses = hybridrl's defaults at fp32 (without fast bf16)",
           "hybridrl"),
    Config("hybridrl-bf16", "+ bf16 (compute, rollout; token TIS) = hybridrl's defaults with fast bf16", "hybridrl",
           bf16=True),
    Config("hybridrl-vllm", "hybridrl defaults with the vLLM rollout (fp32; CPU-s omit its engine process)", "hybridrl",
           ["actor_rollout_ref.rollout.name=vllm"], needs="vllm", workloads=FIXED),
]


def cpu_kind(flags: list[str]) -> str:
    """The CPU kinds the issue tells apart: bf16 matmul speed depends on AVX512_BF16 / AMX."""
    if any(f.startswith("amx") for f in flags) or "avx512_bf16" in flags:
        return "avx512-bf16"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "other"


# Emulating an AVX2-only CPU on an AVX-512 one: ATEN_CPU_CAPABILITY picks PyTorch's own kernels' ISA,
# ONEDNN_MAX_CPU_ISA caps oneDNN, which runs the bf16 matmuls (measured here: 399 -> 2.2 GFLOP/s bf16,
# fp32 unchanged at ~193: MKL's sgemm on this AMD EPYC runs AVX2 code either way).
ISA_CAPS = ("ATEN_CPU_CAPABILITY", *ONEDNN_ISA_ENV)


def isa_caps() -> dict[str, str]:
    """The ISA caps set in this environment, as set."""
    return {k: os.environ[k] for k in ISA_CAPS if os.environ.get(k)}


def bench_kind(flags: list[str]) -> str:
    """The kind the results are filed under: the CPU's, or "avx2-emulated" / "<kind>-capped" when ISA caps
    are set, so that a capped run never lands in (or overwrites) the native kind's table."""
    native, caps = cpu_kind(flags), {k: v.strip().lower() for k, v in isa_caps().items()}
    if not caps:
        return native
    if native.startswith("avx512") and set(caps.values()) == {"avx2"} and "ATEN_CPU_CAPABILITY" in caps:
        return "avx2-emulated"
    return f"{native}-capped"


def sft_small(log_dir: str) -> str:
    """The learning workload's "small" model: the small shape, random init, SFT'd on the arithmetic task
    for SMALL_SFT_STEPS steps as scripts/build_tiny_model.sh makes tiny-arith; cached in bench/.cache."""
    shape = workload.MODELS["small"]
    out = os.path.join(CACHE, f"small-arith-{SMALL_SFT_STEPS}")
    if os.path.exists(os.path.join(out, "model.safetensors")):
        return out
    hybridrl = [sys.executable, "-m", "hybridrl"]
    work = os.path.join(CACHE, "small-sft-work")
    steps = [
        hybridrl + ["data", "arithmetic", "--output", os.path.join(work, "data"), "--seed", "0"],
        [sys.executable, "-m", "hybridrl.models.tiny", "--out", os.path.join(work, "init"), "--hidden",
         str(shape["hidden"]), "--layers", str(shape["layers"]), "--heads", str(shape["heads"]), "--intermediate",
         str(shape["intermediate"]), "--seed", str(workload.SEED)],
        hybridrl + ["sft", f"model.partial_pretrain={os.path.join(work, 'init')}",
                    f"data.train_files={os.path.join(work, 'data', 'train.parquet')}",
                    f"data.val_files={os.path.join(work, 'data', 'val.parquet')}", "data.train_batch_size=64",
                    "optim.lr=1e-3", "optim.lr_warmup_steps=100", "optim.lr_scheduler=constant",
                    f"trainer.total_training_steps={SMALL_SFT_STEPS}", f"trainer.test_freq={SMALL_SFT_STEPS}",
                    f"trainer.default_local_dir={os.path.join(work, 'sft')}"],
    ]
    print(f"[learning] a {SMALL_SFT_STEPS}-step SFT of the small model (once; cached in {out})", file=sys.stderr,
          flush=True)
    with open(os.path.join(log_dir, "small-sft.log"), "w") as f:
        for cmd in steps:
            subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, check=True)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(os.path.join(work, "sft"), out, ignore=shutil.ignore_patterns("global_step*", "*.jsonl"))
    shutil.rmtree(work, ignore_errors=True)
    return out


def _shape(model, path: str) -> dict:
    from hybridrl.models.flops import attention_width, matmul_params

    c = model.config
    return {"path": path, "params": sum(p.numel() for p in model.parameters()), "n_matmul": matmul_params(model),
            "n_layers": c.num_hidden_layers, "width": attention_width(c), "hidden": c.hidden_size,
            "layers": c.num_hidden_layers, "heads": c.num_attention_heads, "intermediate": c.intermediate_size}


def build_models(kind: str, names: list[str], folder: str) -> dict[str, dict]:
    """Each model of workload `kind`: its folder and what FLOP counting needs. "fixed": random init, written
    with the tokenizer into `folder`; "learning": the bundled tiny-arith, and the SFT'd small model."""
    from hybridrl.models.loading import load_causal_lm
    from hybridrl.models.tiny import build_model, build_tokenizer

    models = {}
    if kind == "learning":
        for name in names:
            path = TINY_ARITH if name == "tiny" else sft_small(folder)
            models[name] = _shape(load_causal_lm(path), path)
        return models
    tok = build_tokenizer()
    for name in names:
        model = build_model(tok, seed=workload.SEED, **workload.MODELS[name])
        path = os.path.join(folder, name)
        model.save_pretrained(path)
        tok.save_pretrained(path)
        models[name] = _shape(model, path)
    return models


def measure_peaks(threads: int) -> dict[str, float]:
    """Matmul GFLOP/s at the runs' thread count. bf16 runs at well under 1 GFLOP/s on a CPU
    without AVX512-BF16/AMX, so its matrices are kept small (well under a second)."""
    from hybridrl.models.flops import measured_peak_flops

    torch.set_num_threads(threads)
    fp32 = measured_peak_flops("cpu", torch.float32) / 1e9
    bf16 = measured_peak_flops("cpu", torch.bfloat16, size=256) / 1e9
    if bf16 > fp32 / 4:  # fast bf16 (AVX512_BF16, AMX): measure at fp32's size, where small matrices undersell it
        bf16 = measured_peak_flops("cpu", torch.bfloat16) / 1e9
    # the bf16 rows run only where bf16 matmuls beat fp32 ones: emulated (no AVX512_BF16/AMX, or oneDNN capped
    # below it) they run at 1-3 GFLOP/s
    return {"fp32_gflops": fp32, "bf16_gflops": bf16, "fast_bf16": bf16 > fp32}


def machine() -> dict:
    """This machine as every bench names it: CPU, flags, versions, ISA caps and the kind its results are filed under."""
    cpuinfo = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    name = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, re.M)
    flags = sorted(set(re.findall(r"\b(avx512\w*|avx2|avx_vnni\w*|amx\w*)\b", cpuinfo)))
    import transformers

    trl = None
    if os.path.exists(TRL_PY):  # bench/setup_trl.sh installs it (make bench); bench/profile_steps.py needs none
        trl = json.loads(subprocess.run([TRL_PY, "-c", "import json, torch, transformers, trl; print(json.dumps({'trl': "
                                         "trl.__version__, 'transformers': transformers.__version__, 'torch': "
                                         "torch.__version__}))"], capture_output=True, text=True, check=True).stdout)
    return {"processor": platform.processor(), "cpu_model": name.group(1) if name else "",
            "cpu_count": os.cpu_count(), "cpu_flags": flags, "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "trl_venv": trl, "isa_caps": isa_caps(), "kind": bench_kind(flags)}


class RowFailed(Exception):
    """An optional row's run failed; the message is its error line."""


def run(cfg: Config, kind: str, model: str, steps: int, threads: int, out: str, log: str) -> list[dict]:
    """One fresh process of `steps` steps; its step records. Exits with the log's tail on failure (an optional
    row raises RowFailed instead)."""
    script = os.path.join(HERE, f"{cfg.runner}_grpo.py")
    python = TRL_PY if cfg.runner == "trl" else sys.executable
    args = [python, script, "--model", model, "--steps", str(steps), "--threads", str(threads), "--out", out,
            "--workload", kind, *(["--bf16"] if cfg.bf16 else []), *(["--compile"] if cfg.compile else []),
            *cfg.overrides]
    with open(log, "w") as f:
        done = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if done.returncode:
        tail = open(log).read().splitlines()[-40:]
        if cfg.optional:
            raise RowFailed(next((line for line in reversed(tail) if "Error" in line), f"exit {done.returncode}"))
        sys.exit(f"{cfg.name} on {model} failed (exit {done.returncode}); {log} ends:\n" + "\n".join(tail))
    # Another process on the cores slows a multi-threaded run several-fold (its threads wait on each other):
    # the load average at the end of each run tells such runs apart in the results.
    load = os.getloadavg()[0]
    return [{**json.loads(line), "load_1m": load} for line in open(out)]


def step_flops(rec: dict, shape: dict, shares: bool) -> dict[str, float]:
    """Model FLOPs of one step's training pass (all 32 sequences in full, and what was computed: each
    prompt once with sharing, and only the responses not skipped) and of its rollout (prefill + one
    forward per generated token). Lengths vary in the learning workload: every sequence is taken at the
    step's mean length, which is exact for the matmuls and close for the attention."""
    from hybridrl.models.flops import shared_prompt_training_flops, training_flops

    dims = (shape["n_matmul"], shape["n_layers"], shape["width"])
    seq = rec["train_tokens"] / SEQS
    response = rec["gen_tokens"] / SEQS
    prompt = seq - response
    nominal = training_flops(torch.full((SEQS,), seq), *dims)
    executed = nominal
    if shares:
        group = torch.arange(workload.PROMPTS_PER_STEP).repeat_interleave(workload.SAMPLES_PER_PROMPT)
        executed = shared_prompt_training_flops(torch.full((SEQS,), prompt), torch.full((SEQS,), response),
                                                group, *dims)
    executed *= 1.0 - rec.get("skipped_frac", 0.0)  # skipped responses (whole groups) are not computed
    prefilled = prompt * (workload.PROMPTS_PER_STEP if shares else SEQS)
    return {"train_nominal": nominal, "train_executed": executed,
            "rollout": 2 * shape["n_matmul"] * (rec["gen_tokens"] + prefilled),
            "rollout_plain": 2 * shape["n_matmul"] * (rec["gen_tokens"] + prompt * SEQS)}


def summarize(records: list[dict], shape: dict, shares: bool, peak_flops: float) -> dict:
    med = lambda values: statistics.median(list(values))  # noqa: E731
    train_s, gen_s = med(r["train_s"] for r in records), med(r["gen_s"] for r in records)
    flops = [step_flops(r, shape, shares) for r in records]
    mfu = lambda key, seconds: med(f[key] for f in flops) / seconds / peak_flops  # noqa: E731
    step_s = med(r["step_s"] for r in records)
    floor_s = med((f["train_executed"] + f["rollout"]) / peak_flops for f in flops)
    # the floor of the plain computation (every sequence's prompt prefilled and trained in full, no response
    # skipped: what TRL computes, so its two floors coincide): a step below it did less work, not faster work
    plain_floor_s = med((f["train_nominal"] + f["rollout_plain"]) / peak_flops for f in flops)
    return {
        "steps": len(records), "step_s": step_s, "cpu_s": med(r["cpu_s"] for r in records),
        "gen_s": gen_s, "rollout_s": med(r["rollout_s"] for r in records), "train_s": train_s,
        "gen_tok_s": med(r["gen_tokens"] / r["gen_s"] for r in records),
        "train_tok_s": med(r["train_tokens"] / r["train_s"] for r in records),
        "response_tokens": statistics.mean(r["gen_tokens"] / SEQS for r in records),
        "zero_std_share": statistics.mean(r.get("zero_std_share", 0.0) for r in records),
        "score": statistics.mean(r.get("score", 0.0) for r in records),
        "peak_rss_gb": max(r["peak_rss_gb"] for r in records),
        # train_s is the whole step past the rollout (hybridrl's log-prob pass included), while the
        # FLOPs are those of one forward + backward: the MFU of the training share, a lower bound.
        "mfu_train_nominal": mfu("train_nominal", train_s), "mfu_train_executed": mfu("train_executed", train_s),
        "mfu_rollout": mfu("rollout", gen_s),
        # what the step computes (training as executed + rollout) at the measured peak of its dtype
        "gflop_step": med(f["train_executed"] + f["rollout"] for f in flops) / 1e9,
        "floor_s": floor_s, "over_floor": step_s / floor_s, "over_plain_floor": step_s / plain_floor_s,
        # hybridrl's phases (timing_s/*): where a step's time goes, the profile the levers are read from
        "phases": {k: med(r["timing"].get(k, 0.0) for r in records)
                   for k in sorted({k for r in records for k in r.get("timing", {})} - {"step"})},
    }


def add_speedups(rows: list[dict]) -> None:
    """vs TRL fp32 (like-for-like) and vs TRL's best (its fastest row) of the same workload and model."""
    for row in rows:
        same = [r for r in rows if (r["workload"], r["model"]) == (row["workload"], row["model"])]
        ref = next((r for r in same if r["config"] == CONFIGS[0].name), None)
        best = min((r for r in same if r["runner"] == "trl"), key=lambda r: r["step_s"], default=None)
        row["speedup"] = ref["step_s"] / row["step_s"] if ref else None
        row["cpu_speedup"] = ref["cpu_s"] / row["cpu_s"] if ref else None
        row["speedup_vs_best"] = best["step_s"] / row["step_s"] if best else None


def markdown(rows: list[dict], models: dict, peaks: dict, info: dict, command: str,
             failed: list[dict] = ()) -> str:
    x = lambda v: f"{v:.2f}x" if v is not None else "n/a"  # noqa: E731
    pct = lambda v: f"{100 * v:.1f} %"  # noqa: E731
    caps = " ".join(f"{k}={v}" for k, v in info.get("isa_caps", {}).items())
    out = [f"CPU: {info['cpu_model']} ({info['cpu_count']} cores), kind **{info['kind']}** (flags: "
           f"{', '.join(info['cpu_flags']) or 'none of interest'}"
           f"{f'; run with {caps}, which caps the ISA PyTorch and oneDNN use' if caps else ''}); measured matmul peak at the bench's thread count: "
           f"{peaks['fp32_gflops']:.1f} GFLOP/s fp32, {peaks['bf16_gflops']:.1f} GFLOP/s bf16 "
           f"({'fast bf16: the bf16 rows run' if peaks['fast_bf16'] else 'no fast bf16: the bf16 rows are left out'}).\n"]
    header = ("| model | configuration | s/step (median) | vs TRL fp32 | vs TRL's best | CPU-s/step | generation s "
              "| training s | resp. tokens | equal-reward groups | skipped | generated tok/s | trained tok/s "
              "| training MFU (nominal / executed) | rollout MFU | floor s | step / floor | step / plain floor "
              "| peak RSS GB |")
    for kind in workload.WORKLOADS:
        part = [r for r in rows if r["workload"] == kind]
        if not part:
            continue
        out += [f"\n**{kind} workload**\n", header, "|" + " --- |" * header.count(" | ") + " --- |"]
        for r in part:
            out.append(
                f"| {r['model']} ({models[kind][r['model']]['params'] / 1e6:.1f}M) | {r['label']} | {r['step_s']:.2f} "
                f"| {x(r['speedup'])} | {x(r['speedup_vs_best'])} | {r['cpu_s']:.2f} | {r['gen_s']:.2f} "
                f"| {r['train_s']:.2f} | {r['response_tokens']:.1f} | {pct(r['zero_std_share'])} "
                f"| {pct(r['skipped_frac'])} | {r['gen_tok_s']:.0f} | {r['train_tok_s']:.0f} "
                f"| {pct(r['mfu_train_nominal'])} / {pct(r['mfu_train_executed'])} | {pct(r['mfu_rollout'])} "
                f"| {r['floor_s']:.2f} | {r['over_floor']:.1f}x | {r['over_plain_floor']:.1f}x | {r['peak_rss_gb']:.2f} |")
        for model in dict.fromkeys(r["model"] for r in part):
            mine = [r for r in part if r["model"] == model and r["runner"] == "hybridrl"]
            best = min(mine, key=lambda r: r["step_s"], default=None)
            if best and best["speedup_vs_best"] is not None:
                target = TARGETS[kind]
                verdict = "meets" if best["speedup_vs_best"] >= target else "misses"
                out.append(f"\n{kind}/{model}: hybridrl's fastest row ({best['config']}) takes {best['step_s']:.2f} s, "
                           f"{best['speedup_vs_best']:.2f}x TRL's best: {verdict} the {target:g}x target; it is "
                           f"{best['over_floor']:.1f}x its compute floor ({best['gflop_step']:.0f} GFLOP per step at the "
                           f"measured {'bf16' if best['bf16'] else 'fp32'} peak) and {best['over_plain_floor']:.1f}x the "
                           f"floor of the plain computation (every sequence in full, as TRL computes).")
    phased = [r for r in rows if r["runner"] == "hybridrl" and r["phases"]]
    if phased:
        keys = [k for k in ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights")
                if any(k in r["phases"] for r in phased)]
        out += ["\n**Where hybridrl's step goes** (median seconds per phase, `timing_s/*`)\n",
                "| workload | model | configuration | " + " | ".join(keys) + " | step |",
                "|" + " --- |" * (len(keys) + 4)]
        for r in phased:
            out.append(f"| {r['workload']} | {r['model']} | {r['config']} | "
                       + " | ".join(f"{r['phases'].get(k, 0.0):.3f}" for k in keys) + f" | {r['step_s']:.3f} |")
    for f in failed:
        out.append(f"\n{f['workload']}/{f['model']}: the row \"{f['label']}\" failed and is left out: {f['error']}")
    out.append(f"\nCommand: `{command}`")
    return "\n".join(out) + "\n"


def update_readme(table: str, kind: str) -> None:
    """The tables into the docs' benchmark page (docs/benchmarks/speed.md), between this kind's markers."""
    path = os.path.join(ROOT, "docs", "benchmarks", "speed.md")
    text = open(path).read()
    start_mark, end_mark = f"<!-- bench-{kind}:start -->", f"<!-- bench-{kind}:end -->"
    start, end = text.find(start_mark), text.find(end_mark)
    if start < 0 or end < start:
        return  # no markers for this CPU kind: the page is not ours to restructure
    with open(path, "w") as f:
        f.write(text[:start + len(start_mark)] + "\n" + table + text[end:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--models", default="tiny,small")
    p.add_argument("--workloads", default=",".join(workload.WORKLOADS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out-dir", default=os.path.join("bench", "results"))
    p.add_argument("--quick", action="store_true", help="smoke test: 3 steps, 1 round, 1 warm-up step dropped")
    p.add_argument("--configs", default=",".join(c.name for c in CONFIGS))
    a = p.parse_args()
    steps, rounds, warmup = (3, 1, 1) if a.quick else (a.steps, a.rounds, 2)
    names, kinds = a.models.split(","), a.workloads.split(",")
    unknown = (set(a.configs.split(",")) - {c.name for c in CONFIGS} | set(names) - set(workload.MODELS)
               | set(kinds) - set(workload.WORKLOADS))
    if unknown:
        p.error(f"unknown model, workload or config: {', '.join(sorted(unknown))}")
    configs = [c for c in CONFIGS if c.name in a.configs.split(",")]
    missing = [c for c in configs if c.needs and importlib.util.find_spec(c.needs) is None]
    for c in missing:
        print(f"skipping {c.name}: {c.needs} is not installed (make vllm)", file=sys.stderr)
    configs = [c for c in configs if c not in missing]
    caps = [f"{k}={v}" for k, v in isa_caps().items()]  # an emulated kind's command names them
    command = " ".join(caps + [shlex.join([os.path.relpath(sys.executable, ROOT), *sys.argv])])
    os.makedirs(a.out_dir, exist_ok=True)

    info = machine()
    peaks = measure_peaks(a.threads)
    if not peaks["fast_bf16"]:
        configs = [c for c in configs if not c.bf16]
    rows, models, failed = [], {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            models[kind] = build_models(kind, names, tmp)
            for name in names:
                mine = [c for c in configs if kind in c.workloads]
                pooled: dict[str, list[dict]] = {c.name: [] for c in mine}
                for i in range(rounds):
                    for cfg in list(mine):  # alternate: A B C A B C ...
                        print(f"[{kind}/{name}] round {i + 1}/{rounds}: {cfg.name}", file=sys.stderr, flush=True)
                        out = os.path.join(tmp, f"{kind}-{name}-{cfg.name}-{i}.jsonl")
                        log = os.path.join(tmp, f"{kind}-{name}-{cfg.name}-{i}.log")
                        try:
                            pooled[cfg.name] += run(cfg, kind, models[kind][name]["path"], steps, a.threads, out,
                                                    log)[warmup:]
                        except RowFailed as e:
                            print(f"{cfg.name} failed on {kind}/{name}, left out: {e}", file=sys.stderr)
                            failed.append({"workload": kind, "model": name, "config": cfg.name, "label": cfg.label,
                                           "error": str(e)})
                            mine.remove(cfg)
                for cfg in mine:
                    peak = peaks["bf16_gflops" if cfg.bf16 else "fp32_gflops"] * 1e9
                    stats = summarize(pooled[cfg.name], models[kind][name], cfg.shares_prompts, peak)
                    skipped = statistics.mean(r.get("skipped_frac", 0.0) for r in pooled[cfg.name])
                    rows.append({"workload": kind, "model": name, "config": cfg.name, "label": cfg.label,
                                 "runner": cfg.runner, "bf16": cfg.bf16, "overrides": cfg.overrides, **stats,
                                 "skipped_frac": skipped, "records": pooled[cfg.name]})
    add_speedups(rows)

    table = markdown(rows, models, peaks, info, command, failed)
    for per_kind in models.values():
        for m in per_kind.values():
            m["path"] = os.path.relpath(m["path"], ROOT) if m["path"].startswith(ROOT) else "(temporary)"
    result = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "command": command,
              "steps": steps, "rounds": rounds, "warmup_steps_dropped": warmup, "threads": a.threads,
              "workload": {"prompts_per_step": workload.PROMPTS_PER_STEP,
                           "samples_per_prompt": workload.SAMPLES_PER_PROMPT, "new_tokens": workload.NEW_TOKENS,
                           "lr": workload.LR, "seed": workload.SEED, "small_sft_steps": SMALL_SFT_STEPS},
              "machine": info, "peaks": peaks, "models": models, "rows": rows, "failed_rows": failed}
    stem = os.path.join(a.out_dir, f"speed-{info['kind']}")
    with open(stem + ".json", "w") as f:
        json.dump(result, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(table)
    update_readme(table, info["kind"])
    print(table)


if __name__ == "__main__":
    main()
