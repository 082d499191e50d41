"""Nsight Compute's CSV pages parsed (tests/data/ncu: a real profile of seed_kernels.gemm on an H200, see its
README), and its stall samples folded onto the GEMM's source lines through a compile of the same kernel
here; every expected value is read from the CSV again with the csv module."""

import csv
import gzip
import io
import json
import re
from collections import Counter
from pathlib import Path

import pytest
import seed_kernels as S
import torch

import tilebench as tb
from tilebench.compiler.cuda_tools import find_cuda_tool
from tilebench.compiler.options import LINE_DIRECTIVES
from tilebench.inspect.line_map import MAGIC_LINES, shown_cuda
from tilebench.inspect.ncu_report import (
    ALL_SAMPLES,
    NOT_ISSUED,
    LineHeat,
    Metric,
    NcuProfile,
    opcode,
    parse_details,
    parse_source,
    value_of,
)
from tilebench.views.diff import profile_section

DATA = Path(__file__).parent.parent / "data" / "ncu"
SEED_KERNELS = Path(__file__).parent.parent / "seed_kernels.py"
DETAILS = (DATA / "details.csv").read_text()
SOURCE = gzip.decompress((DATA / "src_sass.csv.gz").read_bytes()).decode()
_SASS = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;")


def details_rows() -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(DETAILS)))


def source_rows() -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(SOURCE.split("\n", 1)[1])))  # past the "Kernel Name" line


def number(text: str) -> int:
    return int(text.replace(",", ""))


def stall_columns(row: dict[str, str]) -> dict[str, int]:
    return {k[6:]: number(v) for k, v in row.items() if k.startswith("stall_") and "Not Issued" not in k}


def csv_stalls(pick=lambda row: True) -> Counter:
    """Reason -> samples over the source page's rows that `pick` takes."""
    counts = Counter()
    for row in source_rows():
        if pick(row):
            counts.update(stall_columns(row))
    return counts


@pytest.fixture(scope="module")
def profile() -> NcuProfile:
    return NcuProfile.parse(DETAILS, SOURCE)


def test_values_as_ncu_prints_them():
    assert value_of("554,654") == 554654.0 and value_of("521,095.61") == 521095.61
    assert value_of("3.20") == 3.2 and value_of("0") == 0.0 and value_of("-1,024") == -1024.0
    assert value_of("-") is None and value_of("") is None
    assert value_of("PolicySpread") == "PolicySpread" and value_of("inf") == "inf"  # strict JSON stays


def test_the_details_page(profile):
    rows = details_rows()
    assert profile.kernel == "gemm_kernel" == rows[0]["Kernel Name"]
    metric_rows = [r for r in rows if r["Metric Name"]]
    rule_rows = [r for r in rows if r["Rule Name"]]
    assert len(metric_rows) + len(rule_rows) == len(rows)
    assert sum(len(m) for m in profile.metrics.values()) == len(metric_rows) == 87
    for row in metric_rows:
        parsed = profile.metric(row["Section Name"], row["Metric Name"])
        text = row["Metric Value"]
        expected = float(text.replace(",", "")) if re.fullmatch(r"[\d,.]+", text) else text
        assert parsed == Metric(expected, row["Metric Unit"]), row
    assert [(r.name, r.kind, r.section) for r in profile.rules] == [
        (r["Rule Name"], r["Rule Type"], r["Section Name"]) for r in rule_rows
    ]
    assert profile.rules[0].description.startswith("This workload exhibits low compute throughput")
    speedups = [float(r["Estimated Speedup"]) if r["Estimated Speedup"] else None for r in rule_rows]
    assert [r.speedup for r in profile.rules] == speedups


