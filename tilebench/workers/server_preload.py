"""Imported by the compile server before it forks any worker: NVRTC's PCH heap placed first, then tilelang,
and the precompiled headers of the kernels compiled last, loaded once for all of them."""

import contextlib
import os

from tilebench.compiler import headers, nvrtc
from tilebench.workers import server

with contextlib.suppress(Exception):  # a broken install shows up in the first compile's outcome instead
    headers.pin_heap()  # before tilelang and torch map anything: see headers.py
    # started ahead of the compiles (warm_up): make what is missing; else only load a kept PCH (0.2 s)
    make = os.environ.get(server.PREBUILD_ENV) == "1"
    guess = headers.speculate(make)  # the likely PCH, made while tilelang imports
    from tilebench.compiler.runtime import tilelang

    tilelang()
    nvrtc.usable()  # loads libnvrtc and reads the toolkit's version once, before the forks
    headers.prebuild(make, guess)
