"""The worker process: one llama.cpp model, one scheduler thread, a ZeroMQ link to the gateway."""
