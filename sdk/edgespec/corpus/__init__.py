"""Corpora: prompt suites from installed packages and self-distilled training data."""
