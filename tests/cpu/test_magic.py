"""%%tilelang in a real IPython shell (compile-only here): namespace, panel, options, errors, cache."""

import time

import ipywidgets
import pytest
from IPython import get_ipython
from IPython.core.error import UsageError
from IPython.testing.globalipapp import start_ipython
from magic_cells import EAGER_GEMM, LAZY_AND_PRIM

import tilebench as tb
from tilebench.kernel.jit import JIT
from tilebench.magic.errors import TileLangCellError
from tilebench.views.panel import without_line_directives


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()  # the test shell is one per process: later callers get None
    shell.run_line_magic("load_ext", "tilebench")
    shell.run_cell(
        "import torch, tilebench as tb\n"
        "A = tb.place(1024, 512, dtype=torch.float16)\n"
        "B = tb.place(512, 256, dtype=torch.float16)\n"
    )
    return shell


@pytest.fixture(scope="module")
def gemm_result(ip):
    ip.run_cell_magic("tilelang", "A, B -o res --ref 'lambda A, B: A @ B'", EAGER_GEMM)
    return ip.user_ns["res"]


def test_kernels_and_other_names_land_in_the_namespace(ip, gemm_result):
    assert isinstance(ip.user_ns["gemm"], JIT)
    assert ip.user_ns["GEMM_NOTE"] == "eager"
    assert gemm_result.name == "gemm" and list(gemm_result.kernels) == ["gemm"]
    assert ip.user_ns["gemm"].compile(ip.user_ns["A"], ip.user_ns["B"]) is gemm_result.kernel


def test_panel_carries_tir_cuda_and_layouts(gemm_result):
    panel = gemm_result.panel()
    titles = [panel.tabs.get_title(i) for i in range(len(panel.tabs.children))]
    assert titles == [
        "Source",
        "TIR",
        "Lowered TIR",
        "CUDA",
        "PTX",
        "SASS",
        "Resources",
        "Layouts",
        "Run",
        "Profile",
    ]
    assert "def gemm" in panel.content("Source").code
    assert "T.gemm" in panel.content("TIR").code or "gemm" in panel.content("TIR").code
    assert "wgmma" in panel.content("CUDA").code
    cuda = gemm_result.kernel.cuda_source
    assert "#line" in cuda  # cell kernels map nvcc errors to cell lines ...
    assert "#line" not in panel.content("CUDA").code  # ... and the CUDA tab hides those directives
    assert panel.content("CUDA").code == without_line_directives(cuda)
    layouts = panel.content("Layouts")
    names = [layout.name for layout in gemm_result.artifacts.layouts]
    assert "C_l" in names
    assert isinstance(layouts, ipywidgets.Widget)
    assert "registers" in panel.content("Resources").value.lower()
    assert "compile-only" in panel.content("Run").value


def test_text_summary_for_plain_frontends(gemm_result):
    text = gemm_result.summary()
    assert text.startswith("gemm → cuda -arch=sm_90a")
    assert "regs/thread" in text and "compile-only" in text
    assert gemm_result._repr_mimebundle_()["text/plain"] == text


def test_rerun_of_an_unchanged_cell_hits_the_cell_cache(ip, gemm_result):
    kernel = gemm_result.kernel
    start = time.perf_counter()
    ip.run_cell_magic("tilelang", "A, B -o res --ref 'lambda A, B: A @ B'", EAGER_GEMM)
    elapsed = time.perf_counter() - start
    again = ip.user_ns["res"]
    assert again.cached and again.kernel is kernel
    assert elapsed < 5  # generous; benchmarks/magic.py measures the real figure
    ip.run_cell_magic("tilelang", "A, B -o res --force --no-run", EAGER_GEMM)
    assert not ip.user_ns["res"].cached


def test_changed_input_shape_misses_the_cell_cache(ip, gemm_result):
    ip.run_cell("A2 = tb.place(2048, 512, dtype=torch.float16)")
    ip.run_cell_magic("tilelang", "A2, B -o res2 --no-run", EAGER_GEMM)
    result = ip.user_ns["res2"]
    assert not result.cached and result.kernel is not gemm_result.kernel
    assert result.kernel.specs[0].shape == (2048, 512)


def test_lazy_factory_and_prim_func_are_found(ip):
    ip.run_cell_magic("tilelang", "-k vector_add 4096 -o lazy", LAZY_AND_PRIM)
    result = ip.user_ns["lazy"]
    assert set(result.kernels) == {"vector_add", "fill"}
    assert result.kernel.specs[0].shape == (4096,)
    ip.run_cell_magic("tilelang", "-o prim", LAZY_AND_PRIM)
    assert ip.user_ns["prim"].name == "fill" and ip.user_ns["prim"].kernel is not None


