"""`hybridrl check`: the invariants of a correct run, proved on the user's own config, data, reward and model
architecture (a shrunk twin), before the run spends GPU hours. One module per check (registry.py lists them);
runner.py runs them, report.py prints the ✓ / ✗ / – report."""
