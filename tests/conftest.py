"""Every test run uses its own tilebench cache folder, never the user's ~/.cache/tilebench."""

import os
import tempfile

os.environ.setdefault(
    "TILEBENCH_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"tilebench-tests-{os.getuid()}")
)
os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")
os.environ.setdefault("TILELANG_PRINT_ON_COMPILATION", "0")
