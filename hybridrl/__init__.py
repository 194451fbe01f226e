"""hybridrl: reinforcement-learning post-training for LLMs, from a laptop CPU to a cluster."""

__version__ = "0.1.0"
