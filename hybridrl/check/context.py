"""What every check reads: the user's config exactly as `hybridrl train` would load it, its problems, the
shrunk twins of its models, the data rows, and a scratch folder; and the twin run's config, the user's
config with only the sizes changed (models, batch counts, steps), validated the same way.

A check never reaches into state a user's run does not have: it builds roles, runs and exports through
the same functions `train` and `export` use.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Optional

from hybridrl.plan.batch_plan import BatchPlan
from hybridrl.config.schema import RLConfig

if TYPE_CHECKING:
    from hybridrl.plan.resolve import RunPlan

RUN_RESPONSE_TOKENS = 32  # the twin run's data.max_response_length cap: enough for a few words, seconds a step
RUN_MINI_BATCHES = 2  # the twin run keeps at most this many of the user's mini-batches per step
RUN_STEPS = 3


@dataclass
class CheckContext:
    config_file: Optional[str]
    overrides: list[str]  # key=value, verl style (a verl script's already extracted)
    work_dir: str  # scratch: twins, twin runs, exports (the caller removes it)
    log: Callable[[str], None] = print
    _twins: dict = field(default_factory=dict)

    # ---- the user's config --------------------------------------------------------------------------
    @cached_property
    def loaded(self):
        """(config, errors, plan): every problem `train` would refuse with, none raised; plan None when the
        batch sizes do not make one."""
        from hybridrl.plan.resolve import load_rl_config_checked

        return load_rl_config_checked(self.config_file, self.overrides)

    @property
    def cfg(self) -> RLConfig:
        return self.loaded[0]

    @property
    def config_errors(self) -> list[str]:
        return self.loaded[1]

    @property
    def plan(self) -> Optional[BatchPlan]:
        return self.loaded[2]

    @property
    def runnable(self) -> bool:
        """The config trains as it is (no problem): the checks that run it can."""
        return not self.config_errors and self.plan is not None

    @cached_property
    def model_path(self) -> str:
        """The policy's model folder; a folder that does not exist says what the check needs from it."""
        from hybridrl.models.loading import BUNDLED, resolve_model_path
        from hybridrl.models.twin import require_twin_source

        path = self.cfg.actor_rollout_ref.model.path
        if path not in BUNDLED and not os.path.isdir(path):
            require_twin_source(path)
        return resolve_model_path(path)

    @cached_property
    def tokenizer(self):
        """The real model's tokenizer (the twin's is the same files)."""
        from hybridrl.models.loading import load_tokenizer

        return load_tokenizer(self.model_path)

    # ---- twins -------------------------------------------------------------------------------------
    def twin(self, folder: Optional[str] = None, head: str = "causal_lm") -> str:
        """The shrunk twin of model folder `folder` (default: the policy's) with `head`, built once."""
        from hybridrl.models.loading import resolve_model_path
        from hybridrl.models.twin import build_twin

        folder = self.model_path if folder is None else resolve_model_path(folder)
        key = (os.path.abspath(folder), head)
        if key not in self._twins:
            out = os.path.join(self.work_dir, "twins", f"{len(self._twins)}-{os.path.basename(folder.rstrip('/'))}")
            self._twins[key] = build_twin(folder, out, head=head)
        return self._twins[key]

    # ---- data --------------------------------------------------------------------------------------
    def rows(self, split: str = "train", limit: Optional[int] = None) -> list[dict]:
        """The first `limit` rows of data.train_files / data.val_files as dicts (parquet or jsonl)."""
        from hybridrl.data.dataset import read_rows

        files = self.cfg.data.train_files if split == "train" else self.cfg.data.val_files
        out: list[dict] = []
        for path in files or []:
            out.extend(read_rows(path, f"data.{split}_files"))
            if limit is not None and len(out) >= limit:
                return out[:limit]
        return out

    @cached_property
    def data_problem(self) -> Optional[str]:
        """Why the training rows cannot be read (a file missing, not parquet/jsonl, empty), or None: the checks
        that build the run's dataset then say "see data" once instead of each repeating it."""
        from hybridrl.errors import HybridRLError

        try:
            self.rows("train", 1)
        except HybridRLError as e:
            return str(e).splitlines()[0]
        return None

    # ---- the twin run --------------------------------------------------------------------------------
    def run_overrides(self, run_dir: str, steps: int = RUN_STEPS, **changes) -> list[str]:
        """The user's overrides, then the twin run's: the twins for every model, one process, the user's
        split of a step (micro-batches per mini-batch) at a smaller batch, short responses, `steps` steps,
        no validation, checkpoints in `run_dir`. `changes`: more key=value (dots as '__' in names)."""
        cfg, plan = self.cfg, self.plan
        arr, out = cfg.actor_rollout_ref, [f"actor_rollout_ref.model.path={self.twin()}"]
        if cfg.critic.model.path:
            out.append(f"critic.model.path={self.twin(cfg.critic.model.path, 'token_value')}")
        if cfg.reward_model.enable and cfg.reward_model.model.path:
            out.append(f"reward_model.model.path={self.twin(cfg.reward_model.model.path, 'sequence_score')}")
        if cfg.distillation.enabled and cfg.distillation.teacher_model.model_path:
            out.append(f"distillation.teacher_model.model_path={self.twin(cfg.distillation.teacher_model.model_path)}")
        out += [f"{k}={v}" for k, v in shrunk_batch(plan).items()]
        if cfg.critic.model.path or cfg.algorithm.adv_estimator == "gae":
            out += [f"critic.ppo_mini_batch_size={shrunk_batch(plan)['actor_rollout_ref.actor.ppo_mini_batch_size']}",
                    "critic.ppo_micro_batch_size_per_gpu=null", "critic.forward_micro_batch_size_per_gpu=null",
                    "critic.n_workers=null", "critic.enable_resource_pool=false"]
        if cfg.data.gen_batch_size is not None:
            out.append(f"data.gen_batch_size={shrunk_batch(plan)['data.train_batch_size']}")
        if arr.rollout.name == "vllm" and not vllm_installed():
            out.append("actor_rollout_ref.rollout.name=hf")
        out += [
            f"data.max_response_length={min(cfg.data.max_response_length, RUN_RESPONSE_TOKENS)}",
            "trainer.n_gpus_per_node=1", "trainer.nnodes=1", "trainer.backend=local",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
            "reward_model.enable_resource_pool=false", "distillation.enable_resource_pool=false",
            f"trainer.total_training_steps={steps}", "trainer.total_epochs=1000", "trainer.test_freq=-1",
            "trainer.val_before_train=false", "trainer.logger=[file]", f"trainer.default_local_dir={run_dir}",
            "trainer.rollout_data_dir=null", "trainer.validation_data_dir=null", "trainer.profile_timeline=null",
            "trainer.resume_mode=auto", "trainer.resume_from_path=null", "trainer.max_actor_ckpt_to_keep=null",
            "trainer.max_critic_ckpt_to_keep=null", "trainer.save_freq=1", "actor_rollout_ref.model.lora_adapter_path=null",
        ]
        out += [f"{k.replace('__', '.')}={v}" for k, v in changes.items()]
        return self.overrides + [o for o in out if o]

    def run_config(self, run_dir: str, steps: int = RUN_STEPS, **changes) -> RunPlan:
        """The twin run's resolved plan, as `train` resolves it (a problem raises ConfigErrors)."""
        from hybridrl.plan.resolve import load_run_plan

        return load_run_plan(self.config_file, self.run_overrides(run_dir, steps, **changes))


def shrunk_batch(plan: BatchPlan) -> dict[str, int]:
    """Batch keys for one worker that keep the user's structure of a step: the same number of micro-batches
    per optimizer step (grad_accum_steps, what mis-scaled accumulation depends on), ppo_epochs, and up to
    RUN_MINI_BATCHES of the mini-batches, with as few prompts as that allows (n responses each)."""
    g, n = plan.grad_accum_steps, plan.n
    mini = g // math.gcd(g, n)  # prompts per mini-batch: mini * n responses split into g equal micro-batches
    micro = mini * n // g
    minis = min(plan.mini_batches_per_epoch, RUN_MINI_BATCHES)
    return {"data.train_batch_size": minis * mini, "actor_rollout_ref.actor.ppo_mini_batch_size": mini,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro,
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro,
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro,
            "data.train_max_samples": 2 * minis * mini}  # an epoch is 2 steps: a 3-step run crosses its boundary


def vllm_installed() -> bool:
    from importlib import util

    return util.find_spec("vllm") is not None
