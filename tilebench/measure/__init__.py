"""One way to measure a kernel: inputs, the check against a reference, the timer and one `Measurement`
type with one status vocabulary, shared by the panel's Run tab, `kernel.bench`, `tb.bench`, the
tilelang-compatible profiler and the tuner.

``job`` is the picklable job (it runs in the isolated benchmark worker, or in-process on request),
``worker`` the process that runs jobs for one GPU, ``timer`` the CUDA-event timer, ``check`` the
comparison, ``inputs`` the input supply, ``result`` the Measurement, ``trial`` the panel's Run.
"""
