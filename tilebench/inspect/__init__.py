"""What a compiled kernel holds, read without running it: TIR, CUDA, PTX and SASS, the cubin's resources,
occupancy, the layouts tilelang chose, and the source lines of TIR statements."""
