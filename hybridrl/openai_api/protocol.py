"""The OpenAI request bodies `hybridrl serve` and the agent proxy accept (pydantic) and their OpenAI-style error
bodies.

Unknown fields are refused (`extra="forbid"`), as are known OpenAI features this server does not
implement when they carry a non-default value (penalties, logit_bias, best_of, suffix,
response_format, ...): a client that relies on one gets a 400 naming it rather than a silently
different answer. Bounds that come
from the command line (max_tokens, n, context length) are checked later, in serve/requests.py.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, ValidationInfo,
                      field_validator, model_validator)

from hybridrl.openai_api.logprobs import MAX_CHAT_TOP, MAX_LEGACY_TOP
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


class FunctionCall(_Strict):
    name: str
    arguments: str  # a JSON object, as a string (OpenAI's form)


class ToolCall(_Strict):
    """A call of an earlier assistant turn, sent back in the history."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Strict):
    role: Literal["system", "user", "assistant", "tool"]
    content: Any  # str or a list of text parts; null (or left out) only on an assistant turn with tool_calls
    name: Optional[str] = None  # accepted (a tool result's name goes to the template)
    tool_calls: Optional[list[ToolCall]] = None  # assistant turns only
    tool_call_id: Optional[str] = None  # tool results only: the call it answers

    @model_validator(mode="before")
    @classmethod
    def _calls_only(cls, data: Any) -> Any:
        """An assistant turn that only called tools may leave `content` out (OpenAI clients do)."""
        calls_only = isinstance(data, dict) and data.get("role") == "assistant" and data.get("tool_calls")
        return {**data, "content": None} if calls_only and "content" not in data else data

    @model_validator(mode="after")
    def _roles(self) -> "Message":
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("'content' is required (it may be null only on an assistant message with tool_calls)")
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError("only assistant messages carry 'tool_calls'")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("a tool message needs 'tool_call_id', and only a tool message has one")
        return self

    @field_validator("content")
    @classmethod
    def _text(cls, v: Any, info: ValidationInfo) -> Optional[str]:
        if v is None and info.data.get("role") == "assistant":  # a turn of tool calls (checked in _roles)
            return v
        if isinstance(v, str):
            return v
        if isinstance(v, list) and all(isinstance(p, dict) for p in v):
            if any(p.get("type") != "text" for p in v):
                raise ValueError("only content parts of type 'text' are supported")
            if not all(set(p) == {"type", "text"} and isinstance(p["text"], str) for p in v):
                raise ValueError("a text part is {'type': 'text', 'text': '...'}")
            return "".join(p["text"] for p in v)
        raise ValueError("give a string or a list of {'type': 'text', 'text': ...} parts")


class FunctionDef(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI's rule for function names
    description: Optional[str] = None
    parameters: Optional[dict] = None  # a JSON schema, passed to the chat template as it is
    strict: Optional[StrictBool] = None  # accepted; nothing constrains sampling to the schema


class ToolDef(_Strict):
    type: Literal["function"]
    function: FunctionDef


TOOL_CHOICES = ("none", "auto")  # "required" and a named function would need constrained sampling


class ChatRequest(BaseRequest):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: Optional[StrictInt] = None  # the newer name of max_tokens
    logprobs: Optional[StrictBool] = None
    top_logprobs: Optional[StrictInt] = Field(None, ge=0, le=MAX_CHAT_TOP)  # needs logprobs: true
    tools: Optional[list[ToolDef]] = None
    tool_choice: Any = None  # "none" | "auto" (the default with tools); "required" and named ones are refused
    functions: Optional[list] = None
    function_call: Any = None
    parallel_tool_calls: Optional[StrictBool] = None
    response_format: Optional[dict] = None

    def unsupported(self) -> list[tuple[str, bool]]:
        fmt = (self.response_format or {}).get("type", "text")
        return super().unsupported() + [
            ("functions", bool(self.functions)), ("function_call", self.function_call not in (None, "none")),
            ("parallel_tool_calls", self.parallel_tool_calls is False),  # the model may always make several calls
            ("response_format", fmt != "text")]

    @property
    def parses_tools(self) -> bool:
        """The model's turn is read for tool calls: tools given and tool_choice not "none"."""
        return bool(self.tools) and self.tool_choice in (None, "auto")


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
    if isinstance(req, ChatRequest):
        _check_chat(req)
    return req


def _check_chat(req: ChatRequest) -> None:
    if req.top_logprobs is not None and not req.logprobs:
        raise APIError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value")
    choice = req.tool_choice
    if choice is None or choice in TOOL_CHOICES:
        if choice == "auto" and not req.tools:
            raise APIError(400, "'tool_choice' is only allowed when 'tools' are given", "tool_choice", "invalid_value")
        return
    if choice == "required" or (isinstance(choice, dict) and choice.get("type") == "function"):
        raise APIError(400, "'tool_choice' 'required' or a named function is not supported by this server: it does "
                            "not constrain sampling, so it could not guarantee the call; use 'auto' (the model "
                            "decides) or 'none'", "tool_choice", "unsupported_parameter")
    raise APIError(400, "Invalid value for 'tool_choice': give 'none', 'auto', 'required' or "
                        "{'type': 'function', 'function': {'name': ...}}", "tool_choice", "invalid_value")
