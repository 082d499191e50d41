"""Where the CUDA toolkit's binaries are, and which nvcc tilelang compiles with."""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import sysconfig

from tilebench.compiler.environment import prepare_environment

NONE = "none"


def find_cuda_tool(name: str) -> str | None:
    """A CUDA binary on PATH, else under $CUDA_HOME/bin or /usr/local/cuda/bin, else in NVIDIA's wheels
    (`pip install nvidia-cuda-nvdisasm` puts nvdisasm in site-packages/nvidia/cu13/bin)."""
    found = shutil.which(name)
    if found:
        return found
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    folders = [os.path.join(home, "bin") for home in homes if home]
    folders += sorted(glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "cu*", "bin")))
    for folder in folders:
        candidate = os.path.join(folder, name)
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@functools.cache
def nvcc_version() -> str:
    """The version of the nvcc tilelang compiles with ("V13.0.88"); "none" when there is none. Asked once
    a process (30 ms): the tuning key holds it, and warming up asks early."""
    prepare_environment()  # CUDA_HOME as tilelang sees it
    nvcc = find_cuda_tool("nvcc")
    if nvcc is None:
        return NONE
    try:
        done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    found = re.search(r"\bV(\d+(?:\.\d+)+)", done.stdout)
    return f"V{found.group(1)}" if found else "unknown"
