"""How the data-parallel ranks of a training role hold its weights (`actor.strategy`, `critic.strategy`).

- `ddp` (Replicated): every rank keeps the whole model, gradients and AdamW state; after the last
  micro-batch the gradients are summed in one flat all-reduce (dp.py).
- `fsdp2` (FullyShard): torch's `fully_shard` (FSDP2) keeps 1/world of every parameter, gradient
  and AdamW moment on each rank as DTensors; each decoder layer's parameters are all-gathered for
  its forward and backward and freed after, and its gradients are reduce-scattered.

Both give the single-process update: the loss is already normalised by the global mini-batch
(dp.loss_scale), so gradients are SUMMED over ranks, never averaged. FSDP2's default divides by the
world size, and its divide-factor path uses ReduceOp.PREMUL_SUM, which gloo lacks; so a divide
factor of 1 with forced SUM reductions is set on every sharded module.

Precision (models/precision.py): under ddp the mixed_precision.reduce_dtype is the dtype of the one
gradient all-reduce; under fsdp2 it is FSDP2's MixedPrecisionPolicy: layers are gathered in the
compute dtype (bf16 halves the all-gather and the unsharded copy), gradients reduce-scattered in
reduce_dtype, and the sharded parameters and AdamW state stay fp32 either way. `param_offload` on a
GPU is FSDP2's CPUOffloadPolicy: sharded parameters, gradients and the optimizer step live in host
memory, each layer copied to the GPU for its forward and backward.

The no-gradient passes (generation, log-probs, values) run on gathered weights (`gathered()`): a
rank generates its own number of tokens and micro-batches, and a per-forward all-gather would need
every rank to run the same number of forwards. This costs one full copy of the weights during those
passes, as a hybrid engine's rollout copy does.

State crosses the role boundary as full (unsharded) tensors on the CPU, so a checkpoint or a HF
folder does not depend on the strategy or the number of ranks that wrote it.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from hybridrl.models.forward import device_of
from hybridrl.models.precision import FP32, Precision
from hybridrl.parallel.dp import SINGLE, DataParallel, ensure_process_group


class Replicated:
    """`ddp`: a whole copy per rank."""

    lockstep_forwards = False  # gradients cross ranks once per mini-batch: ranks may run different micro-batch counts

    def __init__(self, dp: DataParallel = SINGLE, precision: Precision = FP32):
        self.dp, self.precision = dp, precision

    def compute_device(self, module: torch.nn.Module) -> torch.device:
        """Where the forwards run (batches are moved there): with the weights."""
        return device_of(module)

    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def set_gradient_sync(self, module: torch.nn.Module, last_micro_batch: bool) -> None:
        pass  # the all-reduce runs once, in finish_gradients

    def finish_gradients(self, module: torch.nn.Module) -> None:
        self.dp.sum_gradients(module.parameters(), self.precision.reduce)

    def gathered(self, module: torch.nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def full_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        return to_cpu(module.state_dict())

    def load_full_state_dict(self, module: torch.nn.Module, state: dict[str, torch.Tensor]) -> tuple[list, list]:
        """Load; return (missing, unexpected) keys as torch's load_state_dict(strict=False) does."""
        missing, unexpected = module.load_state_dict(state, strict=False)
        return list(missing), list(unexpected)

    def optimizer_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        return optimizer_state(module, optimizer)

    def load_optimizer_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        load_optimizer_state(module, optimizer, state)


