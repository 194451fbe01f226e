"""`hybridrl eval`: the trainer's validation metrics on any model, plus diversity and KL to a reference.

The model is a HuggingFace causal-LM folder, a bundled model name, a run folder (its newest whole
checkpoint) or a `global_step_<N>` checkpoint folder. Every prompt of the data files gets `n`
sampled responses, scored by the same reward functions the trainer uses, and reported with the
same keys as the trainer's validation (`val-core/<source>/reward/{mean,std}@n`,
`{best,worst,pass,maj}@k`, `val-aux/...`; see trainer/validate.py) plus:

- `diversity/{distinct_1,distinct_2,self_bleu,rep3}`: computed within each prompt's group of n
  responses and averaged over prompts (how different the samples for one question are; diversity
  across different prompts would mostly measure that the prompts differ). On whitespace tokens
  (eval/diversity.py). A group without any n-gram of the order (e.g. one-word answers for
  distinct_2) is left out of that average; a metric that no group defines is nan (null in the
  JSON, n/a in the table), e.g. self-BLEU with n = 1.
- with a reference model, `kl/mean_token_k1` (per response: the mean over its tokens of
  log π(y_t) - log π_ref(y_t); averaged over responses), `kl/mean_seq_k1` (per response: the sum
  over its tokens, i.e. an estimate of the KL between the two models' response distributions;
  averaged over responses), and the same for k3 = r - log r - 1 with r = π_ref/π (Schulman 2020,
  "Approximating KL Divergence": k1 and k3 are both unbiased for KL(π‖π_ref) on samples from π;
  k3 is never negative and has lower variance). Summed over tokens they stay unbiased for the
  sequence-level KL by the chain rule. Unlike the training loss, k3 is not clamped here.

Log-probs for the KL are taken at the sampling temperature T (1.0 by default, where this is exactly
KL(π‖π_ref)): the responses are samples of softmax(logits/T), so only at that temperature are the
estimators unbiased, for the KL between the two models' tempered distributions, which is what
verl's and this trainer's KL metrics use too. top-p/top-k truncation and greedy decoding
(log-probs at T = 1 then) make the samples come from another distribution: the numbers are then
the mean log-ratio on those responses, not an unbiased KL estimate. Both models score the same
token ids with the same code, so a model against itself gives exactly 0.

The table is printed; JSON (settings + metrics) is written only with `output` (like lm-eval's
--output_path: no file appears in the working directory unasked), every generation with `dump`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch

from hybridrl.batch import Rollout
from hybridrl.config.schema import DataConfig, RewardModelConfig
from hybridrl.data.dataset import RLDataset
from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.eval.diversity import distinct_n, ngrams, repetition_rate, self_bleu
from hybridrl.models.forward import batched_log_probs
from hybridrl.models.loading import BUNDLED, check_context_length, eos_token_ids, load_causal_lm, load_tokenizer
from hybridrl.rewards.manager import ON_ERROR, RewardManager, RewardSettings
from hybridrl.rewards.pool import FunctionRef, ScoringPool
from hybridrl.rollout.base import SamplingParams, generate_rollout
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.trainer.validate import validate

_DATA, _RM = DataConfig(), RewardModelConfig()


@dataclass(frozen=True)
class EvalSettings:
    """One evaluation; the defaults are the trainer's (data.*, reward_model.*, trainer.seed)."""

    data: list[str]  # parquet/jsonl files in verl's schema
    model: str = "tiny-arith"  # HF folder, bundled name, run folder or global_step_<N> folder
    n: int = 8  # samples per prompt
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    greedy: bool = False  # argmax decoding (temperature, top_p, top_k unused)
    max_prompt_length: int = _DATA.max_prompt_length
    max_response_length: int = _DATA.max_response_length
    max_samples: int = -1  # the first N prompts; -1: all
    batch_size: int = 256  # responses per generation batch and per log-prob forward
    seed: int = 1
    ref: Optional[str] = None  # reference model for the KL metrics, same kinds of path as `model`
    prompt_key: str = _DATA.prompt_key
    reward_fn_key: str = _DATA.reward_fn_key
    num_workers: int = _RM.num_workers  # scoring processes; 0: in this process
    timeout_s: float = _RM.timeout_s
    on_error: str = _RM.on_error
    custom_reward_path: Optional[str] = None
    custom_reward_name: str = "compute_score"
    output: Optional[str] = None  # JSON file of settings and metrics
    dump: Optional[str] = None  # JSONL file of every generation


