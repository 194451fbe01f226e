"""The generation-backend role of the server: take jobs from the inbox and generate them.

Backends are sibling modules: hf.py (the model in this process, dynamic batches) and vllm.py
(vLLM's engine with its own continuous batching). `serve` is the body of the single worker
thread that owns the model; the HTTP side only ever touches the inbox and the jobs' queues.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from hybridrl.serve.jobs import Inbox


class Backend(ABC):
    name: str  # "hf" | "vllm"

    @abstractmethod
    def serve(self, inbox: Inbox) -> None:
        """Generate the inbox's jobs until it closes (runs in the worker thread). A failure of one batch
        fails its jobs (jobs.run_guarded) and the loop goes on."""

    def close(self) -> None:
        """Free what the backend holds outside this process (vLLM's engine process)."""
