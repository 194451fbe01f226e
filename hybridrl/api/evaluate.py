"""hybridrl.evaluate and hybridrl.load: `hybridrl eval` from Python (eval/evaluate.py, the same code), and
a trained model back as transformers objects."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Optional, Sequence

from hybridrl.errors import ConfigError

TAKEN = ("data", "model", "n", "custom_reward_path", "custom_reward_name")  # evaluate()'s own arguments


def _folder_of(model: Any) -> str:
    """A model argument as a path: a Run (its newest checkpoint), a path, or a bundled name."""
    from hybridrl.api.train import Run

    if isinstance(model, Run):
        return model.run_dir
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    raise ConfigError(f"model: a {type(model).__name__}; give a model folder, a run folder, a global_step_<N> "
                      "folder, a bundled model name (tiny-arith) or a Run (a model object: save_pretrained it first)")


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
    from hybridrl.api.train import settings_of
    from hybridrl.eval.evaluate import EvalSettings
    from hybridrl.eval.evaluate import evaluate as run_eval

    chosen = settings_of(EvalSettings, settings, TAKEN, "hybridrl.evaluate")
    keys = {k: chosen[k] for k in ("prompt_key", "reward_fn_key") if k in chosen}
    with tempfile.TemporaryDirectory(prefix="hybridrl-eval-") as folder:  # the rows' parquet, for this call only
        written = write_split(data, folder, "eval", keys.get("prompt_key", "prompt"),
                              keys.get("reward_fn_key", "data_source"), reward is not None)
        ref = function_ref(reward, reward_weights, written.text_prompts)
        s = EvalSettings(data=[written.path], model=_folder_of(model), n=n, **chosen)
        return run_eval(s, log=log, reward=ref)


def load(path: Any, log: Optional[Callable[[str], None]] = None):
    """(model, tokenizer) of a run folder (its newest whole checkpoint), a global_step_<N> folder, an exported
    or HF folder, or a bundled name: a transformers causal LM in eval mode on the CPU (a LoRA run's adapter on
    its base model, with peft), and its tokenizer. A damaged checkpoint is refused naming the file."""
    from hybridrl.eval.evaluate import model_folder
    from hybridrl.models.loading import load_causal_lm, load_tokenizer
    from hybridrl.models.lora import is_adapter_folder, load_adapter_model

    folder = model_folder(_folder_of(path), "hybridrl.load", log)
    model = load_adapter_model(folder) if is_adapter_folder(folder) else load_causal_lm(folder)
    return model.eval(), load_tokenizer(folder)
