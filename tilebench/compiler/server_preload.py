"""Imported by the compile server before it forks any worker: tilelang, NVRTC and the precompiled headers of
the kernels compiled last, loaded once for all of them."""

import contextlib
import os

from tilebench.compiler import nvrtc, server
from tilebench.compiler.runtime import tilelang

with contextlib.suppress(Exception):  # a broken install shows up in the first compile's outcome instead
    tilelang()
    nvrtc.usable()  # loads libnvrtc and reads the toolkit's version once, before the forks
    if os.environ.get(server.PREBUILD_ENV) == "1":  # started ahead of the compiles, by warm_up
        nvrtc.prebuild()  # the workers forked from here inherit it
