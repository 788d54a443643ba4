"""Two ways to ask jevfleet, below the commands and the measurements that use them: in this
process (local.py: the gateway's request path in front of a worker's engine, what `jevfleet
decide`, `eval` and `calibrate` run) and over HTTP as a plain client does (net.py)."""
