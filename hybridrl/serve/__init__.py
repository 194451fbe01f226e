"""`hybridrl serve`: an OpenAI-compatible HTTP server for a model or checkpoint (FastAPI + uvicorn).

protocol.py (request bodies, errors) -> requests.py (limits, what to generate) -> service.py (the
worker thread and per-request queues) -> backend.py, hf.py / vllm.py (generation) -> jobs.py and
text.py (tokens to streamed text) -> responses.py (OpenAI bodies and SSE chunks); logprobs.py (log-probs
from logits, in OpenAI's shapes), tools.py (tool calls in and out) and metrics.py (/metrics counters)
serve them; app.py wires the routes, build.py and cli.py the command.
"""
