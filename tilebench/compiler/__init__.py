"""The compiler layer: tilelang to a binary (targets, options, build, NVRTC and precompiled headers, the
kernel cache, the launcher, compile requests as plain data).

With inspect/ (reading what was built), compat/ (tilelang's user surface) and templates/ (kernels in the
DSL), it is one of the four places that import tilelang or TVM (pyproject.toml's import-linter contract).
Everything above sees plain data: targets as dicts, artifacts as dataclasses, kernels behind a launcher.
"""
