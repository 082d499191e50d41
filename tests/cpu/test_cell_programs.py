"""%%tilelang cells that are whole programs, the magic line read as Python, and tilelang seen as tilebench
only inside the cell (a real IPython shell; compile-only here)."""

import sys

import pytest
from IPython import get_ipython
from IPython.core.error import UsageError
from IPython.testing.globalipapp import start_ipython
from magic_cells import EAGER_GEMM, LAZY_AND_PRIM

import tilebench as tb
from tilebench.kernel.compiled import Kernel
from tilebench.kernel.jit import JIT
from tilebench.magic.line import split, words

PROGRAM = """
import tilelang
import tilelang.language as T
from tilelang.autotuner import autotune


@tilelang.jit(out_idx=[-1])
def scale(N, factor, block=256, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * factor

    return main


def helper_returning_a_dict():
    @T.prim_func
    def unused(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            A[bx] = 1.0

    return {"block": 64}


def main():
    seen["jit"] = tilelang.jit
    small = scale(1024, 2.0, block=helper_returning_a_dict()["block"])
    large = scale(N=4096, factor=3.0)
    seen["kernels"] = (small, large)
    small.get_profiler().assert_allclose(lambda A: A * 2.0)
    seen["after"] = True


seen = {}
main()
"""


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "tilebench")
    return shell


@pytest.fixture(scope="module")
def program(ip):
    ip.run_cell_magic("tilelang", "-o prog", PROGRAM)
    return ip.user_ns["prog"]


def test_a_whole_program_cell_runs_on_tilebench_objects(ip, program):
    small, large = ip.user_ns["seen"]["kernels"]
    assert isinstance(small, Kernel) and isinstance(large, Kernel)
    assert [p.kernel for p in program.programs] == [small, large]
    assert small.specs[0].shape == (1024,) and large.specs[0].shape == (4096,)
    # the compile lines, as the editor numbers them (line 1 is %%tilelang)
    lines = PROGRAM.splitlines()
    compile_line = '    small = scale(1024, 2.0, block=helper_returning_a_dict()["block"])'
    assert program.programs[0].compiled_at == lines.index(compile_line) + 2
    assert "def scale" in program.programs[0].source


def test_without_a_gpu_the_program_stops_where_it_needs_one(ip, program):
    if tb.has_gpu():
        pytest.skip("this machine has a GPU")
    assert "after" not in ip.user_ns["seen"]
    line = PROGRAM.splitlines().index("    small.get_profiler().assert_allclose(lambda A: A * 2.0)") + 2
    assert f"compile-only: the program stopped at cell line {line}" in program.summary()


def test_several_kernels_get_a_selector(program):
    selector = program.panel()
    assert len(selector.picker.options) == 2
    assert selector.holder.children[0].result is program.programs[-1]
    selector.picker.value = 0
    assert selector.holder.children[0].result is program.programs[0]
    run_tab = selector.panel(0).content("Run").value
    assert ("assert_allclose passed" if tb.has_gpu() else "compile-only") in run_tab


def test_decorated_kernels_are_found_and_plain_helpers_stay_functions(ip, program):
    assert set(program.kernels) == {"scale"} and isinstance(ip.user_ns["scale"], JIT)
    assert ip.user_ns["helper_returning_a_dict"]() == {"block": 64}


def test_tilelang_is_tilebench_only_inside_the_cell(ip, program):
    import tilelang

    assert ip.user_ns["seen"]["jit"].__module__ == "tilebench.compat.scope"  # the cell's view
    assert tilelang.jit.__module__.startswith("tilelang")  # the module itself never changed
    assert sys.modules["tilelang"] is tilelang
    assert ip.user_ns["tilelang"] is tilelang  # after the cell, the name is the real module again
    assert "tilelang" in repr(ip.user_ns["tilelang"]) and "tilebench" not in repr(ip.user_ns["tilelang"])


def test_autotune_in_a_cell_is_tilebenchs(ip):
    ip.run_cell_magic(
        "tilelang",
        "-o tuned",
        "from tilelang.autotuner import autotune, AutoTuner\n"
        "import tilelang.profiler\n"
        "got = (autotune, AutoTuner, tilelang.profiler.do_bench, tilelang.autotune)\n",
    )
    autotune, auto_tuner, do_bench, top_autotune = ip.user_ns["got"]
    assert autotune is tb.autotune is top_autotune and auto_tuner is tb.AutoTuner
    assert do_bench.__module__ == "tilebench.compat.scope"


