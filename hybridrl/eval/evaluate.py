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

With `tool_config` (a tools YAML, as actor_rollout_ref.rollout.multi_turn.tool_config_path takes)
responses are the trainer's multi-turn conversations: the same MultiTurnEngine around the same
engine, the same turn and tool-response limits (defaults from the trainer's config). As in the
trainer, rewards, diversity and KL see only the model's own tokens (tool turns are context, masked
out of response_mask); the table adds the trainer's multi-turn metrics (trainer/metrics.py:
`num_turns/*`, `tool_call_counts/*` with per-response stats and `frac_with_call`, and totals over
all responses of `tool_call_counts/<tool>` and `tool_errors/<kind>`), and dumped rows carry each
response's counts as the trainer's generation dumps do.

The table is printed; JSON (settings + metrics) is written only with `output` (like lm-eval's
--output_path: no file appears in the working directory unasked), every generation with `dump`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch

from hybridrl import progress
from hybridrl.batch import Rollout
from hybridrl.config.schema import ON_ERROR, SEED_MAX, DataConfig, MultiTurnConfig, RewardModelConfig
from hybridrl.data.dataset import DataNames, RLDataset
from hybridrl.errors import ConfigError, HybridRLError, raise_all
from hybridrl.eval.diversity import distinct_n, ngrams, repetition_rate, self_bleu
from hybridrl.models.forward import batched_log_probs
from hybridrl.models.loading import BUNDLED, check_context_length, eos_token_ids, load_causal_lm, load_tokenizer
from hybridrl.paths import check_output_file
from hybridrl.rewards.manager import RewardManager, RewardSettings
from hybridrl.rewards.pool import FunctionRef, ScoringPool
from hybridrl.rollout.base import SamplingParams, generate_rollout
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.rollout.multi_turn import MultiTurnEngine, MultiTurnSettings
from hybridrl.rollout.tools.base import Tool
from hybridrl.rollout.tools.loading import load_tools
from hybridrl.trainer.metrics import multi_turn_metrics
from hybridrl.trainer.validate import validate

_DATA, _RM, _MT = DataConfig(), RewardModelConfig(), MultiTurnConfig()
RESPONSE_CAP = 1024  # most tokens per response when --max-response-length is not given
PROMPT_FLAG = "--max-prompt-length"
EVAL_NAMES = DataNames("--prompt-key", "--reward-fn-key", PROMPT_FLAG,
                       f"raise {PROMPT_FLAG}, or leave it out (the longest prompt sets it)",
                       "Fix the row, or leave it out of --data")


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
    max_prompt_length: Optional[int] = None  # None: the longest prompt of the data, after the chat template
    max_response_length: Optional[int] = None  # None: the model's context left after that, at most RESPONSE_CAP
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
    tool_config: Optional[str] = None  # tools YAML: multi-turn responses that may call its tools; None: single turn
    max_assistant_turns: Optional[int] = None  # with tool_config; None: the trainer's default
    max_tool_response_length: Optional[int] = None  # characters of a tool's answer shown; None: the trainer's default

    def multi_turn(self) -> Optional[MultiTurnSettings]:
        """The multi-turn limits with the trainer's defaults filled in; None without tool_config."""
        if self.tool_config is None:
            return None
        turns, length = self.max_assistant_turns, self.max_tool_response_length
        return MultiTurnSettings(_MT.max_assistant_turns if turns is None else turns,
                                 _MT.max_tool_response_length if length is None else length)


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
                "tool_config": s.tool_config, **_multi_turn_json(s.multi_turn()),
                "num_generations": len(self.rows), "time_s": round(self.seconds, 3),
                "metrics": {k: (v if math.isfinite(v) else None) for k, v in self.metrics.items()}}


def _multi_turn_json(mt: Optional[MultiTurnSettings]) -> dict:
    """The limits in effect (null for a single-turn eval), so every JSON file has the same keys."""
    if mt is None:
        return {"max_assistant_turns": None, "max_tool_response_length": None}
    return {"max_assistant_turns": mt.max_assistant_turns, "max_tool_response_length": mt.max_tool_response_length}


