"""Build hook: compile tilebench's C key parser (tilebench/kernel/_keyparse.c) into the wheel.

Runs for `pip install .` and `pip install -e .`. Without a C compiler or Python's headers the
install goes on with a warning, and tilebench uses the Python key parser instead.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class NativeBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        path = Path(self.root) / "tilebench" / "kernel" / "native.py"
        spec = importlib.util.spec_from_file_location("tilebench_native_build", path)
        assert spec is not None and spec.loader is not None
        native = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(native)  # standard library only: tilebench's dependencies are not here yet
        try:
            built = native.build()
        except RuntimeError as exc:
            self.app.display_warning(f"tilebench: the C key parser is not built ({exc}); Python's serves")
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":  # an editable install imports it from the source tree
            build_data["force_include"][str(built)] = f"tilebench/kernel/{built.name}"
