"""What a run folder holds, read (never written) for the viewer: metrics.jsonl through a `LineIndex`,
the generation dumps named by its config.yaml, and its checkpoints.

Everything a run can leave half-done is a message, not an exception: a missing or unreadable
config.yaml, a metrics.jsonl cut mid-line, a dump folder that does not exist (yet).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Optional

from hybridrl.view.index import LineIndex
from hybridrl.view.metrics import MetricsTable

_STEP_FILE = re.compile(r"^(\d+)\.jsonl$")
_STEP_PREFIX = re.compile(rb'^\{"step": (\d+)')  # how json.dumps({"step": N, ...}) begins every dumped row
GENERATION_KINDS = ("rollout", "validation", "val_generations")


class ViewError(Exception):
    """A request the run folders cannot answer (unknown run, step, prompt): a message for the page."""


@dataclasses.dataclass
class GenerationSource:
    """Dumped generations of one kind: a folder of <step>.jsonl files, or one file with a step per row."""

    kind: str  # rollout (trainer.rollout_data_dir) | validation (trainer.validation_data_dir) | val_generations
    path: str
    per_step_files: bool
    _steps_index: Optional[LineIndex] = None  # the one-file kind: its lines, and the step of each
    _line_steps: list[int] = dataclasses.field(default_factory=list)

    def steps(self) -> list[int]:
        if self.per_step_files:
            try:
                names = os.listdir(self.path)
            except OSError:
                return []
            return sorted(int(m[1]) for n in names if (m := _STEP_FILE.match(n)))
        return sorted(set(self._one_file_steps()))

    def steps_with(self, prompt: str) -> list[int]:
        """The steps whose dump holds a row of this prompt: a byte search for its "input" field as json.dumps
        writes it (the trainer's dump_rows; also without ASCII escapes or spaces, as other writers do), no JSON
        parsing. Reads every step's rows once: ~0.3 s for 250 MB of dumps."""
        needles = {f'"input":{sep}{json.dumps(prompt, ensure_ascii=ascii)}'.encode()
                   for sep in (" ", "") for ascii in (True, False)}
        has = lambda data: any(n in data for n in needles)  # noqa: E731
        if self.per_step_files:
            found = []
            for step in self.steps():
                try:
                    with open(os.path.join(self.path, f"{step}.jsonl"), "rb") as f:
                        if has(f.read()):
                            found.append(step)
                except OSError:  # removed meanwhile (a resumed run rewrites its dumps)
                    continue
            return found
        steps = self._one_file_steps()
        return sorted({steps[j] for j, line in enumerate(self._steps_index.read(0, len(steps))) if has(line)})

    def step_lines(self, step: int) -> tuple[LineIndex, list[int]]:
        """The index of the file holding `step`, and the line numbers of its rows there."""
        if self.per_step_files:
            index = LineIndex(os.path.join(self.path, f"{step}.jsonl"))
            index.refresh()
            return index, list(range(len(index)))
        steps = self._one_file_steps()
        return self._steps_index, [i for i, s in enumerate(steps) if s == step]

    def _one_file_steps(self) -> list[int]:
        """The step of every line of the one-file kind, read from each line's prefix only (rows begin with
        '{"step": N'), and only for the lines appended since the last call."""
        if self._steps_index is None:
            self._steps_index = LineIndex(self.path)
        idx = self._steps_index
        before = idx.generation
        idx.refresh()
        if idx.generation != before:
            self._line_steps = []
        have = len(self._line_steps)
        for j, line in enumerate(idx.read(have, len(idx))):
            m = _STEP_PREFIX.match(line)
            self._line_steps.append(int(m[1]) if m else _step_of_json(line, have + j))
        return self._line_steps


def _step_of_json(line: bytes, _: int) -> int:
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError):
        return -1
    return step if isinstance(step, int) else -1


