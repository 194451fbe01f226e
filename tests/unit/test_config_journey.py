"""The config's journey from the command line to the trainer (issue #47): the hybridrl modules whose functions
are handed the config (the RLConfig, one of its sections, or the RunPlan holding it) while `hybridrl train`
loads, resolves and builds a run, up to the driver loop's first line. Fewer modules that touch the config is
fewer places a value can be changed or misread; a call into a module of a higher layer than its caller's
(tests/unit/test_package_layers.py) is the config climbing back up. `python tests/unit/test_config_journey.py`
prints the journey.

Measured with this file on the default GRPO run (python tests/unit/test_config_journey.py, 2026-12-08): 23 modules
and no climb at 7ad42a0 (config/ held the plan then, so its climbs were inside one package); 21 modules and 2 climbs
after the split into config/, vocab/ and plan/ (03bb54f: config.validate ran plan.checks' checks); 21 modules and
0 climbs once the run builder reads the RunPlan (2a70bf1). The issue's own count (44 modules, 29 climbs) came from
another walk, which it does not give; this test holds the counts above."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_package_layers import LAYER, package_of  # noqa: E402

BUDGET_MODULES = 25  # the target: under 25 modules from the CLI to the trainer
BUDGET_CLIMBS = 0  # calls that hand the config to a module of a higher layer than the caller's


class Stop(Exception):
    """Raised at the driver loop's first line: the journey ends where the trainer takes over the built run."""


def carries_config(value) -> bool:
    kind = type(value)
    return kind.__module__.startswith("hybridrl.config.") or kind.__name__ == "RunPlan"


def journey(argv: list[str]) -> list[tuple[str, str, str]]:
    """(caller module, callee module, callee function) for each call handing the config on, in order, while
    `hybridrl ARGV` runs up to RLTrainer.fit."""
    from hybridrl import cli  # noqa: F401
    from hybridrl.models.loading import load_causal_lm, load_tokenizer
    from hybridrl.trainer import build, launch, rl  # noqa: F401  (imported before the trace: importing is not the walk)

    load_causal_lm(load_tokenizer("tiny-arith") and "tiny-arith")  # transformers' lazy imports too, untraced

    calls: list[tuple[str, str, str]] = []

    def profile(frame, event, arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("hybridrl.") or frame.f_code.co_name.startswith("<"):
            return
        code = frame.f_code
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if names and names[0] == "self" and carries_config(frame.f_locals.get("self")):
            return  # the config's own methods (its sections' constructors, as the config is made) hand nothing on
        if any(carries_config(frame.f_locals.get(n)) for n in names):
            calls.append((module_of(handed_by(frame)), module, code.co_name))

    sys.setprofile(profile)
    try:
        run_to_the_trainer(argv)
    finally:
        sys.setprofile(None)
    return calls


def run_to_the_trainer(argv: list[str]) -> None:
    """`hybridrl ARGV` in this process, stopped at RLTrainer.fit's first line."""
    from hybridrl import cli
    from hybridrl.trainer import rl

    def stop(self):
        raise Stop

    real_fit = rl.RLTrainer.fit
    rl.RLTrainer.fit = stop
    try:
        cli.main(argv)
    except Stop:
        pass
    finally:
        rl.RLTrainer.fit = real_fit


def readers(argv: list[str]) -> Counter:
    """The hybridrl modules that read a config key (an attribute of a config section), with their read counts,
    while `hybridrl ARGV` runs up to RLTrainer.fit."""
    import dataclasses
    import importlib
    import pkgutil

    import hybridrl.config

    classes = set()
    for info in pkgutil.iter_modules(hybridrl.config.__path__, "hybridrl.config."):
        module = importlib.import_module(info.name)
        classes |= {c for c in vars(module).values() if isinstance(c, type) and dataclasses.is_dataclass(c)
                    and c.__module__.startswith("hybridrl.config.")}
    reads: Counter = Counter()

    def getattribute(self, name, _real=object.__getattribute__):
        if not name.startswith("__"):
            reads[sys._getframe(1).f_globals.get("__name__", "")] += 1
        return _real(self, name)

    for c in classes:
        c.__getattribute__ = getattribute
    try:
        run_to_the_trainer(argv)
    finally:
        for c in classes:
            del c.__getattribute__
    return Counter({m: n for m, n in reads.items() if m.startswith("hybridrl.")})


def handed_by(frame):
    """The frame that handed the config on to `frame`'s function: its caller, or where the caller only runs a
    function it was given (config/validate.Problems.check(fn, cfg), a callback), whoever gave it."""
    caller = frame.f_back
    while caller is not None and caller.f_back is not None and any(
            getattr(v, "__code__", None) is frame.f_code for v in caller.f_locals.values()):
        caller = caller.f_back
    return caller


def module_of(frame) -> str:
    return frame.f_globals.get("__name__", "") if frame is not None else ""


def layer(module: str) -> int:
    return LAYER.get(package_of(module), -1)


def climbs(calls) -> list[tuple[str, str, str]]:
    return [(a, b, f) for a, b, f in calls if a.startswith("hybridrl.") and layer(b) > layer(a)]


def train_argv(arith_data, run_dir) -> list[str]:
    return ["train", f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}",
            "data.train_batch_size=4", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "trainer.total_training_steps=1", "trainer.logger=[file]", f"trainer.default_local_dir={run_dir}"]


@pytest.fixture(scope="module")
def sixteen_prompts(tmp_path_factory) -> dict:
    from hybridrl.data.arithmetic import write_dataset

    return write_dataset(str(tmp_path_factory.mktemp("sixteen")), train_size=16, val_size=4, seed=0)


def test_the_config_reaches_the_trainer_through_few_modules_and_rarely_climbs_back(sixteen_prompts, tmp_path):
    calls = journey(train_argv(sixteen_prompts, tmp_path / "run"))
    modules = list(dict.fromkeys(b for _, b, _ in calls))
    assert "hybridrl.plan.resolve" in modules and "hybridrl.trainer.build" in modules, modules  # it traced the path
    assert len(modules) < BUDGET_MODULES, "\n".join(modules)
    up = climbs(calls)
    assert len(up) <= BUDGET_CLIMBS, "\n".join(f"{a} -> {b}.{f}" for a, b, f in up)


if __name__ == "__main__":  # the journey of the same short run, printed
    import tempfile

    from hybridrl.data.arithmetic import write_dataset

    with tempfile.TemporaryDirectory() as tmp:
        data = write_dataset(tmp + "/data", train_size=16, val_size=4, seed=0)
        calls = journey(train_argv(data, tmp + "/run"))
    per = Counter(b for _, b, _ in calls)
    for m in dict.fromkeys(b for _, b, _ in calls):
        print(f"{layer(m):>2} {m}: {per[m]} call(s)")
    print(f"{len(per)} modules")
    for a, b, f in climbs(calls):
        print(f"climbs back: {a} (layer {layer(a)}) -> {b}.{f} (layer {layer(b)})")
    print(f"{len(climbs(calls))} climbs back")
    with tempfile.TemporaryDirectory() as tmp:
        data = write_dataset(tmp + "/data", train_size=16, val_size=4, seed=0)
        read = readers(train_argv(data, tmp + "/run"))
    for m, n in read.most_common():
        print(f"reads keys: {layer(m):>2} {m}: {n}")
    print(f"{len(read)} modules read config keys")
