"""The tuning key: each of its parts, changed alone, gives another key (and `diff` names that part);
nothing changed gives the same key, in this process and in another one."""

import dataclasses
import importlib.util
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tilebench as tb
from tilebench.store import Record, RecordStore
from tilebench.tuner.key import NONE, TuningKey, build_key
from tilebench.tuner.session import TuneOptions

# A kernel that reads a helper function, a T.macro and a constant global, and a reference that reads a
# helper of its own. Each variant below edits one of them.
KERNEL = """
import tilelang.language as T

import tilebench as tb

SCALE = 2.0


def blocks(n, block):
    return (n + block - 1) // block


@T.macro
def scaled(x):
    return x * SCALE


@tb.jit(out_idx=[-1])
def double(n: int, block: int = 128):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(blocks(n, block), threads=block) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = scaled(A[bx * block + i])

    return main


def twice(a):
    return a * SCALE


def reference(a):
    return twice(a)
"""

_folders = itertools.count()


def load(tmp_path: Path, text: str = KERNEL):
    """The kernel module from its own file (each load a fresh module named `tunekernel`)."""
    folder = tmp_path / f"m{next(_folders)}"
    folder.mkdir()
    path = folder / "tunekernel.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("tunekernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def key_of(module, n: int = 4096, target: str = "sm_90a", jit=None, **options) -> TuningKey:
    options = {"ref": module.reference, **options}
    return build_key(jit or module.double, {"n": n}, TuneOptions(**options), target, gpu=False)


def edited(old: str, new: str) -> str:
    assert KERNEL.count(old) == 1, old
    return KERNEL.replace(old, new)


def other_ref(a):
    return a + a


def manual_check_a(outputs, refs):
    assert outputs == refs


def manual_check_b(outputs, refs):
    assert len(outputs) == len(refs)


def supply_a(params):
    return [0 for _ in params]


def supply_b(params):
    return [1 for _ in params]


SOURCE_EDITS = {
    "kernel source": (
        edited("threads=block) as bx:", "threads=block) as bx:  # edited"),
        {"kernel_source": None},
    ),
    "helper source": (
        edited("return (n + block - 1) // block", "return -(-n // block)"),
        {"dependencies": "tunekernel.blocks"},
    ),
    "macro source": (
        edited("return x * SCALE", "return SCALE * x"),
        {"dependencies": "tunekernel.scaled"},
    ),
    "global constant": (
        edited("SCALE = 2.0", "SCALE = 3.0"),
        {"dependencies": "tunekernel.SCALE", "ref": None},  # the reference's helper reads it too
    ),
    "reference's helper": (edited("return a * SCALE", "return SCALE * a"), {"ref": None}),
    "default argument": (
        edited("block: int = 128", "block: int = 256"),
        {"kernel_source": None, "dependencies": "tunekernel.double.<default block>"},
    ),
}


@pytest.mark.parametrize("edit", list(SOURCE_EDITS))
def test_editing_the_kernel_or_what_it_reads_changes_the_key(tmp_path, edit):
    text, expected = SOURCE_EDITS[edit]
    before, after = key_of(load(tmp_path)), key_of(load(tmp_path, text))
    assert before.digest() != after.digest()
    changed = before.diff(after)
    assert set(changed) == set(expected), changed
    for part, label in expected.items():
        if label is not None:  # the dependency that changed, by name
            old, new = changed[part]
            assert {name for name in old.keys() | new.keys() if old.get(name) != new.get(name)} == {label}


def test_the_key_lists_the_helpers_macros_and_constants_the_kernel_reads(tmp_path):
    dependencies = key_of(load(tmp_path)).dependencies
    assert {"tunekernel.blocks", "tunekernel.scaled", "tunekernel.SCALE"} <= set(dependencies)
    assert dependencies["tunekernel.SCALE"] == "2.0"  # a constant by value
    assert "tunekernel.twice" not in dependencies  # the reference's helper is folded into `ref`


def test_a_tilebench_template_is_keyed_by_its_source_and_its_macros_not_by_tilebench_s_version():
    from tilebench import templates

    gemm = templates.kernel("gemm")
    key = build_key(gemm, {}, TuneOptions(), "sm_90a", gpu=False)
    # a changed template (an editable install keeps tilebench's version) must not resume older records
    assert not key.kernel_source.startswith("lib:")
    macros = {"tilebench.templates.gemm.load_tile", "tilebench.templates.gemm.multiply_tile"}
    assert macros <= set(key.dependencies) and not any(
        key.dependencies[name].startswith("lib:") for name in macros
    )
    assert key.dependencies["tilebench.templates.gemm.STORE_COLUMNS"] == "128"


