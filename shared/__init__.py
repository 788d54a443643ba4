"""Code both sides of the fleet use: gateway↔worker messages, configuration, model profiles."""
