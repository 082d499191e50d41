"""Run notebooks/*.ipynb top to bottom and store them as nbval checks them.

Cells tagged `nbval-ignore-output` (timings, widgets, anything that differs between a GPU and
compile-only run) are stored without outputs; the other cells keep theirs, which nbval compares on the
next run. Widget state is never stored. Run it after editing a notebook: `make notebooks`.

usage: python scripts/refresh_notebooks.py [NOTEBOOK ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

IGNORE = "nbval-ignore-output"
ROOT = Path(__file__).resolve().parent.parent


def refresh(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    started = time.monotonic()
    NotebookClient(
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        if IGNORE in cell.metadata.get("tags", []):
            cell.outputs = []
    notebook.metadata.pop("widgets", None)
    nbformat.write(notebook, path)
    print(f"{path.name}: ran in {time.monotonic() - started:.0f} s, stored")


def main(argv: list[str]) -> int:
    paths = [Path(p) for p in argv] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in paths:
        refresh(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
