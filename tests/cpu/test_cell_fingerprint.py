"""The cell cache fingerprints what a %%tilelang cell reads by content: containers of any size, strings of any
length, big ints, dicts, tensors changed in place, functions and the globals they read, the magic line's
names. What it cannot fingerprint makes the cell run again, and the cell says why. Real cells in a real
IPython shell (compile-only), and cell_key itself."""

import time

import numpy as np
import pytest
import torch
from IPython import get_ipython
from IPython.testing.globalipapp import start_ipython
from magic_cells import LAZY_AND_PRIM

from tilebench.magic.fingerprint import CellMemory, cell_key

# The cell reads one global through `{read}` at top level and defines a fixed kernel; `picked` is what it read.
CELL = """
picked = {read}


@T.prim_func
def fill(X: T.Tensor((4096,), "float32")):
    with T.Kernel(4, threads=128) as bx:
        for i in T.Parallel(1024):
            X[bx * 1024 + i] = 1.0
"""


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()  # the test shell is one per process: later callers get None
    shell.run_line_magic("load_ext", "tilebench")
    return shell


def run(ip, read: str, line: str = "--no-run -o res"):
    ip.run_cell_magic("tilelang", line, CELL.format(read=read))
    return ip.user_ns["res"], ip.user_ns["picked"]


def check_change(ip, setup: str, read: str, change: str, before, after):
    """Run the cell, again (answered from memory), then after `change`: it runs, and reads the new value."""
    ip.run_cell(setup)
    first, picked = run(ip, read)
    assert not first.cached and picked == before
    again, picked = run(ip, read)
    assert again.cached and picked == before
    assert ip.run_cell(change).success
    changed, picked = run(ip, read)
    assert not changed.cached and picked == after
    assert "(cached)" not in changed.summary()


@pytest.mark.parametrize(
    "setup, read, change, before, after",
    [
        ("cfg = list(range(71))", "cfg[0]", "cfg[0] = 64", 0, 64),
        ("deep = [[list(range(100))] * 3, {'k': [1, 2]}]", "deep[1]['k'][1]", "deep[1]['k'][1] = 7", 2, 7),
        ("text = 'a' * 1500", "text[-1]", "text = 'a' * 1499 + 'b'", "a", "b"),
        ("big = 10 ** 5000 + 1", "big % 10", "big += 2", 1, 3),
        ("table = {f'k{i}': i for i in range(100)}", "table['k99']", "table['k99'] = -1", 99, -1),
        ("pairs = {(i, str(i)) for i in range(80)}", "len(pairs)", "pairs.add((80, '80'))", 80, 81),
        ("X = torch.zeros(8)", "float(X[0])", "X[0] = 5", 0.0, 5.0),
        ("Y = torch.zeros(1 << 20)", "float(Y[7])", "Y.add_(2)", 0.0, 2.0),  # 4 MiB: by version counter
        ("Z = np.zeros(300)", "float(Z[299])", "Z[299] = 3", 0.0, 3.0),
        ("ws = [10, 20]\ndef helper():\n    return ws[1]\n", "helper()", "ws[1] = 30", 20, 30),
    ],
    ids=["list71", "nested", "long-string", "5000-digit-int", "dict100", "set", "tensor", "big-tensor",
         "numpy", "function-reads"],
)  # fmt: skip
def test_a_change_to_what_the_cell_reads_runs_it_again(ip, setup, read, change, before, after):
    ip.run_cell("import numpy as np")
    check_change(ip, setup, read, change, before, after)


def test_an_unfingerprintable_global_runs_the_cell_again_and_says_why(ip):
    ip.run_cell("class Foo:\n    pass\n\nobj = Foo()\n")
    for _ in range(2):
        result, picked = run(ip, "obj")
        assert not result.cached and picked is ip.user_ns["obj"]
        assert "re-run: cannot fingerprint global `obj` (a Foo)" in result.summary()
    ip.run_cell("held = {'kernels': [Foo()]}")
    result, _ = run(ip, "held")
    assert "re-run: cannot fingerprint global `held['kernels'][0]` (a Foo)" in result.summary()
    ip.run_cell("huge = np.zeros(2 << 20)")  # 16 MiB of numpy: no version counter, too big to hash
    result, _ = run(ip, "huge.shape")
    assert not result.cached and "cannot fingerprint global `huge` (a numpy array of 16.0 MiB" in result.note


