"""`%%tilelang` and `%tilebench`, registered by `%load_ext tilebench`."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from tilebench.magic.cell import run_cell
from tilebench.magic.commands import COMMANDS, TAKES_A_KERNEL
from tilebench.magic.line import (
    bucketing,
    key_names,
    parse,
    positive_number,
    positive_whole,
    strategy_name,
    tolerance,
)
from tilebench.tuner.strategies import STRATEGIES


@magics_class
class TileLangMagics(Magics):
    @magic_arguments("%tilelang")  # IPython puts one "%" before the name: the usage reads %%tilelang
    @argument(
        "call",
        nargs="*",
        help="Arguments to compile the kernel with, as a Python call's argument list: `A, B` (tensors or "
        'tb.place(...) placeholders), `1024, 1024, 1024, "float16", block_M=64` (string literals stay '
        "strings), or bare words `1024 1024 1024`. Evaluated in the notebook's namespace after the cell "
        "ran. Without it, a cell whose code compiles kernels (a pasted main()) shows those kernels.",
    )
    @argument("-k", "--kernel", help="Which kernel of the cell to compile (default: the last one defined).")
    @argument(
        "--inputs",
        help="Expression giving the inputs to run the compiled kernel with "
        "(default: the eager call's tensors, else random tensors from the kernel's signature).",
    )
    @argument(
        "--target",
        help="Compile target, e.g. 'cuda -arch=sm_80' or 'sm_90a' (default: this GPU, "
        "else TILEBENCH_DEFAULT_ARCH).",
    )
    @argument("--backend", help="tilelang execution backend: tvm_ffi, cython, nvrtc, ...")
    @argument(
        "--pass-config",
        action="append",
        metavar="KEY=VALUE",
        help="A tilelang pass config (PassConfigKey name or value); repeatable.",
    )
    @argument(
        "--compile-flags",
        help="Extra flags for the device compiler, one string: '-O3 --use_fast_math'. tilelang passes them "
        "to nvcc (the pass config tl.device_compile_flags), so a kernel given any is compiled by nvcc "
        "rather than NVRTC; the PTX tab's nvcc compile gets them too.",
    )
    @argument("--ref", help="Reference callable to check against and time beside, e.g. 'lambda A, B: A @ B'.")
    @argument("--rtol", type=tolerance, help="Relative tolerance of the check (default by dtype).")
    @argument("--atol", type=tolerance, help="Absolute tolerance of the check (default by dtype).")
    @argument("--flops", help="FLOPs of one call (an expression), to report TFLOP/s.")
    @argument("--bytes", help="Bytes moved by one call (an expression), to report GB/s.")
    @argument(
        "--tune",
        metavar="SPACE",
        help='Tune first, over a dict of parameter -> values, e.g. "dict(block_M=[64, 128], block_N=[64, 128])"; '
        "the live dashboard shows it, then the best config is compiled and shown.",
    )
    @argument(
        "--constraint",
        metavar="EXPR",
        help="With --tune: a callable (config dict -> bool) that keeps the configs worth compiling, e.g. "
        '\'lambda c: c["block_M"] * c["block_N"] <= 128 * 128\'; the rest are never compiled.',
    )
    @argument(
        "--strategy",
        type=strategy_name,
        help=f"Search strategy for --tune: {', '.join(STRATEGIES)} (default grid).",
    )
    @argument(
        "--key",
        type=key_names,
        help="Tune once per bucket of these arguments' values (e.g. M,N,K or A,B: a tensor by its shape and "
        "dtype); a later run in a tuned bucket takes its best config without tuning (--force tunes again).",
    )
    @argument("--buckets", type=bucketing, help="How --key values round to buckets: exact (default) or pow2.")
    @argument("--max-configs", type=positive_whole, help="At most this many configs for --tune.")
    @argument("--max-seconds", type=positive_number, help="At most this many seconds for --tune.")
    @argument(
        "--cluster",
        metavar="ADDR",
        help="Tune on a Dask cluster: its scheduler's address (tcp://host:8786), a name in the notebook "
        "bound to a dask.distributed.Client, or 'local' for a cluster on this host.",
    )
    @argument("--no-run", action="store_true", help="Compile and inspect only.")
    @argument(
        "--profile",
        action="store_true",
        help="Also profile one launch with Nsight Compute (ncu), on the Run tab's inputs: the Profile tab.",
    )
    @argument(
        "--timeout",
        type=positive_number,
        default=120.0,
        metavar="SECONDS",
        help="The Run tab's limit: a kernel still running after it is stopped (timeout) (default 120).",
    )
    @argument(
        "--in-process",
        action="store_true",
        help="Run the Run tab's check and timing in the notebook process, not the isolated benchmark "
        "worker (for debugging: a kernel that faults then takes the notebook down).",
    )
    @argument(
        "--force",
        action="store_true",
        help="Ignore the cell cache (and, with --tune, re-measure stored configs).",
    )
    @argument("-o", "--output", metavar="VAR", help="Store the result object (CellResult) in VAR.")
    @cell_magic
    def tilelang(self, line: str, cell: str) -> None:
        """Define TileLang kernels in a cell, compile one, show its panel and run it against a reference.

        The cell runs with `T` (tilelang.language), `tilelang`, `torch` and `tb` available. Kernels it
        defines (`@tilelang.jit`/`@tb.jit` functions, lazy factories, `@T.prim_func`s) land in the
        namespace as tilebench kernels. Re-running an unchanged cell reuses what was compiled.

        Example::

            %%tilelang A, B --ref "lambda A, B: A @ B" --flops 2*M*N*K
            @tilelang.jit
            def gemm(A, B, block_M: int = 128): ...
        """
        from IPython.display import display

        options = parse(line, self.tilelang)  # every option checked, before the cell runs
        result = run_cell(self.shell, options, line, cell, display)
        if options.output:
            self.shell.user_ns[options.output] = result
        display(result)

    @line_magic
    def tilebench(self, line: str) -> Any:
        """`%tilebench info | cache | clear-cache | records [KERNEL] | runs [KERNEL] | help`.

        Versions and target; the kernel cache; clearing it; stored tuning records or runs as DataFrames;
        this list with a line on each (`%tilebench help`).
        """

        words = line.split()
        name = words[0] if words else "info"
        command = COMMANDS.get(name)
        if command is None:
            raise UsageError(
                f"%tilebench: unknown command {name!r}; `%tilebench help` lists the commands "
                f"({', '.join(COMMANDS)})"
            )
        if len(words) - 1 > TAKES_A_KERNEL.count(name):
            takes = "at most a kernel name" if name in TAKES_A_KERNEL else "nothing more"
            raise UsageError(f"%tilebench {name} takes {takes}, got {' '.join(words[1:])!r}")
        return command(self.shell, words[1:])


# `--flop 5` must not pass for `--flops 5`.
TileLangMagics.tilelang.parser.allow_abbrev = False


def load(shell: Any) -> None:
    shell.register_magics(TileLangMagics)
