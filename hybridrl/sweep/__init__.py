"""`hybridrl sweep`: hyperparameter search over hybridrl runs with Ray Tune (issue #38, part 1).

spec.py reads the sweep file, space.py its search space, check.py checks both against the config schema,
resources.py derives how many trials run at once, trial.py runs one trial (an ordinary run), driver.py runs the
sweep, results.py reads a sweep folder back for `hybridrl compare`.
"""
