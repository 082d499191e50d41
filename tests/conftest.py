"""Every test run uses its own tilebench cache folder, never the user's ~/.cache/tilebench."""

import os
import tempfile

os.environ.setdefault(
    "TILEBENCH_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"tilebench-tests-{os.getuid()}")
)
os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")
os.environ.setdefault("TILELANG_PRINT_ON_COMPILATION", "0")
# Which compiles find a precompiled header would otherwise depend on which test started the process's
# compile server; the test of the prebuild turns it on for the processes it starts.
os.environ.setdefault("TILEBENCH_PREBUILD_HEADERS", "0")
# `import tilebench` starts no compile server in the test processes: tests start it where they need it.
os.environ.setdefault("TILEBENCH_START_SERVER", "0")
