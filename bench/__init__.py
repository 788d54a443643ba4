"""Benchmarks: scripts that print tables of figures measured side by side in one run (never run by tests)."""
