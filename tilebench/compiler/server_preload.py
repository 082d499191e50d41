"""Imported by the compile server before it forks any worker: tilelang, NVRTC and the precompiled headers of
the kernels compiled last, loaded once for all of them."""

import contextlib

from tilebench.compiler import nvrtc
from tilebench.compiler.runtime import tilelang

with contextlib.suppress(Exception):  # a broken install shows up in the first compile's outcome instead
    tilelang()
    nvrtc.usable()  # loads libnvrtc and reads the toolkit's version once, before the forks
    nvrtc.prebuild()  # the workers forked from here inherit it
