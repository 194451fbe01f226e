"""`hybridrl view RUN_DIR [RUN_DIR ...]`: the viewer's subcommand (add_parser / run)."""

from __future__ import annotations

import argparse
import os
import sys

from hybridrl.errors import ConfigError

DESCRIPTION = ("a local, read-only web page over run folders: metric curves (live while a run trains), dumped "
               "generations by step and prompt, per-token detail, and an A/B table of two runs")


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("view", help=DESCRIPTION, description=DESCRIPTION,
                       epilog="runs dump generations with trainer.rollout_data_dir / trainer.validation_data_dir "
                              "(and per-token detail with trainer.dump_token_details=true); the API key may also "
                              "come from $HYBRIDRL_API_KEY")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders (a run's trainer.default_local_dir), or "
                                                              "one sweep folder (its trials, filtered by value)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, this machine only)")
    p.add_argument("--port", type=int, default=8080, help="port (default: %(default)s; 0: any free port)")
    p.add_argument("--api-key", default=os.environ.get("HYBRIDRL_API_KEY") or None,
                   help="require 'Authorization: Bearer KEY' on /api/* (the page asks for it); needed when --host "
                        "is not a loopback address (default: $HYBRIDRL_API_KEY, else none)")
    p.add_argument("--allow-no-api-key", action="store_true",
                   help="allow a --host other machines can reach without --api-key (refused otherwise)")
    p.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"),
                   help="uvicorn's log level (default: %(default)s)")
    return p


def check_access(host: str, api_key: str | None, allow_no_api_key: bool = False) -> None:
    """Run data leaves this machine only behind a key: a non-loopback address without one is refused, unless
    --allow-no-api-key says it is meant (serve/settings.py: the rule every hybridrl server follows)."""
    from hybridrl.serve.settings import exposure_error, open_by_accident

    if api_key is not None and not api_key.strip():
        raise ConfigError("--api-key: give a non-empty key")
    if open_by_accident(host, api_key, allow_no_api_key):
        raise ConfigError(exposure_error(host, "read every run it shows"))


def open_runs(paths: list[str]):
    """(the runs, None) for run folders; (its trials' runs named by trial id, the SweepFolder) for one sweep
    folder."""
    from hybridrl.sweep.results import is_sweep_folder
    from hybridrl.view.runs import load_folders

    sweeps = [p for p in paths if is_sweep_folder(p)]
    if not sweeps:
        return load_folders(paths), None
    if len(paths) > 1:
        raise ConfigError(f"{sweeps[0]}: a sweep folder is viewed alone (its trials are the runs); give just it, "
                          "or give trial folders (<sweep>/<trial_id>) as runs")
    from hybridrl.view.sweep import SweepFolder

    sweep = SweepFolder(paths[0])
    runs = load_folders(sweep.run_folders())
    for r in runs:  # trials share their base's experiment_name: name them by trial id
        r.name = os.path.basename(r.folder)
    return runs, sweep


def run(args) -> None:
    """Serve the page until interrupted."""
    import uvicorn

    from hybridrl.serve.cli import listen_socket
    from hybridrl.serve.settings import exposure_warning
    from hybridrl.view.app import build_app

    check_access(args.host, args.api_key, args.allow_no_api_key)
    warning = exposure_warning(args.host, args.api_key, "read every run it shows")
    if warning:
        print(f"hybridrl view: {warning}", file=sys.stderr)
    runs, sweep = open_runs(args.runs)
    sock = listen_socket(args.host, args.port)  # a port in use is one line naming it
    try:
        port = sock.getsockname()[1]
        for r in runs:
            for problem in r.problems:
                print(f"hybridrl view: {r.name}: {problem}", file=sys.stderr)
        what = f"a sweep of {len(sweep.read()[1])} trial(s)" if sweep else f"{len(runs)} run(s)"
        print(f"hybridrl view: {what} on http://{args.host}:{port}/", file=sys.stderr, flush=True)
        config = uvicorn.Config(build_app(runs, args.api_key, sweep), host=args.host, port=port,
                                log_level=args.log_level)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