def test_line_expressions_are_unquoted_and_evaluated(ip, gemm_result):
    values = gemm_result.values
    assert callable(values.ref) and values.ref.__name__ == "<lambda>"
    ip.run_cell_magic(
        "tilelang", "A, B --no-run -o r --flops 2*1024*512*256 --bytes '2 * (1024*512)'", EAGER_GEMM
    )
    assert ip.user_ns["r"].values.flops == 2 * 1024 * 512 * 256
    assert ip.user_ns["r"].values.nbytes == 2 * 1024 * 512


def test_space_separated_call_values(ip):
    ip.run_cell_magic("tilelang", "-k vector_add 4096 512 -o spaced --no-run", LAZY_AND_PRIM)
    assert ip.user_ns["spaced"].call == ((4096, 512), {})


def test_kernel_without_arguments_is_defined_not_compiled(ip):
    ip.run_cell_magic("tilelang", "-o bare", EAGER_GEMM)
    result = ip.user_ns["bare"]
    assert (
        result.kernel is None
        and "gemm: not compiled, give its arguments on the magic line" in result.summary()
    )


@pytest.mark.parametrize(
    "line, match",
    [
        ("--backend nope", "--backend 'nope'"),
        ("--pass-config tl.no_such_thing=1", "unknown pass config"),
        ("--pass-config TL_DISABLE_TMA_LOWER", "KEY=VALUE"),
        ("--target sm_1234", "--target"),
        ("--bogus", "unrecognized arguments"),
        ("-k nothing A, B", "not a kernel of this cell"),
        ("A, B, =", "not a Python argument list"),
        ("A, B --ref 3", "--ref must be callable"),
        ("A, B --ref NOT_CALLABLE", "--ref must be callable, got int 3"),
        ("A, B --flops 2*undefined_size", "--flops '2\\*undefined_size' failed: NameError"),
        ("A, B --bytes \"'many'\"", "--bytes must be a positive number"),
        ("A, B --inputs (", "--inputs '\\(' is not a Python expression"),
        ("A, B --flops \"float('nan')\"", "--flops must be a positive number, got nan"),
        ("A, B --flops 1e400", "--flops must be a positive number, got inf"),
        ("A, B --timeout -5", "--timeout: must be a positive number, got '-5'"),
        ("A, B --timeout nan", "--timeout: must be a positive number, got 'nan'"),
        ("A, B --rtol nan", "--rtol: must be a finite number >= 0, got 'nan'"),
        ("A, B --atol -0.5", "--atol: must be a finite number >= 0"),
        ("A, B --max-seconds inf", "argument --max-seconds: must be a positive number"),
        ("A, B -o 'not a name'", "-o takes a variable name, got 'not a name'"),
        ("A, B -o class", "-o takes a variable name, got 'class'"),
    ],
)
def test_bad_options_raise_usage_error(ip, line, match):
    ip.user_ns["NOT_CALLABLE"] = 3
    with pytest.raises(UsageError, match=match):
        ip.run_cell_magic("tilelang", line, EAGER_GEMM)


MARKED = "RAN_THE_CELL = True\n" + LAZY_AND_PRIM
WITH_A_CALL = ["", "-k vector_add 12288 "]  # the same line without and with the call's arguments
TUNED = "--tune 'dict(block_N=[256])' "


