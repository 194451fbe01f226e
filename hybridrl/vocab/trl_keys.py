"""TRL's names for settings hybridrl has under verl's names, each answered with the key to use here.

People come from TRL's GRPOConfig / PPOConfig (and the transformers TrainingArguments under them) and
write `beta=0.04` or `learning_rate: 1e-6`. Those names are not keys here, and string similarity
points the wrong way (`beta` looks like critic.optim.betas; TRL's `beta` is the KL coefficient), so
the loader asks this table first and answers with our key, its value filled in, and a unit where
TRL's differs (TRL counts completions, verl's batch keys count prompts). Only names whose mapping is
exact are here; TRL's flat names are matched as typed, at the top level. The facts follow TRL's
documented config fields (2025-2026).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hybridrl.vocab.verl_keys import normalise

ARR = "actor_rollout_ref"
_KL_IN_REWARD = ("algorithm.kl_ctrl.kl_coef={value} with algorithm.use_kl_in_reward=true "
                 "(the KL subtracted from the reward)")
# TRL counts completions per device; verl's batch keys count prompts over all workers: say how they relate
_PROMPT_UNITS = (f"data.train_batch_size and {ARR}.actor.ppo_mini_batch_size count prompts, each sampled "
                 f"{ARR}.rollout.n times: one optimizer step per TRL generation batch is data.train_batch_size = "
                 f"{ARR}.actor.ppo_mini_batch_size = per_device_train_batch_size * devices * "
                 "gradient_accumulation_steps / num_generations")
_AGG = f"{ARR}.actor.loss_agg_mode"


@dataclass(frozen=True)
class TrlKey:
    meaning: str  # what the name sets in TRL
    instead: str  # what to set here; {value} is the value given
    by_value: dict[str, str] = field(default_factory=dict)  # normalised TRL value -> what to set for it


TABLE: dict[str, TrlKey] = {
    "beta": TrlKey("KL coefficient (GRPOConfig)",
                   f"set {ARR}.actor.kl_loss_coef={{value}} with {ARR}.actor.use_kl_loss=true (the KL term in the "
                   f"loss, as TRL adds it), or {_KL_IN_REWARD}",
                   {"0": f"leave {ARR}.actor.use_kl_loss=false (the default: no KL term, as TRL's beta=0)"}),
    # tutorials write kl_coef for GRPO's KL loss too: both places are named
    "kl_coef": TrlKey("KL coefficient (PPOConfig, a penalty in the reward)",
                      f"set {_KL_IN_REWARD}; for a KL term in the loss (GRPO's), set {ARR}.actor.kl_loss_coef={{value}} "
                      f"with {ARR}.actor.use_kl_loss=true"),
    "learning_rate": TrlKey("learning rate", f"set {ARR}.actor.optim.lr={{value}} (the critic's is critic.optim.lr)"),
    "weight_decay": TrlKey("AdamW weight decay",
                           f"set {ARR}.actor.optim.weight_decay={{value}} (the critic's is critic.optim.weight_decay)"),
    "warmup_steps": TrlKey("linear learning-rate warm-up, in optimizer steps",
                           f"set {ARR}.actor.optim.lr_warmup_steps={{value}}"),
    "warmup_ratio": TrlKey("linear learning-rate warm-up, as a fraction of training",
                           f"set {ARR}.actor.optim.lr_warmup_steps_ratio={{value}}"),
    "max_grad_norm": TrlKey("gradient-norm clip",
                            f"set {ARR}.actor.grad_clip={{value}} (the critic's is critic.grad_clip)"),
    "num_generations": TrlKey("number of completions sampled per prompt", f"set {ARR}.rollout.n={{value}}"),
    "max_completion_length": TrlKey("completion length limit, in tokens",
                                    "set data.max_response_length={value}"),
    "response_length": TrlKey("response length limit, in tokens (PPOConfig)",
                              "set data.max_response_length={value}"),
    "max_prompt_length": TrlKey("prompt length limit, in tokens (longer prompts are cut from the left)",
                                "set data.max_prompt_length={value} with data.truncation=left (TRL's cut; "
                                "data.filter_overlong_prompts=true drops them instead)"),
    "per_device_train_batch_size": TrlKey(
        "per-device batch (completions per device in one forward/backward)",
        f"set {ARR}.actor.ppo_micro_batch_size_per_gpu={{value}} (the same unit: responses per worker); "
        + _PROMPT_UNITS),
    "gradient_accumulation_steps": TrlKey(
        "number of micro-batches per optimizer step",
        f"hybridrl derives it from {ARR}.actor.ppo_mini_batch_size and {ARR}.actor.ppo_micro_batch_size_per_gpu "
        "(a worker's mini-batch responses / the micro-batch), so set those (`hybridrl plan` shows it); "
        + _PROMPT_UNITS),
    "num_iterations": TrlKey("number of passes over each generated batch (GRPO's mu)",
                             f"set {ARR}.actor.ppo_epochs={{value}}"),
    "num_ppo_epochs": TrlKey("number of passes over each generated batch (PPOConfig)",
                             f"set {ARR}.actor.ppo_epochs={{value}}"),
    "epsilon": TrlKey("clip range (both sides unless epsilon_high is set)",
                      f"set {ARR}.actor.clip_ratio={{value}} (both sides; {ARR}.actor.clip_ratio_low={{value}} "
                      "for the lower side only)"),
    "epsilon_high": TrlKey("upper clip range (DAPO's clip-higher)", f"set {ARR}.actor.clip_ratio_high={{value}}"),
    "cliprange": TrlKey("policy clip range (PPOConfig)", f"set {ARR}.actor.clip_ratio={{value}}"),
    "cliprange_value": TrlKey("value clip range (PPOConfig)", "set critic.cliprange_value={value}"),
    "loss_type": TrlKey(
        "loss reduction over tokens and completions",
        f"set {_AGG}: grpo is seq-mean-token-mean, bnpo and dapo are token-mean, dr_grpo is seq-mean-token-sum-norm",
        {"grpo": f"set {_AGG}=seq-mean-token-mean (each completion's token mean, then the mean over completions)",
         "bnpo": f"set {_AGG}=token-mean (the mean over all tokens of the mini-batch)",
         "dapo": f"set {_AGG}=token-mean (the mean over all tokens of the mini-batch)",
         "dr_grpo": f"set {_AGG}=seq-mean-token-sum-norm (token sums divided by data.max_response_length)"}),
    "scale_rewards": TrlKey(
        "scaling of the advantages by the reward std",
        "set algorithm.norm_adv_by_std_in_grpo=true (divide by the group's std) or false (do not scale)",
        {"true": "set algorithm.norm_adv_by_std_in_grpo=true (the default: divide by the group's std)",
         "group": "set algorithm.norm_adv_by_std_in_grpo=true (the default: divide by the group's std)",
         "false": "set algorithm.norm_adv_by_std_in_grpo=false (Dr.GRPO: advantages not scaled)",
         "null": "set algorithm.norm_adv_by_std_in_grpo=false (Dr.GRPO: advantages not scaled)",  # "none"
         "batch": "hybridrl has no batch-std scaling: set algorithm.norm_adv_by_std_in_grpo=true (the group's std) "
                  "or false (not scaled)"}),
    "temperature": TrlKey("sampling temperature of the training completions",
                          f"set {ARR}.rollout.temperature={{value}} "
                          f"(validation's is {ARR}.rollout.val_kwargs.temperature)"),
    "top_p": TrlKey("nucleus-sampling threshold", f"set {ARR}.rollout.top_p={{value}}"),
    "top_k": TrlKey("top-k sampling cut", f"set {ARR}.rollout.top_k={{value}}",
                    {"null": f"leave {ARR}.rollout.top_k=-1 (the default: no top-k cut, as TRL's null)",
                     "0": f"leave {ARR}.rollout.top_k=-1 (the default: no top-k cut, as TRL's 0)"}),
    "num_train_epochs": TrlKey("number of passes over the training prompts", "set trainer.total_epochs={value}"),
    "seed": TrlKey("one seed of the whole run",
                   "set trainer.seed={value} (rollout sampling) and data.seed={value} (the prompt shuffle)"),
}


def answer(dotted: str, value: Any) -> Optional[str]:
    """`name=value: `name` is TRL's <meaning>, not a key here; <what to set>`; None for a key that is
    not one of TRL's names."""
    entry = TABLE.get(dotted)
    if entry is None:
        return None
    shown, instead = fill(entry, value)
    return f"{dotted}={shown}: `{dotted}` is TRL's {entry.meaning}, not a key here; {instead}"


def fill(entry: TrlKey, value: Any) -> tuple[str, str]:
    """(the value as shown, the entry's `instead` for it with {value} filled in); an entry of
    vocab/tutorial_keys.py has the same fields."""
    shown = value if isinstance(value, str) else normalise(value)  # as typed; 1.0 -> 1, True -> true
    return shown, entry.by_value.get(normalise(value), entry.instead).replace("{value}", shown)
