"""The compiler layer: the only package that touches tilelang and TVM internals.

Everything above it (kernel front, tuner, views) sees plain data: targets as dicts,
artifacts as dataclasses, compiled kernels behind a small launcher.
"""
