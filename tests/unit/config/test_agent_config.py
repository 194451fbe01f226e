"""actor_rollout_ref.rollout.agent.*: the agent function is checked when the config is (file, name, async, arity),
what agent rollouts do not support yet is refused by name, and hybridrl.train(agent=...)
gets the same checks before anything is written."""

from __future__ import annotations

import pytest

from hybridrl.plan.resolve import load_rl_config_checked
from hybridrl.errors import ConfigError
from hybridrl.rollout.agent.loading import check_agent, load_agent

KEY = "actor_rollout_ref.rollout.agent"
AGENTS = '''
async def agent(client, row):
    return 1.0

def blocking(client, row):
    return 1.0

async def one_arg(client):
    return 1.0

async def with_default(client, row, tries=2):
    return 1.0

helper = 3
'''


@pytest.fixture
def agents_file(tmp_path):
    path = tmp_path / "agents.py"
    path.write_text(AGENTS)
    return str(path)


def _errors(*overrides: str) -> list[str]:
    _, errors, _ = load_rl_config_checked(None, list(overrides))
    return errors


def test_a_good_agent_loads_and_the_defaults_are_off(agents_file):
    assert _errors(f"{KEY}.path={agents_file}") == []
    assert load_agent(agents_file, "with_default").__name__ == "with_default"  # extra arguments with defaults: fine


@pytest.mark.parametrize("name,says", [
    ("blocking", "is not an async function"),
    ("one_arg", "must take two arguments (client, row); its signature is one_arg(client)"),
    ("helper", "is a int, not a function"),
    ("missing", "no such function in"),
])
def test_a_wrong_function_is_one_line_naming_the_key(agents_file, name, says):
    errors = _errors(f"{KEY}.path={agents_file}", f"{KEY}.name={name}")
    assert len(errors) == 1 and f"{KEY}.name='{name}'" in errors[0] and says in errors[0], errors
    if name == "missing":
        assert "async functions there: agent, one_arg, with_default" in errors[0]


def test_a_missing_file(tmp_path):
    errors = _errors(f"{KEY}.path={tmp_path}/nope.py")
    assert errors == [f"{KEY}.path='{tmp_path}/nope.py': file not found; give the Python file that defines "
                      "`async def agent(client, row) -> float | dict`"]


@pytest.mark.parametrize("override,says", [
    ("actor_rollout_ref.rollout.multi_turn.enable=true", "multi_turn.enable=true both say how a rollout runs"),
    ("algorithm.filter_groups.enable=true", "algorithm.filter_groups.enable=true (dynamic sampling"),
])
def test_what_agent_rollouts_cannot_do_yet_is_refused(agents_file, override, says):
    errors = _errors(f"{KEY}.path={agents_file}", override)
    assert any(says in e for e in errors), errors


def test_a_wrong_function_and_a_conflict_are_reported_together(agents_file):
    errors = _errors(f"{KEY}.path={agents_file}", f"{KEY}.name=blocking", "algorithm.filter_groups.enable=true")
    assert len(errors) == 2 and "is not an async function" in errors[0] and "filter_groups" in errors[1], errors


@pytest.mark.parametrize("overrides", [["actor_rollout_ref.rollout.name=vllm"], ["trainer.backend=ray"],
                                       ["trainer.backend=ray", "trainer.n_gpus_per_node=2",
                                        "actor_rollout_ref.rollout.name=vllm"]])
def test_agents_run_on_either_engine_and_backend(agents_file, overrides, vllm_installed):
    assert _errors(f"{KEY}.path={agents_file}", *overrides) == []


ASYNC = ("trainer.backend=ray", "rollout.n_gpus_per_node=1", "rollout.nnodes=1")


def test_asynchronous_training_takes_an_agent_but_not_partial_rollouts(agents_file):
    assert _errors(f"{KEY}.path={agents_file}", *ASYNC) == []
    assert _errors(f"{KEY}.path={agents_file}", *ASYNC, "async_training.staleness_threshold=1") == []
    errors = _errors(f"{KEY}.path={agents_file}", *ASYNC, "async_training.staleness_threshold=1",
                     "async_training.partial_rollout=true")
    assert [e for e in errors if "partial_rollout" in e] == [
        "async_training.partial_rollout=true (a weight push landing inside one completion) is not yet supported with "
        f"the agent proxy; set async_training.partial_rollout=false with {KEY}.path (a push may still land between "
        "two turns: the batch's lag is its oldest turn's)"], errors


def test_on_error_is_a_choice_key():
    errors = _errors(f"{KEY}.on_error=skip")
    assert len(errors) == 1 and "zero" in errors[0] and "fail" in errors[0], errors


def test_a_function_from_python_is_checked_the_same_way():
    def sync_agent(client, row):
        return 0.0

    with pytest.raises(ConfigError, match="agent=sync_agent is not an async function"):
        check_agent(sync_agent, "agent=sync_agent")

    class Callable:
        async def __call__(self, client, row):
            return 0.0

    assert isinstance(check_agent(Callable(), "agent="), Callable)  # an object with an async __call__ is fine


def test_hybridrl_train_refuses_a_sync_agent_before_anything_is_written(tmp_path):
    import hybridrl

    def agent(client, row):
        return 1.0

    with pytest.raises(ConfigError, match="agent=agent is not an async function"):
        hybridrl.train({"trainer.default_local_dir": str(tmp_path / "run")}, agent=agent)
    assert not (tmp_path / "run").exists()


def test_hybridrl_train_refuses_an_agent_given_twice(tmp_path, agents_file):
    import hybridrl

    async def agent(client, row):
        return 1.0

    with pytest.raises(ConfigError, match="agent= and actor_rollout_ref.rollout.agent.path=.* both name the agent"):
        hybridrl.train({f"{KEY}.path": agents_file, "trainer.default_local_dir": str(tmp_path / "run")}, agent=agent)