@pytest.mark.parametrize("call", WITH_A_CALL)
@pytest.mark.parametrize(
    "options, match",
    [
        ("--tune 5", "--tune takes a dict of parameter -> list of values, got 5$"),
        ("--tune '[1, 2]'", "--tune takes a dict of parameter -> list of values, got \\[1, 2\\]"),
        ("--tune '{}'", "--tune takes a dict"),
        ("--tune 'dict(block_N=256)'", "--tune 'block_N' takes a list of values, got int 256"),
        ("--tune 'dict(block_N=[], threads=SOME)'", "--tune 'block_N' takes a list of values, got none"),
        ("--tune '{1: [2]}'", "--tune takes .*, keyed by parameter names; got the key 1"),
        ("--tune 'dict(block_N=[256]'", "--tune .* is not a Python expression"),
        (TUNED + "--max-configs -3", "argument --max-configs: must be a positive whole number, got '-3'"),
        (TUNED + "--max-configs 0", "argument --max-configs: must be a positive whole number, got '0'"),
        (TUNED + "--max-configs 2.5", "argument --max-configs: must be a positive whole number, got '2.5'"),
        (TUNED + "--strategy bogus", "argument --strategy: must be one of grid, random, tpe, .*got 'bogus'"),
        (TUNED + "--max-seconds 0", "argument --max-seconds: must be a positive number"),
        (TUNED + "--constraint 3", "--constraint takes a callable \\(config dict -> bool\\), got int"),
        (TUNED + "--cluster ''", "--cluster takes a scheduler's address"),
        ("--max-configs 5", "--max-configs goes with --tune SPACE"),
        ("--strategy random", "--strategy goes with --tune SPACE"),
        ("--max-seconds 5", "--max-seconds goes with --tune SPACE"),
        ("--constraint 'lambda c: True'", "--constraint goes with --tune SPACE"),
        ("--cluster local", "--cluster goes with --tune SPACE"),
        ("--ref 3", "--ref must be callable, got int 3"),
        ("--flops \"'many'\"", "--flops must be a positive number, got 'many'"),
        ("--bytes -1", "--bytes must be a positive number, got -1"),
        ("--inputs '('", "--inputs '\\(' is not a Python expression"),
        ("--timeout 0", "argument --timeout: must be a positive number"),
        ("--rtol -1", "argument --rtol: must be a finite number >= 0"),
        ("-o 1x", "-o takes a variable name, got '1x'"),
        ("--backend nope", "--backend 'nope' is not one of"),
        ("--pass-config TL_DISABLE_TMA_LOWER", "--pass-config takes KEY=VALUE"),
    ],
)
def test_each_option_is_checked_the_same_with_or_without_a_call_before_the_cell_runs(
    ip, call, options, match
):
    ip.user_ns.pop("RAN_THE_CELL", None)
    with pytest.raises(UsageError, match=f"^%%tilelang: {match}"):
        ip.run_cell_magic("tilelang", call + options, MARKED)
    assert "RAN_THE_CELL" not in ip.user_ns


@pytest.mark.parametrize("call", WITH_A_CALL)
@pytest.mark.parametrize(
    "options, match",
    [
        ("--tune SPACE", "--tune 'block_N' takes a list of values, got int 64"),
        ("--tune 'dict(block_N=TEXT)'", "--tune 'block_N' takes a list of values, got str 'text'"),
        ("--tune 'dict(block_N=undefined_name)'", "--tune .* failed: NameError"),
        (TUNED + "--constraint TEXT", "--constraint takes a callable"),
        (TUNED + "--cluster SPACE", "--cluster SPACE: cluster must be a dask.distributed.Client"),
        ("--ref TEXT", "--ref must be callable, got str 'text'"),
        ("--flops TEXT", "--flops must be a positive number, got 'text'"),
    ],
)
def test_the_options_expressions_are_checked_once_the_cell_ran_before_anything_compiles(
    ip, call, options, match
):
    cell = "SPACE = dict(block_N=64)\nTEXT = 'text'\n" + LAZY_AND_PRIM  # names the line may use
    ip.user_ns["TEXT"] = 3  # the cell's own values count, not the notebook's before it ran
    compiled = tb.cache_info()["memory_kernels"]
    with pytest.raises(UsageError, match=f"^%%tilelang: {match}"):
        ip.run_cell_magic("tilelang", call + options, cell)
    assert tb.cache_info()["memory_kernels"] == compiled


def test_a_strategy_and_a_budget_on_the_line_drive_the_tune(ip):
    line = (
        "-k vector_add 4096 --tune 'dict(block_N=[256, 512, 1024])' --strategy random --max-configs 1 -o few"
    )
    ip.run_cell_magic("tilelang", line + " --no-run", LAZY_AND_PRIM)
    assert len(ip.user_ns["few"].tune.records) == 1


def test_help_lists_the_options(ip):
    doc = ip.find_cell_magic("tilelang").__doc__
    for option in ("--ref", "--flops", "--bytes", "--no-run", "--force", "--pass-config", "-o"):
        assert option in doc


def test_broken_cell_names_its_line_and_keeps_old_names(ip, gemm_result):
    before = ip.user_ns["gemm"]
    broken = EAGER_GEMM.replace('GEMM_NOTE = "eager"', "GEMM_NOTE = undefined_name + 1")
    with pytest.raises(TileLangCellError) as info:
        ip.run_cell_magic("tilelang", "A, B", broken)
    line = broken.splitlines().index("GEMM_NOTE = undefined_name + 1") + 2  # the editor's numbering
    assert info.value.report.cell_line == line
    assert "undefined_name" in info.value.report.summary
    assert ip.user_ns["gemm"] is before and ip.user_ns["GEMM_NOTE"] == "eager"
    # the shell is fine afterwards
    assert ip.run_cell("1 + 1").result == 2


