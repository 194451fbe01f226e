"""`hybridrl serve` settings and their checks (no heavy imports: the CLI parser reads the defaults)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional

from hybridrl.config.schema import SEED_MAX
from hybridrl.errors import raise_all

ENGINES = ("auto", "hf", "vllm")
DTYPES = ("float32", "bfloat16")  # weights dtype (torch names)
CONTEXT_CAP = 4096  # default --max-model-len: the model's context, at most this


@dataclass(frozen=True)
class ServeSettings:
    model: str  # HF folder, bundled name, run folder or global_step_<N> folder
    host: str = "127.0.0.1"
    port: int = 8000
    engine: str = "auto"  # auto: vllm when importable, else hf
    served_model_name: Optional[str] = None  # None: the folder's name
    api_key: Optional[str] = None
    seed: int = 0
    dtype: str = "float32"
    max_num_seqs: int = 32  # responses generated together
    max_model_len: Optional[int] = None  # None: min(max_position_embeddings, CONTEXT_CAP)
    max_tokens_limit: int = 1024
    max_n: int = 8
    max_body_bytes: int = 1 << 20
    threads: Optional[int] = None  # torch CPU threads of the hf engine; None: torch's default
    allow_no_api_key: bool = False  # --allow-no-api-key: a non-loopback --host without a key, knowingly


def check_settings(s: ServeSettings) -> None:
    """Every bad flag at once (errors.ConfigErrors), each line naming the flag."""
    problems = [
        (not 0 <= s.port <= 65535, f"--port {s.port}: give 0 to 65535"),
        (not 0 <= s.seed <= SEED_MAX, f"--seed {s.seed}: give 0 to {SEED_MAX}"),
        (s.engine not in ENGINES, f"--engine {s.engine}: give one of {', '.join(ENGINES)}"),
        (s.dtype not in DTYPES, f"--dtype {s.dtype}: give one of {', '.join(DTYPES)}"),
        (s.max_num_seqs < 1, f"--max-num-seqs {s.max_num_seqs}: give at least 1"),
        (s.max_model_len is not None and s.max_model_len < 2, f"--max-model-len {s.max_model_len}: give at least 2"),
        (s.max_tokens_limit < 1, f"--max-tokens-limit {s.max_tokens_limit}: give at least 1"),
        (s.max_n < 1, f"--max-n {s.max_n}: give at least 1"),
        (s.max_body_bytes < 1024, f"--max-body-bytes {s.max_body_bytes}: give at least 1024"),
        (s.threads is not None and s.threads < 1, f"--threads {s.threads}: give at least 1"),
        (s.api_key is not None and not s.api_key.strip(), "--api-key: give a non-empty key"),
        (s.served_model_name is not None and not s.served_model_name.strip(),
         "--served-model-name: give a non-empty name"),
        (open_by_accident(s.host, s.api_key, s.allow_no_api_key), exposure_error(s.host, "use the model")),
    ]
    raise_all([message for bad, message in problems if bad])  # every bad flag at once


# The binding rule of every hybridrl server that can listen beyond this machine (serve, view): an address other
# machines can reach needs an API key, or --allow-no-api-key saying the opening is meant. Servers that only ever
# bind loopback (the agent proxy of a run) take no --host at all.
ALLOW_FLAG = "--allow-no-api-key"


def open_by_accident(host: str, api_key: Optional[str], allowed: bool) -> bool:
    return not is_loopback(host) and api_key is None and not allowed


def exposure_error(host: str, what: str) -> str:
    return (f"--host {host}: an address other machines can reach, and no API key: anyone who reaches it could {what}; "
            f"set --api-key KEY (or $HYBRIDRL_API_KEY), bind 127.0.0.1, or pass {ALLOW_FLAG} if that is meant")


def exposure_warning(host: str, api_key: Optional[str], what: str) -> Optional[str]:
    """The line a server prints at start when it listens beyond loopback without a key (allowed by the flag)."""
    if not open_by_accident(host, api_key, allowed=False):
        return None
    return f"warning: serving {host} without an API key ({ALLOW_FLAG}): anyone who can reach it can {what}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False
