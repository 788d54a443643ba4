"""The worker process: one llama.cpp model, one model thread (worker/model_thread.py) that makes
every llama.cpp call, a ZeroMQ link to the gateway."""
