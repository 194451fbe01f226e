"""`hybridrl serve PATH`: an OpenAI-compatible HTTP server (FastAPI + uvicorn) for one model.

`add_parser(sub)` adds the subcommand to hybridrl's argparse subparsers and `run(args)` runs it;
`python -m hybridrl.serve.cli PATH ...` does the same on its own.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys

from hybridrl import progress
from hybridrl.errors import ConfigError
from hybridrl.serve.settings import ALLOW_FLAG, DTYPES, ENGINES, ServeSettings

DESCRIPTION = ("serve a model (HF folder, bundled name, run folder or global_step_<N> checkpoint) over an "
               "OpenAI-compatible HTTP API: /v1/completions, /v1/chat/completions (streaming too), /v1/models, /health")
_D = ServeSettings("")


def add_parser(sub) -> argparse.ArgumentParser:
    """The `serve` subcommand and its flags."""
    p = sub.add_parser("serve", help=DESCRIPTION, description=DESCRIPTION,
                       epilog="the API key may also come from $HYBRIDRL_API_KEY; /health never needs it")
    p.add_argument("path", metavar="PATH", help="HF model folder, bundled model name (tiny-arith), run folder "
                                               "(newest checkpoint) or global_step_<N> folder")
    p.add_argument("--host", default=_D.host, help="address to bind (default: %(default)s, this machine only)")
    p.add_argument("--port", type=int, default=_D.port, help="port (default: %(default)s)")
    p.add_argument("--engine", choices=ENGINES, default=_D.engine,
                   help="generation backend; auto: vllm when installed, else hf (default: %(default)s)")
    p.add_argument("--served-model-name", help="the model id clients send (default: PATH's folder name)")
    p.add_argument("--api-key", default=os.environ.get("HYBRIDRL_API_KEY") or None,
                   help="require 'Authorization: Bearer KEY' on /v1/* (default: $HYBRIDRL_API_KEY, else none)")
    p.add_argument(ALLOW_FLAG, action="store_true",
                   help="allow a --host other machines can reach without --api-key (refused otherwise)")
    p.add_argument("--seed", type=int, default=_D.seed,
                   help="seed of the requests that bring none (default: %(default)s)")
    p.add_argument("--dtype", choices=DTYPES, default=_D.dtype, help="weights dtype (default: %(default)s)")
    p.add_argument("--max-num-seqs", type=int, default=_D.max_num_seqs,
                   help="responses generated together in one batch (default: %(default)s)")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="prompt + generated tokens per response (default: the model's context, at most 4096)")
    p.add_argument("--max-tokens-limit", type=int, default=_D.max_tokens_limit,
                   help="largest max_tokens a request may ask for (default: %(default)s)")
    p.add_argument("--max-n", type=int, default=_D.max_n, help="most choices (n) per prompt (default: %(default)s)")
    p.add_argument("--max-body-bytes", type=int, default=_D.max_body_bytes,
                   help="largest request body; bigger ones get 413 (default: %(default)s)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads of the hf engine (torch.set_num_threads); on a busy machine fewer threads than "
                        "cores can be much faster for small models (default: torch's choice)")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"),
                   help="uvicorn's log level; info logs every request (default: %(default)s)")
    return p


def settings_of(args) -> ServeSettings:
    return ServeSettings(model=args.path, host=args.host, port=args.port, engine=args.engine,
                         served_model_name=args.served_model_name, api_key=args.api_key, seed=args.seed,
                         dtype=args.dtype, max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len,
                         max_tokens_limit=args.max_tokens_limit, max_n=args.max_n, max_body_bytes=args.max_body_bytes,
                         threads=args.threads, allow_no_api_key=args.allow_no_api_key)


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (as uvicorn binds one: SO_REUSEADDR), taken before the model loads so
    that a port in use is one line naming it at once, not uvicorn's error after the "serving on" banner;
    the server then uses this very socket, so nothing can take the port in between."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise ConfigError(f"--host {host}: not a name or address of this machine ({e.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        fixes = {errno.EADDRINUSE: f"--port {port}: {host}:{port} is already in use (another server, or an earlier "
                                   f"`hybridrl serve`?); stop it, or choose another port, e.g. --port {port + 1}",
                 errno.EADDRNOTAVAIL: f"--host {host}: not an address of this machine; use 127.0.0.1 (this machine "
                                      "only) or 0.0.0.0 (every interface)",
                 errno.EACCES: f"--port {port}: binding it needs privileges (ports below 1024); give --port 1024 "
                               "or higher"}
        raise ConfigError(fixes.get(e.errno, f"--host {host} --port {port}: cannot listen there ({e.strerror})")) \
            from None
    sock.set_inheritable(True)
    return sock


def run(args) -> None:
    """Load the model, then serve until interrupted (Ctrl-C / SIGTERM end it cleanly)."""
    import uvicorn

    from hybridrl.serve.app import build_app
    from hybridrl.serve.build import build_service
    from hybridrl.serve.settings import check_settings, exposure_warning

    s = settings_of(args)
    check_settings(s)  # before the model loads: a typo fails in a second
    warning = exposure_warning(s.host, s.api_key, "use the model")
    if warning:
        print(f"hybridrl serve: {warning}", file=sys.stderr)
    sock = listen_socket(s.host, s.port)  # a port in use fails here, before the model loads
    try:
        with progress.reporting(), progress.phase("loading the model"):
            service, app_settings, engine = build_service(s)
        port = sock.getsockname()[1]  # --port 0: the port the system chose
        print(f"hybridrl serve: model '{app_settings.model_name}' ({engine} engine, context "
              f"{app_settings.limits.max_model_len}) on http://{s.host}:{port}/v1", file=sys.stderr, flush=True)
        config = uvicorn.Config(build_app(service, app_settings), host=s.host, port=port, log_level=args.log_level)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


def main(argv: list[str] | None = None) -> int:
    from hybridrl.errors import HybridRLError
    from hybridrl.interrupt import EXIT_CODE, Interrupted, handling_signals

    parser = argparse.ArgumentParser(prog="hybridrl")
    args = add_parser(parser.add_subparsers(dest="command", required=True)).parse_args(argv)
    with handling_signals():  # Ctrl-C while loading: one line, exit 130 (uvicorn handles it while serving)
        try:
            run(args)
        except HybridRLError as e:
            print(f"hybridrl serve: error: {e}", file=sys.stderr)
            return 2
        except (Interrupted, KeyboardInterrupt) as e:
            print(f"hybridrl serve: {getattr(e, 'message', None) or 'interrupted'}", file=sys.stderr)
            return EXIT_CODE
    return 0


if __name__ == "__main__":
    sys.exit(main())
