"""The tuner: benchmark candidate configs of a kernel in crash-isolated worker processes, one per GPU.

``bench_job`` holds the picklable job and result types and the code that runs inside a worker;
``bench_worker`` holds the process handling (spawn, timeout, kill, respawn).
"""
