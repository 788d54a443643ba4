"""The harness: how tests, benchmarks (bench/) and load sweeps (loadtest/) start jevfleet, reach
it and measure it, written once for all of them.

    fleet.py            a real fleet (`jevfleet serve` → supervisord) in a run directory: start,
                        wait on /health, supervisorctl, logs, stop
    processes.py        waiting for a condition with a deadline; stopping processes we started
    load.py             decision payloads, distinct states, a closed loop of client threads,
                        what /health and /proc say about a fleet
    stats.py            the one percentile
    engine.py           the model as a worker finds it and an engine as a worker builds it
    netns.py, hosts.py  network namespaces as hosts on one bridge, each running parts of a fleet
                        (the chaos run, loadtest/chaos.py, and the multi-host tests use them)
    scripted_worker.py  a stand-in worker for tests and the gateway benchmarks: real ZeroMQ and
                        real messages, answers made up, no model

HTTP as a plain client speaks it is client/net.py, a layer lower, since quality/ uses it too.
It is a tool around the product, never part of it: `jevfleet serve`, the gateway, the workers
and `jevfleet decide` do not import it (tests/test_harness.py checks).
"""