CALL_AND_OPTION_CHANGES = {
    "signature": ({"n": 8192}, "signature"),
    "target": ({"target": "sm_80"}, "target"),
    "ref": ({"ref": other_ref}, "ref"),
    "no ref": ({"ref": None}, "ref"),
    "rtol": ({"rtol": 1e-3}, "rtol"),
    "atol": ({"atol": 1e-3}, "atol"),
    "max_mismatched_ratio": ({"max_mismatched_ratio": 0.0}, "max_mismatched_ratio"),
    "skip_check": ({"skip_check": True}, "skip_check"),
    "manual_check": ({"manual_check": manual_check_b}, "manual_check"),
    "supply_type": ({"supply_type": "normal"}, "supply_type"),
    "supply_prog": ({"supply_prog": supply_b}, "supply_prog"),
    "seed": ({"seed": 1}, "seed"),
    "backend": ({"backend": "cudagraph"}, "timing_backend"),
    "warmup": ({"warmup": 50}, "warmup"),
    "rep": ({"rep": 200}, "rep"),
}


@pytest.mark.parametrize("change", list(CALL_AND_OPTION_CHANGES))
def test_changing_the_call_target_check_inputs_or_timer_changes_the_key(tmp_path, change):
    module = load(tmp_path)
    base = {"manual_check": manual_check_a, "supply_prog": supply_a}
    changes, part = CALL_AND_OPTION_CHANGES[change]
    before, after = key_of(module, **base), key_of(module, **{**base, **changes})
    assert before.digest() != after.digest()
    assert set(before.diff(after)) == {part}


def test_compile_options_are_part_of_the_signature(tmp_path):
    module = load(tmp_path)
    before = key_of(module)
    after = key_of(module, jit=module.double.with_options(pass_configs={"tl.disable_tma_lower": True}))
    assert set(before.diff(after)) == {"signature"}


MACHINE_AND_VERSIONS = (
    "gpu_name",
    "sm_count",
    "cuda_driver",
    "cuda_runtime",
    "nvcc",
    "tilelang_version",
    "torch_version",
    "tilebench_version",
)


@pytest.mark.parametrize("part", MACHINE_AND_VERSIONS)
def test_the_digest_covers_the_machine_and_the_versions(tmp_path, part):
    """An H100 and an H200 are both sm_90a: their keys differ by GPU name and SM count."""
    key = key_of(load(tmp_path))
    other = dataclasses.replace(key, **{part: "NVIDIA H200"})
    assert key.digest() != other.digest() and set(key.diff(other)) == {part}


def test_compile_only_has_no_machine_and_real_versions(tmp_path):
    import tilelang
    import torch

    import tilebench

    key = key_of(load(tmp_path))
    assert (key.gpu_name, key.sm_count, key.cuda_driver, key.cuda_runtime) == (NONE,) * 4
    assert key.tilelang_version == tilelang.__version__ and key.torch_version == torch.__version__
    assert key.tilebench_version == tilebench.__version__
    assert key.nvcc.startswith("V") or key.nvcc == NONE


def test_an_unchanged_kernel_keeps_its_key_wherever_its_file_lives(tmp_path):
    first, second = load(tmp_path), load(tmp_path)  # same text, another folder, another module object
    assert first.double is not second.double
    assert key_of(first).digest() == key_of(second).digest()
    assert key_of(first, warmup=25, rep=100).digest() == key_of(first, warmup=25.0, rep=100.0).digest()
    assert key_of(first, supply_type="AUTO").digest() == key_of(first).digest()
    assert key_of(first).diff(key_of(second).parts()) == {}  # a run's stored parts compare too


CHILD = """
import sys
sys.path.insert(0, {tests!r})
from test_tuning_key import key_of, load
from pathlib import Path
print(key_of(load(Path({folder!r}))).digest())
"""


def test_the_key_is_the_same_in_another_process(tmp_path):
    """Nothing in the key depends on addresses or on import order: a new notebook resumes."""
    here = key_of(load(tmp_path)).digest()
    child = tmp_path / "child"
    child.mkdir()
    code = CHILD.format(tests=str(Path(__file__).parent), folder=str(child))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == here


# ---------------------------------------------------------------------------------------------------
# End to end: a compile-only tune with real tilelang and a real store


