"""Keys set away from their defaults that change nothing under the rest of the config (`hybridrl check`'s
config check): a KL coefficient with the KL term off, critic.* under a critic-free estimator, a tool file with
multi-turn off. Such a key is a setting the user believes is in effect; the run silently ignores it.

Each rule of RULES names keys (a key ending in '.' covers its whole section) and returns why they are not read
under this config, or None when they are. Every condition was checked against the code that reads the key
(cited per rule). Three of them are probes that ask the code itself instead of a table: the advantage estimator
and the policy loss are run on a small fixed batch, and the micro-batching of each pass is computed, with the
user's value and with the default; identical results mean the key is not read (so a new estimator or loss is
covered without editing this file).

Levels: DROPPED, a value that clearly states an intent the config drops (a KL coefficient > 0 with the KL term
off: the check fails); UNUSED, a key that does nothing here (a detail line); NOTE, a verl key that hybridrl
accepts as a documented no-op on this device (offload, vLLM's GPU memory share on a CPU): said, never counted.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional

from hybridrl.plan.levers import (
    actor_update_batching,
    critic_update_batching,
    critic_values_batching,
    log_prob_batching,
    ref_batching,
)
from hybridrl.plan.precision_auto import resolve_auto_precision
from hybridrl.plan.roles import needs_critic, needs_reference, needs_teacher, policy_loss_params
from hybridrl.config.schema import RLConfig, TrainerConfig
from hybridrl.errors import ConfigError

DROPPED, UNUSED, NOTE = "dropped", "unused", "note"
ACTOR, ROLLOUT, REF = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref"
RC = "algorithm.rollout_correction"


@dataclass(frozen=True)
class InertKey:
    key: str  # the dotted key, as the user sets it
    value: Any  # the user's value
    why: str  # the setting that makes it inert, named by its key
    level: str  # DROPPED | UNUSED | NOTE
    fix: Optional[str] = None  # DROPPED: the switch that would make it count

    def line(self) -> str:
        return f"{self.key}={_show(self.value)} has no effect: {self.why}"


Why = Callable[[RLConfig, str], Optional[str]]  # (config, key) -> why the key is not read, or None


@dataclass(frozen=True)
class Rule:
    keys: tuple[str, ...]  # dotted keys; one ending in '.' covers its section
    inert: Why
    level: str = UNUSED
    # DROPPED rules: the values that state an intent (others, e.g. a coefficient of 0, agree with the switch off
    # and are not reported) and the switch that would make the key count
    intent: Callable[[Any], bool] = lambda value: True
    switch: Optional[str] = None

    def covers(self, key: str) -> bool:
        return any(key == k or (k.endswith(".") and key.startswith(k)) for k in self.keys)


# ---- conditions -------------------------------------------------------------------------------------------
def _when(test: Callable[[RLConfig], bool], why: str) -> Why:
    """A condition that does not depend on the key: `why` (formatted with the config as `c`) when test holds."""
    return lambda cfg, key: why.format(c=cfg) if test(cfg) else None


def _no_kl_loss(cfg: RLConfig) -> bool:  # workers/policy.py adds the KL term only `if s.use_kl_loss`
    return not cfg.actor_rollout_ref.actor.use_kl_loss


def _no_kl_in_reward(cfg: RLConfig) -> bool:  # trainer/build.py makes a KLController only with use_kl_in_reward
    return not cfg.algorithm.use_kl_in_reward


def _no_reference(cfg: RLConfig) -> bool:
    """The ref.* keys configure the reference and the distillation teacher (workers/build.py); neither is built."""
    return not (needs_reference(cfg) or needs_teacher(cfg))


def _no_validation(cfg: RLConfig) -> Optional[str]:
    """trainer/rl.py validates when there are val files, before training (val_before_train) or every test_freq."""
    d, tr = cfg.data, cfg.trainer
    if not d.val_files:
        return "data.val_files is empty, so nothing is validated"
    if tr.test_freq <= 0 and not tr.val_before_train:
        return f"trainer.test_freq={tr.test_freq} and trainer.val_before_train=false: validation never runs"
    return None


def _backend(cfg: RLConfig) -> str:
    """trainer.backend with `auto` resolved as plan/levers.py resolve_backend does (this config is not derived)."""
    tr = cfg.trainer
    return tr.backend if tr.backend != "auto" else ("ray" if tr.n_gpus_per_node * tr.nnodes > 1 else "local")


# ---- probes: the code itself says whether a value matters ---------------------------------------------------
def _get(cfg: Any, key: str) -> Any:
    return functools.reduce(getattr, key.split("."), cfg)


def _reset(cfg: RLConfig, key: str, value: Any) -> RLConfig:
    """A copy of cfg with `key` set to `value`."""
    out = copy.deepcopy(cfg)
    *path, last = key.split(".")
    setattr(functools.reduce(getattr, path, out), last, value)
    return out


@functools.lru_cache(maxsize=1)
def _probe_batch():
    """A fixed batch with what every estimator and loss reads: 2 groups of 2 responses of uneven lengths, a reward
    on every token, critic values, greedy baselines, and log-ratios from -4 to 4 under both signs of advantage
    (wide enough to hit any clip range, the dual clip at 3 and SAPO's gates)."""
    import torch

    g = torch.Generator().manual_seed(0)
    B, T = 4, 6  # noqa: N806
    mask = (torch.arange(T)[None, :] < torch.tensor([6, 4, 5, 3])[:, None]).float()  # [B, T]
    rewards = torch.randn(B, T, generator=g) * mask
    values = torch.randn(B, T, generator=g) * mask
    old = -torch.rand(B, T, generator=g)  # [B, T] log π_old
    log_probs = old + torch.linspace(-4, 4, B * T).view(B, T)
    advantages = torch.tensor([1.0, -1.0, 0.5, -2.0])[:, None] * mask
    return dict(rewards=rewards, mask=mask, uid=torch.tensor([0, 0, 1, 1]), values=values,
                baselines=torch.randn(B, generator=g), old=old, log_probs=log_probs, advantages=advantages)


def _advantages(name: str, norm: bool, gamma: float, lam: float):
    from hybridrl.algos.advantages import ADV_ESTIMATORS, AdvantageInputs, AdvantageParams

    b = _probe_batch()
    out = ADV_ESTIMATORS.get(name)(AdvantageInputs(b["rewards"], b["mask"], b["uid"], b["values"], b["baselines"]),
                                   AdvantageParams(norm_adv_by_std_in_grpo=norm, gamma=gamma, lam=lam))
    return out.advantages, out.returns


def _estimator_ignores(cfg: RLConfig, key: str) -> Optional[str]:
    """algorithm.gamma / lam / norm_adv_by_std_in_grpo: the estimator gives the same advantages and returns
    without the user's value (trainer/build.py passes these three as AdvantageParams)."""
    import torch

    alg, default = cfg.algorithm, _reset(cfg, key, _get(_default_config(), key)).algorithm
    mine = _advantages(alg.adv_estimator, alg.norm_adv_by_std_in_grpo, alg.gamma, alg.lam)
    base = _advantages(alg.adv_estimator, default.norm_adv_by_std_in_grpo, default.gamma, default.lam)
    if all(torch.equal(a, b) for a, b in zip(mine, base)):
        return f"algorithm.adv_estimator={alg.adv_estimator} does not read it"
    return None


def _loss_ignores(cfg: RLConfig, key: str) -> Optional[str]:
    """clip_ratio*, tau_*: clip_ratio replaced by both clip_ratio_low and clip_ratio_high, or a loss that is the same
    on the probe batch without the user's value (a loss without that clip). A value that gives the loss the
    parameters the default gives (clip_ratio_low equal to clip_ratio) is a spelled-out default, not reported."""
    import torch

    from hybridrl.algos.policy_losses import POLICY_LOSSES

    actor, b = cfg.actor_rollout_ref.actor, _probe_batch()
    if key.endswith(".clip_ratio") and actor.clip_ratio_low is not None and actor.clip_ratio_high is not None:
        return f"{ACTOR}.clip_ratio_low and clip_ratio_high are both set and replace it"
    default = _reset(cfg, key, _get(_default_config(), key)).actor_rollout_ref.actor
    if policy_loss_params(actor) == policy_loss_params(default):  # clip_ratio_low=0.2 beside clip_ratio=0.2: one bound
        return None
    loss = POLICY_LOSSES.get(actor.policy_loss.loss_mode)
    mine, base = (loss(b["log_probs"], b["old"], b["advantages"], b["mask"], policy_loss_params(a)).loss
                  for a in (actor, default))
    if not torch.equal(mine, base):
        return None
    return f"{ACTOR}.policy_loss.loss_mode={actor.policy_loss.loss_mode} does not read it"


def _batchings(cfg: RLConfig) -> tuple:
    """Every pass's micro-batching (plan/levers.py) that this config runs."""
    out = (actor_update_batching(cfg, 1), log_prob_batching(cfg))
    out += (ref_batching(cfg),) if not _no_reference(cfg) else ()
    return out + ((critic_update_batching(cfg, 1), critic_values_batching(cfg)) if needs_critic(cfg) else ())


def _batching_ignores(cfg: RLConfig, key: str) -> Optional[str]:
    """A token budget: every pass forms the same micro-batches without it."""
    if _batchings(cfg) != _batchings(_reset(cfg, key, _get(_default_config(), key))):
        return None
    return (f"no pass forms micro-batches by token count from it ({ACTOR}.use_dynamic_bsz="
            f"{_show(cfg.actor_rollout_ref.actor.use_dynamic_bsz)}, or the pass has its own budget; a pass's "
            "log_prob_use_dynamic_bsz / use_dynamic_bsz overrides the actor's switch)")


# ---- the rules, first match wins for a key ------------------------------------------------------------------
# the token budgets (a pass's use_dynamic_bsz switch always counts, unless it spells out what null gives)
DYNAMIC_KEYS = (f"{ACTOR}.ppo_max_token_len_per_gpu", f"{ROLLOUT}.log_prob_max_token_len_per_gpu",
                f"{REF}.log_prob_max_token_len_per_gpu", "critic.ppo_max_token_len_per_gpu",
                "critic.forward_max_token_len_per_gpu")
OFFLOAD_KEYS = (f"{ACTOR}.fsdp_config.param_offload", f"{ACTOR}.fsdp_config.optimizer_offload",
                f"{REF}.fsdp_config.param_offload", "critic.model.fsdp_config.param_offload",
                "critic.model.fsdp_config.optimizer_offload")
_positive = lambda value: bool(value) and value > 0  # noqa: E731  a coefficient of 0 agrees with the term off

RULES: tuple[Rule, ...] = (
    # intents the config drops (the check fails on these)
    Rule((f"{ACTOR}.kl_loss_coef",), _when(_no_kl_loss, f"{ACTOR}.use_kl_loss=false, so the loss has no KL term"),
         DROPPED, _positive, f"{ACTOR}.use_kl_loss=true"),
    Rule(("algorithm.kl_ctrl.kl_coef",), _when(_no_kl_in_reward, "algorithm.use_kl_in_reward=false, so the "
                                                                 "reward has no KL penalty"),
         DROPPED, _positive, "algorithm.use_kl_in_reward=true"),
    Rule((f"{ROLLOUT}.multi_turn.tool_config_path",),  # rollout/multi_turn.py with_tools: the plain engine when off
         _when(lambda c: not c.actor_rollout_ref.rollout.multi_turn.enable,
               f"{ROLLOUT}.multi_turn.enable=false, so the tools are never offered"),
         DROPPED, switch=f"{ROLLOUT}.multi_turn.enable=true"),
    # verl keys accepted as documented no-ops on this device (schema_policy.py's docs; plan/levers.py offload_note)
    Rule(OFFLOAD_KEYS, _when(lambda c: c.trainer.device == "cpu", "trainer.device=cpu keeps weights and AdamW "
                                                                   "state in host memory already"), NOTE),
    Rule((f"{ROLLOUT}.gpu_memory_utilization", f"{ROLLOUT}.free_cache_engine"),  # rollout/vllm.py: GPU only
         _when(lambda c: c.actor_rollout_ref.rollout.name != "vllm" or c.trainer.device == "cpu",
               "it sizes a vLLM engine on a GPU ({c.actor_rollout_ref.rollout.name} engine on "
               "trainer.device={c.trainer.device})"), NOTE),
    Rule((f"{ROLLOUT}.enforce_eager",), _when(lambda c: c.actor_rollout_ref.rollout.name != "vllm",
                                              f"{ROLLOUT}.name=hf (a vLLM option)"), NOTE),
    # roles that are not built (trainer/build.py _roles)
    Rule(("critic.", "trainer.max_critic_ckpt_to_keep"),
         _when(lambda c: not needs_critic(c), "algorithm.adv_estimator={c.algorithm.adv_estimator} uses no critic")),
    Rule((f"{REF}.",), _when(_no_reference, f"there is no reference model ({ACTOR}.use_kl_loss=false, "
                                            "algorithm.use_kl_in_reward=false, no distillation teacher)")),
    Rule(("reward_model.micro_batch_size_per_gpu",),  # read by build_reward_model only
         _when(lambda c: not c.reward_model.enable, "reward_model.enable=false")),
    Rule(("critic.n_gpus_per_node", "critic.nnodes"),  # plan/roles.py critic_pool_workers
         _when(lambda c: not c.critic.enable_resource_pool,
               "the critic has no per-node pool of its own (critic.enable_resource_pool=false)")),
    Rule(("reward_model.n_gpus_per_node", "reward_model.nnodes"),  # plan/placement.py pool_sizes
         _when(lambda c: not (c.reward_model.enable and c.reward_model.enable_resource_pool),
               "the reward model has no pool of its own (reward_model.enable_resource_pool=false)")),
    Rule(("distillation.distillation_loss.",),
         _when(lambda c: not c.distillation.enabled, "distillation.enabled=false")),
    Rule(("distillation.n_gpus_per_node", "distillation.nnodes"),
         _when(lambda c: not (c.distillation.enabled and c.distillation.enable_resource_pool),
               "the teacher has no pool of its own (distillation.enable_resource_pool=false)")),
    # terms that are off
    Rule((f"{ACTOR}.kl_loss_type",), _when(_no_kl_loss, f"{ACTOR}.use_kl_loss=false")),
    Rule(("algorithm.kl_ctrl.", "algorithm.kl_penalty"), _when(_no_kl_in_reward, "algorithm.use_kl_in_reward=false")),
    Rule(("algorithm.kl_ctrl.target_kl", "algorithm.kl_ctrl.horizon"),  # algos/kl_ctrl.py update: fixed returns
         _when(lambda c: c.algorithm.kl_ctrl.type == "fixed", "algorithm.kl_ctrl.type=fixed keeps the coefficient")),
    Rule(("algorithm.filter_groups.",), _when(lambda c: not c.algorithm.filter_groups.enable,
                                              "algorithm.filter_groups.enable=false")),
    Rule(("reward_model.overlong_buffer.",), _when(lambda c: not c.reward_model.overlong_buffer.enable,
                                                   "reward_model.overlong_buffer.enable=false")),
    Rule((f"{ROLLOUT}.multi_turn.",), _when(lambda c: not c.actor_rollout_ref.rollout.multi_turn.enable,
                                            f"{ROLLOUT}.multi_turn.enable=false")),
    Rule((f"{RC}.rollout_rs_threshold", f"{RC}.rollout_rs_threshold_lower"),
         _when(lambda c: c.algorithm.rollout_correction.rollout_rs is None,  # trainer/settings.py rejection_band
               f"{RC}.rollout_rs is off")),
    Rule((f"{RC}.rollout_is_threshold",),  # policy.py (rollout_is) and the rs band's default
         _when(lambda c: c.algorithm.rollout_correction.rollout_is is None and (
             c.algorithm.rollout_correction.rollout_rs is None or c.algorithm.rollout_correction.rollout_rs_threshold
             is not None), f"{RC}.rollout_is is off (and rollout_rs has its own threshold or is off)")),
    Rule((f"{ACTOR}.loss_scale_factor",),  # algos/reduce.py: only seq-mean-token-sum-norm reads norm_length
         _when(lambda c: c.actor_rollout_ref.actor.loss_agg_mode != "seq-mean-token-sum-norm",
               f"{ACTOR}.loss_agg_mode={{c.actor_rollout_ref.actor.loss_agg_mode}} (only seq-mean-token-sum-norm "
               "reads it)")),
    # probes
    Rule(("algorithm.gamma", "algorithm.lam", "algorithm.norm_adv_by_std_in_grpo"), _estimator_ignores),
    Rule(tuple(f"{ACTOR}.{k}" for k in ("clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "tau_pos",
                                        "tau_neg")), _loss_ignores),
    Rule(DYNAMIC_KEYS, _batching_ignores),
    # sampling and validation (rollout/hf.py choose_tokens, rollout/vllm.py: greedy ignores top-p / top-k)
    Rule((f"{ROLLOUT}.top_p", f"{ROLLOUT}.top_k"), _when(lambda c: not c.actor_rollout_ref.rollout.do_sample,
                                                         f"{ROLLOUT}.do_sample=false (greedy)")),
    Rule((f"{ROLLOUT}.val_kwargs.", "data.val_max_samples", "trainer.log_val_generations",
          "trainer.validation_data_dir"), lambda cfg, key: _no_validation(cfg)),
    Rule(("trainer.test_freq", "trainer.val_before_train"), _when(lambda c: not c.data.val_files,
                                                                  "data.val_files is empty")),
    Rule((f"{ROLLOUT}.val_kwargs.temperature", f"{ROLLOUT}.val_kwargs.top_p", f"{ROLLOUT}.val_kwargs.top_k"),
         _when(lambda c: not c.actor_rollout_ref.rollout.val_kwargs.do_sample,
               f"{ROLLOUT}.val_kwargs.do_sample=false (greedy validation)")),
    # engines and the rest
    Rule((f"{ROLLOUT}.cpu_kv_cache_gb",), _when(lambda c: c.actor_rollout_ref.rollout.name != "vllm" or
                                                c.trainer.device != "cpu", "it sizes a vLLM engine on a CPU")),
    Rule((f"{ROLLOUT}.engine_kwargs.",), _when(lambda c: c.actor_rollout_ref.rollout.name != "vllm",
                                               f"{ROLLOUT}.name=hf")),
    Rule((f"{ROLLOUT}.lean_decode",), _when(lambda c: c.actor_rollout_ref.rollout.name != "hf",
                                            f"{ROLLOUT}.name=vllm (an hf engine option)")),
    Rule((f"{ROLLOUT}.pack_weights",),  # rollout/hf.py: packs only the lean decoder's weights, on a CPU
         _when(lambda c: c.actor_rollout_ref.rollout.name != "hf" or not c.actor_rollout_ref.rollout.lean_decode
               or c.trainer.device != "cpu", "it packs the hf engine's lean decoder on a CPU only")),
    Rule(("data.truncation",), _when(lambda c: c.data.filter_overlong_prompts,  # data/dataset.py: dropped first
                                     "data.filter_overlong_prompts=true drops an overlong prompt before any cut")),
    Rule(("custom_reward_function.name",), _when(lambda c: c.custom_reward_function.path is None,
                                                 "custom_reward_function.path is null (the built-in scorers)")),
    Rule(("ray_kwargs.",), _when(lambda c: _backend(c) == "local", "trainer.backend=local runs no Ray")),
)


# ---- the comparison ------------------------------------------------------------------------------------------
def leaves(obj: Any, prefix: str = "") -> dict[str, Any]:
    """{dotted key: value} of every leaf of a config dataclass (a list or a dict is one leaf)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), f"{prefix}{f.name}"
        out.update(leaves(value, f"{key}.") if dataclasses.is_dataclass(value) else {key: value})
    return out


def _resolved(cfg: RLConfig) -> RLConfig:
    """`cfg` with its `auto` precision keys resolved (plan/precision_auto.py), as a user's config is when judged."""
    resolve_auto_precision(cfg)
    return cfg


def _unresolved(cfg: RLConfig) -> bool:
    """Is one of the `auto` precision keys of `cfg` still `auto`?"""
    probe = copy.deepcopy(cfg)
    return bool(resolve_auto_precision(probe)) or leaves(probe) != leaves(cfg)


def _default_config() -> RLConfig:
    """The default config (on the default device), its `auto` precision keys resolved."""
    return _resolved(RLConfig())


def defaults_for(cfg: RLConfig) -> RLConfig:
    """The default config on the user's device, so that the `auto` precision keys resolve as the user's did."""
    return _resolved(RLConfig(trainer=TrainerConfig(device=cfg.trainer.device)))


def changed_keys(cfg: RLConfig) -> dict[str, Any]:
    """{key: value} of the leaves that differ from the defaults."""
    base = leaves(defaults_for(cfg))
    return {k: v for k, v in leaves(cfg).items() if base.get(k) != v}


def inert_keys(cfg: RLConfig) -> list[InertKey]:
    """The keys of `cfg` (as loaded, before the micro-batch sizes are derived: derived values are not the user's)
    set away from their defaults that this config never reads, in key order; each judged by the first rule that
    covers it. A rule that cannot be judged (an unknown estimator or loss: the config's errors say so) is skipped.
    `auto` precision keys still `auto` in `cfg` are judged resolved, as the defaults are (on a copy: `cfg` is
    left as it is)."""
    if _unresolved(cfg):
        cfg = _resolved(copy.deepcopy(cfg))
    out = []
    for key, value in changed_keys(cfg).items():
        for rule in (r for r in RULES if r.covers(key)):
            try:
                why = rule.inert(cfg, key)
            except ConfigError:
                why = None
            if why is None:
                continue
            if rule.level != DROPPED or rule.intent(value):
                level = rule.level
                out.append(InertKey(key, value, why, level, rule.switch if level == DROPPED else None))
            break
    return out


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)
