"""tb.compare: two compiled configs side by side (resources, instruction mix, profile) and the diff of their
sources; tb.bench refuses to time without a GPU."""

import re

import pytest
import seed_kernels as S
import torch

import tilebench as tb


@pytest.fixture(scope="module")
def matmul():
    return S.matmul


def test_compare_two_configs_cuda(matmul):
    small = matmul.compile(1024, 1024, 1024, block_M=64)
    large = matmul.compile(1024, 1024, 1024, block_M=128)
    diff = tb.compare(small, large)
    assert not diff.identical and diff.added > 0 and diff.removed > 0
    assert diff.summary() == f"cuda: {diff.added} lines added, {diff.removed} removed"
    changed = [line for line in diff.text.splitlines() if line.startswith(("+", "-"))]
    assert any("64" in line for line in changed)  # the block size shows up in what changed
    bundle = diff._repr_mimebundle_()
    assert bundle["text/plain"] == diff.summary() and "application/vnd.jupyter.widget-view+json" in bundle
    assert tb.compare(small, small).identical
    assert tb.compare(small, large, what="tir").added > 0


def test_compare_and_bench_refuse_bad_input(matmul):
    kernel = matmul.compile(1024, 1024, 1024)
    with pytest.raises(ValueError, match="what must be one of cuda, tir, ptx, sass, host"):
        tb.compare(kernel, kernel, what="llvm")
    with pytest.raises(TypeError, match="compare\\(\\) takes compiled kernels"):
        tb.compare(kernel, 42)
    if not torch.cuda.is_available():
        with pytest.raises(tb.NoDeviceError, match="needs a CUDA device"):
            tb.bench(torch.matmul, torch.ones(2, 2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="backend must be one of event, cupti, cudagraph"):
        tb.bench(torch.matmul, backend="wall")


# --- two configs side by side: resources, instruction mix, profile ---------------------------------

# each resource row -> the Resources fields it shows
RESOURCE_FIELDS = {
    "registers / thread": ("registers_per_thread",),
    "spills": ("spill_store_bytes", "spill_load_bytes"),
    "shared memory": ("smem_bytes", "static_smem_bytes", "dynamic_smem_bytes"),
    "threads / block": ("threads_per_block",),
    "grid": ("grid",),
    "occupancy": ("occupancy_blocks_per_sm", "occupancy_limiter"),
}
GUARD = r"^[ \t]*(?:@!?%?\w+[ \t]+)?"  # an instruction's line start in PTX, predicate guard included


@pytest.fixture(scope="module")
def stages(matmul):
    """The same GEMM tile with 2 and with 4 pipeline stages."""
    return (
        matmul.compile(1024, 1024, 1024, num_stages=2),
        matmul.compile(1024, 1024, 1024, num_stages=4),
    )


def _figures(resources, row):
    return tuple(getattr(resources, name) for name in RESOURCE_FIELDS[row])


def _count(shown):
    return int(shown.split()[0])


def test_two_configs_side_by_side_resources(stages):
    a, b = stages
    ra, rb = a.artifacts().resources, b.artifacts().resources
    cmp = tb.compare(a, b, labels=("2 stages", "4 stages"))
    section = cmp.sections["resources"]
    assert [row.name for row in section.rows] == list(RESOURCE_FIELDS)
    assert rb.smem_bytes > ra.smem_bytes  # every stage adds a buffer for A's and B's tiles
    assert cmp.sections["resources"].row("shared memory").differs
    assert "resources: shared memory" in cmp.differing
    for row in section.rows:  # a row is flagged exactly when the figures behind it differ
        assert row.differs == (_figures(ra, row.name) != _figures(rb, row.name)), row
    assert ra.threads_per_block == rb.threads_per_block and ra.grid == rb.grid
    assert not section.row("threads / block").differs and not section.row("grid").differs
    assert str(ra.registers_per_thread) in section.row("registers / thread").a
    assert f"{ra.occupancy_blocks_per_sm} block" in section.row("occupancy").a
    # the old diff is there too, labelled as asked
    assert cmp.text.splitlines()[:2] == ["--- 2 stages", "+++ 4 stages"]
    assert cmp.added > 0 and cmp.summary() == f"cuda: {cmp.added} lines added, {cmp.removed} removed"


def test_two_configs_instruction_mix_from_ptx(stages):
    a, b = stages
    cmp = tb.compare(a, b)
    art_a, art_b = a.artifacts(), b.artifacts()
    isa = "SASS" if art_a.sass and art_b.sass else "PTX"
    section = cmp.sections["instruction mix"]
    assert section.title == f"instruction mix ({isa})" and f"static counts from {isa}" in section.note
    if isa == "PTX":  # no nvdisasm on the CPU machine: PTX, counted here again line by line
        for art, side in ((art_a, "a"), (art_b, "b")):
            wgmma = len(re.findall(GUARD + r"wgmma\.", art.ptx, re.M))
            tma = len(re.findall(GUARD + r"(?:cp\.async\.bulk|prefetch\.tensormap)\b", art.ptx, re.M))
            assert wgmma > 0 and _count(getattr(section.row("tensor core"), side)) == wgmma
            assert tma > 0 and _count(getattr(section.row("memory: TMA"), side)) == tma
        assert "no SASS" in section.note
    total = section.row("total")
    classes = [row for row in section.rows if row is not total]
    for side in ("a", "b"):
        assert sum(_count(getattr(row, side)) for row in classes) == _count(getattr(total, side))
    for row in section.rows:
        assert row.differs == (_count(row.a) != _count(row.b)), row
    # both tiles are 128x128: as many wgmma instructions, not flagged
    assert not section.row("tensor core").differs
    assert cmp.sections["profile"].rows == () and cmp.sections["profile"].note == "not profiled"


def test_ptx_mix_reads_nvcc_and_embedded_ptx_alike(stages):
    """The panel's line-info PTX (nvcc's layout: tabs, comments, .loc lines, inline asm blocks) and the
    cubin's embedded copy (bare lines) are the same program: the same opcodes, counted the same."""
    from tilebench.inspect.instruction_mix import TENSOR_CORE, classify, ptx_mix

    art = stages[0].artifacts()
    nvcc_ptx = art.ensure_line_info()
    assert ".loc" in nvcc_ptx and "// begin inline asm" in nvcc_ptx
    nvcc, embedded = ptx_mix(nvcc_ptx), ptx_mix(art.ptx)
    assert nvcc.opcodes == embedded.opcodes and nvcc.counts == embedded.counts
    assert nvcc.counts[TENSOR_CORE] == len(re.findall(GUARD + r"wgmma\.", nvcc_ptx, re.M)) > 0
    assert sum(nvcc.opcodes.values()) == nvcc.total
    assert classify("ld.shared::cta.v4.u32") == classify("LDS.128") == "memory: shared"
    assert classify("cp.async.ca.shared.global") == classify("LDGSTS.E.BYPASS") == "memory: cp.async"
    assert (
        classify("cp.async.bulk.tensor.2d.shared::cluster.global") == classify("UTMALDG.2D") == "memory: TMA"
    )
    assert classify("UIADD3") == classify("IADD3") == "arithmetic"
    assert classify("setmaxnreg.inc.sync.aligned.u32") == "other"


def test_sass_is_preferred_when_both_kernels_have_it(stages):
    """SASS as nvdisasm writes it (cuobjdump's encoding comments ignored); one kernel without SASS makes
    both count PTX, so the two columns always come from one ISA."""
    import dataclasses

    from tilebench.magic.result import CellResult

    sass = "\n".join(
        [
            "        /*0000*/                   LDC R1, c[0x0][0x28] ;",
            "                                                              /* 0x000fe200078e00ff */",
            "        /*0010*/              @!P0 BRA `(.L_x_1) ;",
            "        /*0020*/                   HGMMA.64x128x16.F32 R24, gdesc[UR4], RZ, !UPT ;",
            "        /*0030*/                   UTMALDG.2D [UR8], [UR10] ;",
            "        /*0040*/                   SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [UR5], RZ ;",
            "        /*0050*/                   STG.E.64 desc[UR6][R8.64], R4 ;",
            "        /*0060*/                   EXIT ;",
        ]
    )
    arts = [dataclasses.replace(kernel.artifacts(), sass=sass) for kernel in stages]
    cells = [CellResult(cell="", kernels={}, name="main", artifacts=art) for art in arts]
    section = tb.compare(*cells).sections["instruction mix"]
    assert section.title == "instruction mix (SASS)"
    shown = {row.name: _count(row.a) for row in section.rows}
    assert shown["tensor core"] == shown["memory: TMA"] == shown["memory: global"] == 1
    assert shown["control (branch, barrier)"] == 3 and shown["other"] == 1 and shown["total"] == 7
    assert not any(row.differs for row in section.rows)
    without = dataclasses.replace(stages[1].artifacts(), sass=None)
    mixed = tb.compare(cells[0], CellResult(cell="", kernels={}, name="main", artifacts=without))
    assert mixed.sections["instruction mix"].title == "instruction mix (PTX)"


def test_the_real_sass_mix_counts_what_nvdisasm_printed(stages):
    """With nvdisasm (the test extra's nvidia-cuda-nvdisasm): the kernels' own SASS, code only."""
    from tilebench.compiler.cuda_tools import find_cuda_tool

    if find_cuda_tool("nvdisasm") is None:
        pytest.skip("needs nvdisasm (pip install nvidia-cuda-nvdisasm, in the test extra)")
    sass = [kernel.artifacts().sass for kernel in stages]
    assert all(text and ".debug_line" not in text for text in sass)
    section = tb.compare(*stages).sections["instruction mix"]
    assert section.title == "instruction mix (SASS)"
    row = section.row("tensor core")
    counted = [len(re.findall(r"\b(?:HGMMA|WARPGROUP)\.", text)) for text in sass]  # wgmma and its fences
    assert [_count(row.a), _count(row.b)] == counted and min(counted) > 0


def test_profile_metrics_where_an_object_carries_them(stages):
    from tilebench.magic.result import CellResult

    a, b = (CellResult(cell="", kernels={}, name="main", kernel=k, artifacts=k.artifacts()) for k in stages)
    a.profile_metrics = {
        "metrics": {"sm__throughput.avg.pct_of_peak_sustained_elapsed": 61.5, "dram__bytes.sum": 4096},
        "stalls": {"long_scoreboard": 12.5},
    }
    b.profile_metrics = {
        "metrics": {"sm__throughput.avg.pct_of_peak_sustained_elapsed": 70, "dram__bytes.sum": 4096}
    }
    section = tb.compare(a, b).sections["profile"]
    assert section.row("sm__throughput.avg.pct_of_peak_sustained_elapsed").differs
    assert not section.row("dram__bytes.sum").differs and section.row("dram__bytes.sum").a == "4096"
    stall = section.row("stall: long_scoreboard")
    assert (stall.a, stall.b, stall.differs) == ("12.5", "—", True)
    only_a = tb.compare(a, stages[1]).sections["profile"]
    assert only_a.note == "b: not profiled" and only_a.row("dram__bytes.sum").b == "—"
    b.profile_metrics = {"cycles": 10}
    with pytest.raises(TypeError, match="profile_metrics must be a dict with 'metrics' and/or 'stalls'"):
        tb.compare(a, b)


def test_comparison_renders_html_and_text(stages):
    cmp = tb.compare(*stages, labels=("stages <2>", "stages <4>"))
    page = cmp._repr_html_()
    assert "stages &lt;2&gt;" in page and "stages &lt;4&gt;" in page
    marked = re.findall(r"<tr class='tb-differs'[^>]*><th>([^<]*)</th>", page)
    differing = [row.name for s in cmp.sections.values() for row in s.rows if row.differs]
    assert marked == differing and "shared memory" in marked
    assert page.count("<tr") - page.count("<tr class='tb-differs'") - page.count("<thead><tr>") == sum(
        not row.differs for s in cmp.sections.values() for row in s.rows
    )
    assert "not profiled" in page and "<pre>" in page  # the diff, folded under its summary
    text = str(cmp)
    assert text.startswith("stages <2>  vs  stages <4>") and text.endswith(cmp.summary())
    starred = [line[2:].split("  ")[0] for line in text.splitlines() if line.startswith("* ")]
    assert starred == differing
    bundle = cmp._repr_mimebundle_()
    assert bundle["text/plain"] == cmp.summary() and bundle["text/html"] == page
    assert "application/vnd.jupyter.widget-view+json" in bundle  # the tables above the diff's code view
    same = tb.compare(stages[0], stages[0])
    assert same.identical and not same.differing and "text/html" in same._repr_mimebundle_()
    assert same.text == "" and str(same).splitlines()[0].startswith("a: main")


def test_source_strings_and_bad_labels():
    cmp = tb.compare("x = 1\ny = 2\n", "x = 1\ny = 3\n")
    assert (cmp.added, cmp.removed, cmp.sections) == (1, 1, {})
    assert "no side-by-side figures" in str(cmp) and "no side-by-side figures" in cmp._repr_html_()
    with pytest.raises(ValueError, match="labels must be two strings"):
        tb.compare("a", "b", labels="ab")


def test_a_cells_profile_is_compared(stages):
    """A %%tilelang --profile result carries Nsight Compute's metrics (the captured seed-GEMM profile)."""
    import gzip
    from pathlib import Path

    from tilebench.inspect.ncu_report import NcuProfile
    from tilebench.magic.result import CellResult
    from tilebench.workers.profile import ProfileOutcome

    data = Path(__file__).parent.parent / "data" / "ncu"
    profile = NcuProfile.parse(
        (data / "details.csv").read_text(), gzip.decompress((data / "src_sass.csv.gz").read_bytes()).decode()
    )
    a, b = (CellResult(cell="", kernels={}, name="main", kernel=k, artifacts=k.artifacts()) for k in stages)
    a.profile = ProfileOutcome(profile, "", 1.0)
    section = tb.compare(a, b).sections["profile"]
    assert section.note == "b: not profiled"
    for reason, percent in profile.profile_metrics()["stalls"].items():
        assert (
            section.row(f"stall: {reason}").a == f"{percent:.4g}" and section.row(f"stall: {reason}").b == "—"
        )
    b.profile = ProfileOutcome(profile, "", 1.0)
    assert not any(row.differs for row in tb.compare(a, b).sections["profile"].rows)
