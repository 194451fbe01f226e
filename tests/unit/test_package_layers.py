"""The package layers of hybridrl, low to high. A module may import only from its own layer or below, at
the top of a file or inside a function; an import that runs up is a failure unless ALLOWED names it
with its reason. Print the up-running arrows with `python tests/unit/test_package_layers.py`.

 0 leaves (the top-level modules: errors, registry, paths, batch, batching, timeline, ...): used everywhere.
 1 algos, and eval/metrics.py + eval/diversity.py: pure math (tensors; pass@k, maj@k, distinct-n) that
   the trainer's validation and `hybridrl eval` share; they import nothing of hybridrl above the leaves.
 2 vocab: other frameworks' words (verl, TRL, Hydra keys) are data that config's checks quote.
 3 config: the keys, their loading and validation, over the algos' registries and the vocab.
 4 data, models, rewards: each builds one kind of input (rows, weights, scores) from a checked config.
 5 plan: batch plan, levers, precision, placement and memory, derived from the config and the model's shape.
 6 openai_api, rollout, parallel: generation engines, the OpenAI protocol they and serve speak, and the
   torch.distributed data parallelism and sharding (parallel/) that the roles run under.
 7 workers: the roles (policy, reference, critic, reward model), their optimizer and their builders.
 8 distributed: Ray pools and the worker processes that host the roles.
 9 trainer: the driver loop, sources, checkpoints (and `export`, which reads them), tracking, validation.
10 eval, serve, view, sweep, check, api, doctor_checks, doctor: commands that run, read or serve runs.
11 cli, __main__: the command line over everything.
"""
import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hybridrl"
LEAVES = ["__init__", "errors", "registry", "paths", "batch", "batching", "timeline", "interrupt",
          "library_logs", "user_code", "surrogates", "versions", "progress"]
LAYERS = [LEAVES, ["algos", "eval_metrics"], ["vocab"], ["config"], ["data", "models", "rewards"], ["plan"],
          ["openai_api", "rollout", "parallel"], ["workers"], ["distributed"], ["trainer"],
          ["eval", "serve", "view", "sweep", "check", "api", "doctor_checks", "doctor"], ["cli", "__main__"]]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}
# Modules that sit in a layer other than their folder's: module -> the pseudo-package (in LAYERS) it counts as.
PLACED = {"hybridrl.eval.metrics": "eval_metrics", "hybridrl.eval.diversity": "eval_metrics"}
# (from module, to module) -> why this up-running import stays. Keep it small; every entry must still occur.
ALLOWED: dict[tuple[str, str], str] = {
    ("hybridrl.plan.checks", "hybridrl.rollout.tools.loading"):
        "the plan's check of rollout.multi_turn.tool_config_path loads the user's tool file the way the engine will, "
        "so a broken tool is refused before any role is built (an import inside the check)",
    ("hybridrl.plan.checks", "hybridrl.rollout.agent.loading"):
        "the same for rollout.agent.path: the user's agent function is imported and its signature checked at plan time",
}
BUDGET = 6  # at most this many distinct (from package, to package) up-arrows, allowed ones included


def package_of(module: str) -> str:
    """`hybridrl.a.b` -> its package `a` (a top-level module is its own package), or as PLACED puts it."""
    for prefix, package in PLACED.items():
        if module == prefix or module.startswith(prefix + "."):
            return package
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, int]]:
    """Every hybridrl module `path` imports (top level and inside functions), with its line.
    `from hybridrl.x import y` names `hybridrl.x.y` when y is a module, else `hybridrl.x`."""
    own = module_name(path)
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = own.split(".")[: len(own.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                is_module = (ROOT / Path(*sub.split("."))).with_suffix(".py").exists() or \
                    (ROOT / Path(*sub.split("."))).is_dir()
                out.append((sub if is_module else base, node.lineno))
    return sorted({(m, line) for m, line in out if m == "hybridrl" or m.startswith("hybridrl.")})


def up_edges() -> list[tuple[str, str, str]]:
    """(from module, to module, file:line) for every import that runs up the layers."""
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        src = module_name(path)
        for dst, line in imports(path):
            a, b = package_of(src), package_of(dst)
            if LAYER.get(b, -1) > LAYER.get(a, len(LAYERS)):
                edges.append((src, dst, f"{path.relative_to(ROOT)}:{line}"))
    return edges


def unknown_packages() -> set[str]:
    found = {package_of(module_name(p)) for p in PACKAGE.rglob("*.py")}
    return found - set(LAYER)


def report(edges) -> str:
    pairs = Counter((package_of(s), package_of(d)) for s, d, _ in edges)
    lines = [f"{len(pairs)} package-level up-arrows, {len(edges)} module-level up-imports"]
    for (a, b), n in sorted(pairs.items()):
        lines.append(f"  {a} (layer {LAYER.get(a)}) -> {b} (layer {LAYER.get(b)}): {n}")
        lines += [f"      {s} -> {d}  {where}" for s, d, where in edges if (package_of(s), package_of(d)) == (a, b)]
    return "\n".join(lines)


def test_the_parser_sees_imports_inside_functions_and_modules_named_in_from_imports():
    found = {m for m, _ in imports(PACKAGE / "cli.py")}
    assert "hybridrl.trainer.export" in found  # `from hybridrl.trainer.export import export` inside a function
    assert "hybridrl.progress" in {m for m, _ in imports(PACKAGE / "workers" / "update_loop.py")}  # `from hybridrl import progress`


def test_every_package_has_a_layer():
    assert not unknown_packages(), f"add these to LAYERS (with a line of why in the docstring): {unknown_packages()}"


def test_no_import_runs_up_the_layers():
    bad = [e for e in up_edges() if (e[0], e[1]) not in ALLOWED]
    assert not bad, "imports that run up the layers (move the code or the import):\n" + report(bad)


def test_the_allow_list_has_no_stale_entries():
    seen = {(s, d) for s, d, _ in up_edges()}
    assert not set(ALLOWED) - seen, f"remove these from ALLOWED: {sorted(set(ALLOWED) - seen)}"


def test_at_most_a_budget_of_package_level_up_arrows():
    pairs = {(package_of(s), package_of(d)) for s, d, _ in up_edges()}
    assert len(pairs) <= BUDGET, report(up_edges())


if __name__ == "__main__":
    print(report(up_edges()))
    if unknown_packages():
        print(f"packages without a layer: {sorted(unknown_packages())}")
    sys.exit(0)
