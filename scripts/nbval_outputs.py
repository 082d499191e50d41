"""A pytest plugin for nbval runs: writes each cell's text outputs to $NBVAL_OUTPUTS (Markdown), so a GPU
run's results (timings, TFLOP/s, checks against torch) are kept; nbval itself only compares them.

usage: NBVAL_OUTPUTS=out.md python -m pytest -p nbval_outputs --nbval notebooks/*.ipynb
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _text(output: dict[str, Any]) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}\n"
    plain = output.get("data", {}).get("text/plain", "")
    return plain if plain.endswith("\n") or not plain else plain + "\n"


def pytest_runtest_teardown(item: Any) -> None:
    path = os.environ.get("NBVAL_OUTPUTS")
    outputs = getattr(item, "test_outputs", None)
    if not path or not outputs:
        return
    text = "".join(_text(output) for output in outputs).strip()
    if text:
        with Path(path).open("a") as out:
            out.write(f"### {item.nodeid}\n```\n{text}\n```\n\n")
