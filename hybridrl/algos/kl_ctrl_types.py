"""algorithm.kl_ctrl.type's valid values, apart from the controller (algos/kl_ctrl.py): config/schema.py declares
the key with them, and importing the controller would load torch for every config (`hybridrl plan`, `--help`)."""

KL_CTRL_TYPES = ("fixed", "adaptive")