def model_folder(path: str, flag: str, log: Optional[Callable[[str], None]] = None) -> str:
    """The HF folder of a bundled name, an HF folder, a run folder or a global_step_<N> folder; a
    checkpoint's files are verified against its manifest's checksums (trainer/export.actor_folder)."""
    from hybridrl.trainer.export import DamagedCheckpoint, actor_folder

    if path in BUNDLED:
        return str(BUNDLED[path])
    kinds = ("a HuggingFace model folder (with config.json), a run folder, a global_step_<N> checkpoint "
             f"or a bundled model ({', '.join(BUNDLED)})")
    if not os.path.isdir(path):
        raise ConfigError(f"{flag} {path}: no such folder; give {kinds}")
    try:
        return actor_folder(path, log)
    except DamagedCheckpoint as e:
        raise ConfigError(f"{flag} {path}: {e}") from None
    except HybridRLError as e:
        raise ConfigError(f"{flag} {path}: not a model folder ({e}); give {kinds}") from None


def check_settings(s: EvalSettings) -> None:
    """Every bad flag at once (ConfigErrors), each line naming the flag and the fix."""
    problems = [
        (not s.data, "--data: give at least one parquet or jsonl file"),
        (s.n < 1, f"--n {s.n}: give at least 1 sample per prompt"),
        (not s.greedy and not s.temperature > 0,
         f"--temperature {s.temperature}: sampling needs a temperature > 0 (e.g. 1.0); use --greedy for argmax decoding"),
        (not 0 < s.top_p <= 1, f"--top-p {s.top_p}: give a probability mass in (0, 1]"),
        (s.top_k == 0 or s.top_k < -1, f"--top-k {s.top_k}: give a positive count, or -1 for off"),
        (s.max_prompt_length is not None and s.max_prompt_length < 1,
         f"--max-prompt-length {s.max_prompt_length}: give at least 1 (or leave it out: the longest prompt sets it)"),
        (s.max_response_length is not None and s.max_response_length < 1,
         f"--max-response-length {s.max_response_length}: give at least 1 (or leave it out: the model's context "
         "left after the prompt, at most 1024)"),
        (s.max_samples == 0 or s.max_samples < -1, f"--max-samples {s.max_samples}: give a positive count, or -1 for all"),
        (s.batch_size < 1, f"--batch-size {s.batch_size}: give at least 1"),
        (not 0 <= s.seed <= SEED_MAX, f"--seed {s.seed}: give 0 to {SEED_MAX}"),
        (s.num_workers < 0, f"--num-workers {s.num_workers}: give 0 (score in this process) or more"),
        (s.on_error not in ON_ERROR, f"--on-error {s.on_error}: give one of {', '.join(ON_ERROR)}"),
        (s.custom_reward_path is not None and not os.path.isfile(s.custom_reward_path),
         f"--custom-reward-path {s.custom_reward_path}: file not found; give a Python file with the reward function"),
        *_tool_problems(s),
    ]
    problems += [(not os.path.isfile(path), (f"--data {path}: file not found; give a parquet or jsonl file in "
                                             "verl's schema (e.g. written by `hybridrl data arithmetic`)"))
                 for path in s.data]
    messages = [message for bad, message in problems if bad]
    for path, flag in ((s.output, "--output"), (s.dump, "--dump")):
        if path is not None:  # before the evaluation, which may take an hour, not after it
            try:
                check_output_file(path, flag)
            except ConfigError as e:
                messages.append(str(e))
    raise_all(messages)  # every bad flag at once


def _tool_problems(s: EvalSettings) -> list[tuple[bool, str]]:
    """The checks of the multi-turn flags, as (bad, message) pairs for check_settings."""
    if s.tool_config is None:  # the limits mean nothing in single-turn eval: refuse them rather than ignore them
        given = [flag for flag, value in (("--max-assistant-turns", s.max_assistant_turns),
                                          ("--max-tool-response-length", s.max_tool_response_length)) if value is not None]
        return [(bool(given), f"{' and '.join(given)} {'need' if len(given) > 1 else 'needs'} --tool-config (a "
                              "tools YAML, e.g. examples/tool_calc/tools.yaml); without it eval is single-turn")]
    mt = s.multi_turn()
    return [
        (not os.path.isfile(s.tool_config), f"--tool-config {s.tool_config}: file not found; give a tools YAML in "
                                            "verl's layout (e.g. examples/tool_calc/tools.yaml)"),
        (mt.max_assistant_turns < 1, f"--max-assistant-turns {mt.max_assistant_turns}: give at least 1 model turn"),
        (mt.max_tool_response_length < 1,
         f"--max-tool-response-length {mt.max_tool_response_length}: give at least 1 character"),
    ]


