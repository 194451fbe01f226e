"""hybridrl.evaluate: `hybridrl eval` from Python (eval/evaluate.py, the same code)."""

from __future__ import annotations

import dataclasses
import tempfile
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from hybridrl.errors import ConfigError

TAKEN = ("data", "model", "n", "custom_reward_path", "custom_reward_name")  # evaluate()'s own arguments


def evaluate(model: Any, data: Any, *, reward: Any = None, reward_weights: Optional[Sequence[float]] = None,
             n: int = 1, log: Callable[[str], None] = print, **settings: Any):
    """`hybridrl eval` on `model` (a Run, a run / checkpoint / HF folder, or a bundled name) and `data` (as
    hybridrl.train's data: rows, a table or a file path); returns eval/evaluate.EvalResult (`.metrics`: the
    trainer's validation keys, val-core/<source>/reward/mean@n ..., plus diversity/*; `.rows`: every
    generation). `reward`: as hybridrl.train's, else each row's built-in scorer. `settings`: EvalSettings'
    fields (temperature, top_p, top_k, greedy, max_prompt_length, max_response_length, max_samples,
    batch_size, seed, ref, prompt_key, reward_fn_key, num_workers, timeout_s, on_error, output, dump, ...)."""
    from hybridrl.api.data import write_split
    from hybridrl.api.rewards import function_ref
    from hybridrl.api.run import model_path
    from hybridrl.eval.evaluate import EvalSettings
    from hybridrl.eval.evaluate import evaluate as run_eval

    chosen = settings_of(EvalSettings, settings, TAKEN, "hybridrl.evaluate")
    keys = {k: chosen[k] for k in ("prompt_key", "reward_fn_key") if k in chosen}
    with tempfile.TemporaryDirectory(prefix="hybridrl-eval-") as folder:  # the rows' parquet, for this call only
        written = write_split(data, folder, "eval", keys.get("prompt_key", "prompt"),
                              keys.get("reward_fn_key", "data_source"), reward is not None)
        ref = function_ref(reward, reward_weights, written.text_prompts)
        s = EvalSettings(data=[written.path], model=model_path(model), n=n, **chosen)
        return run_eval(s, log=log, reward=ref)


def settings_of(cls: type, given: Mapping[str, Any], taken: Iterable[str], what: str) -> dict[str, Any]:
    """`given` checked against the dataclass `cls`'s fields (less `taken`, set otherwise): a ConfigError lists
    the valid names."""
    names = {f.name for f in dataclasses.fields(cls)} - set(taken)
    unknown = sorted(set(given) - names)
    if unknown:
        raise ConfigError(f"{what}: unknown setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(names))}")
    return dict(given)
