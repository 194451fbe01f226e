"""A finished run as hybridrl.train returns it, and hybridrl.load: a trained model back as transformers objects."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from hybridrl.config.schema import RLConfig
from hybridrl.errors import ConfigError

if TYPE_CHECKING:  # trainer/rl.py imports torch: only for the annotation
    from hybridrl.trainer.rl import RunSummary


@dataclass(frozen=True)
class Run:
    """A finished (or resumed and finished) run: its summary, and its folder's contents on demand."""

    run_dir: str  # trainer.default_local_dir, absolute
    summary: "RunSummary"  # steps, val_before / val_after (mean validation score), wall_s, cpu_s; .line()
    config: RLConfig  # the config it ran with, as validated

    def metrics(self) -> list[dict[str, float]]:
        """The rows of <run_dir>/metrics.jsonl, one per logged step (a "step" key each; step 0: before training)."""
        with open(os.path.join(self.run_dir, "metrics.jsonl"), encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def checkpoints(self) -> list[str]:
        """The whole global_step_<N> folders, oldest first."""
        from hybridrl.trainer.checkpoint import complete_checkpoints

        return [path for _, path in sorted(complete_checkpoints(self.run_dir).items())]

    def last_checkpoint(self) -> Optional[str]:
        found = self.checkpoints()
        return found[-1] if found else None

    def load(self):
        """(model, tokenizer) of the newest checkpoint (see hybridrl.load)."""
        return load(self.run_dir)


def model_path(model: Any) -> str:
    """A model argument as a path: a Run (its newest checkpoint), a path, or a bundled name."""
    if isinstance(model, Run):
        return model.run_dir
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    raise ConfigError(f"model: a {type(model).__name__}; give a model folder, a run folder, a global_step_<N> "
                      "folder, a bundled model name (tiny-arith) or a Run (a model object: save_pretrained it first)")


def load(path: Any, log: Optional[Callable[[str], None]] = None):
    """(model, tokenizer) of a run folder (its newest whole checkpoint), a global_step_<N> folder, an exported
    or HF folder, or a bundled name: a transformers causal LM in eval mode on the CPU (a LoRA run's adapter on
    its base model, with peft), and its tokenizer. A damaged checkpoint is refused naming the file."""
    from hybridrl.eval.evaluate import model_folder
    from hybridrl.models.loading import load_causal_lm, load_tokenizer
    from hybridrl.models.lora import is_adapter_folder, load_adapter_model

    folder = model_folder(model_path(path), "hybridrl.load", log)
    model = load_adapter_model(folder) if is_adapter_folder(folder) else load_causal_lm(folder)
    return model.eval(), load_tokenizer(folder)