@dataclass
class EvalResult:
    settings: EvalSettings
    model_folder: str
    ref_folder: Optional[str]
    num_prompts: int
    metrics: dict[str, float]
    rows: list[dict] = field(default_factory=list)  # every generation, prompt by prompt (n rows each)
    seconds: float = 0.0

    def to_json(self) -> dict:
        s = self.settings
        return {"model": s.model, "model_folder": self.model_folder, "ref": s.ref, "ref_folder": self.ref_folder,
                "data": list(s.data), "n": s.n, "temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k,
                "greedy": s.greedy, "max_prompt_length": s.max_prompt_length,
                "max_response_length": s.max_response_length, "seed": s.seed, "num_prompts": self.num_prompts,
                "num_generations": len(self.rows), "time_s": round(self.seconds, 3),
                "metrics": {k: (v if math.isfinite(v) else None) for k, v in self.metrics.items()}}


def model_folder(path: str, flag: str) -> str:
    """The HF folder of a bundled name, an HF folder, a run folder or a global_step_<N> folder."""
    from hybridrl.models.export import actor_folder

    if path in BUNDLED:
        return str(BUNDLED[path])
    kinds = ("a HuggingFace model folder (with config.json), a run folder, a global_step_<N> checkpoint "
             f"or a bundled model ({', '.join(BUNDLED)})")
    if not os.path.isdir(path):
        raise ConfigError(f"{flag} {path}: no such folder; give {kinds}")
    try:
        return actor_folder(path)
    except HybridRLError as e:
        raise ConfigError(f"{flag} {path}: not a model folder ({e}); give {kinds}") from None


def check_settings(s: EvalSettings) -> None:
    """One ConfigError naming the flag and the fix, for the first bad value."""
    problems = [
        (not s.data, "--data: give at least one parquet or jsonl file"),
        (s.n < 1, f"--n {s.n}: give at least 1 sample per prompt"),
        (not s.greedy and not s.temperature > 0,
         f"--temperature {s.temperature}: sampling needs a temperature > 0 (e.g. 1.0); use --greedy for argmax decoding"),
        (not 0 < s.top_p <= 1, f"--top-p {s.top_p}: give a probability mass in (0, 1]"),
        (s.top_k == 0 or s.top_k < -1, f"--top-k {s.top_k}: give a positive count, or -1 for off"),
        (s.max_prompt_length < 1, f"--max-prompt-length {s.max_prompt_length}: give at least 1"),
        (s.max_response_length < 1, f"--max-response-length {s.max_response_length}: give at least 1"),
        (s.max_samples == 0 or s.max_samples < -1, f"--max-samples {s.max_samples}: give a positive count, or -1 for all"),
        (s.batch_size < 1, f"--batch-size {s.batch_size}: give at least 1"),
        (s.num_workers < 0, f"--num-workers {s.num_workers}: give 0 (score in this process) or more"),
        (s.on_error not in ON_ERROR, f"--on-error {s.on_error}: give one of {', '.join(ON_ERROR)}"),
        (s.custom_reward_path is not None and not os.path.isfile(s.custom_reward_path),
         f"--custom-reward-path {s.custom_reward_path}: file not found; give a Python file with the reward function"),
    ]
    problems += [(not os.path.isfile(path), (f"--data {path}: file not found; give a parquet or jsonl file in "
                                             "verl's schema (e.g. written by `hybridrl data arithmetic`)"))
                 for path in s.data]
    for bad, message in problems:
        if bad:
            raise ConfigError(message)


class KLMeter:
    """Per-response KL estimates of `policy` against `ref` on each batch's sampled tokens."""

    def __init__(self, policy, ref, temperature: float, micro_batch_size: int):
        self.policy, self.ref = policy, ref
        self.temperature, self.micro_batch_size = temperature, micro_batch_size
        self.k1_sum: list[float] = []
        self.k1_token: list[float] = []
        self.k3_sum: list[float] = []
        self.k3_token: list[float] = []

    def __call__(self, rollout: Rollout) -> None:
        seqs = rollout.sequences()
        lp = batched_log_probs(self.policy, seqs, self.temperature, self.micro_batch_size)
        ref_lp = batched_log_probs(self.ref, seqs, self.temperature, self.micro_batch_size)
        mask = seqs.response_mask.float()
        x = (lp - ref_lp) * mask  # k1 = log π - log π_ref, 0 on padding
        k3 = (torch.exp(-x) + x - 1) * mask  # r - log r - 1 with r = π_ref/π = exp(-x)
        length = mask.sum(-1).clamp(min=1)
        self.k1_sum += x.sum(-1).tolist()
        self.k1_token += (x.sum(-1) / length).tolist()
        self.k3_sum += k3.sum(-1).tolist()
        self.k3_token += (k3.sum(-1) / length).tolist()

    def metrics(self) -> dict[str, float]:
        def mean(v: list[float]) -> float:
            return sum(v) / len(v)

        return {"kl/mean_token_k1": mean(self.k1_token), "kl/mean_seq_k1": mean(self.k1_sum),
                "kl/mean_token_k3": mean(self.k3_token), "kl/mean_seq_k3": mean(self.k3_sum)}


