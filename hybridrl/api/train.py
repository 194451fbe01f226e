"""hybridrl.train: an RL run from Python, the same run `hybridrl train` makes (one code path:
config/validate.load_rl_config, then trainer/launch.launch)."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from hybridrl.api.data import write_split
from hybridrl.api.run import Run
from hybridrl.config.schema import DataConfig, RLConfig
from hybridrl.errors import ConfigError

ConfigLike = Union[str, "os.PathLike[str]", Mapping[str, Any], RLConfig]


def train(config: ConfigLike = None, *, data: Any = None, val_data: Any = None, reward: Any = None,
          reward_weights: Optional[Sequence[float]] = None, callbacks: Iterable[Any] = (),
          agent: Optional[Callable[..., Any]] = None, log: Optional[Callable[[str], None]] = None) -> Run:
    """Train as `hybridrl train` does and return the Run.

    config: a dict of config keys (verl's dotted names, `{"algorithm.adv_estimator": "grpo"}`, or nested dicts),
        a YAML file's path, or an RLConfig; None: the defaults. Checked exactly as the CLI checks its
        keys (the same errors, all at once).
    data, val_data: the training / validation prompts: a list of dicts, pyarrow Table, pandas DataFrame or
        datasets.Dataset in verl's or TRL's row schema (hybridrl/api/data.py), or a parquet/jsonl path. Written
        to <run folder>/data/ and given as data.train_files / data.val_files (so not set in `config` too).
        With `data` and no `val_data` nor data.val_files in the config, nothing is validated.
    reward: a reward function or a list of them, TRL's or verl's signature, sync or async (api/rewards.py), with
        `reward_weights`; instead of custom_reward_function.path. None: the built-in scorer of each data_source.
    callbacks: objects with on_step_end / on_validation / on_save, or functions of those names
        (trainer/callbacks.py).
    agent: `async def agent(client, row) -> float | dict`, whose chat completions through `client` (an
        openai.AsyncOpenAI) the policy generates and trains on (docs/agents.md); instead of
        actor_rollout_ref.rollout.agent.path. None: the engine answers the prompts itself.
    log: where hybridrl's own lines go (None: printed, as the CLI prints them); the step lines are
        trainer.logger's (its console logger prints them).
    """
    from hybridrl.api.rewards import function_ref
    from hybridrl.trainer.callbacks import Callbacks
    from hybridrl.plan.resolve import load_run_plan
    from hybridrl.trainer.launch import launch

    hooks = Callbacks([callbacks] if _single_callback(callbacks) else callbacks)
    file, values = config_source(config)
    run = load_run_plan(file, (), values)  # every config problem before anything is written
    cfg = run.config
    if agent is not None:
        _check_agent(cfg, agent)
    if reward is not None and cfg.custom_reward_function.path is not None:
        raise ConfigError(f"reward= and custom_reward_function.path={cfg.custom_reward_function.path!r} both name "
                          "the reward function; give one")
    text_prompts = False
    if data is not None or val_data is not None:
        written, values = _write_data(cfg, values, data, val_data, reward is not None)
        text_prompts = written.text_prompts
        run = load_run_plan(file, (), values)
        cfg = run.config
    ref = function_ref(reward, reward_weights, text_prompts)
    summary = launch(run, reward=ref, callbacks=hooks, log=log, agent=agent)
    return Run(os.path.abspath(cfg.trainer.default_local_dir), summary, cfg)


def _check_agent(cfg: RLConfig, agent: Any) -> None:
    """agent= is an async function of (client, row), the config does not name one too, and nothing in the config
    conflicts with agent rollouts (the same rules as actor_rollout_ref.rollout.agent.path's)."""
    from hybridrl.config.agent_checks import KEY, agent_conflicts
    from hybridrl.errors import raise_all
    from hybridrl.rollout.agent.loading import check_agent

    check_agent(agent, f"agent={getattr(agent, '__name__', type(agent).__name__)}")
    if cfg.actor_rollout_ref.rollout.agent.path is not None:
        raise ConfigError(f"agent= and {KEY}.path={cfg.actor_rollout_ref.rollout.agent.path!r} both name the agent; "
                          "give one")
    raise_all(agent_conflicts(cfg, "agent="))


def _single_callback(callbacks: Any) -> bool:
    return callable(callbacks) or not isinstance(callbacks, Iterable)


def config_source(config: ConfigLike) -> tuple[Optional[str], dict[str, Any]]:
    """(YAML file or None, mapping of keys) of what hybridrl.train accepts as `config`."""
    if config is None:
        return None, {}
    if isinstance(config, (str, os.PathLike)):
        return os.fspath(config), {}
    if isinstance(config, RLConfig):
        from omegaconf import OmegaConf

        return None, OmegaConf.to_container(OmegaConf.structured(config), resolve=False)
    if isinstance(config, Mapping):
        return None, dict(config)
    raise ConfigError(f"config: a {type(config).__name__}; give a dict of config keys, a YAML file path or an RLConfig")


def _write_data(cfg: RLConfig, values: dict[str, Any], data: Any, val_data: Any, own_reward: bool):
    """The data written into <run folder>/data/ and the config keys that point at it; (train's or else val's
    Written, new values)."""
    d, defaults = cfg.data, DataConfig()
    folder = os.path.join(cfg.trainer.default_local_dir, "data")
    values, written = dict(values), {}
    for split, given, key, default in (("train", data, "train_files", defaults.train_files),
                                       ("val", val_data, "val_files", defaults.val_files)):
        if given is None:
            continue
        if getattr(d, key) != default:  # the config names files too: which one is meant?
            raise ConfigError(f"data.{key}={getattr(d, key)} is set and {'data' if split == 'train' else 'val_data'}= "
                              "is given; give one of them")
        written[split] = write_split(given, folder, split, d.prompt_key, d.reward_fn_key, own_reward)
        values[f"data.{key}"] = [written[split].path]
    if data is not None and val_data is None and d.val_files == defaults.val_files:
        values["data.val_files"] = []  # the default's arithmetic prompts are not this data's validation
    return written.get("train") or written["val"], values