def test_the_magic_lines_names_are_fingerprinted_too(ip):
    ip.run_cell("sizes = [4096]")
    line = "-k vector_add sizes[0] --no-run -o lazy"
    ip.run_cell_magic("tilelang", line, LAZY_AND_PRIM)
    ip.run_cell_magic("tilelang", line, LAZY_AND_PRIM)
    assert ip.user_ns["lazy"].cached
    ip.run_cell("sizes[0] = 2048")
    ip.run_cell_magic("tilelang", line, LAZY_AND_PRIM)
    assert not ip.user_ns["lazy"].cached and ip.user_ns["lazy"].kernel.specs[0].shape == (2048,)


def key(namespace, names=None):
    return cell_key("cell", "", "target", names or set(namespace), namespace)


def test_equal_content_is_one_key_and_any_change_another():
    base = {"a": list(range(200)), "s": "x" * 5000, "d": {i: [i] for i in range(100)}, "n": 10**5000}
    same = {"a": list(range(200)), "s": "x" * 5000, "d": {i: [i] for i in range(100)}, "n": 10**5000}
    assert key(base) == key(same) and key(base).reason is None
    assert key({"e": {3, 1, 2}}) == key({"e": {2, 3, 1}})  # a set in any order
    for name, value in [("a", [*range(199), 0]), ("s", "x" * 4999 + "y"), ("n", 10**5000 + 1)]:
        assert key({**base, name: value}) != key(base), name
    assert key({"v": [1, 2, 3]}) != key({"v": (1, 2, 3)}) != key({"v": [1.0, 2.0, 3.0]})
    assert key({"v": [True] * 9}) != key({"v": [1] * 9})
    loop = [1]
    loop.append(loop)
    assert key({"loop": loop}).reason is None  # a cycle ends


def test_a_function_is_its_code_defaults_closure_and_reads():
    namespace: dict = {"cfg": [0], "cfg2": [1]}
    exec("def f(x=cfg):\n    return cfg2[0] + x[0]\n", namespace)
    first = key(namespace, {"f"})
    namespace["cfg2"][0] = 2
    assert key(namespace, {"f"}) != first
    namespace["f"].__defaults__ = ([5],)
    assert key(namespace, {"f"}) != first


def test_tensors_and_arrays():
    small, big = torch.zeros(16), torch.zeros(1 << 16)
    namespace = {"small": small, "big": big}
    first = key(namespace)
    small.numpy()[3] = 1  # a write torch's version counter does not see: the bytes do
    second = key(namespace)
    assert second != first
    big[0] = 1
    assert key(namespace) != second
    assert key({"t": torch.zeros(4, 4)}) != key({"t": torch.zeros(4, 4).t()}) != key({"t": torch.zeros(16)})
    assert key({"a": np.arange(10)}) == key({"a": np.arange(10)}) != key({"a": np.arange(10.0)})
    with torch.inference_mode():
        frozen = torch.zeros(1 << 20)
    assert "inference-mode tensor" in key({"frozen": frozen}).reason


def test_a_key_with_a_reason_is_never_answered_nor_kept():
    memory = CellMemory()
    refused = key({"obj": object()})
    assert refused.reason == "re-run: cannot fingerprint global `obj` (an object)"

    class Result:
        note = "compile-only"

    result = Result()
    memory.put(refused, ({}, result))
    assert memory.get(refused) is None and len(memory) == 0
    assert result.note == f"compile-only; {refused.reason}"


def test_large_content_is_hashed_fast():
    namespace = {"ints": list(range(1_000_000)), "floats": [0.5] * 1_000_000, "text": "y" * 50_000_000}
    start = time.perf_counter()
    assert key(namespace).reason is None
    assert time.perf_counter() - start < 2.0


def test_a_cell_result_is_fingerprinted_by_which_run_made_it(ip):
    """A cell that reads an earlier cell's `-o` result (`gemm = tuned.kernels["gemm"]`) is answered from
    the cache while that result stands, and runs again once its cell made a new one."""
    ip.run_cell("sizes = [4096]")
    ip.run_cell_magic("tilelang", "-k vector_add sizes[0] --no-run -o earlier", LAZY_AND_PRIM)
    line = "-k vector_add sizes[0] --no-run -o later"
    naming = "vector_add = earlier.kernels['vector_add']\n"
    ip.run_cell_magic("tilelang", line, naming)
    assert "cannot fingerprint" not in ip.user_ns["later"].summary()
    ip.run_cell_magic("tilelang", line, naming)
    assert ip.user_ns["later"].cached
    ip.run_cell_magic("tilelang", "-k vector_add sizes[0] --no-run --force -o earlier", LAZY_AND_PRIM)
    ip.run_cell_magic("tilelang", line, naming)
    assert not ip.user_ns["later"].cached
