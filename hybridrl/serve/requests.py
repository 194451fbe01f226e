"""From a parsed request and its prompt token ids to what to generate, within the server's limits.

Every bound that the command line sets is checked here, before anything is queued, so a request
that cannot be served gets a 400 naming its field instead of failing half-way through a stream.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from hybridrl.openai_api.protocol import APIError, ChatRequest, CompletionRequest, BaseRequest
from hybridrl.serve.jobs import Sampling

COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
MAX_PROMPTS = 64  # prompts in one /v1/completions request


@dataclass(frozen=True)
class Limits:
    """The server's bounds on a request (command-line flags)."""

    max_model_len: int = 256  # prompt + generated tokens (--max-model-len)
    max_tokens_limit: int = 1024  # largest max_tokens (--max-tokens-limit)
    max_n: int = 8  # most choices per prompt (--max-n)
    max_body_bytes: int = 1 << 20  # largest request body (--max-body-bytes)


@dataclass(frozen=True)
class Plan:
    """What one request generates: n responses for each prompt, choice index = prompt * n + j."""

    prompts: list[list[int]]  # token ids of each prompt (chat: after the template)
    sampling: Sampling
    max_tokens: int  # per response
    n: int
    stops: list[str]
    seed: Optional[int]  # None: the server draws one
    stream: bool
    include_usage: bool  # streaming: a last chunk with the usage
    logprobs: Optional[int] = None  # top-k of the generated tokens' log-probs; None: no log-probs
    prompt_logprobs: Optional[int] = None  # echo with logprobs: top-k of the prompt's log-probs
    eos_logprob: bool = False  # a generated EOS gets its log-prob entry too (completions; chat hides it)

    @property
    def prompt_tokens(self) -> int:
        return sum(map(len, self.prompts))


def sampling_of(req: BaseRequest) -> Sampling:
    top_k = -1 if req.top_k in (None, 0) else req.top_k
    return Sampling(1.0 if req.temperature is None else req.temperature, 1.0 if req.top_p is None else req.top_p, top_k)


def check_max_tokens(value: Optional[int], param: str, limits: Limits, least: int = 1) -> None:
    """least: 0 for an echo request (its prompt's log-probs alone: lm-evaluation-harness's log-likelihoods)."""
    if value is not None and not least <= value <= limits.max_tokens_limit:
        echo = " (0 only with 'echo': true)" if least == 1 and value == 0 and param == "max_tokens" else ""
        raise APIError(400, f"'{param}' is {value}; give {least} to {limits.max_tokens_limit} (this server's "
                            f"--max-tokens-limit){echo}", param, "invalid_value")


def check_choices(req: BaseRequest, prompts: int, limits: Limits) -> None:
    if (req.n or 1) > limits.max_n:
        raise APIError(400, f"'n' is {req.n}; this server gives at most {limits.max_n} choices (--max-n)", "n",
                       "invalid_value")
    if prompts > MAX_PROMPTS:
        raise APIError(400, f"{prompts} prompts in one request; give at most {MAX_PROMPTS}", "prompt", "invalid_value")


def check_prompt(ids: list[int], max_tokens: int, max_tokens_param: str, param: str, limits: Limits) -> None:
    """The prompt is not empty and leaves room for max_tokens in the context."""
    if not ids:
        raise APIError(400, "The prompt is empty (0 tokens); give at least one token", param, "invalid_value")
    if len(ids) + (max_tokens == 0) > limits.max_model_len:  # max_tokens 0: the prompt may fill the context
        raise APIError(400, f"The prompt has {len(ids)} tokens; this server's context is {limits.max_model_len} "
                            "tokens (--max-model-len), prompt plus at least 1 generated token", param,
                       "context_length_exceeded")
    if len(ids) + max_tokens > limits.max_model_len:
        raise APIError(400, f"The prompt ({len(ids)} tokens) plus '{max_tokens_param}' ({max_tokens}) exceeds this "
                            f"server's context of {limits.max_model_len} tokens; lower '{max_tokens_param}'",
                       max_tokens_param, "context_length_exceeded")


def early_checks(req: BaseRequest, limits: Limits) -> None:
    """The bounds that need no tokenization (so a bad request costs nothing)."""
    if isinstance(req, ChatRequest):
        check_max_tokens(req.max_completion_tokens, "max_completion_tokens", limits)
        check_choices(req, 1, limits)
        check_max_tokens(req.max_tokens, "max_tokens", limits)
    else:
        check_choices(req, len(req.prompt), limits)
        check_max_tokens(req.max_tokens, "max_tokens", limits, least=0 if req.echo else 1)


def completion_plan(req: CompletionRequest, prompts: list[list[int]], limits: Limits) -> Plan:
    max_tokens = COMPLETION_DEFAULT_MAX_TOKENS if req.max_tokens is None else req.max_tokens
    for ids in prompts:
        check_prompt(ids, max_tokens, "max_tokens", "prompt", limits)
    echoed = req.logprobs if req.echo else None
    # OpenAI's legacy completions and vLLM list a generated EOS among the tokens (its text is empty);
    # lm-evaluation-harness's local-completions counts on it: it drops the last entry as the generated token
    return replace(_plan(req, prompts, max_tokens, req.logprobs, echoed), eos_logprob=True)


def chat_plan(req: ChatRequest, prompt: list[int], limits: Limits) -> Plan:
    """max_completion_tokens wins over max_tokens; neither: the rest of the context, up to the limit."""
    param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if max_tokens is None:
        max_tokens = max(1, min(limits.max_tokens_limit, limits.max_model_len - len(prompt)))
    check_prompt(prompt, max_tokens, param, "messages", limits)
    return _plan(req, [prompt], max_tokens, (req.top_logprobs or 0) if req.logprobs else None)


def _plan(req: BaseRequest, prompts: list[list[int]], max_tokens: int, logprobs: Optional[int],
          prompt_logprobs: Optional[int] = None) -> Plan:
    include_usage = bool(req.stream and req.stream_options and req.stream_options.include_usage)
    return Plan(prompts, sampling_of(req), max_tokens, req.n or 1, req.stop, req.seed, bool(req.stream), include_usage,
                logprobs, prompt_logprobs)