def diversity_metrics(texts: Sequence[str], n: int) -> dict[str, float]:
    """distinct-1/2, self-BLEU and the 3-gram repetition rate within each group of n consecutive texts
    (the samples of one prompt), averaged over the groups that have n-grams of the metric's order
    (and, for self-BLEU, at least 2 texts); nan when no group does."""
    groups = [list(texts[i:i + n]) for i in range(0, len(texts), n)]
    specs: list[tuple[str, int, int, Callable[[list[str]], float]]] = [  # name, n-gram order, texts needed, metric
        ("diversity/distinct_1", 1, 1, lambda g: distinct_n(g, 1)),
        ("diversity/distinct_2", 2, 1, lambda g: distinct_n(g, 2)),
        ("diversity/self_bleu", 1, 2, self_bleu),
        ("diversity/rep3", 3, 1, lambda g: repetition_rate(g, 3)),
    ]
    out = {}
    for name, order, needed, fn in specs:
        values = [fn(g) for g in groups if len(g) >= needed and any(ngrams(t.split(), order) for t in g)]
        out[name] = sum(values) / len(values) if values else math.nan
    return out


def evaluate(s: EvalSettings, log: Callable[[str], None] = print) -> EvalResult:
    check_settings(s)
    start = time.perf_counter()
    folder = model_folder(s.model, "--model")
    ref_folder = model_folder(s.ref, "--ref") if s.ref is not None else None
    torch.manual_seed(s.seed)
    tokenizer = load_tokenizer(folder)
    module = load_causal_lm(folder).eval().requires_grad_(False)
    check_context_length(module, s.max_prompt_length, s.max_response_length,
                         "--max-prompt-length + --max-response-length")
    data = RLDataset(list(s.data), tokenizer, s.prompt_key, s.max_prompt_length, "error", False, "--data",
                     s.max_samples, s.reward_fn_key)
    meter = None
    if ref_folder is not None:
        if load_tokenizer(ref_folder).get_vocab() != tokenizer.get_vocab():
            raise ConfigError(f"--ref {s.ref}: its tokenizer differs from --model's; the KL compares the "
                              "probabilities of the same token ids, give a reference with the same tokenizer")
        ref = load_causal_lm(ref_folder).eval().requires_grad_(False)
        meter = KLMeter(module, ref, 1.0 if s.greedy else s.temperature, s.batch_size)
    if s.greedy and s.n > 1:
        log(f"note: --greedy gives {s.n} identical responses per prompt; pass --n 1 or sample")
    sampling = SamplingParams(s.max_response_length, s.temperature, s.top_p, s.top_k, do_sample=not s.greedy)
    engine = HFRolloutEngine(module, eos_token_ids(module, tokenizer), tokenizer.pad_token_id, seed=s.seed)
    pool = ScoringPool(FunctionRef(s.custom_reward_path, s.custom_reward_name), s.num_workers, s.timeout_s)
    reward = RewardManager(tokenizer, pool, RewardSettings(on_error=s.on_error))
    try:
        result = validate(functools.partial(generate_rollout, engine), data, reward, sampling, s.n,
                          tokenizer.pad_token_id, s.batch_size, meter)
    finally:
        reward.close()
    metrics = dict(result.metrics)
    metrics.update(diversity_metrics([row["output"] for row in result.rows], s.n))
    rows = result.rows
    if meter is not None:
        metrics.update(meter.metrics())
        for row, k1, k3 in zip(rows, meter.k1_sum, meter.k3_sum):
            row["kl_k1"], row["kl_k3"] = k1, k3
    out = EvalResult(s, folder, ref_folder, len(data), metrics, rows, time.perf_counter() - start)
    if s.output:
        _write(s.output, json.dumps(out.to_json(), indent=2) + "\n")
    if s.dump:
        _write(s.dump, "".join(json.dumps(row) + "\n" for row in rows))
    return out


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise HybridRLError(f"cannot write {path}: {e.strerror}; give a writable path") from None


def format_table(result: EvalResult) -> str:
    """Two header lines, then one `metric  value` line per metric (counts as integers, nan as n/a)."""
    s = result.settings
    decoding = "greedy" if s.greedy else f"temperature {s.temperature:g}" + (
        f", top-p {s.top_p:g}" if s.top_p < 1 else "") + (f", top-k {s.top_k}" if s.top_k > 0 else "")
    ref = f", ref {result.ref_folder}" if result.ref_folder else ""
    head = (f"model {result.model_folder}{ref}\ndata {', '.join(s.data)}: {result.num_prompts} prompts x {s.n} "
            f"samples, {decoding}, {result.seconds:.1f} s")
    width = max(len(k) for k in result.metrics)
    lines = [head, "", f"{'metric':<{width}}  value", f"{'-' * width}  {'-' * 9}"]
    for key, value in result.metrics.items():
        text = "n/a" if not math.isfinite(value) else f"{int(value)}" if key.endswith("/errors") else f"{value:.4f}"
        lines.append(f"{key:<{width}}  {text:>9}")
    return "\n".join(lines)
