"""The %%tilelang cell magic: run a cell, find its kernels, compile, show the panel."""
