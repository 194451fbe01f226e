"""Agent rollouts through an OpenAI-compatible proxy (issue #36 part 2): an agent's chat completions are generated
by the rollout engine and recorded token-exactly as one training sample (recorder.py)."""
