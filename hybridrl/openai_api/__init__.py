"""The OpenAI API as `hybridrl serve` and the agent rollout proxy both speak it, written once.

protocol.py: the request bodies (pydantic) and OpenAI-style errors; responses.py: the fields every body and
streamed chunk repeats, chunks, server-sent events and usage; logprobs.py: log-probs written as OpenAI writes
them; tools.py: a model turn split into OpenAI `tool_calls`, and a history rendered for the chat template;
hermes.py: the Hermes `<tool_call>` blocks models write (the rollout's multi-turn tools read them too).

Nothing here imports serve, rollout or the trainer: both apps build on it.
"""
