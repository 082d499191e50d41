"""benchmarks/_hopper_kernels.py for the tests, loaded by its path.

benchmarks/ itself stays off sys.path: the benchmark workers the tests spawn inherit sys.path, and there
benchmarks/kernels.py would shadow tests/cpu/kernels.py (their jobs then fail to load).
"""

import importlib.util
import sys
from pathlib import Path

NAME = "_hopper_kernels"
PATH = Path(__file__).resolve().parents[1] / "benchmarks" / f"{NAME}.py"


def load():
    """The module, imported once per process."""
    if NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(NAME, PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[NAME] = module
        spec.loader.exec_module(module)
    return sys.modules[NAME]