def test_speed_of_light_occupancy_and_traffic(profile):
    rows = details_rows()

    def value(section: str, name: str) -> float:
        (row,) = [r for r in rows if r["Section Name"] == section and r["Metric Name"] == name]
        return float(row["Metric Value"].replace(",", ""))

    sol, section = profile.speed_of_light(), "GPU Speed Of Light Throughput"
    assert (sol.compute_pct, sol.memory_pct, sol.dram_pct) == (
        value(section, "Compute (SM) Throughput"),
        value(section, "Memory Throughput"),
        value(section, "DRAM Throughput"),
    )
    assert (sol.l1_pct, sol.l2_pct) == (
        value(section, "L1/TEX Cache Throughput"),
        value(section, "L2 Cache Throughput"),
    )
    assert sol.duration_us == value(section, "Duration") == 412.99  # ncu printed it in "us"
    assert sol.sm_frequency_ghz == value(section, "SM Frequency") == 1.33  # in "Ghz"

    occupancy = profile.occupancy()
    limits = [r for r in rows if r["Metric Name"].startswith("Block Limit ")]
    smallest = min(limits, key=lambda r: float(r["Metric Value"]))
    assert occupancy.limiter == smallest["Metric Name"].removeprefix("Block Limit ") == "Shared Mem"
    assert occupancy.limit_blocks == float(smallest["Metric Value"])
    assert occupancy.achieved_pct == value("Occupancy", "Achieved Occupancy")
    assert occupancy.theoretical_pct == value("Occupancy", "Theoretical Occupancy")
    assert occupancy.achieved_warps == value("Occupancy", "Achieved Active Warps Per SM")
    assert occupancy.registers == value("Launch Statistics", "Registers Per Thread") == 240

    traffic = profile.traffic()
    assert traffic.memory_gbs == value("Memory Workload Analysis", "Memory Throughput") == 900.92
    assert traffic.l1_hit_pct == value("Memory Workload Analysis", "L1/TEX Hit Rate")
    assert traffic.l2_hit_pct == value("Memory Workload Analysis", "L2 Hit Rate")
    assert traffic.dram_pct == sol.dram_pct


def test_the_sass_source_page(profile):
    rows = source_rows()
    assert len(profile.sass) == len(rows) == 624
    base = int(rows[0]["Address"], 16)
    assert [s.offset for s in profile.sass] == [int(r["Address"], 16) - base for r in rows]
    assert [s.offset for s in profile.sass[:3]] == [0, 16, 32]
    assert [s.source for s in profile.sass] == [r["Source"].strip() for r in rows]
    assert profile.total_samples == sum(number(r[ALL_SAMPLES]) for r in rows) == 33605
    assert sum(s.not_issued for s in profile.sass) == sum(number(r[NOT_ISSUED]) for r in rows)
    for sample, row in zip(profile.sass, rows):
        assert sample.stalls == {k: v for k, v in stall_columns(row).items() if v}  # zeros left out
    assert profile.stall_samples() == +csv_stalls()


def test_top_stalls_and_what_compare_reads(profile):
    expected = csv_stalls().most_common(5)
    top = profile.top_stalls()
    assert [(s.reason, s.samples) for s in top] == expected
    assert [s.reason for s in top] == ["long_sb", "barrier", "wait", "selected", "lg"]
    assert all(s.share == s.samples / profile.total_samples for s in top)
    assert top[0].share == pytest.approx(0.4436, abs=1e-4)

    measured = profile.profile_metrics()
    assert set(measured) == {"metrics", "stalls"}
    assert measured["stalls"]["long_sb"] == pytest.approx(100 * expected[0][1] / profile.total_samples)
    assert measured["metrics"]["duration µs"] == 412.99 and measured["metrics"]["registers/thread"] == 240
    assert all(isinstance(v, float) for part in measured.values() for v in part.values())
    section = profile_section(measured, None)  # what tb.compare shows of it
    assert section.row("stall: long_sb").a == f"{measured['stalls']['long_sb']:.4g}"
    assert section.row("L2 hit rate %").a == "78.06" and section.note == "b: not profiled"


def test_json_round_trip(profile):
    data = json.loads(json.dumps(profile.to_dict(), allow_nan=False))
    assert NcuProfile.from_dict(data) == profile
    heat = LineHeat({28: 5}, {28: {"barrier": 4}}, total=10, mapped=5)
    assert LineHeat.from_dict(json.loads(json.dumps(heat.to_dict()))) == heat and heat.share == 0.5


def test_several_kernels_in_the_details_page():
    header, *rows = DETAILS.splitlines()
    second = [
        row.replace('"0","736","python3.12","127.0.0.1","gemm_kernel"', '"1","736","p","h","other"')
        for row in rows
    ]
    text = "\n".join([header, *rows, *second])
    assert parse_details(text)[0] == "gemm_kernel"
    name, metrics, rules = parse_details(text, kernel_id="1")
    assert name == "other" and metrics == parse_details(DETAILS)[1] and len(rules) == 8
    with pytest.raises(ValueError, match=r"no rows of kernel ID '7' \(IDs: \['0', '1'\]\)"):
        parse_details(text, kernel_id="7")


