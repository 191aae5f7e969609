"""Lowering to ExecuTorch programs, and the runtime contract they expose."""
