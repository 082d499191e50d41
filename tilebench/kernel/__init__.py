"""The JIT front: kernel objects, dispatch, placeholders and the kernel cache."""
