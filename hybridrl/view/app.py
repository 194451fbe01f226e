"""The viewer's FastAPI app: the page, its static files, and a JSON API over the run folders.

Every error is JSON {"error": message} that the page shows: an unknown run, step or prompt is a
404, a bad query value a 400, a missing or wrong API key a 401. With `api_key` set every /api route
needs `Authorization: Bearer KEY`; the page and its scripts do not (they hold no run data).
"""

from __future__ import annotations

import hmac
import importlib.util
import json
import logging
import math
import os
import threading
from typing import Optional

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from hybridrl.view.generations import Filter, StepCache, find, page
from hybridrl.view.runs import RunFolder, ViewError

log = logging.getLogger("hybridrl.view")
STATIC = os.path.join(os.path.dirname(__file__), "static")
_PAGES = {"app.js": "application/javascript", "sweep.js": "application/javascript", "style.css": "text/css"}


def plotly_js() -> Optional[str]:
    """plotly.min.js as the plotly package installs it (served from there: no copy in this repository,
    no CDN, which a machine without internet could not reach)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "package_data", "plotly.min.js")
    return path if os.path.isfile(path) else None


def _authorize(api_key: Optional[str]):
    def check(request: Request) -> None:
        if api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise ViewAuthError()
    return check


class ViewAuthError(Exception):
    pass


def _errors(app: FastAPI) -> None:
    @app.exception_handler(ViewError)
    async def not_found(request: Request, e: ViewError):
        return JSONResponse({"error": str(e)}, status_code=404)

    @app.exception_handler(ViewAuthError)
    async def unauthorized(request: Request, e: ViewAuthError):
        return JSONResponse({"error": "this viewer needs its API key (hybridrl view --api-key): give it in the page"},
                            status_code=401, headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError):
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"] if p != "query")
        return JSONResponse({"error": f"bad value for '{where}': {err['msg']}"}, status_code=400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException):
        return JSONResponse({"error": f"{request.method} {request.url.path}: {e.detail}"}, status_code=e.status_code)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, e: Exception):  # a bug: the page still shows a message
        log.exception("error in %s", request.url.path)
        return JSONResponse({"error": f"internal error ({type(e).__name__}: {e}); see the viewer's log"},
                            status_code=500)


class _Runs:
    """The runs the app serves (addressed by their position: run=0, 1, ...), the lock the request threads share
    them under (their indexes and the step cache are read and filled lazily), and the step cache."""

    def __init__(self, runs: list[RunFolder]):
        self.runs, self.lock, self.cache = runs, threading.Lock(), StepCache()
        self.sweep = False  # whether the runs are a sweep's trials (the page opens on its trials table)

    def at(self, run: int) -> RunFolder:
        if not 0 <= run < len(self.runs):
            raise ViewError(f"no run {run}; runs are 0..{len(self.runs) - 1}")
        return self.runs[run]

    def groups(self, run: int, kind: str, step: int):
        """(step's prompt groups, skipped lines) of run's `kind` generations; call under the lock."""
        r = self.at(run)
        return self.cache.groups(r.name, r.source(kind), step)


def build_app(runs: list[RunFolder], api_key: Optional[str] = None, sweep=None) -> FastAPI:
    """The app over `runs` (addressed by their position: run=0, 1, ...); with `sweep` (a view/sweep.SweepFolder
    whose trials are the runs) also its trials table."""
    app = FastAPI(title="hybridrl view", docs_url=None, redoc_url=None, openapi_url=None)
    _errors(app)
    _page_routes(app)
    api = APIRouter(prefix="/api", dependencies=[Depends(_authorize(api_key))])
    state = _Runs(runs)
    _run_routes(api, state)
    _generation_routes(api, state)
    if sweep is not None:
        from hybridrl.view.sweep import sweep_routes

        sweep_routes(api, sweep, {os.path.basename(r.folder): i for i, r in enumerate(runs)}, state.lock)
    state.sweep = sweep is not None
    app.include_router(api)
    return app


def _page_routes(app: FastAPI) -> None:
    """The page, its scripts and styles, and a health check: no run data, so no API key."""
    @app.get("/")
    def index():
        return FileResponse(os.path.join(STATIC, "index.html"), media_type="text/html")

    @app.get("/static/{name}")
    def static(name: str):
        if name == "plotly.min.js":
            if (path := plotly_js()) is None:
                raise ViewError("plotly is not installed: pip install plotly (or pip install 'hybridrl[view]')")
            return FileResponse(path, media_type="application/javascript")
        if name not in _PAGES:
            raise ViewError(f"no static file {name!r}")
        return FileResponse(os.path.join(STATIC, name), media_type=_PAGES[name])

    @app.get("/health")
    def health():
        return {"status": "ok"}


def _run_routes(api: APIRouter, state: _Runs) -> None:
    """The runs, their metrics, the steps with generations, and the A/B table of two runs."""
    @api.get("/runs")
    def list_runs():
        with state.lock:
            return {"runs": [dict(r.summary(), id=i) for i, r in enumerate(state.runs)],
                    "plotly": plotly_js() is not None, "sweep": state.sweep}

    @api.get("/metrics")
    def metrics(run: int, since: int = 0, upto: Optional[int] = None, gen: int = -1, sections: Optional[str] = None,
                keys: str = ""):
        """Rows since..upto-1 of the run's metrics, the series of `sections` only (comma-separated; "*" or
        none given: all) plus the named `keys`, and every key's name. `gen`: the generation the client's
        rows came from; a rewritten file (a resumed run) answers "reset" and its rows from 0."""
        with state.lock:
            table = state.at(run).metrics_table()
            reset = gen >= 0 and gen != table.generation
            secs = None if sections in (None, "*") else [s for s in sections.split(",") if s]
            data = table.select(0 if reset else since, upto, secs, [k for k in keys.split(",") if k])
        # json.dumps directly (FastAPI's jsonable_encoder walks each of 10,000 steps x 40 values one by one),
        # without the spaces after "," and ":" (a tenth of the bytes of a column of numbers)
        return Response(json.dumps(dict(data, reset=reset), separators=(",", ":")), media_type="application/json")

    @api.get("/steps")
    def steps(run: int, kind: str):
        with state.lock:
            return {"steps": state.at(run).source(kind).steps()}

    @api.get("/compare")
    def compare(a: int, b: int):
        from hybridrl.eval.compare import BEST_RULE, compare_table

        with state.lock:
            pair = [_as_eval_run(state.at(a)), _as_eval_run(state.at(b))]
        if any(not p.series for p in pair):
            raise ViewError("a run without any metric line cannot be compared yet")
        rows = compare_table(pair)
        return {"best_rule": BEST_RULE, "runs": [p.name for p in pair],
                "rows": [{"metric": r.metric, "best_is": r.best_is, "final": [_json(v) for v in r.final],
                          "best": [_json(v) for v in r.best]} for r in rows]}


def _generation_routes(api: APIRouter, state: _Runs) -> None:
    """A step's prompts (filtered, a page at a time), one prompt's responses, and the steps a prompt recurs at."""
    @api.get("/prompts")
    def prompts(run: int, kind: str, step: int, offset: int = 0, limit: int = 50, q: str = "", source: str = "",
                min_score: Optional[float] = None, max_score: Optional[float] = None,
                min_length: Optional[int] = None, max_length: Optional[int] = None):
        flt = Filter(q, source, min_score, max_score, min_length, max_length)
        with state.lock:
            groups, skipped = state.groups(run, kind, step)
        return dict(page(groups, flt, max(0, offset), max(1, min(limit, 500))), skipped=skipped)

    @api.get("/prompt")
    def prompt(run: int, kind: str, step: int, i: Optional[int] = None, key: str = ""):
        with state.lock:
            groups, _ = state.groups(run, kind, step)
        if key:  # the same prompt at another step: that it was not sampled there is an answer, not an error
            at = find(groups, key)
            if at is None:
                return {"found": False, "step": step, "message": f"this prompt is not among step {step}'s "
                                                                 f"{len(groups)} prompts"}
        elif i is None or not 0 <= i < len(groups):
            raise ViewError(f"step {step} has no prompt {i} ({len(groups)} prompts)")
        else:
            at = i
        g = groups[at]
        return {"found": True, "i": at, "key": g.key, "input": g.input, "step": step, "rows": g.rows}

    @api.get("/prompt_steps")
    def prompt_steps(run: int, kind: str, step: int, i: int):
        """The steps where prompt i of `step` was sampled too: the choices of the page's "same prompt at step" picker."""
        with state.lock:
            groups, _ = state.groups(run, kind, step)
            if not 0 <= i < len(groups):
                raise ViewError(f"step {step} has no prompt {i} ({len(groups)} prompts)")
            return {"steps": state.at(run).source(kind).steps_with(groups[i].input)}


def _as_eval_run(r: RunFolder):
    """The run as `hybridrl compare` reads one, so the A/B table is computed by the same code."""
    from hybridrl.eval.runs import Run

    table = r.metrics_table()
    series = {}
    for key, column in table.series.items():
        points = [(s, float(v)) for s, v in zip(table.steps, column) if v is not None]
        series[key] = sorted(dict(points).items())  # a step logged twice: the later line wins, as compare's
    return Run(r.name, r.metrics.path, series)


def _json(v):
    return v if v is None or math.isfinite(v) else str(v)
