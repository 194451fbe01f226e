"""Every implementation of a role (the local class, the Ray group) has every method of its interface
(workers/roles.py) with the same parameters: names, kinds and defaults. A Ray group that lacks a method, or takes
it with other parameters, fails here instead of in a run on a cluster."""

from __future__ import annotations

import inspect
import typing

import pytest

from hybridrl.distributed.group import (
    CriticGroup,
    PolicyGroup,
    RayRoles,
    ReferenceGroup,
    RewardModelGroup,
    TeacherGroup,
)
from hybridrl.workers.critic import Critic
from hybridrl.workers.policy import Policy
from hybridrl.workers.reference import Reference
from hybridrl.workers.reward_model import RewardModel
from hybridrl.workers.roles import (
    CriticRole,
    PolicyRole,
    ReferenceRole,
    RewardModelRole,
    TeacherRole,
    WorkerProcesses,
)

IMPLEMENTATIONS = [
    (PolicyRole, Policy), (PolicyRole, PolicyGroup),
    (ReferenceRole, Reference), (ReferenceRole, ReferenceGroup),
    (TeacherRole, Reference), (TeacherRole, TeacherGroup),  # build_teacher builds a Reference of another model
    (CriticRole, Critic), (CriticRole, CriticGroup),
    (RewardModelRole, RewardModel), (RewardModelRole, RewardModelGroup),
    (WorkerProcesses, RayRoles),  # what RLRun.close and the timeline call on the Ray workers
]


def protocol_methods(protocol: type) -> dict[str, typing.Callable]:
    """The methods a Protocol declares, its bases' included."""
    out: dict[str, typing.Callable] = {}
    for cls in reversed(protocol.__mro__):
        if cls is typing.Protocol or not getattr(cls, "_is_protocol", False):
            continue
        out.update({name: f for name, f in vars(cls).items() if inspect.isfunction(f) and not name.startswith("_")})
    return out


def parameters(f: typing.Callable) -> list[tuple]:
    """(name, kind, default) of each parameter; annotations may differ (a group returns an object-store reference
    where the local class returns tensors)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]


def mismatches(protocol: type, cls: type) -> list[str]:
    problems = []
    for name, declared in protocol_methods(protocol).items():
        found = getattr(cls, name, None)
        if found is None or not callable(found):
            problems.append(f"{cls.__name__} has no {name}()")
        elif parameters(found) != parameters(declared):
            problems.append(f"{cls.__name__}.{name}{inspect.signature(found)} is not "
                            f"{protocol.__name__}.{name}{inspect.signature(declared)}")
    return problems


def test_the_interfaces_declare_what_the_driver_calls():
    assert set(protocol_methods(PolicyRole)) == {
        "generate", "skip", "log_probs", "log_probs_and_entropy", "update", "engine_weights", "model_shape", "close",
        "state_dict", "load_state_dict", "save_pretrained", "load_pretrained", "saved_shapes"}
    assert set(protocol_methods(CriticRole)) == {
        "values", "update", "state_dict", "load_state_dict", "save_pretrained", "load_pretrained", "saved_shapes"}
    assert set(protocol_methods(ReferenceRole)) == set(protocol_methods(TeacherRole)) == {"log_probs"}
    assert set(protocol_methods(RewardModelRole)) == {"scores"}
    assert set(protocol_methods(WorkerProcesses)) == {"timeline_events", "close"}


@pytest.mark.parametrize(("protocol", "cls"), IMPLEMENTATIONS, ids=lambda x: x.__name__)
def test_each_implementation_has_every_method_of_its_role(protocol, cls):
    assert mismatches(protocol, cls) == []


def test_a_drifted_implementation_is_named_with_what_differs():
    class Drifted:  # no close(), and generate without its `stream`
        def generate(self, prompts, n, sampling):
            ...

    problems = mismatches(PolicyRole, Drifted)
    assert "Drifted has no close()" in problems
    assert any(p.startswith("Drifted.generate(self, prompts, n, sampling) is not PolicyRole.generate(") for p in problems)