def load_eval_tools(s: EvalSettings) -> Optional[dict[str, Tool]]:
    """The tools of --tool-config by name (None without it); a bad file is a ConfigError naming the flag."""
    if s.tool_config is None:
        return None
    try:
        return load_tools(s.tool_config)
    except ConfigError as e:  # load_tools' messages start with the path, or name the trainer's key
        detail = str(e).removeprefix(f"{s.tool_config}: ")
        raise ConfigError(f"--tool-config {s.tool_config}: {detail}; see examples/tool_calc/tools.yaml") from None


class RolloutLog:
    """What eval keeps of each generated batch besides validate's rows: the model's own text of each
    response (what the reward reads: tool turns left out) and the multi-turn counts (name -> [N])."""

    def __init__(self, decode: Callable[[Rollout], list[str]]):
        self.decode = decode
        self.texts: list[str] = []
        self.turn_stats: list[dict[str, torch.Tensor]] = []

    def __call__(self, rollout: Rollout) -> None:
        self.texts += self.decode(rollout)
        if rollout.turn_stats is not None:
            self.turn_stats.append(rollout.turn_stats)

    def metrics(self, n: int) -> dict[str, float]:
        """Diversity within each prompt's n samples and, for multi-turn responses, the trainer's
        tool-use metrics over all responses."""
        out = diversity_metrics(self.texts, n)
        if self.turn_stats:
            out.update(multi_turn_metrics({k: torch.cat([b[k] for b in self.turn_stats]) for k in self.turn_stats[0]}))
        return out


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


def evaluate(s: EvalSettings, log: Callable[[str], None] = print, reward: Optional[FunctionRef] = None) -> EvalResult:
    """`reward`: a reward function given from Python (hybridrl.evaluate), instead of the custom reward file."""
    check_settings(s)  # flags and output paths: before anything loads
    tools = load_eval_tools(s)  # a bad tools file fails at once
    ref = reward or FunctionRef(s.custom_reward_path, s.custom_reward_name,
                                keys=("--custom-reward-path", "--custom-reward-name"))
    pool = ScoringPool(ref, s.num_workers, s.timeout_s)  # a custom reward file that cannot load fails at once too
    try:
        with progress.reporting():  # a bar over the prompts on a terminal, plain lines in a log (hybridrl/progress.py)
            return _evaluate(s, tools, pool, log)
    finally:
        pool.close()


def _evaluate(s: EvalSettings, tools: Optional[dict[str, Tool]], pool: ScoringPool,
              log: Callable[[str], None]) -> EvalResult:
    start = time.perf_counter()
    folder = model_folder(s.model, "--model", log)
    ref_folder = model_folder(s.ref, "--ref", log) if s.ref is not None else None
    torch.manual_seed(s.seed)
    with progress.phase("loading"):  # the model(s), and the data's prompts through the chat template
        tokenizer = load_tokenizer(folder)
        module = load_causal_lm(folder).eval().requires_grad_(False)
        data, s, derived = _data_and_lengths(s, tokenizer, module)
        meter = _kl_meter(s, ref_folder, module, tokenizer) if ref_folder is not None else None
    if derived:  # after the phase: its line is not interrupted
        log(derived)
    if s.greedy and s.n > 1:
        log(f"note: --greedy gives {s.n} identical responses per prompt; pass --n 1 or sample")
    sampling = SamplingParams(s.max_response_length, s.temperature, s.top_p, s.top_k, do_sample=not s.greedy)
    engine = _engine(s, module, tokenizer, tools)
    reward = RewardManager(tokenizer, pool, RewardSettings(on_error=s.on_error))
    kept = RolloutLog(reward.decode)
    hooks = [hook for hook in (kept, meter) if hook is not None]
    result = validate(functools.partial(generate_rollout, engine), data, reward, sampling, s.n,
                      tokenizer.pad_token_id, s.batch_size, lambda rollout: [hook(rollout) for hook in hooks],
                      label="eval")
    metrics = dict(result.metrics)
    metrics.update(kept.metrics(s.n))
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


