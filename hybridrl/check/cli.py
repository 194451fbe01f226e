"""`hybridrl check [--config F.yaml | SCRIPT.sh] [key=value ...]`: certify a run's config on a shrunk twin of
its model before it spends GPU hours. Takes what `train` takes (verl's keys, or a verl launch script whose
key=value items it reads); prints one line per check; --json writes the report; exit code 1 on any ✗."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

from hybridrl.errors import HybridRLError


def add_parser(sub) -> None:
    text = ("run the configured dataflow for a few steps on a shrunk twin of the model and report, per check, "
            "whether an invariant of a correct run holds (✓), fails (✗: what is wrong and the fix) or does not "
            "apply (–); exit code 1 on any ✗")
    p = sub.add_parser("check", help=text, description=text,
                       epilog="checks: " + ", ".join(_order()) + " (`hybridrl check --list` says what each proves)")
    p.add_argument("--config", help="YAML file of config keys, as for train (overrides on the command line win)")
    p.add_argument("items", nargs="*", metavar="key=value | SCRIPT.sh",
                   help="dotted config overrides as for train; a verl launch script (.sh) first contributes the "
                        "key=value items of its training command")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE ('-': stdout only)")
    p.add_argument("--only", metavar="NAMES", help="comma-separated checks to run (default: all)")
    p.add_argument("--work-dir", metavar="DIR", help="keep the twins, twin runs and exports in DIR (default: a "
                                                     "temporary folder, removed at the end)")
    p.add_argument("--list", action="store_true", help="list the checks and what each proves, then exit")


def _order() -> tuple[str, ...]:
    from hybridrl.check.registry import ORDER

    return ORDER


def run(args) -> int:
    from hybridrl.check.context import CheckContext
    from hybridrl.check.registry import load_checks
    from hybridrl.check.report import exit_code, header_lines, result_lines, summary_line, to_json
    from hybridrl.vocab.verl_script import split_script_items
    from hybridrl.library_logs import route_library_logging

    if args.list:
        for entry in load_checks():
            print(f"{entry.name}: {entry.doc}")
        return 0
    only = _only(args.only)
    if args.json and args.json != "-":  # a report that cannot be written fails now, not after the checks ran
        from hybridrl.paths import check_output_file

        check_output_file(args.json, "--json")
    overrides, source = split_script_items(args.items)
    work = args.work_dir or tempfile.mkdtemp(prefix="hybridrl-check-")
    os.makedirs(work, exist_ok=True)
    quiet = args.json == "-"
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if quiet else (lambda line: print(line, flush=True))
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        route_library_logging(work)  # the libraries' warnings go to <work>/logs/driver.log
        ctx = CheckContext(args.config, overrides, work, log=say)
        twin = ctx.twin()  # a missing or unreadable model folder: one line, before any check runs
        header = {"model": ctx.model_path, "architecture": _architecture(ctx.model_path), "source": source,
                  "config": args.config, "overrides": overrides, "twin": _twin_shape(twin)}
        for line in header_lines(header, header["twin"]):
            say(line)
        results = []
        from hybridrl.check.runner import run_checks

        results = run_checks(ctx, only, on_result=lambda r: [say(line) for line in result_lines(r)])
        total_wall, total_cpu = time.perf_counter() - wall, time.process_time() - cpu
        say(summary_line(results, total_wall, total_cpu))
        if args.json:
            text = to_json(results, header, total_wall, total_cpu)
            if quiet:
                print(text)
            else:
                os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
                with open(args.json, "w") as f:
                    f.write(text + "\n")
                say(f"wrote {args.json}")
        return exit_code(results)
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


def _only(names: str | None) -> list[str] | None:
    if not names:
        return None
    import difflib

    order, wanted = _order(), [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in order]
    if unknown:
        hints = [f"{n!r}" + "".join(f" (did you mean {m!r}?)" for m in difflib.get_close_matches(n, order, 1))
                 for n in unknown]
        raise HybridRLError(f"--only: unknown check {', '.join(hints)}; the checks are {', '.join(order)}")
    return wanted


def _architecture(folder: str) -> str:
    try:
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return "unknown architecture"
    return ", ".join(config.get("architectures") or [config.get("model_type", "unknown architecture")])


def _twin_shape(folder: str) -> str:
    with open(os.path.join(folder, "twin.json")) as f:
        twin = json.load(f)
    return f"{twin['layers']} layers x {twin['width']} wide"