def test_a_tune_measures_again_when_the_ref_changes_and_reuses_its_records_otherwise(tmp_path):
    module = load(tmp_path)
    store = RecordStore(tmp_path / "records.sqlite")
    options = {"store": store, "progress": None, "ref": module.reference}
    first = module.double.tune(4096, block=tb.tune([0, 128]), tune_options=options)
    assert [r.status for r in first.records] == ["compile_error", "skipped"]  # no GPU: 128 compiled only
    assert [r.gpu for r in store.records(run_id=first.run_id)] == [None, None]
    # a GPU run measured block=128 under this key; its record stands in for it here
    store.add_record(Record({"block": 128}, "ok", median_ms=0.01, key=first.key, gpu="NVIDIA H100 80GB HBM3"))

    same = module.double.tune(4096, block=tb.tune([0, 128]), tune_options=options)
    assert same.key == first.key and same.resumed == 2  # nothing changed: both answered from the store
    assert same.best_config == {"block": 128} and same.records[1].gpu == "NVIDIA H100 80GB HBM3"
    listed = store.records(run_id=same.run_id)  # what it answered from the store: nothing measured again
    assert len(listed) == 2 and not any(r.run_id == same.run_id for r in listed)

    changed = module.double.tune(4096, block=tb.tune([0, 128]), tune_options={**options, "ref": other_ref})
    assert changed.key != first.key and changed.resumed == 0
    assert [r.status for r in changed.records] == ["compile_error", "skipped"]  # both measured again
    assert len(store.records(run_id=changed.run_id)) == 2
    why = TuningKey(**store.run(changed.run_id).key_parts).diff(store.run(first.run_id).key_parts)
    assert set(why) == {"ref"}


def test_the_same_lambda_written_anywhere_is_one_reference():
    from tilebench.tuner.key import fingerprint_with_reads

    on_a_magic_line = eval(compile("lambda A, B: A @ B", "<%%tilelang line>", "eval"))
    in_a_cell = dict(ref=lambda A, B: A @ B)["ref"]  # noqa: E731 (as a notebook passes it)
    assert fingerprint_with_reads(on_a_magic_line) == fingerprint_with_reads(in_a_cell)
    assert fingerprint_with_reads(in_a_cell) != fingerprint_with_reads(lambda A, B: A + B)


# Two closures of one factory, a partial and a frozenset, all read by the kernel
CAPTURES = """
import functools

import tilelang.language as T

import tilebench as tb

MODES = frozenset({"alpha", "beta", "gamma", "delta", "epsilon"})


def make_scale(k):
    @T.macro
    def scale(x):
        return x * k

    return scale


first_scale = make_scale(2.0)
second_scale = make_scale(3.0)


def blocks(n, block):
    return (n + block - 1) // block


grid = functools.partial(blocks, block=128)


@tb.jit(out_idx=[-1])
def double(n: int, block: int = 128):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(grid(n), threads=block) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = second_scale(first_scale(A[bx * block + i])) if "alpha" in MODES else 0.0

    return main


def reference(a):
    return a * 6.0
"""


@pytest.mark.parametrize(
    "old, new",
    [
        ("second_scale = make_scale(3.0)", "second_scale = make_scale(5.0)"),  # the second closure's capture
        ("first_scale = make_scale(2.0)", "first_scale = make_scale(5.0)"),
        ("functools.partial(blocks, block=128)", "functools.partial(blocks, block=64)"),  # a bound argument
    ],
)
def test_what_closures_capture_and_partials_bind_is_in_the_key(tmp_path, old, new):
    """Two closures of one factory share a name: each is its own part, its captured value in its
    fingerprint (the second one's edit was not in the key, so its records answered for the new value)."""
    before, after = key_of(load(tmp_path, CAPTURES)), key_of(load(tmp_path, CAPTURES.replace(old, new)))
    assert before.digest() != after.digest()
    assert set(before.diff(after)) == {"dependencies"}


def test_a_frozenset_the_kernel_reads_keys_alike_in_every_process(tmp_path):
    """Its elements' order follows string hashing, which differs by process: the key sorts them."""
    folder = tmp_path / "frozen"
    folder.mkdir()
    (folder / "tunekernel.py").write_text(CAPTURES)
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import importlib.util\nfrom test_tuning_key import key_of\n"
        f"spec = importlib.util.spec_from_file_location('tunekernel', {str(folder / 'tunekernel.py')!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "print(key_of(module).digest())\n"
    )
    digests = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
        )
        assert done.returncode == 0, done.stderr
        digests.add(done.stdout.strip().splitlines()[-1])
    assert len(digests) == 1
