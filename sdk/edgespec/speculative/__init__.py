"""Speculative Streaming: multi-stream attention, draft trees, verification, training, baselines."""
