"""The names `trainer.logger` takes and the check that each one can run here (its optional package installed),
made when the config is checked; trainer/tracking.py builds the loggers by these names."""

from __future__ import annotations

import importlib.util
import os

from hybridrl.errors import ConfigError

LOGGERS = ("console", "file", "tensorboard", "wandb", "mlflow")
# logger -> (module it needs, the pip package that provides it)
OPTIONAL = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb"),
            "mlflow": ("mlflow", "mlflow-skinny")}


def check_loggers(loggers: list[str]) -> None:
    """Unknown names and missing optional packages, before anything is loaded or trained."""
    for name in loggers:
        if name not in LOGGERS:
            raise ConfigError(f"trainer.logger={name!r} is not supported; valid values: {', '.join(LOGGERS)}")
        if name in OPTIONAL and importlib.util.find_spec(OPTIONAL[name][0]) is None:
            raise ConfigError(f"trainer.logger includes {name}, but the {OPTIONAL[name][1]} package is not installed: "
                              f"pip install {OPTIONAL[name][1]} (or pip install 'hybridrl[tracking]'), or drop {name} "
                              "from trainer.logger")
        if name == "mlflow" and not os.environ.get("MLFLOW_TRACKING_URI"):
            missing = [m for m in ("sqlalchemy", "alembic") if importlib.util.find_spec(m) is None]
            if missing:
                raise ConfigError(f"trainer.logger includes mlflow with its default local store (<run folder>/"
                                  f"mlflow.db), which needs {' and '.join(missing)}: pip install {' '.join(missing)} "
                                  "(or pip install 'hybridrl[tracking]'), or set MLFLOW_TRACKING_URI to your "
                                  "tracking server")
