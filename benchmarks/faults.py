"""Inject faults and count what survives: notebook deaths, records lost, statuses by fault kind.

Part 1 tunes 21 configs of one kernel, most of them faulty (illegal address, endless loop, wrong values,
NaN, too much shared memory, an out-of-range compile-time value), and checks that every config ends
as a record with the status its fault calls for. Part 2 runs 5 faulting `%%tilelang` cells in a
separate IPython process (the "notebook") and checks that it answers after each. Needs a GPU for the
runs; on a CPU machine every config is only compiled.
"""

import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import Report  # noqa: E402
from _trust_faults import trust_faults  # noqa: E402

KERNEL = '''
@tb.jit(out_idx=[-1], pass_configs={"tl.disable_safe_memory_legalize": True})
def faulty(n, mode="ok", block=128):
    """B = A * 2 + 1, or a fault: "far" (illegal address), "spin" (never ends), "wrong", "nan",
    "smem" (more shared memory than a block may have)."""
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            if mode == "far":
                for i in T.Parallel(block):
                    B[T.Cast("int64", bx * block + i + 1) * T.int64(1000000000)] = A[bx * block + i]
            elif mode == "spin":
                acc = T.alloc_var("float32")
                acc = A[0]
                for i in T.serial(2147483647):
                    for j in T.serial(2147483647):
                        acc = acc * A[j % n] + A[i % n]
                B[0] = acc
            elif mode == "smem":
                S = T.alloc_shared((96 * 1024,), "float32")
                for i in T.Parallel(block):
                    S[i] = A[bx * block + i]
                for i in T.Parallel(block):
                    B[bx * block + i] = S[i + 1024] * 2.0 + 1.0
            elif mode == "wrong":
                for i in T.Parallel(block):
                    B[bx * block + i] = A[bx * block + i] * 3.0
            elif mode == "nan":
                for i in T.Parallel(block):
                    B[bx * block + i] = T.sqrt(A[bx * block + i] - 100.0)
            else:
                for i in T.Parallel(block):
                    B[bx * block + i] = A[bx * block + i] * 2.0 + 1.0

    return main
'''

EXPECTED = {  # fault -> the statuses that are right for it (compile-only machines: skipped)
    "ok": {"ok"},
    "far": {"crash"},
    "spin": {"timeout"},
    "wrong": {"mismatch"},
    "nan": {"mismatch"},
    "smem": {"launch_error", "compile_error"},
    "bad value": {"compile_error"},
}

NOTEBOOK = """
from IPython.testing.globalipapp import start_ipython

if __name__ == "__main__":  # the benchmark worker imports this script too: run the cells once
    ip = start_ipython()
    ip.run_line_magic("load_ext", "tilebench")
    ip.run_cell("import torch, tilebench as tb")
    ip.run_cell({kernel!r})
    for mode in ("far", "spin", "wrong", "nan", "smem"):
        line = f"-k faulty 65536, {{mode!r}} -o r --ref 'lambda A: A * 2 + 1' --timeout 10"
        try:
            ip.run_cell_magic("tilelang", line, "faulty = faulty")
            run = ip.user_ns["r"].run
            print("CELL", mode, getattr(run, "status", "none"), "|", getattr(run, "message", "")[:120], flush=True)
        except Exception as exc:
            print("CELL", mode, "raised", type(exc).__name__, flush=True)
    print("ALIVE", ip.run_cell("1 + 1").result, flush=True)
"""


def tune_faults(store_path: Path) -> tuple[list, int]:

    import importlib.util

    from tilebench.store import RecordStore

    # tilelang reads a kernel's source from its file, so the kernel lives in a module of its own
    module_path = store_path.parent / "faults_kernel.py"
    module_path.write_text("import tilebench as tb\nimport tilelang.language as T\n" + KERNEL)
    spec = importlib.util.spec_from_file_location("faults_kernel", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    faulty = module.faulty
    configs = [
        {"mode": mode, "block": block}
        for mode in ("ok", "far", "spin", "wrong", "nan", "smem")
        for block in (128, 256, 512)
    ]
    configs += [{"mode": "ok", "block": bad} for bad in (None, "x", 0)]  # bad compile-time values
    store = RecordStore(store_path)
    result = faulty.tune_configs(
        [dict(n=1 << 16, **c) for c in configs],
        ref=lambda a: a * 2 + 1,
        timeout_s=10,
        store=store,
        progress=None,
    )
    return result.records, len(configs)


def notebook_faults() -> tuple[dict[str, str], bool]:
    script = NOTEBOOK.format(kernel="import tilelang.language as T\n" + textwrap.dedent(KERNEL))
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(script)
    done = subprocess.run([sys.executable, handle.name], capture_output=True, text=True, timeout=900)
    cells = {}
    for line in done.stdout.splitlines():
        if line.startswith("CELL "):
            _, mode, status = line.split(" ", 2)
            cells[mode] = status.split(" | ")[0]
            print(line)
    alive = done.returncode == 0 and "ALIVE 2" in done.stdout
    if not alive:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
    return cells, alive


def main() -> None:
    import torch

    gpu = torch.cuda.is_available()
    with tempfile.TemporaryDirectory() as folder:
        records, asked = tune_faults(Path(folder) / "records.sqlite")
    report = Report("faults", "injected faults: deaths, records lost, statuses by fault kind")
    by_fault: dict[str, Counter] = {}
    for record in records:
        block = record.config.get("block")
        fault = record.config["mode"] if isinstance(block, int) and block > 0 else "bad value"
        by_fault.setdefault(fault, Counter())[record.status] += 1
    right = 0
    for fault, statuses in by_fault.items():
        expected = EXPECTED[fault] if gpu or fault == "bad value" else {"skipped"}
        good = sum(n for status, n in statuses.items() if status in expected)
        right += good
        report.row(
            part="tune",
            fault=fault,
            configs=sum(statuses.values()),
            statuses=", ".join(f"{s} {n}" for s, n in sorted(statuses.items())),
            as_expected=good,
        )
    cells, alive = notebook_faults()
    for mode, status in cells.items():
        report.row(part="%%tilelang", fault=mode, configs=1, statuses=status, as_expected=None)
    deaths = 0 if alive else 1
    trusted = trust_faults()
    for row in trusted:
        report.row(
            part="trust", fault=row["fault"], configs=1, statuses=row["outcome"], as_expected=row["survived"]
        )
    report.row(
        part="total",
        fault="-",
        configs=asked + 5,
        statuses=f"notebook deaths {deaths}, records lost {asked - len(records)}",
        as_expected=right,
    )
    report.note(f"{asked} faulty or good configs tuned; 5 faulting cells in a separate notebook process")
    report.note(f"notebook deaths: {deaths}; records lost: {asked - len(records)} (targets: 0 and 0)")
    survived = sum(row["survived"] for row in trusted)
    report.note(f"trust faults survived as they should: {survived}/{len(trusted)} (target: all)")
    report.finish()


if __name__ == "__main__":
    main()