def test_star_imports_give_the_modules_names_with_tilebenchs_own(ip):
    """`from tilelang.autotuner import *` (as tilelang's examples write it) binds every name the module
    would, tilebench's where it has one."""
    ip.run_cell_magic(
        "tilelang",
        "-o starred",
        "from tilelang.autotuner import *\nfrom tilelang import *\n"
        "got = (autotune, AutoTuner, set_autotune_inputs, jit, language, TensorSupplyType)\n",
    )
    autotune, auto_tuner, set_inputs, jit, language, supply = ip.user_ns["got"]
    import tilelang.autotuner

    assert autotune is tb.autotune and auto_tuner is tb.AutoTuner
    assert set_inputs is tilelang.autotuner.set_autotune_inputs
    assert jit.__module__ == "tilebench.compat.scope"
    assert language is tilelang.language and supply is tilelang.TensorSupplyType


SCALE_FACTORY = """
import tilelang
import tilelang.language as T


def scale(N, block=128):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * 2.0

    return main
"""

FROM_JIT_MODULE = (
    SCALE_FACTORY
    + """
from tilelang.jit import jit, compile as tl_compile, JITKernel
from tilelang.jit.kernel import JITKernel as KernelClass

by_jit = jit(out_idx=[-1])(scale)(1024)
by_compile = tl_compile(scale(2048), out_idx=[-1])
kinds = [isinstance(k, c) for k in (by_jit, by_compile) for c in (JITKernel, KernelClass, tilelang.JITKernel)]
"""
)


def test_tilelang_jit_module_names_are_tilebenchs_and_its_kernels_are_jit_kernels(ip):
    """`from tilelang.jit import jit, compile, JITKernel` (as programs import tilelang's compile) gives
    tilebench's: the kernels compile as the cell's others do, and are JITKernels to the program."""
    ip.run_cell_magic("tilelang", "-o from_jit_module", FROM_JIT_MODULE)
    by_jit, by_compile = ip.user_ns["by_jit"], ip.user_ns["by_compile"]
    assert isinstance(by_jit, Kernel) and isinstance(by_compile, Kernel)
    assert ip.user_ns["kinds"] == [True] * 6
    assert [r.kernel for r in ip.user_ns["from_jit_module"].programs] == [by_jit, by_compile]
    import tilelang

    assert not isinstance(by_jit, tilelang.JITKernel)  # outside the cell tilelang is unchanged


def test_magic_line_strings_stay_strings(ip):
    cell = PROGRAM.replace("seen = {}\nmain()\n", "")
    ip.run_cell_magic("tilelang", '-k scale 4096, 2.0, 256, "float16" -o strings --no-run', cell)
    result = ip.user_ns["strings"]
    assert result.call == ((4096, 2.0, 256, "float16"), {})
    assert result.kernel.specs[0].dtype == "float16"


def test_line_words_respect_quotes_and_brackets():
    assert words("A, B, 'x y' --tune dict(a=[1, 2]) --ref \"lambda A: A\"") == [
        "A,",
        "B,",
        "'x y'",
        "--tune",
        "dict(a=[1, 2])",
        "--ref",
        '"lambda A: A"',
    ]
    from tilebench.magic.magics import TileLangMagics

    call, options = split('1024, "float16" -k gemm --flops=2*3 -1', TileLangMagics.tilelang.parser)
    assert call == ["1024,", '"float16"', "-1"]
    assert options == ["-k", "gemm", "--flops", "2*3"]


@pytest.mark.parametrize(
    "line, match",
    [
        ("--flop 5", r"^%%tilelang: unrecognized arguments: --flop$"),
        ("--bogus 3", r"^%%tilelang: unrecognized arguments: --bogus$"),
        ("A, 'open", "unterminated string"),
    ],
)
def test_line_errors_say_they_come_from_tilelang(ip, line, match):
    with pytest.raises(UsageError, match=match):
        ip.run_cell_magic("tilelang", line, LAZY_AND_PRIM)


def test_compile_takes_t_const_values_by_keyword():
    import tilelang.language as T

    @tb.jit
    def double(A, block: int = 128):
        N = T.const("N")
        A: T.Tensor[[N], T.float32]
        B = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * 2.0
        return B

    kernel = double.compile(N=2048, block=256)
    assert kernel.specs[0].shape == (2048,)
    assert double.compile(N=2048, block=256) is kernel
    partial = double.partial(N=1024)
    assert partial.compile().specs[0].shape == (1024,)


