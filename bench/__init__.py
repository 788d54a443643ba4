"""Benchmarks: scripts that print tables of figures measured in one run (not run by tests)."""
