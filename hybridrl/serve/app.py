"""The FastAPI app: OpenAI-compatible routes over a GenerationService.

Errors always have OpenAI's shape {"error": {"message", "type", "param", "code"}}: request
problems are 4xx (bad JSON 400, bad field 400, key 401, route 404, method 405, body too large 413),
anything unexpected is a 500 with a generic message while the traceback goes to the log.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Optional

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from hybridrl.openai_api.protocol import APIError, ChatRequest, CompletionRequest, parse
from hybridrl.openai_api.tools import template_messages
from hybridrl.serve.requests import Limits, Plan, chat_plan, completion_plan, early_checks
from hybridrl.serve.responses import ServeMeta, collect, stream
from hybridrl.serve.service import GenerationService, internal_error

log = logging.getLogger("hybridrl.serve")


@dataclass(frozen=True)
class AppSettings:
    model_name: str  # the id clients give as `model` (--served-model-name)
    api_key: Optional[str] = None  # required as `Authorization: Bearer KEY` on /v1/* when set
    limits: Limits = Limits()


async def read_json(request: Request, max_bytes: int):
    """The parsed JSON body; 413 past max_bytes (told by Content-Length before anything is read, or
    counted while reading a chunked body), 400 when it is not JSON."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise APIError(413, f"The request body is {declared} bytes; this server takes at most {max_bytes} "
                            "(--max-body-bytes)", code="request_too_large")
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > max_bytes:
            raise APIError(413, f"The request body exceeds {max_bytes} bytes (--max-body-bytes)",
                           code="request_too_large")
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise APIError(400, f"The request body is not valid JSON: {e}", code="invalid_json") from None


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request: Request, e: APIError):
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError):
        """FastAPI's 422 for a path or query parameter, as OpenAI's 400 (bodies are parsed by `parse`)."""
        err = e.errors()[0]
        param = ".".join(str(p) for p in err["loc"] if p not in ("body", "path", "query")) or None
        return await api_error(request, APIError(400, f"Invalid value for '{param}': {err['msg']}", param,
                                                 "invalid_value"))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException):
        messages = {404: f"Not found: {request.method} {request.url.path}",
                    405: f"Method {request.method} is not allowed on {request.url.path}"}
        body = APIError(e.status_code, messages.get(e.status_code, str(e.detail)),
                        code={404: "not_found", 405: "method_not_allowed"}.get(e.status_code)).body()
        return JSONResponse(body, status_code=e.status_code, headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, e: Exception):
        log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=e)
        return await api_error(request, internal_error())


def build_app(service: GenerationService, settings: AppSettings) -> FastAPI:
    """The app; closing it (lifespan shutdown) closes the service."""
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await run_in_threadpool(service.close)

    app = FastAPI(title="hybridrl serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    _error_handlers(app)

    @app.get("/health")
    async def health():
        if not service.alive:
            return JSONResponse(internal_error().body(), status_code=503)
        return {"status": "ok"}

    @app.get("/metrics", dependencies=[Depends(_authorize(settings.api_key))])  # every route but /health: the key
    async def metrics():
        """Prometheus text: the tool calls returned, and the malformed ones returned as text."""
        return PlainTextResponse(service.counters.prometheus(), media_type="text/plain; version=0.0.4")

    app.include_router(_v1_router(service, settings))
    return app


def _authorize(api_key: Optional[str]):
    async def check(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise APIError(401, "Incorrect or missing API key; send 'Authorization: Bearer <key>'",
                           code="invalid_api_key")
    return check


def _v1_router(service: GenerationService, settings: AppSettings) -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[Depends(_authorize(settings.api_key))])
    limits, started = settings.limits, int(time.time())
    card = {"id": settings.model_name, "object": "model", "created": started, "owned_by": "hybridrl",
            "max_model_len": limits.max_model_len}

    @router.get("/models")
    async def models():
        return {"object": "list", "data": [card]}

    @router.get("/models/{model_id:path}")
    async def model(model_id: str):
        _check_model(model_id, settings.model_name, "model_id")
        return card

    @router.post("/completions")
    async def completions(request: Request):
        req = await _parse(request, CompletionRequest, settings)
        params = ["prompt"] if len(req.prompt) == 1 else [f"prompt[{i}]" for i in range(len(req.prompt))]
        prompts = await run_in_threadpool(lambda: [service.encode_prompt(p, q) for p, q in zip(req.prompt, params)])
        plan = completion_plan(req, prompts, limits)
        echo = None
        if req.echo:  # the prompt's text as given, or the decoded token ids
            echo = await run_in_threadpool(lambda: [p if isinstance(p, str) else service.decode(p) for p in req.prompt])
        meta = ServeMeta("completion", settings.model_name, n=plan.n, logprobs=plan.logprobs is not None, echo=echo)
        return await _respond(service, meta, plan)

    @router.post("/chat/completions")
    async def chat(request: Request):
        req = await _parse(request, ChatRequest, settings)
        messages = template_messages(req.messages)
        tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
        prompt = await run_in_threadpool(service.encode_chat, messages, tools)
        plan = chat_plan(req, prompt, limits)
        meta = ServeMeta("chat", settings.model_name, logprobs=plan.logprobs is not None, tools=req.parses_tools,
                         counters=service.counters)
        return await _respond(service, meta, plan)

    return router


async def _parse(request: Request, model, settings: AppSettings):
    req = parse(model, await read_json(request, settings.limits.max_body_bytes))
    _check_model(req.model, settings.model_name, "model")
    early_checks(req, settings.limits)
    return req


def _check_model(name: str, served: str, param: str) -> None:
    if name != served:
        raise APIError(404, f"The model '{name}' does not exist; this server serves '{served}'", param,
                       "model_not_found")


async def _respond(service: GenerationService, meta: ServeMeta, plan: Plan):
    """Queue the plan's jobs; stream server-sent events, or return the whole body once done."""
    pending = service.submit(plan)
    if plan.stream:
        return StreamingResponse(stream(meta, pending, plan.prompt_tokens, plan.include_usage),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    try:
        return await collect(meta, pending, plan.prompt_tokens)
    finally:
        pending.cancel()  # the handler was cancelled (client gone) or failed: free the rows