def _data_and_lengths(s: EvalSettings, tokenizer, module) -> tuple[RLDataset, EvalSettings, Optional[str]]:
    """The prompts, and the settings with the lengths in effect: --max-prompt-length, else the longest
    prompt after the chat template; --max-response-length, else what the model's context leaves after
    that, at most RESPONSE_CAP (so real data is never refused for a default that does not fit it). The
    third item says which lengths were derived (None when both were given)."""
    context = getattr(module.config, "max_position_embeddings", None)
    limit = s.max_prompt_length or context or 2 ** 31
    names = EVAL_NAMES if s.max_prompt_length is not None else dataclasses.replace(  # only the context bounds a prompt
        EVAL_NAMES, max_prompt_length="the model's context (max_position_embeddings)",
        overlong_fix=f"this prompt cannot be evaluated with {s.model}; leave the row out")
    data = RLDataset(list(s.data), tokenizer, s.prompt_key, limit, "error", False, "--data", s.max_samples,
                     s.reward_fn_key, names=names)
    prompt = s.max_prompt_length or max(len(r.prompt_ids) for r in data.records)
    response = s.max_response_length
    if response is None:
        room = RESPONSE_CAP if context is None else min(RESPONSE_CAP, context - prompt)
        if room < 1:
            raise ConfigError(f"{PROMPT_FLAG} {prompt} fills the model's context of {context} tokens, which leaves no "
                              f"room for a response; give a smaller {PROMPT_FLAG} (longer prompts are refused)")
        response = room
    derived = None
    if s.max_prompt_length is None or s.max_response_length is None:
        derived = (f"{PROMPT_FLAG} {prompt}{'' if s.max_prompt_length else ' (the longest prompt)'}, "
                   f"--max-response-length {response}"
                   f"{'' if s.max_response_length else f' (the context left, at most {RESPONSE_CAP})'}")
    check_context_length(module, prompt, response, f"{PROMPT_FLAG} + --max-response-length")
    return data, dataclasses.replace(s, max_prompt_length=prompt, max_response_length=response), derived


def _kl_meter(s: EvalSettings, ref_folder: str, module, tokenizer) -> KLMeter:
    if load_tokenizer(ref_folder).get_vocab() != tokenizer.get_vocab():
        raise ConfigError(f"--ref {s.ref}: its tokenizer differs from --model's; the KL compares the "
                          "probabilities of the same token ids, give a reference with the same tokenizer")
    ref = load_causal_lm(ref_folder).eval().requires_grad_(False)
    # response_mask leaves a multi-turn response's tool tokens out of the KL; they stay attended to (as in the trainer)
    return KLMeter(module, ref, 1.0 if s.greedy else s.temperature, s.batch_size)


def _engine(s: EvalSettings, module, tokenizer, tools: Optional[dict[str, Tool]]):
    """The trainer's hf rollout engine; with tools, wrapped in its multi-turn engine (rollout/multi_turn.py)."""
    engine = HFRolloutEngine(module, eos_token_ids(module, tokenizer), tokenizer.pad_token_id, seed=s.seed)
    if tools is None:
        return engine
    try:
        return MultiTurnEngine(engine, tokenizer, tools, s.multi_turn())
    except ValueError as e:  # ChatDelta: the chat template has no tool turns to append
        raise ConfigError(f"--tool-config {s.tool_config}: --model {s.model} cannot take tool turns ({e}); "
                          "give a model whose chat template renders tool messages (e.g. ChatML)") from None


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
    mt = s.multi_turn()
    tools = f"\ntools {s.tool_config}: up to {mt.max_assistant_turns} model turns" if mt else ""
    head = (f"model {result.model_folder}{ref}\ndata {', '.join(s.data)}: {result.num_prompts} prompts x {s.n} "
            f"samples, {decoding}, {result.seconds:.1f} s{tools}")
    width = max(len(k) for k in result.metrics)
    lines = [head, "", f"{'metric':<{width}}  value", f"{'-' * width}  {'-' * 9}"]
    for key, value in result.metrics.items():
        text = "n/a" if not math.isfinite(value) else f"{int(value)}" if _is_count(key) else f"{value:.4f}"
        lines.append(f"{key:<{width}}  {text:>9}")
    return "\n".join(lines)


def _is_count(key: str) -> bool:
    """Totals printed as integers: scorer errors, tool errors and calls per tool (not their per-response stats)."""
    if key.endswith("/errors") or key.startswith("tool_errors/"):
        return True
    return key.startswith("tool_call_counts/") and key.rsplit("/", 1)[1] not in ("min", "max", "mean", "frac_with_call")
