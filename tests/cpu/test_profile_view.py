"""The panel's Profile tab: how to profile when not profiled, ncu's note when a profile failed, and a real
profile (Nsight Compute on the seed GEMM, captured on an H200: tests/data/ncu) with its stall samples as a
heat column beside the kernel's source lines."""

import gzip
import re
import sys
from pathlib import Path

import pytest
import torch

import tilebench as tb
from tilebench.compiler.cuda_tools import find_cuda_tool
from tilebench.compiler.options import LINE_DIRECTIVES
from tilebench.inspect.ncu_report import NcuProfile
from tilebench.magic.result import CellResult
from tilebench.views.panel import TABS, KernelPanel
from tilebench.views.profile import HOW, defining_cell
from tilebench.workers.profile import MISSING, ProfileOutcome

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import seed_kernels as S  # noqa: E402

DATA = Path(__file__).parent.parent / "data" / "ncu"
SEED = Path(S.__file__).read_text()


@pytest.fixture(scope="module")
def profiled():
    """A CellResult of the profiled GEMM: the seed file as its cell, the captured profile as its --profile."""
    if find_cuda_tool("nvdisasm") is None:
        pytest.skip("needs nvdisasm (pip install nvidia-cuda-nvdisasm, in the test extra)")
    A = tb.place(4096, 4096, dtype=torch.float16)
    B = tb.place(4096, 4096, dtype=torch.float16)
    kernel = S.gemm.with_options(pass_configs={LINE_DIRECTIVES: True}).compile(A, B)
    profile = NcuProfile.parse(
        (DATA / "details.csv").read_text(), gzip.decompress((DATA / "src_sass.csv.gz").read_bytes()).decode()
    )
    outcome = ProfileOutcome(profile, "", 12.5)
    return CellResult(
        cell=SEED,
        kernels={},
        name="gemm",
        kernel=kernel,
        artifacts=kernel.artifacts(),
        source=S.gemm.source,
        profile=outcome,
    )


def rows(html_text: str) -> dict[int, int]:
    """Heat rows: editor line -> samples."""
    return {int(a): int(b) for a, b in re.findall(r"data-line='(\d+)' data-samples='(\d+)'", html_text)}


def test_the_profile_tab_is_last_and_says_how_to_profile(profiled):
    assert TABS[-1] == "Profile"
    unprofiled = CellResult(**{**profiled.__dict__, "profile": None, "_panel": None})
    shown = KernelPanel(unprofiled).content("Profile").value
    assert HOW in shown and "--profile" in shown and "kernel.profile" in shown


def test_a_failed_profile_shows_ncus_note(profiled):
    failed = CellResult(**{**profiled.__dict__, "profile": ProfileOutcome(None, MISSING), "_panel": None})
    shown = KernelPanel(failed).content("Profile").value
    assert "tilebench-profile-failed" in shown and "TILEBENCH_NCU" in shown


def test_stall_heat_folds_the_samples_onto_the_cell_without_asking_for_line_info_first(profiled):
    """result.stall_heat() (notebook 7's `explain`) compiles the line info it needs itself."""
    heat = profiled.stall_heat()
    assert heat is not None and heat.mismatched == 0 and heat.share >= 0.9, heat
    gemm_line = next(n for n, line in enumerate(SEED.splitlines(), start=2) if "T.gemm(" in line)
    assert heat.samples.get(gemm_line, 0) > 0
    assert CellResult(**{**profiled.__dict__, "profile": None, "_panel": None}).stall_heat() is None
    failed = CellResult(**{**profiled.__dict__, "profile": ProfileOutcome(None, MISSING), "_panel": None})
    assert failed.stall_heat() is None


def test_a_profile_shows_speed_of_light_stalls_and_a_heat_column(profiled):
    shown = KernelPanel(profiled).content("Profile").value
    profile = profiled.profile.profile
    sol = profile.speed_of_light()
    assert f"{sol.compute_pct:,.1f}%" in shown and f"{sol.memory_pct:,.1f}%" in shown
    top = profile.top_stalls(5)
    assert all(stall.reason in shown for stall in top) and f"{100 * top[0].share:.1f}%" in shown
    heat = rows(shown)
    source = S.gemm.source.splitlines()
    first = min(heat)
    assert len(heat) == len(source) and max(heat) == first + len(source) - 1
    expected = profile.fold(profiled.artifacts.line_sass, profiled.artifacts.line_map_for(SEED))
    assert {line: n for line, n in heat.items() if n} == expected.samples
    hottest = max(heat, key=heat.get)
    assert "T.Pipelined(" in source[hottest - first]  # its mbarrier waits
    gemm_line = next(line for line in heat if "T.gemm(" in source[line - first])
    assert heat[gemm_line] == sorted(heat.values())[-2]
    assert f"{expected.mapped:,} of {expected.total:,} stall samples" in shown


def test_a_cell_that_names_an_earlier_cells_kernel_finds_that_cells_lines(ip):
    """`gemm = tuned.kernels["gemm"]` in a %%tilelang cell (notebook 7 profiles configs this way): the
    Profile tab's source lines are those of the cell that defined the kernel."""
    from magic_cells import EAGER_GEMM

    ip.run_cell("import torch, tilebench as tb\nA = tb.place(1024, 512, dtype=torch.float16)\n")
    ip.run_cell("B = tb.place(512, 256, dtype=torch.float16)\nsmall = dict(block_M=64)")
    ip.run_cell_magic("tilelang", "A, B -o defining", EAGER_GEMM)
    ip.run_cell_magic("tilelang", "A, B, **small -o naming", "gemm = defining.kernels['gemm']\n")
    panel = KernelPanel(ip.user_ns["naming"])
    cell, start = defining_cell(ip.user_ns["naming"])
    assert cell.rstrip() == EAGER_GEMM.rstrip() and panel.links.start is None
    source = ip.user_ns["naming"].source.splitlines()
    assert EAGER_GEMM.splitlines()[start - 2] == source[0]  # editor line `start` is the source's first
