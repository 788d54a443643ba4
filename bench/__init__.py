"""Benchmarks: scripts printing figures measured side by side in one run."""
