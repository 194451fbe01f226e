"""Model types (`model_type` in a model's config.json) whose decoder is Llama-shaped (RMSNorm, rotary
attention with grouped-query heads, SwiGLU MLP): rollout/decode.py's lean decode runs them, and
plan/memory_phases.py counts its buffers for them. A leaf: it imports nothing."""

FAMILY = ("qwen2", "llama", "mistral")