class RunFolder:
    """One run folder (trainer.default_local_dir), or a metrics.jsonl file's folder."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.problems: list[str] = []  # shown on the page beside the run
        folder = os.path.dirname(self.path) if os.path.isfile(self.path) else self.path
        if not os.path.exists(self.path):
            self.problems.append(f"{path}: no such folder")
        elif os.path.isdir(self.path) and not os.path.isfile(os.path.join(self.path, "metrics.jsonl")):
            self.problems.append(f"{path}: no metrics.jsonl (not a run folder, or the run logged nothing yet; "
                                 "runs log it with trainer.logger including 'file')")
        self.folder = folder
        metrics = self.path if os.path.isfile(self.path) else os.path.join(folder, "metrics.jsonl")
        self.metrics = LineIndex(metrics)
        self.table = MetricsTable(self.metrics)
        self.config = self._read_config()
        self.name = str(self._select("trainer.experiment_name") or os.path.basename(folder))
        self.sources = self._sources()

    def _read_config(self):
        path = os.path.join(self.folder, "config.yaml")
        if not os.path.isfile(path):
            return None
        from omegaconf import OmegaConf

        try:
            return OmegaConf.load(path)
        except Exception as e:  # a YAML error: the run still has curves worth seeing
            self.problems.append(f"{path}: cannot read it ({type(e).__name__}); its dumps are not found")
            return None

    def _select(self, key: str):
        if self.config is None:
            return None
        from omegaconf import OmegaConf

        try:
            return OmegaConf.select(self.config, key, default=None)
        except Exception:  # an interpolation that does not resolve here
            return None

    def _dump_dir(self, key: str) -> Optional[str]:
        """A dump folder from the config: as written (absolute, or relative to where training ran, which is
        often here), else relative to the run folder."""
        value = self._select(key)
        if not value:
            return None
        for candidate in (str(value), os.path.join(self.folder, str(value))):
            if os.path.isdir(candidate):
                return os.path.abspath(candidate)
        self.problems.append(f"{key}={value}: no such folder (yet); its generations are not shown")
        return None

    def _sources(self) -> dict[str, GenerationSource]:
        found = {}
        for kind, key in (("rollout", "trainer.rollout_data_dir"), ("validation", "trainer.validation_data_dir")):
            if (d := self._dump_dir(key)) is not None:
                found[kind] = GenerationSource(kind, d, True)
        val = os.path.join(self.folder, "val_generations.jsonl")
        if os.path.isfile(val) and os.path.getsize(val) > 0:
            found["val_generations"] = GenerationSource("val_generations", val, False)
        return found

    def source(self, kind: str) -> GenerationSource:
        if kind not in self.sources:
            have = ", ".join(self.sources) or "none"
            raise ViewError(f"run {self.name!r} has no {kind} generations (it has: {have}); set "
                            "trainer.rollout_data_dir / trainer.validation_data_dir when training to dump them")
        return self.sources[kind]

    def metrics_table(self) -> MetricsTable:
        """The run's metrics as columns, brought up to date (only appended lines are parsed)."""
        self.table.refresh()
        return self.table

    def checkpoints(self) -> list[dict]:
        """global_step_<N> folders: step, whole (its checkpoint.json manifest was written last) and the
        roles saved."""
        out = []
        try:
            names = os.listdir(self.folder)
        except OSError:
            return out
        for n in names:
            if (m := re.fullmatch(r"global_step_(\d+)", n)) and os.path.isdir(p := os.path.join(self.folder, n)):
                roles = sorted(r for r in ("actor", "critic") if os.path.isdir(os.path.join(p, r)))
                out.append({"step": int(m[1]), "whole": os.path.isfile(os.path.join(p, "checkpoint.json")),
                            "roles": roles})
        return sorted(out, key=lambda c: c["step"])

    def summary(self) -> dict:
        self.metrics.refresh()
        return {"name": self.name, "path": self.path, "problems": list(self.problems),
                "metric_lines": len(self.metrics), "generations": {k: s.path for k, s in self.sources.items()},
                "checkpoints": self.checkpoints()}


def load_folders(paths: list[str]) -> list[RunFolder]:
    """RunFolders with names that tell them apart (a shared experiment_name gets its folder name added)."""
    runs = [RunFolder(p) for p in paths]
    seen: dict[str, int] = {}
    for r in runs:
        seen[r.name] = seen.get(r.name, 0) + 1
    for i, r in enumerate(runs):
        if seen[r.name] > 1:
            r.name = f"{r.name} ({os.path.basename(r.folder) or r.folder} #{i + 1})"
    return runs
