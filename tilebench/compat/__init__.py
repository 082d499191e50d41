"""tilelang's user surface on tilebench's objects: `tb.jit` with tuning (jit.py), adopting tilelang's jit
and autotune objects (adopt.py), `autotune` and the tuning calls (tuning.py, sessions.py: which executor,
which dashboard), tilelang's `AutoTuner` class (autotuner.py), and tilelang as a %%tilelang cell sees it
(scope.py). The compiled kernel's own tilelang API (JITKernel methods, the profiler) is the JIT front's:
kernel/tilelang_api.py and kernel/profiler.py."""
