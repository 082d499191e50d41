"""`tb.compare(a, b)`: what changed between two compiled kernels' CUDA (or TIR, PTX, SASS), as a diff."""

from __future__ import annotations

import difflib
from typing import Any

# what -> the KernelArtifacts field that holds it
SOURCES = {"cuda": "cuda_source", "tir": "tir", "ptx": "ptx", "sass": "sass", "host": "host_source"}


def _artifacts(value: Any) -> Any:
    """KernelArtifacts of a Kernel, a CellResult (`-o VAR`) or a TuneResult's best kernel."""
    artifacts = getattr(value, "artifacts", None)
    if callable(artifacts):  # tilebench Kernel
        return artifacts()
    if artifacts is not None:  # CellResult
        return artifacts
    raise TypeError(
        f"compare() takes compiled kernels (kernel.compile(...)), %%tilelang results (-o VAR) or "
        f"source strings, not {type(value).__name__}"
    )


def _text(value: Any, what: str) -> tuple[str, str]:
    """(text, label) of one side."""
    if isinstance(value, str):
        return value, "a string"
    artifacts = _artifacts(value)
    if what == "ptx":
        artifacts.ensure_ptx()
    text = getattr(artifacts, SOURCES[what])
    if text is None:
        reason = artifacts.errors.get(what, "not produced for this target")
        raise ValueError(f"compare(): {artifacts.name} has no {what} ({reason})")
    return text, f"{artifacts.name} ({artifacts.target})"


class SourceDiff:
    """A unified diff of two kernels' sources; shows as a highlighted code view, `.text` is the diff."""

    def __init__(self, a: str, b: str, label_a: str, label_b: str, what: str, context: int) -> None:
        self.what = what
        lines = difflib.unified_diff(
            a.splitlines(), b.splitlines(), fromfile=label_a, tofile=label_b, n=context, lineterm=""
        )
        self.text = "\n".join(lines)
        body = [line for line in self.text.splitlines()[2:] if not line.startswith("@@")]
        self.added = sum(line.startswith("+") for line in body)
        self.removed = sum(line.startswith("-") for line in body)

    @property
    def identical(self) -> bool:
        return not self.text

    def summary(self) -> str:
        if self.identical:
            return f"the two {self.what} sources are identical"
        return f"{self.what}: {self.added} lines added, {self.removed} removed"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        from tilebench.views.code import CodeView  # late: loads IPython, anywidget, ipywidgets

        if self.identical:
            return {"text/plain": self.summary()}
        view = CodeView(self.text, "diff", title=self.summary())
        bundle = view._repr_mimebundle_(include=include, exclude=exclude) or {}
        if isinstance(bundle, tuple):  # anywidget answers (data, metadata)
            bundle = bundle[0]
        bundle = dict(bundle)
        bundle["text/plain"] = self.summary()
        return bundle

    def __repr__(self) -> str:
        return self.summary()


def compare(a: Any, b: Any, what: str = "cuda", context: int = 3) -> SourceDiff:
    """The diff from `a` to `b` of their `what` ("cuda", "tir", "ptx", "sass" or "host")."""
    if what not in SOURCES:
        raise ValueError(f"compare(): what must be one of {', '.join(SOURCES)}, not {what!r}")
    text_a, label_a = _text(a, what)
    text_b, label_b = _text(b, what)
    if label_a == label_b:
        label_a, label_b = f"a: {label_a}", f"b: {label_b}"
    return SourceDiff(text_a, text_b, label_a, label_b, what, context)
