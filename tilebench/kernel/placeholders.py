"""Stand-ins for tensors and pointers, so kernels compile without allocating anything."""

from __future__ import annotations

from typing import Any


def _torch_dtype(dtype: Any) -> Any:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str):
        resolved = getattr(torch, dtype.removeprefix("torch."), None)
        if isinstance(resolved, torch.dtype):
            return resolved
    raise TypeError(f"dtype must be a torch.dtype or its name such as 'float16', got {dtype!r}")


class Placeholder:
    """The shape, dtype and strides of a tensor, with no storage: `tb.place(1024, 512, dtype=torch.float16)`.

    It compiles like a tensor of that shape; calling a kernel with one raises TypeError.
    """

    __slots__ = ("shape", "dtype", "_strides", "device")

    def __init__(
        self,
        *shape: int,
        dtype: Any = "float32",
        strides: tuple[int, ...] | None = None,
        device: str = "cuda",
    ) -> None:
        import torch

        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise TypeError(f"place() takes non-negative int dimensions, got {shape!r}")
        self.shape = torch.Size(shape)
        self.dtype = _torch_dtype(dtype)
        if strides is None:
            strides, step = [], 1
            for dim in reversed(shape):
                strides.append(step)
                step *= max(dim, 1)
            strides = tuple(reversed(strides))
        elif len(strides) != len(shape):
            raise ValueError(
                f"place(): strides {strides!r} do not match the {len(shape)} dimensions of {shape!r}"
            )
        self._strides = tuple(strides)
        self.device = torch.device(device)

    def stride(self, dim: int | None = None) -> Any:
        return self._strides if dim is None else self._strides[dim]

    def dim(self) -> int:
        return len(self.shape)

    ndim = property(dim)

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def is_contiguous(self) -> bool:
        return self._strides == Placeholder(*self.shape, dtype=self.dtype).stride()

    def data_ptr(self) -> int:
        raise TypeError(f"{self!r} is a placeholder: it has no data. Pass a torch.Tensor to run the kernel.")

    def __repr__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        strides = "" if self.is_contiguous() else f", strides={self._strides}"
        return f"tb.place({dims}, dtype={self.dtype}{strides})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Placeholder) and (self.shape, self.dtype, self._strides) == (
            other.shape,
            other.dtype,
            other._strides,
        )

    def __hash__(self) -> int:
        return hash((tuple(self.shape), self.dtype, self._strides))


class EmptyDataPtr(int):
    """A null pointer argument for `T.ptr` parameters: compiles, refuses to run."""

    def __new__(cls) -> EmptyDataPtr:
        return super().__new__(cls, 0)

    def __repr__(self) -> str:
        return "tb.empty_data_ptr()"


def place(*shape: int, dtype: Any = "float32", strides: tuple[int, ...] | None = None) -> Placeholder:
    """A tensor placeholder: compile for this shape and dtype without allocating memory."""
    return Placeholder(*shape, dtype=dtype, strides=strides)


def empty_data_ptr() -> EmptyDataPtr:
    """A placeholder for a pointer argument (`T.ptr`)."""
    return EmptyDataPtr()


def is_placeholder(value: Any) -> bool:
    if isinstance(value, (Placeholder, EmptyDataPtr)):
        return True
    # T.Tensor((M, N), dtype) outside a kernel is a TVM Buffer: tilelang's examples use it as a placeholder too.
    return type(value).__name__ == "Buffer" and type(value).__module__.startswith("tvm")
