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
        self.check_present()
        if self.per_step_files:
            try:
                names = os.listdir(self.path)
            except OSError:
                return []
            return sorted(int(m[1]) for n in names if (m := _STEP_FILE.match(n)))
        return sorted(set(self._one_file_steps()))

    def check_present(self) -> None:
        """Raise ViewError when the dump was deleted or moved while served (it existed when the run was
        loaded): its steps would otherwise just vanish from the page without a word."""
        if not os.path.exists(self.path):
            raise ViewError(f"{self.path}: the {self.kind} dump was deleted or moved while the viewer ran; its "
                            "generations cannot be read until it is back")

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
    """One run folder (trainer.default_local_dir). Anything else given (a file, a missing path) is a run
    with a problem and nothing to read, named by what was given: not by a folder the user did not name."""

    def __init__(self, path: str):
        self.given = path  # as typed: what every message about the path names
        self.path = os.path.abspath(path)
        self.folder = self.path
        self.was_folder = os.path.isdir(self.path)  # one deleted later is gone; one missing now may still come
        self.problems: list[str] = _path_problems(path, self.path)  # shown on the page beside the run
        self.metrics = LineIndex(os.path.join(self.folder, "metrics.jsonl"))
        self.table = MetricsTable(self.metrics)
        self.config = self._read_config()
        self.name = str(self._select("trainer.experiment_name") or os.path.basename(self.folder))
        self.sources = self._sources()

    def gone(self) -> Optional[str]:
        """Why the run can no longer be read (its folder deleted or moved while served), or None."""
        if self.was_folder and not os.path.isdir(self.folder):
            return (f"{self.given}: the run folder was deleted or moved while the viewer ran; what the page has "
                    "stays as last read, nothing more is read until the folder is back (restart `hybridrl view` "
                    "without it to drop it)")
        return None

    def check_present(self) -> None:
        """Raise ViewError naming the deleted folder, so that a request about it answers why (the page shows
        the message) instead of an empty run."""
        if (why := self.gone()) is not None:
            raise ViewError(why)

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
        self.check_present()
        if kind not in self.sources:
            have = ", ".join(self.sources) or "none"
            raise ViewError(f"run {self.name!r} has no {kind} generations (it has: {have}); set "
                            "trainer.rollout_data_dir / trainer.validation_data_dir when training to dump them")
        return self.sources[kind]

    def metrics_table(self) -> MetricsTable:
        """The run's metrics as columns, brought up to date (only appended lines are parsed); ViewError when
        the folder is gone, since reading its missing metrics.jsonl would empty the curves without a word."""
        self.check_present()
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
        """The run as the page lists it; a run whose folder is gone keeps its last counts, marked gone with
        the reason among its problems."""
        gone = self.gone()
        if gone is None:
            self.metrics.refresh()
        return {"name": self.name, "path": self.path, "problems": self.problems + ([gone] if gone else []),
                "gone": gone is not None, "metric_lines": len(self.metrics),
                "generations": {k: s.path for k, s in self.sources.items()},
                "checkpoints": [] if gone else self.checkpoints()}


def _path_problems(given: str, path: str) -> list[str]:
    """What is wrong with a path given as a run folder: missing, a file, or a folder without metrics.jsonl."""
    if os.path.isfile(path):
        return [_file_problem(given, path)]
    if not os.path.exists(path):
        return [f"{given}: no such folder"]
    if not os.path.isfile(os.path.join(path, "metrics.jsonl")):
        return [f"{given}: no metrics.jsonl (not a run folder, or the run logged nothing yet; runs log it with "
                "trainer.logger including 'file')"]
    return []


def _file_problem(given: str, path: str) -> str:
    """A file given as a run: named as given, with the folder to give instead when its own holds a run."""
    parent = os.path.dirname(path)
    instead = (f": `hybridrl view {os.path.dirname(given) or '.'}`"
               if os.path.isfile(os.path.join(parent, "metrics.jsonl")) else " (the run's trainer.default_local_dir)")
    return f"{given}: a file, not a run folder; give the run folder, the one holding metrics.jsonl{instead}"


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
