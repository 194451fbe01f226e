"""The role builders sit below both of their callers: the one-process run (trainer/build.py) and the
Ray worker processes (distributed/). Neither the builders nor the Ray side may import the trainer's
assembly, even inside a function, or the old circle trainer.build -> distributed.group ->
distributed.worker -> trainer.build comes back."""

import ast
from pathlib import Path

import hybridrl

PACKAGE = Path(hybridrl.__file__).parent
BELOW_THE_RUN = ["workers/build.py", "distributed/group.py", "distributed/worker.py"]


def imported_modules(path: Path) -> set[str]:
    """Every hybridrl module `path` imports, at the top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("hybridrl")}


def test_role_builders_and_the_ray_side_never_import_the_run_assembly():
    for rel in BELOW_THE_RUN:
        assert "hybridrl.trainer.build" not in imported_modules(PACKAGE / rel), rel


def test_the_run_assembly_builds_roles_through_the_builders():
    assert "hybridrl.workers.build" in imported_modules(PACKAGE / "trainer" / "build.py")
    assert "hybridrl.workers.build" in imported_modules(PACKAGE / "distributed" / "worker.py")


def test_scorer_modules_register_into_the_leaf_registry_not_their_package():
    """The package imports its scorer modules to fill SCORERS; a module importing the package back was a circle."""
    scorers = PACKAGE / "rewards" / "scorers"
    for path in sorted(scorers.glob("*.py")):
        if path.name not in ("__init__.py", "registry.py"):
            assert "hybridrl.rewards.scorers" not in imported_modules(path), path.name
    assert imported_modules(scorers / "registry.py") == {"hybridrl.registry"}


def test_which_roles_a_config_builds_is_decided_below_the_checks():
    """plan/roles.py (needs_critic, needs_reference, critic_batch_plan, policy_loss_params) reads only the
    schema, the batch plan and two pure registries of algos/; the derivation and the memory estimate import it
    instead of the checks or resolve.py, which import them."""
    plan = PACKAGE / "plan"
    assert imported_modules(plan / "roles.py") <= {"hybridrl.algos.advantages", "hybridrl.algos.policy_losses",
                                                   "hybridrl.plan.batch_plan", "hybridrl.config.schema"}
    for name in ("derive.py", "memory.py", "memory_fixes.py"):
        assert not {"hybridrl.plan.checks", "hybridrl.plan.resolve"} & imported_modules(plan / name), name


def test_the_memory_check_sits_above_the_estimate_and_the_derivation():
    """memory.py estimates; memory_fixes.py checks the estimate and proposes fixes (check_memory) and fits derived
    sizes; derive.py calls it. Neither the estimate nor the fixes import back the modules above them."""
    plan = PACKAGE / "plan"
    assert "hybridrl.plan.memory_fixes" not in imported_modules(plan / "memory.py")
    assert "hybridrl.plan.derive" not in imported_modules(plan / "memory_fixes.py")


def test_tool_classes_and_the_built_ins_never_import_the_config_loader():
    """tools/loading.py reads the tool config and imports the built-ins to register them; base.py (the Tool
    class and registry) and the built-in tools below it never import it or each other's importer."""
    tools = PACKAGE / "rollout" / "tools"
    for name in ("base.py", "calculator.py", "sandbox.py"):
        assert not {"hybridrl.rollout.tools.loading", "hybridrl.rollout.tools"} & imported_modules(tools / name), name


def test_the_timeline_recorder_imports_nothing_of_hybridrl():
    """Worker processes of any pool import it beside their roles; it must not pull in the trainer (or torch)."""
    assert imported_modules(PACKAGE / "timeline.py") == set()


def test_the_vocabulary_sits_below_the_config_and_the_config_below_its_plan():
    """vocab/ (other frameworks' words) imports nothing of config/ or above; config/ (keys, loading, key checks)
    imports only the leaf modules, algos/ and vocab/: resolving a config into a run is plan/'s."""
    for path in sorted((PACKAGE / "vocab").glob("*.py")):
        assert {m.split(".")[1] for m in imported_modules(path)} <= {"errors", "vocab"}, path.name
    below_config = {"errors", "registry", "paths", "batch", "batching", "user_code", "algos", "vocab", "config"}
    for path in sorted((PACKAGE / "config").glob("*.py")):  # (the `auto` precision keys are plan.resolve's too)
        assert {m.split(".")[1] for m in imported_modules(path)} <= below_config, path.name