def test_clear_errors_on_what_ncu_did_not_write():
    with pytest.raises(ValueError, match=r"not Nsight Compute's details page \(ncu --csv --page details\)"):
        parse_details("name,value\nx,1\n")
    with pytest.raises(ValueError, match="not Nsight Compute's details page"):
        parse_details(SOURCE)  # the other page
    with pytest.raises(ValueError, match=r"not Nsight Compute's source page \(ncu --csv --page source"):
        parse_source(DETAILS)
    with pytest.raises(ValueError, match="its header lacks Metric Value"):
        parse_details('"ID","Kernel Name","Section Name","Metric Name","Metric Unit"\n')
    # cut in the middle of a row: the details page inside a quoted field, the source page between fields
    with pytest.raises(ValueError, match="details page is cut short or not CSV"):
        parse_details(DETAILS[: DETAILS.index("This workload exhibits") + 20])
    with pytest.raises(ValueError, match=r"details page: line 4 has 13 fields, fewer than the 15 its header"):
        parse_details(DETAILS[: DETAILS.index('"Elapsed Cycles"')])
    with pytest.raises(ValueError, match=r"source page: line 30 has \d+ fields, fewer than the 67"):
        parse_source(
            "\n".join(SOURCE.splitlines()[:29]) + "\n" + SOURCE.splitlines()[29][:80].rsplit(",", 1)[0]
        )
    with pytest.raises(ValueError, match="source page has no instruction rows"):
        parse_source("\n".join(SOURCE.splitlines()[:2]))
    renamed = SOURCE.replace('"Kernel Name","gemm_kernel"', '"Kernel Name","other_kernel"', 1)
    with pytest.raises(
        ValueError, match="details page is of kernel 'gemm_kernel', the source page of 'other_kernel'"
    ):
        NcuProfile.parse(DETAILS, renamed)


# ---------------------------------------------------------------------------------------------------
# The fold: the same GEMM compiled here, with `#line` directives (a %%tilelang cell's pass config)


@pytest.fixture(scope="module")
def compiled():
    """(SASS with line info, LineMap for seed_kernels.py's text) of the profiled GEMM. The directives
    change no instruction (the fold finds every opcode at its offset)."""
    if find_cuda_tool("nvdisasm") is None:
        pytest.skip("needs nvdisasm (pip install nvidia-cuda-nvdisasm, in the test extra)")
    A = tb.place(4096, 4096, dtype=torch.float16)
    B = tb.place(4096, 4096, dtype=torch.float16)
    kernel = S.gemm.with_options(pass_configs={LINE_DIRECTIVES: True}).compile(A, B)
    art = kernel.artifacts()
    art.ensure_line_info()
    line_map = art.line_map_for(SEED_KERNELS.read_text())
    assert line_map.cell_file == str(SEED_KERNELS.resolve()) and art.line_sass, art.errors
    return art.line_sass, line_map, shown_cuda(art.cuda_source).splitlines()


def sass_lines(line_sass: str) -> dict[int, int]:
    """Offset -> SASS line (1-based) of nvdisasm's text."""
    lines = enumerate(line_sass.splitlines(), start=1)
    return {int(m.group(1), 16): n for n, line in lines if (m := _SASS.match(line))}


def cell_line(needle: str) -> int:
    """The LineMap's line of seed_kernels.py's line holding `needle` in `gemm`: the file's text was given as
    the cell, so its lines count as the editor's, one past the file's (the `%%tilelang` line)."""
    lines = SEED_KERNELS.read_text().splitlines()
    first = next(n for n, line in enumerate(lines, start=1) if line.startswith("def gemm("))
    found = next(n for n, line in enumerate(lines[first:], start=first + 1) if needle in line)
    return found + MAGIC_LINES


