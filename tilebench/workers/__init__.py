"""The processes tilebench starts: one supervisor (supervisor.py) under the compile pool (pool.py, workers
forked from the compile server, server.py) and the benchmark worker of each GPU (bench.py); their start
written once (warm.py); par_compile (parallel.py) and the panel's Run (trial.py) on top of them."""
