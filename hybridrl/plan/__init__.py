"""What a run does, resolved from its config once (plan/resolve.py): the batch plan, the micro-batch sizes left
null, precision, backend, placement, the memory estimate and the checks that need them. It reads config/ and the
models' facts; the roles, the workers and the trainer read the RunPlan it returns."""
