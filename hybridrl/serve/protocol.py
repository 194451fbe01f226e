"""The OpenAI request bodies this server accepts (pydantic) and its OpenAI-style error bodies.

Unknown fields are refused (`extra="forbid"`), as are known OpenAI features this server does not
implement when they carry a non-default value (penalties, logit_bias, best_of, suffix,
response_format, ...): a client that relies on one gets a 400 naming it rather than a silently
different answer. Bounds that come
from the command line (max_tokens, n, context length) are checked later, in serve/requests.py.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, field_validator

from hybridrl.serve.logprobs import MAX_CHAT_TOP, MAX_LEGACY_TOP
from hybridrl.surrogates import find_lone_surrogate

MAX_STOPS = 4  # OpenAI's limit on stop strings


class APIError(Exception):
    """An error answered as {"error": {"message", "type", "param", "code"}} with an HTTP status."""

    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None,
                 type: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _param(loc: tuple) -> str:
    """A pydantic error location as OpenAI writes a parameter: messages[0].content."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def validation_error(e: ValidationError) -> APIError:
    """The first problem of a request body, as a 400 naming its field."""
    err = e.errors(include_url=False)[0]
    param = _param(tuple(err["loc"]))
    if err["type"] == "extra_forbidden":
        return APIError(400, f"Unrecognized request argument supplied: {param}", param, "unrecognized_argument")
    if err["type"] == "missing":
        return APIError(400, f"'{param}' is a required property", param, "missing_required_parameter")
    message = err["msg"].removeprefix("Value error, ")
    return APIError(400, f"Invalid value for '{param}': {message}", param, "invalid_value")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class StreamOptions(_Strict):
    include_usage: StrictBool = False


class BaseRequest(_Strict):
    """Fields shared by /v1/completions and /v1/chat/completions (None: the default)."""

    model: str
    max_tokens: Optional[StrictInt] = None
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)  # 0: greedy
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    top_k: Optional[StrictInt] = Field(None, ge=-1)  # extension (vLLM's): -1 or 0: off
    n: Optional[StrictInt] = Field(None, ge=1)
    stream: Optional[StrictBool] = False
    stream_options: Optional[StreamOptions] = None
    stop: Any = Field(None, validate_default=True)  # str or up to MAX_STOPS strings -> list[str]
    seed: Optional[StrictInt] = None
    user: Optional[str] = None  # accepted and ignored
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    logit_bias: Optional[dict[str, float]] = None

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, v: Any) -> list[str]:
        stops = [] if v is None else [v] if isinstance(v, str) else v
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise ValueError("give a string or a list of strings")
        if len(stops) > MAX_STOPS:
            raise ValueError(f"give at most {MAX_STOPS} stop strings")
        if any(s == "" for s in stops):
            raise ValueError("stop strings must not be empty")
        return stops

    def unsupported(self) -> list[tuple[str, bool]]:
        """(field, set to something this server does not do) pairs; subclasses add theirs."""
        return [("presence_penalty", bool(self.presence_penalty)), ("frequency_penalty", bool(self.frequency_penalty)),
                ("logit_bias", bool(self.logit_bias))]


def _token_ids(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(type(t) is int and t >= 0 for t in v)


class CompletionRequest(BaseRequest):
    prompt: Any  # a string, a list of strings, a list of token ids or a list of such lists -> list[str | list[int]]
    echo: Optional[StrictBool] = None  # the prompt's text (and, with logprobs, its log-probs) before the completion
    best_of: Optional[StrictInt] = None
    logprobs: Optional[StrictInt] = Field(None, ge=0, le=MAX_LEGACY_TOP)  # top-k per token (the legacy format)
    suffix: Optional[str] = None

    @field_validator("prompt")
    @classmethod
    def _prompts(cls, v: Any) -> list[str | list[int]]:
        if isinstance(v, str) or _token_ids(v):
            return [v]
        if isinstance(v, list) and v and all(isinstance(p, str) or _token_ids(p) for p in v):
            return v
        raise ValueError("give a string, a list of strings, a list of token ids (ints >= 0) or a list of such lists")

    def unsupported(self) -> list[tuple[str, bool]]:
        return super().unsupported() + [("best_of", (self.best_of or 1) != 1), ("suffix", bool(self.suffix))]


class Message(_Strict):
    role: Literal["system", "user", "assistant"]
    content: Any  # str or a list of text parts
    name: Optional[str] = None  # accepted and ignored

    @field_validator("content")
    @classmethod
    def _text(cls, v: Any) -> str:
        if isinstance(v, str):
            return v
        if isinstance(v, list) and all(isinstance(p, dict) for p in v):
            if any(p.get("type") != "text" for p in v):
                raise ValueError("only content parts of type 'text' are supported")
            if not all(set(p) == {"type", "text"} and isinstance(p["text"], str) for p in v):
                raise ValueError("a text part is {'type': 'text', 'text': '...'}")
            return "".join(p["text"] for p in v)
        raise ValueError("give a string or a list of {'type': 'text', 'text': ...} parts")


class ChatRequest(BaseRequest):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: Optional[StrictInt] = None  # the newer name of max_tokens
    logprobs: Optional[StrictBool] = None
    top_logprobs: Optional[StrictInt] = Field(None, ge=0, le=MAX_CHAT_TOP)  # needs logprobs: true
    tools: Optional[list] = None
    tool_choice: Any = None
    functions: Optional[list] = None
    function_call: Any = None
    parallel_tool_calls: Optional[StrictBool] = None
    response_format: Optional[dict] = None

    def unsupported(self) -> list[tuple[str, bool]]:
        fmt = (self.response_format or {}).get("type", "text")
        return super().unsupported() + [
            ("tools", bool(self.tools)), ("tool_choice", self.tool_choice not in (None, "none")),
            ("functions", bool(self.functions)), ("function_call", self.function_call not in (None, "none")),
            ("parallel_tool_calls", bool(self.parallel_tool_calls)), ("response_format", fmt != "text")]


def check_text(body: dict) -> None:
    """A 400 naming the field when any string of the body (a key too) holds a lone surrogate: the tokenizer
    would raise on it, and an error echoing it could not be written as UTF-8."""
    found = find_lone_surrogate(body)
    if found is not None:
        raise APIError(400, f"Invalid value for '{found.field}': it holds {found.describe()}; send whole "
                            "characters", found.field, "invalid_value")


def parse(model: type[BaseRequest], body: Any) -> BaseRequest:
    """The validated request, or an APIError 400 naming the first bad or unsupported field."""
    if not isinstance(body, dict):
        raise APIError(400, "The request body must be a JSON object")
    check_text(body)
    try:
        req = model.model_validate(body)
    except ValidationError as e:
        raise validation_error(e) from None
    for name, used in req.unsupported():
        if used:
            raise APIError(400, f"'{name}' is not supported by this server", name, "unsupported_parameter")
    if req.stream_options is not None and not req.stream:
        raise APIError(400, "'stream_options' is only allowed when 'stream' is true", "stream_options", "invalid_value")
    if isinstance(req, CompletionRequest) and req.echo and req.stream:
        raise APIError(400, "'echo' is not supported with 'stream': true; send the request without streaming",
                       "echo", "unsupported_parameter")
    if isinstance(req, ChatRequest) and req.top_logprobs is not None and not req.logprobs:
        raise APIError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value")
    return req
