"""Profiles on the GPU (issue 34): kernel.profile and %%tilelang --profile run Nsight Compute on one launch;
the seed GEMM's tensor-core SASS and its stall samples land on its cell lines, the attention template's
profile fills the panel's Profile tab, and a roofline point matches the Run tab's TFLOP/s."""

from pathlib import Path

import pytest
import seed_kernels as S
import torch
from magic_cells import EAGER_GEMM

import tilebench as tb
from tilebench.compiler.options import LINE_DIRECTIVES
from tilebench.lab.templates import TEMPLATES
from tilebench.measure.peaks import measured_peaks
from tilebench.views.panel import KernelPanel
from tilebench.workers.profile import find_ncu

pytestmark = pytest.mark.skipif(find_ncu() is None, reason="needs Nsight Compute's ncu")
SEED = Path(S.__file__).read_text()


def seed_line(needle: str) -> int:
    """The editor line (the file's line + 1: the `%%tilelang` line) of `needle` in seed_kernels.gemm."""
    lines = SEED.splitlines()
    first = next(n for n, line in enumerate(lines, start=1) if line.startswith("def gemm("))
    return next(n for n, line in enumerate(lines[first:], start=first + 1) if needle in line) + 1


def test_the_gemm_profile_lands_on_its_lines():
    A = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
    B = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
    kernel = S.gemm.with_options(pass_configs={LINE_DIRECTIVES: True}).compile(A, B)
    outcome = kernel.profile(A, B)
    assert outcome.ok, outcome.note
    profile = outcome.profile
    sol = profile.speed_of_light()
    assert 0 < sol.compute_pct <= 100 and 0 < sol.memory_pct <= 100 and sol.duration_us > 0
    assert profile.top_stalls(3) and profile.occupancy().achieved_pct > 0
    art = kernel.artifacts()
    art.ensure_line_info()
    line_map = art.line_map_for(SEED)
    heat = profile.fold(art.line_sass, line_map)
    assert heat.mismatched == 0 and heat.share >= 0.9, heat
    gemm = seed_line("T.gemm(")
    sass = art.line_sass.splitlines()
    owners = [line_map.cell_of("sass", n) for n, line in enumerate(sass, start=1) if "HGMMA" in line]
    assert owners.count(gemm) > len(owners) / 2, owners  # the tensor-core SASS is T.gemm's
    assert heat.samples.get(gemm, 0) > 0
    print(f"profiled in {outcome.seconds:.1f} s; {heat.share:.1%} of {heat.total} samples on a cell line")


@pytest.fixture(scope="module")
def ip():
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "tilebench")
    return shell


def test_the_attention_templates_profile_tab(ip):
    template = next(t for t in TEMPLATES if t.name == "attention")
    magic, _, body = template.source.partition("\n")
    ip.run_cell_magic("tilelang", magic.removeprefix("%%tilelang") + " --profile -o profiled_attention", body)
    result = ip.user_ns["profiled_attention"]
    assert result.profile is not None and result.profile.ok, result.profile and result.profile.note
    shown = KernelPanel(result).content("Profile").value
    assert "speed of light" in shown and "tilebench-heat-row" in shown
    heat = result.stall_heat()
    assert heat is not None and heat.share >= 0.9, heat


def test_a_roofline_point_is_the_run_tabs_tflops(ip):
    ip.run_cell(
        "import torch\n"
        "A = torch.randn(4096, 4096, dtype=torch.float16, device='cuda')\n"
        "B = torch.randn(4096, 4096, dtype=torch.float16, device='cuda')\n"
    )
    ip.run_cell_magic("tilelang", "A, B -o roofline_gemm --flops 2*4096**3", EAGER_GEMM)
    run = ip.user_ns["roofline_gemm"].run
    assert run.status == "ok" and run.tflops, run.message
    figure = tb.roofline(run, peaks=measured_peaks(), flops=2 * 4096**3, bytes=3 * 2 * 4096**2)
    points = [y for trace in figure.data if trace.mode == "markers" for y in trace.y]
    assert points and abs(points[0] - run.tflops) <= 0.05 * run.tflops
