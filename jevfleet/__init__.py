"""jevfleet: a horizontally scaled, local LLM decision engine (command-line entry points)."""
