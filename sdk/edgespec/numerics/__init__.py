"""Numerics for low precision: float formats, pre-normalizer theory, stable norm layers."""
