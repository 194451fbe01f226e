"""In-process rollout with the policy's own HuggingFace module (zero-copy weights).

A hand-written sampling loop over the KV cache rather than `model.generate`: it records the
log-prob of every sampled token, stops as soon as every row has hit EOS, and for tiny
models it spends far less time in per-step Python than the generic generate() machinery.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import torch
from torch import Tensor

from hybridrl import progress
from hybridrl.models.cache_api import cache_kwargs
from hybridrl.models.forward import distinct_prompts, position_ids_of, prefill_distinct
from hybridrl.models.precision import FP32, Precision
from hybridrl.rollout.base import Generation, RolloutEngine, SamplingParams
from hybridrl.rollout.keyed import KeyedDraws, uniforms
from hybridrl.rollout.partial import WeightInbox

# decode steps before the lean decoder packs its weights (rollout.pack_weights): reordering them costs about what
# 4-5 packed steps save on the bench models, so generations that end sooner (EOS) never pay for it
PACK_AFTER = 8

# on_step(start, t, tokens [n], live [n], logits [n, V]) -> None or a bool [n] of rows to end after token t. Called
# once per decoding step of each chunk; rows start .. start + n - 1 of the call; tokens is the pad id on ended rows;
# logits are the raw ones token t was drawn from (before temperature and filtering: the server's log-probs).
StepCallback = Callable[[int, int, Tensor, Tensor, Tensor], Optional[Tensor]]


def filter_logits(logits: Tensor, top_k: int, top_p: float) -> Tensor:
    """Mask logits [N, V] outside the top-k and outside the smallest set of mass >= top_p with -inf."""
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the mass before it already reaches top_p (the first token always stays)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def choose_tokens(logits: Tensor, sampling: SamplingParams, u: Tensor | None) -> tuple[Tensor, Tensor]:
    """Next tokens [N] and their log-probs [N] under softmax(logits / T), before top-k/top-p filtering,
    which is the distribution the trainer recomputes. Sampling inverts the CDF of the filtered
    distribution at the uniforms u ([N], rollout/keyed.py): the first token whose cumulative
    probability exceeds u (a token of probability 0 is never picked)."""
    logits = logits.float()
    if not sampling.do_sample or sampling.temperature <= 0:
        tokens = logits.argmax(-1)
        logp = torch.log_softmax(logits, -1)
    else:
        scaled = logits / sampling.temperature
        logp = torch.log_softmax(scaled, -1)
        cdf = torch.softmax(filter_logits(scaled, sampling.top_k, sampling.top_p), -1).cumsum(-1)
        target = (u.to(cdf.device, torch.float64) * cdf[:, -1].double()).to(cdf.dtype)[:, None]
        tokens = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=cdf.shape[-1] - 1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


class HFRolloutEngine(RolloutEngine):
    def __init__(self, module, eos_token_ids: list[int], pad_token_id: int, seed: int = 0, max_num_seqs: int = 1024,
                 share_prompts: bool = True, lean_decode: bool = True, precision: Precision = FP32,
                 own_copy: bool = False, pack_weights: bool = True):
        self.module = module
        # own_copy: the module is the engine's alone (an async rollout worker's), so load_weights replaces it
        self.shares_weights = not own_copy
        self.precision = precision  # rollout.dtype=bfloat16: bf16 prefill (autocast) and bf16 lean-decode weights
        self.lean_decode = lean_decode  # Llama-family decode steps without the module's machinery (rollout/decode.py)
        self.pack_weights = pack_weights  # the lean decoder's projections in oneDNN's layout after PACK_AFTER steps
        self.share_prompts = share_prompts  # prefill each distinct prompt once (models/forward.prefill_distinct)
        self.max_num_seqs = max_num_seqs  # responses per KV cache (rollout.max_num_seqs)
        self.eos = torch.tensor(eos_token_ids, dtype=torch.long)
        self.pad_token_id = pad_token_id
        self.draws = KeyedDraws(seed)

    def load_weights(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        if not self.shares_weights:  # else the engine samples with the trainer's module itself: nothing to load
            self.module.load_state_dict(dict(named_tensors), strict=True)

    def generate(self, prompt_ids: Tensor, prompt_mask: Tensor, sampling: SamplingParams,
                 sample_ids: Tensor, stream: str = "train", on_step: StepCallback | None = None,
                 inbox: WeightInbox | None = None) -> Generation:
        """See RolloutEngine.generate; `on_step` sees every token as it is chosen (see StepCallback); `inbox`:
        partial rollouts, weights pushed during the call are taken between two tokens (rollout/partial.py)."""
        return self.generate_keyed(prompt_ids, prompt_mask, sampling, self.draws.next_keys(stream, sample_ids), on_step,
                                   inbox)

    @torch.no_grad()
    def generate_keyed(self, prompt_ids: Tensor, prompt_mask: Tensor, sampling: SamplingParams, keys: Tensor,
                       on_step: StepCallback | None = None, inbox: WeightInbox | None = None) -> Generation:
        """generate() with each response's randomness key ([N] int64, rollout/keyed.py) given by the caller
        rather than drawn from the engine's counters (the server derives them from request seeds)."""
        # Chunks of max_num_seqs rows bound the KV cache; each response's draws depend on its key only
        # (rollout/keyed.py), so chunking never changes what is sampled.
        m = self.max_num_seqs
        with self.precision.autocast():
            parts = [self._generate(prompt_ids[i:i + m], prompt_mask[i:i + m], sampling, keys[i:i + m],
                                    _shifted(on_step, i), inbox)
                     for i in range(0, len(prompt_ids), m)]
        if len(parts) == 1:
            return parts[0]
        width = max(p.response_ids.shape[1] for p in parts)
        pad = lambda t, value: torch.cat([t, t.new_full((len(t), width - t.shape[1]), value)], 1)  # noqa: E731
        return Generation(torch.cat([pad(p.response_ids, self.pad_token_id) for p in parts]),
                          torch.cat([pad(p.response_mask, 0) for p in parts]),
                          torch.cat([pad(p.log_probs, 0.0) for p in parts]),
                          versions=None if inbox is None else torch.cat([pad(p.versions, -1) for p in parts]))

    def _prefill(self, prompt_ids: Tensor, prompt_mask: Tensor):
        """Last-position logits [N, V] and a DynamicCache holding every row's prompt keys and values."""
        from transformers import DynamicCache

        groups = distinct_prompts(prompt_ids, prompt_mask) if self.share_prompts else None
        if groups is not None and len(groups[0]) < len(prompt_ids):  # the n samples of a prompt share its prefill
            logits, cache = prefill_distinct(self.module, prompt_ids, prompt_mask, groups)
            return logits[:, -1], cache
        cache = DynamicCache()
        logits = self.module(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=position_ids_of(prompt_mask),
                             **cache_kwargs(self.module, cache), use_cache=True, logits_to_keep=1).logits[:, -1]
        return logits, cache

    def _decoder(self, cache, attn: Tensor, P: int, T: int):
        """step(tokens [N], positions [N], slot) -> logits [N, V] with the KV cache preallocated for P + T
        positions (a growing cache re-copies every layer's keys and values at each token: torch.cat was a
        quarter of generation time). Llama-family models use the lean decoder (rollout/decode.py), others
        the module with a StaticCache."""
        from transformers import StaticCache

        from hybridrl.rollout import decode

        if self.lean_decode and decode.supports(self.module):
            dtype = self.precision.compute if self.precision.mixed else None  # None: the module's own
            weights = dtype or next(self.module.parameters()).dtype
            pack = self.pack_weights and decode.can_pack(attn.device, weights)
            lean = decode.LeanDecoder(self.module, len(attn), P + T, dtype, pack_after=PACK_AFTER if pack else None)
            for i, layer in enumerate(cache.layers):
                lean.fill(i, layer.keys, layer.values)
                layer.keys = layer.values = None  # the prompt's cache is released as it is copied (memory)
            return lambda tokens, positions, slot: lean.step(tokens, positions, slot, attn[:, :slot + 1].bool())
        # The cache places each update after the last (transformers 5 dropped cache_position): the prompt
        # fills slots 0..P-1, decode step t slot P+t, the order in which they are called.
        static = _static_cache(StaticCache, self.module.config, P + T, self.precision)
        for i, layer in enumerate(cache.layers):
            static.update(layer.keys, layer.values, i)
            layer.keys = layer.values = None
        with_cache = cache_kwargs(self.module, static)
        return lambda tokens, positions, slot: self.module(
            input_ids=tokens[:, None], attention_mask=attn, position_ids=positions[:, None], **with_cache,
            use_cache=True).logits[:, -1]

    def _generate(self, prompt_ids: Tensor, prompt_mask: Tensor, sampling: SamplingParams, keys: Tensor,
                  on_step: Callable[[int, Tensor, Tensor, Tensor], Optional[Tensor]] | None = None,
                  inbox: WeightInbox | None = None) -> Generation:
        was_training = self.module.training
        self.module.eval()
        device = prompt_ids.device
        N, P = prompt_ids.shape
        T = sampling.max_new_tokens
        logits, cache = self._prefill(prompt_ids, prompt_mask)  # [N, V]
        attn = torch.zeros(N, P + T, dtype=prompt_mask.dtype, device=device)  # filled as tokens are chosen
        attn[:, :P] = prompt_mask
        step = self._decoder(cache, attn, P, T)
        next_pos = position_ids_of(prompt_mask)[:, -1] + 1  # [N]
        done = torch.zeros(N, dtype=torch.bool, device=device)
        tokens, logps, masks, versions = [], [], [], []
        for t in range(T):
            # partial rollouts: new weights between two tokens; without an inbox the loop is the plain one
            if inbox is not None:
                if (got := inbox.take()) is not None:
                    logits, step = self._swap(got, inbox, prompt_ids, tokens, attn, P, T)
                versions.append(torch.full((N,), inbox.version, dtype=torch.long, device=device))
            tok, lp = choose_tokens(logits, sampling, uniforms(keys, t))
            live = ~done
            tok = torch.where(live, tok, torch.full_like(tok, self.pad_token_id))
            tokens.append(tok), logps.append(lp * live), masks.append(live.long())
            progress.advance_tokens(live)
            if not sampling.ignore_eos:
                done = done | torch.isin(tok, self.eos.to(device))
            if on_step is not None and (end := on_step(t, tok, live, logits)) is not None:
                done = done | end.to(device)
            if bool(done.all()) or t + 1 == T:
                break
            attn[:, P + t] = live
            logits = step(tok, next_pos, P + t)
            next_pos = next_pos + 1
        self.module.train(was_training)
        mask = torch.stack(masks, 1)
        held = None if inbox is None else torch.stack(versions, 1).masked_fill(mask == 0, -1)  # [N, T]
        return Generation(torch.stack(tokens, 1), mask, torch.stack(logps, 1), versions=held)

    def _swap(self, got, inbox: WeightInbox, prompt_ids: Tensor, tokens: list[Tensor], attn: Tensor, P: int, T: int):
        """Load pushed weights mid-generation and recompute the KV cache of the prompt and the t tokens so far with
        them (it was computed with the old weights; AReaL, arXiv 2505.24298, recomputes it too): the next token's
        logits [N, V] and a fresh decode step (the lean decoder copies the weights when built)."""
        from transformers import DynamicCache

        weights, version = got
        self.load_weights(weights)
        inbox.version = version
        t = len(tokens)
        ids = torch.cat([prompt_ids, *(x[:, None] for x in tokens)], 1)  # [N, P + t]
        mask = attn[:, :P + t]  # the prompt's mask, then each token's row liveness when it was fed
        cache = DynamicCache()
        logits = self.module(input_ids=ids, attention_mask=mask, position_ids=position_ids_of(mask),
                             **cache_kwargs(self.module, cache), use_cache=True, logits_to_keep=1).logits[:, -1]
        return logits, self._decoder(cache, attn, P + t, T - t)


def _static_cache(base, config, max_len: int, precision: Precision):
    """A StaticCache of max_len positions; under bf16 autocast one storing keys and values in bf16: a rotary
    model's keys come out of the rotary embedding in fp32 (bf16 projection times fp32 cos/sin) while its
    values come out of a bf16 projection, and a static cache holds a single dtype."""
    if not precision.mixed:
        return base(config=config, max_cache_len=max_len)

    class Cast(base):
        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            return super().update(key_states.to(precision.compute), value_states.to(precision.compute), layer_idx,
                                  *args, **kwargs)

    return Cast(config=config, max_cache_len=max_len)


def _shifted(on_step: StepCallback | None,
             start: int) -> Callable[[int, Tensor, Tensor, Tensor], Optional[Tensor]] | None:
    """The callback of a chunk whose first row is row `start` of the call."""
    return None if on_step is None else (lambda t, tokens, live, logits: on_step(start, t, tokens, live, logits))
