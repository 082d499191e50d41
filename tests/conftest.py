"""Every test run uses its own tilebench cache folder, never the user's ~/.cache/tilebench; `ip` is the
IPython shell the magic tests drive."""

import os
import tempfile

import pytest

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


@pytest.fixture(scope="module")
def ip():
    """The process's IPython test shell with tilebench loaded (one shell per process: start_ipython
    returns None to later callers, get_ipython gives it)."""
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "tilebench")
    return shell