def test_the_samples_fold_onto_the_gemms_lines(profile, compiled):
    line_sass, line_map, _ = compiled
    heat = profile.fold(line_sass, line_map)
    assert heat.mismatched == 0 and heat.total == profile.total_samples
    assert sum(heat.samples.values()) == heat.mapped
    assert all(sum(heat.stalls[line].values()) <= n for line, n in heat.samples.items())
    # what is mapped is exactly the samples of instructions whose SASS line has a cell line
    sass_line = sass_lines(line_sass)
    owned = sum(s.samples for s in profile.sass if line_map.cell_of("sass", sass_line[s.offset]) is not None)
    assert heat.mapped == owned
    print(f"mapped {heat.mapped} of {heat.total} samples ({heat.share:.1%}): {heat.samples}")

    gemm, store, pipelined = cell_line("T.gemm("), cell_line("T.copy(C_local"), cell_line("T.Pipelined(")
    # the most on T.Pipelined (its mbarrier waits: the producer waits for free stages), then T.gemm
    assert sorted(heat.samples, key=heat.samples.get, reverse=True)[:2] == [pipelined, gemm]
    # T.gemm's samples wait on the wgmma (WARPGROUP.DEPBAR: "barrier"), not at the HGMMAs themselves
    depbar = csv_stalls(lambda row: opcode(row["Source"]).startswith("WARPGROUP.DEPBAR"))
    hgmma = csv_stalls(lambda row: opcode(row["Source"]).startswith("HGMMA"))
    assert heat.dominant(gemm) == depbar.most_common(1)[0][0] == "barrier"
    assert hgmma.most_common(1)[0][0] == "wait"
    assert heat.stalls[gemm]["barrier"] == depbar["barrier"]  # every DEPBAR on T.gemm's line
    # the output copy's samples are its global stores'
    stg = csv_stalls(lambda row: opcode(row["Source"]).startswith("STG"))
    assert heat.dominant(store) == stg.most_common(1)[0][0] == "lg"
    assert heat.stalls[store]["lg"] == stg["lg"]


def test_the_pipelines_own_code_goes_to_t_pipelined_and_its_copies(profile, compiled):
    """tilelang writes no `#line` directive for its warp-specialized pipeline (the producer's TMA loop, the
    mbarrier waits and arrives): its TMA loads go to the T.copy of their tensor, the rest to T.Pipelined
    (inspect/pipeline_lines.py); what stays unmapped is under 1% of the samples."""
    line_sass, line_map, cuda = compiled
    to_cell = line_map.to_cell["cuda"]
    for tensor in ("A", "B"):
        loads = [n for n, text in enumerate(cuda, start=1) if f"tma_load({tensor}_desc" in text]
        assert loads and {to_cell.get(n) for n in loads} == {cell_line(f"T.copy({tensor}[")}, tensor
    waits = [n for n, text in enumerate(cuda, start=1) if "].wait(" in text]
    assert len(waits) == 2 and {to_cell.get(n) for n in waits} == {cell_line("T.Pipelined(")}
    heat = profile.fold(line_sass, line_map)
    sass_line = sass_lines(line_sass)
    unmapped = sum(s.samples for s in profile.sass if line_map.cell_of("sass", sass_line[s.offset]) is None)
    assert unmapped == heat.total - heat.mapped < 0.01 * heat.total


def test_the_issues_target_share(profile, compiled):
    """Issue 34's target: 90% of the stall samples or more land on a cell line."""
    line_sass, line_map, _ = compiled
    assert profile.fold(line_sass, line_map).share >= 0.9


def test_opcode_mismatches_are_counted_not_folded(profile, compiled):
    line_sass, line_map, _ = compiled
    sass_line = sass_lines(line_sass)
    mapped = [s for s in profile.sass if line_map.cell_of("sass", sass_line[s.offset]) is not None]
    hottest = max(mapped, key=lambda s: s.samples)
    pattern = rf"(/\*{hottest.offset:04x}\*/\s*(?:@\S+\s+)?){re.escape(opcode(hottest.source))}"
    text = re.sub(pattern, r"\1NOP", line_sass, count=1)
    assert text != line_sass
    before, after = profile.fold(line_sass, line_map), profile.fold(text, line_map)
    assert after.mismatched == 1 and after.mapped == before.mapped - hottest.samples
    assert opcode("@!P1  BRA 0x7f0dd77a4e00") == "BRA"
    assert opcode("HGMMA.64x128x16.F32 R24, gdesc[UR8].tnspB, R24 ;") == "HGMMA.64x128x16.F32"