PASS_CONFIGS_PER_CONFIG = (
    """
NO_WS = tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED
CONFIGS = [{"block_M": 64, "pass_configs": {NO_WS: flag}} for flag in (True, False)]
"""
    + EAGER_GEMM.replace("@tilelang.jit", "@tilelang.autotune(configs=CONFIGS)\n@tilelang.jit", 1)
    + """
kernel = gemm.compile(tb.place(512, 256, dtype=torch.float16), tb.place(256, 512, dtype=torch.float16))
"""
)


def test_autotune_configs_with_pass_configs_compile_each_under_its_own(ip):
    """`pass_configs` in an `@autotune` config (tilelang's reserved key) is no argument of the kernel: the
    config compiles under it, and the tuned kernel is the chosen config's."""
    with pytest.warns(UserWarning, match="compile-only"):
        ip.run_cell_magic("tilelang", "-o per_config_passes", PASS_CONFIGS_PER_CONFIG)
    kernel, configs = ip.user_ns["kernel"], ip.user_ns["CONFIGS"]
    assert kernel.config in configs
    warp_specialized = not kernel.config["pass_configs"][ip.user_ns["NO_WS"]]
    assert ("mbarrier" in kernel.get_kernel_source()) == warp_specialized


def test_a_program_that_exits_ends_there_and_a_failing_status_is_an_error_at_its_line(ip):
    from tilebench.magic.errors import TileLangCellError

    ip.run_cell_magic("tilelang", "", "before_exit = 1\nimport sys\nsys.exit(0)\nafter_exit = 2\n")
    assert ip.user_ns["before_exit"] == 1 and "after_exit" not in ip.user_ns  # as a script would
    with pytest.raises(TileLangCellError, match="the program exited with status 3") as info:
        ip.run_cell_magic("tilelang", "", "x = 1\nimport sys\nsys.exit(3)\n")
    assert info.value.report.cell_line == 4  # the editor's numbering: the magic line is 1
    factory = "import sys\nimport tilelang\n\n@tilelang.jit\ndef k(N):\n    sys.exit(2)\n"
    with pytest.raises(TileLangCellError, match="exited with status 2") as info:
        ip.run_cell_magic("tilelang", "-k k 64", factory)  # the magic compiles k(64): its factory exits
    assert info.value.report.cell_line == 7


TESTING_MAIN = """
import sys
from IPython.testing.globalipapp import start_ipython

ip = start_ipython()
ip.run_line_magic("load_ext", "tilebench")
try:
    ip.run_cell_magic("tilelang", "", "import tilelang.testing\\n\\ndef test_one():\\n    pass\\n\\ntilelang.testing.main()\\n")
except Exception as exc:
    print("RAISED", type(exc).__name__, exc.report.cell_line, exc.report.kind, exc)
    print("HINT", exc.report.hint)
"""


def test_tilelang_testing_main_in_a_cell_says_to_call_the_tests(tmp_path):
    """tilelang's test files end in tilelang.testing.main(), which runs pytest on the program's file: a
    cell has no file, so the cell says so (before, pytest's exit status escaped the magic unexplained).
    In a child process: pytest is not run inside this test run."""
    import os
    import subprocess

    env = {**os.environ, "TILEBENCH_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, "-c", TESTING_MAIN], capture_output=True, text=True, timeout=300, env=env
    ).stdout
    assert "RAISED TileLangCellError 7 python " in out, out  # the program's own run, no lowering error
    assert "tilelang.testing.main() runs pytest on the program's own file" in out
    assert "compiled the kernel" not in out


JIT_KERNEL_CONSTRUCTED = (
    SCALE_FACTORY
    + """
kernel = tilelang.JITKernel(scale(4096), out_idx=-1, target="cuda")
source = kernel.get_kernel_source()
"""
)


def test_a_jit_kernel_constructed_in_a_cell_is_compiled_by_tilebench(ip):
    """`tilelang.JITKernel(func, out_idx=..., target="cuda")` (tilelang's docs construct kernels so) goes
    through the cell's compile as `tilelang.compile` does: tilebench's target (sm_90a here, where tilelang
    would pick sm_50 without a GPU and fail in nvcc) and a kernel the cell shows."""
    import tilelang

    ip.run_cell_magic("tilelang", "-o constructed", JIT_KERNEL_CONSTRUCTED)
    kernel = ip.user_ns["kernel"]
    assert isinstance(kernel, Kernel) and not isinstance(kernel, tilelang.JITKernel)
    assert "__global__" in ip.user_ns["source"] and "sm_90a" in str(kernel.target)
    assert [r.kernel for r in ip.user_ns["constructed"].programs] == [kernel]
