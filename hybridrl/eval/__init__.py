"""Evaluation: sample-based metrics (pass@k, best/worst@k, maj@k) and diversity."""