def test_error_inside_the_kernel_body_points_at_it(ip):
    broken = EAGER_GEMM.replace("T.clear(C_l)", "T.clear(C_missing)")
    with pytest.raises(TileLangCellError) as info:
        ip.run_cell_magic("tilelang", "A, B", broken)
    assert info.value.report.cell_line == broken.splitlines().index("        T.clear(C_missing)") + 2


def test_tilebench_line_magic(ip):
    assert "target: cuda -arch=sm_90a" in str(ip.run_line_magic("tilebench", "info"))
    assert "memory_kernels" in ip.run_line_magic("tilebench", "cache")
    with pytest.raises(UsageError, match="unknown command"):
        ip.run_line_magic("tilebench", "bogus")
    with pytest.raises(UsageError, match="%tilebench info takes nothing more, got '--bogus'"):
        ip.run_line_magic("tilebench", "info --bogus")
    with pytest.raises(UsageError, match="%tilebench runs takes at most a kernel name, got 'x y'"):
        ip.run_line_magic("tilebench", "runs x y")
    assert (
        "best_config" in ip.run_line_magic("tilebench", "runs no_such_kernel").columns
    )  # empty, with columns


def test_tune_option_without_a_gpu_compiles_every_config_and_shows_the_default(ip):
    ip.run_cell_magic(
        "tilelang", "-k vector_add 4096 --tune 'dict(block_N=[256, 512])' --no-run -o tuned", LAZY_AND_PRIM
    )
    result = ip.user_ns["tuned"]
    assert sorted(r.config["block_N"] for r in result.tune.records) == [256, 512]
    assert {r.status for r in result.tune.records} == {"skipped"}  # compiled; no GPU to time them here
    assert "compile-only: 2 configs compiled, none timed" in result.summary()
    assert result.kernel is not None and result.call == ((4096,), {})  # the line's own call, compiled
    frame = ip.run_line_magic("tilebench", "records vector_add")
    assert {256, 512} <= set(frame["block_N"])
    assert "vector_add" in set(ip.run_line_magic("tilebench", "runs")["kernel"])
    with pytest.raises(UsageError, match="--tune takes a dict"):
        ip.run_cell_magic("tilelang", "-k vector_add 4096 --tune '[1, 2]'", LAZY_AND_PRIM)


def test_constraint_option_keeps_only_the_configs_it_allows(ip):
    ip.run_cell_magic(
        "tilelang",
        "-k vector_add 8192 --tune 'dict(block_N=[256, 512, 1024], threads=[128, 256])' "
        '--constraint \'lambda c: c["block_N"] // c["threads"] == 2\' --no-run -o tuned',
        LAZY_AND_PRIM,
    )
    configs = sorted((r.config["block_N"], r.config["threads"]) for r in ip.user_ns["tuned"].tune.records)
    assert configs == [(256, 128), (512, 256)]
    with pytest.raises(UsageError, match="--constraint takes a callable"):
        ip.run_cell_magic(
            "tilelang", "-k vector_add 8192 --tune 'dict(block_N=[256])' --constraint 3", LAZY_AND_PRIM
        )
    with pytest.raises(UsageError, match="--constraint goes with --tune"):
        ip.run_cell_magic("tilelang", "-k vector_add 8192 --constraint 'lambda c: True'", LAZY_AND_PRIM)


PRINTS_ITS_SOURCE = """
import tilelang
import tilelang.language as T


def add_one(N, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] + 1

    return main


@tilelang.jit(out_idx=[-1])
def add_two(N, dtype="float32"):
    return add_one(N, dtype)


compiled = tilelang.compile(add_one(256), out_idx=[-1])
jitted = add_two(256)
asked = tilelang.compile(add_one(512), pass_configs={tilelang.PassConfigKey.TL_EMIT_LINE_DIRECTIVES: True})
SOURCES = [k.get_kernel_source() for k in (compiled, jitted, asked)] + [compiled.kernel_source]
SOURCES.append(add_two.get_kernel_source(256))
"""


def test_the_programs_own_view_of_its_source_has_no_directives_it_did_not_ask_for(ip):
    """The cell compiles with #line directives (nvcc errors name cell lines); a program reading its kernel's
    source gets what plain tilelang gives it: directives only where it asked for them."""
    ip.run_cell_magic("tilelang", "-o res", PRINTS_ITS_SOURCE)
    compiled, jitted, asked, compiled_source, from_the_function = ip.user_ns["SOURCES"]
    assert "#line" not in compiled and "#line" not in jitted and "#line" not in compiled_source
    assert "#line" not in from_the_function
    assert "#line" in asked
    assert "#line" in ip.user_ns["compiled"].cuda_source  # tilebench still has them for nvcc's errors