def optimizer_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The optimizer state whole, keyed by parameter NAME (torch's own state_dict keys by position),
    so either strategy resumes the other's checkpoint (for FSDP2 a collective: every rank calls it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return to_cpu(get_optimizer_state_dict(module, optimizer, options=StateDictOptions(full_state_dict=True)))


def load_optimizer_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    if any(isinstance(k, int) for k in state.get("state", {})):  # a checkpoint keyed by position (older hybridrl)
        optimizer.load_state_dict(state)
        return
    set_optimizer_state_dict(module, optimizer, state, options=StateDictOptions(full_state_dict=True))


def to_cpu(tree):
    """Tensors of nested dicts/lists moved to the CPU (state leaves a worker's device for the driver)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, dict):
        return {k: to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_cpu(v) for v in tree)
    return tree


def _fsdp_modules(module: torch.nn.Module) -> list:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in module.modules() if isinstance(m, FSDPModule)]


class FullyShard:
    """`fsdp2`: parameters, gradients and optimizer state sharded over the ranks (torch FSDP2)."""

    lockstep_forwards = True  # each training forward all-gathers every layer: ranks run the same micro-batch count

    def __init__(self, dp: DataParallel, device_type: str = "cpu", precision: Precision = FP32,
                 param_offload: bool = False):
        self.dp, self.device_type, self.precision = dp, device_type, precision
        self.param_offload = param_offload  # CPUOffloadPolicy: only meaningful with device_type cuda

    def compute_device(self, module: torch.nn.Module) -> torch.device:
        """Where the forwards run: the mesh's device, also when the sharded weights are offloaded to the host."""
        return torch.device(self.device_type) if self.param_offload else device_of(module)

    def _policies(self) -> dict:
        """fully_shard's mixed-precision and offload arguments (none on the plain fp32 path)."""
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

        p, kwargs = self.precision, {}
        if p.mixed or p.reduce != torch.float32:
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=p.compute if p.mixed else None,
                                                       reduce_dtype=p.reduce)
        if self.param_offload:
            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())  # pinning needs a GPU
        return kwargs

    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        """Shard each transformer block (HF names them in `_no_split_modules`), then the rest (embeddings,
        final norm, head) as the root group; the optimizer must be built on the returned module."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        ensure_process_group(self.dp, self.device_type)  # one rank offloading on a GPU still needs a group
        mesh = init_device_mesh(self.device_type, (self.dp.world_size,))
        blocks = set(getattr(module, "_no_split_modules", None) or [])
        policies = self._policies()
        for sub in list(module.modules()):
            if sub is not module and type(sub).__name__ in blocks:
                fully_shard(sub, mesh=mesh, **policies)
        fully_shard(module, mesh=mesh, **policies)
        for sub in _fsdp_modules(module):
            sub.set_gradient_divide_factor(1.0)  # sum, not mean: the loss is globally normalised
            sub.set_force_sum_reduction_for_comms(True)  # plain SUM: gloo has no PREMUL_SUM
        return module

    def set_gradient_sync(self, module: torch.nn.Module, last_micro_batch: bool) -> None:
        """Reduce-scatter only after the last micro-batch; earlier ones accumulate unsharded gradients."""
        module.set_requires_gradient_sync(last_micro_batch)

    def finish_gradients(self, module: torch.nn.Module) -> None:
        pass  # reduce-scattered during the last backward

    @contextlib.contextmanager
    def gathered(self, module: torch.nn.Module) -> Iterator[None]:
        """Full parameters on every rank until the block ends: forwards inside it run no collectives."""
        subs = _fsdp_modules(module)
        for sub in subs:
            sub.unshard()
            sub.set_reshard_after_forward(False, recurse=False)
        try:
            yield
        finally:
            for sub in subs:
                sub.reshard()
                sub.set_reshard_after_forward(True, recurse=False)

    def full_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Every parameter whole, on the CPU (a collective: every rank calls it)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return to_cpu(get_model_state_dict(module, options=StateDictOptions(full_state_dict=True)))

    def load_full_state_dict(self, module: torch.nn.Module, state: dict[str, torch.Tensor]) -> tuple[list, list]:
        """Each rank keeps its shard of the full tensors in `state` (every rank passes the same)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        result = set_model_state_dict(module, state, options=StateDictOptions(full_state_dict=True, strict=False))
        return list(result.missing_keys), list(result.unexpected_keys)

    def optimizer_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        return optimizer_state(module, optimizer)

    def load_optimizer_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        load_optimizer_state(module, optimizer, state)


Sharding = Replicated | FullyShard


def make_sharding(strategy: str, dp: DataParallel, device_type: str = "cpu", precision: Precision = FP32,
                  param_offload: bool = False) -> Sharding:
    """The role's strategy object; with one rank every strategy is the plain single-process model, except
    fsdp2 with param_offload on a GPU, whose CPU offload is FSDP2's (a one-rank FSDP2). On a CPU device
    param_offload changes nothing: the weights are in host memory already."""
    offload = param_offload and torch.device(device_type).type == "cuda"
    if strategy in ("fsdp2", "fsdp") and (dp.active or offload):
        return FullyShard(dp, torch.device(device_type).type, precision, offload)
    return Replicated(dp, precision)
