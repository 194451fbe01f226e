"""The `scale` check: `hybridrl plan`'s placement and memory estimate for the real model on the declared
cluster. The estimate reads the model folder's config.json and its safetensors headers, never the weights,
so a 70B model is checked on a laptop in a second."""

from __future__ import annotations

from typing import Any

from hybridrl.check.context import CheckContext
from hybridrl.check.registry import check
from hybridrl.check.result import Result, failed, passed
from hybridrl.plan.memory import MemoryBudgetError
from hybridrl.errors import ConfigError


@check("scale")
def scale(ctx: CheckContext) -> Result:
    """The real model fits the declared cluster: every role placed on trainer.n_gpus_per_node x trainer.nnodes
    workers (and the pools of its own), and each pool's estimated peak memory per worker within its budget
    (the GPU's memory, trainer.memory_per_worker_gb, or the RAM on a CPU); else which memory lever, batch size or
    worker count makes it fit. Sized from the model folder's config and safetensors headers, not its weights."""
    from hybridrl.plan.memory_fixes import check_memory
    from hybridrl.plan.placement import describe_placement

    cfg = ctx.cfg
    placement = describe_placement(cfg).splitlines()
    try:
        report = check_memory(cfg, ctx.plan)
    except MemoryBudgetError as e:  # the estimate's refusal: what is over, and the nearest settings that fit
        over, _, why = str(e).partition(": ")  # "the actor pool needs about X ... (budget source): why; fixes"
        return failed(f"does not fit: {over}", *placement, why, fix=_fix(e.fixes))
    except ConfigError as e:  # no budget to compare with (a GPU config read on a machine without one), or no sizes
        return failed(f"the memory estimate cannot be made: {str(e).splitlines()[0]}", *placement,
                      fix="set what the message names (trainer.memory_per_worker_gb: one worker's GPU memory in GiB)")
    memory = report.describe().splitlines()
    return passed(f"fits: {memory[0].removeprefix('memory per worker (estimate): ')}", *placement, *memory[1:])


def _fix(fixes: list[dict[str, Any]]) -> str:
    """The estimate's override sets, each of which fits; or, with none, what is left to change."""
    if not fixes:
        return ("use a smaller model, a shorter data.max_prompt_length + data.max_response_length, or workers with "
                "more memory (trainer.memory_per_worker_gb says how much one has)")
    return "set " + "; or set ".join(" ".join(f"{k}={_show(v)}" for k, v in fix.items()) for fix in fixes)


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
