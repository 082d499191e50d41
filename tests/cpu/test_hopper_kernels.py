"""The Hopper templates (tilebench/templates/) compile for sm_90a in each structure their tuning space
names, and the structure parameter changes the kernel as it says."""

import json
import re
from pathlib import Path

import pytest
import torch

import tilebench as tb
from tilebench import templates

ATTENTION = templates.module("attention")
GEMM = templates.module("gemm")
GEMM_DEFAULTS = dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, epilogue="shared")


def test_warp_specialization_is_a_per_call_parameter():
    a = tb.place(4096, 4096, dtype=torch.float16)
    specialized = templates.kernel("gemm").compile(a, a, warp_specialized=True)
    pipelined = templates.kernel("gemm").compile(a, a, warp_specialized=False)
    # a producer warpgroup of 128 threads issuing TMA loads against mbarriers, beside the 256 consumers
    assert specialized.artifacts().resources.threads_per_block == 256 + 128
    assert "tma_load" in specialized.cuda_source and "Barrier*>" in specialized.cuda_source
    assert pipelined.artifacts().resources.threads_per_block == 256
    assert "Barrier*>" not in pipelined.cuda_source and "cp_async" in pipelined.cuda_source.lower()


def test_the_spaces_constraints_keep_configs_worth_compiling():
    import itertools

    def configs(space):
        return [dict(zip(space, values)) for values in itertools.product(*space.values())]

    attention = [c for c in configs(ATTENTION.ATTENTION_SPACE) if ATTENTION.attention_fits(c)]
    assert attention
    assert all(c["block_M"] / (c["threads"] // 128) in (64, 128) for c in attention)
    assert any(c["block_M"] == 192 for c in attention)
    causal = [
        c for c in configs(ATTENTION.ATTENTION_SPACE) if ATTENTION.attention_fits(dict(c, is_causal=True))
    ]
    assert causal and set(map(str, causal)) < set(map(str, attention))
    assert all(c["warp_specialized"] or c["num_stages"] == 1 for c in causal)
    # the shared memory follows the head dim: two stages of 256 keys overflow at 128, fit at 64
    wide = dict(block_M=128, block_N=256, num_stages=2, threads=256, warp_specialized=True, epilogue="shared")
    assert not ATTENTION.attention_fits(wide) and ATTENTION.attention_fits(wide, dim=64)
    # 176-key tiles only for two warpgroups of 64 rows; the written-out pipeline stages its output in Q's
    # tile, so two stages of them fit beside a staged output, where tilelang's pipeline's own tile does not
    long_tiles = [c for c in attention if c["block_N"] == 176]
    assert long_tiles and all((c["block_M"], c["threads"]) == (128, 256) for c in long_tiles)
    two_stages = dict(block_M=128, block_N=176, num_stages=2, threads=256, epilogue="shared")
    assert ATTENTION.attention_fits(dict(two_stages, overlap="pingpong"))
    assert not ATTENTION.attention_fits(dict(two_stages, overlap="none"))
    gemm = [c for c in configs(GEMM.GEMM_SPACE) if GEMM.gemm_fits(c)]
    assert gemm and all(c["block_M"] * c["block_N"] <= 128 * c["threads"] for c in gemm)
    persistent = [c for c in gemm if c["persistent"]]
    assert persistent and all(c["warp_specialized"] for c in persistent)
    # warp-specialized consumers always take whole rows (the output is stored by columns): one policy
    assert {c["policy"] for c in gemm if c["warp_specialized"]} == {"FullRow"}
    assert {c["policy"] for c in gemm if not c["warp_specialized"]} == {"FullRow", "Square"}
    # a warp-specialized block keeps 128 staged output columns beside its operand stages: 4 stages of
    # 128x256x64 fit, 4 of 256x128x64 do not
    assert {c["num_stages"] for c in persistent if (c["block_M"], c["block_N"]) == (128, 256)} == {3, 4}
    assert {c["num_stages"] for c in persistent if (c["block_M"], c["block_N"]) == (256, 128)} == {3}
    # the deferred epilogue only where it differs from "shared": persistent blocks
    assert {c["epilogue"] for c in gemm if not c["persistent"]} == {"shared"}
    assert {c["epilogue"] for c in persistent} == {"shared", "deferred"}


def test_the_gemm_consumers_keep_one_wgmma_group_in_flight_and_free_each_stage_when_its_mmas_finish():
    a = tb.place(4096, 4096, dtype=torch.float16)
    source = templates.kernel("gemm").compile(a, a, num_stages=4).cuda_source
    consumers = source[source.index("warpgroup_reg_alloc<232>") :]
    loop = consumers[: consumers.index("wait_wgmma<0>")]
    # the K loop issues a step's wgmma group, then waits only for the previous one and frees its stage
    assert "warpgroup_commit_batch" in loop and "warpgroup_wait<0>" not in loop
    assert loop.index("warpgroup_commit_batch") < loop.index("wait_wgmma<1>") < loop.index("empty[")
    # one arrival per consumer warpgroup (the barrier counts 2), after that wait
    assert "empty[0].init(2);" in source
    release = loop[loop.index("wait_wgmma<1>();") :]
    assert release.index("% 128) == 0)") < release.index("empty[((step_1 + 3) & 3)].arrive();")
    # the producer gives its registers back and waits for a stage to be free before loading into it
    producer = source[source.index("warpgroup_reg_dealloc<40>") : source.index("warpgroup_reg_alloc<232>")]
    assert producer.index("empty[") < producer.index("tma_load(A_desc")


@pytest.mark.parametrize("name", ["gemm", "attention"])
def test_the_templates_take_bf16_with_dtype_and_name_it_when_it_is_missing(name):
    """dtype="bfloat16": every buffer of the kernel (operands, stages, P, the output) is bf16 and the
    tensor-core instructions take bf16; bf16 tensors without it are refused naming the argument."""
    shape = (4096, 4096) if name == "gemm" else (2, 1024, 4, 64)
    x = tb.place(*shape, dtype=torch.bfloat16)
    args = (x, x) if name == "gemm" else (x, x, x)
    for structure in ({"warp_specialized": True}, {"warp_specialized": False}):
        kernel = templates.kernel(name).compile(*args, dtype="bfloat16", **structure)
        body = kernel.cuda_source[kernel.cuda_source.index("__global__") :]
        assert "bfloat16_t" in body and "half_t" not in body
        assert "DataType::kBFloat16" in body and "DataType::kFloat16" not in body, structure  # wgmma's types
    with pytest.raises(TypeError, match=r"argument .(A|Q). .* expects dtype float16, got bfloat16"):
        templates.kernel(name).compile(*args)


def test_warp_specialized_gemm_consumers_take_whole_rows_whatever_the_policy():
    a = tb.place(4096, 4096, dtype=torch.float16)
    gemm = templates.kernel("gemm")
    # a Square split of 128x256 gave each warpgroup half the columns, and storing the output 128 columns
    # at a time then read the wrong registers (wrong results on the H100)
    square = gemm.compile(a, a, policy="Square").cuda_source
    assert square == gemm.compile(a, a, policy="FullRow").cuda_source


def test_a_gemm_cluster_multicasts_the_b_tile_its_blocks_share():
    a = tb.place(2900, 520, dtype=torch.float16)
    b = tb.place(520, 2912, dtype=torch.float16)
    gemm = templates.kernel("gemm")
    kernel = gemm.compile(a, b, cluster_size=2)
    # 23 rows of 12 tiles: 12 rows of clusters of 2 blocks, the last cluster's second block spare
    assert kernel.artifacts().resources.grid == (12 * 12 * 2, 1, 1)
    source = kernel.cuda_source
    producer = source[source.index("warpgroup_reg_dealloc<40>") : source.index("warpgroup_reg_alloc<232>")]
    assert "tma_load_multicast(B_desc" in producer and "tma_load_multicast(A_desc" not in producer
    # each consumer warpgroup frees a stage in both blocks, whose producers wait for all four arrivals
    assert "empty[0].init(4);" in source and ".arrive(peer)" in source
    # the spare block keeps the pipeline in step but stores nothing; no block leaves before the other
    assert "< 725)" in source[source.index("wait_wgmma<0>") :]
    assert source.rstrip().endswith("tl::cluster_sync();\n}")
    with pytest.raises(ValueError, match="cluster_size=2.*persistent=131"):
        gemm.compile(a, b, cluster_size=2, persistent=131)
    assert not GEMM.gemm_fits(dict(GEMM_DEFAULTS, cluster_size=2, warp_specialized=False))
    assert GEMM.gemm_fits(dict(GEMM_DEFAULTS, cluster_size=2, persistent=132))


def test_the_gemm_stores_its_output_in_parts_that_take_turns_in_two_buffers():
    # 3 stages of 128x256x64 (144 KiB) leave room for the whole 64 KiB tile, 4 stages for 128 columns;
    # the room holds two buffers, and a part waits only for the store that read its buffer two parts ago
    assert GEMM.store_columns(128, 256, 64, 3) == 256 and GEMM.store_columns(128, 256, 64, 4) == 128
    assert GEMM.store_columns(128, 320, 64, 3) == 64  # parts divide the tile
    a = tb.place(4096, 4096, dtype=torch.float16)
    for stages, parts in ((3, 2), (4, 4)):
        source = templates.kernel("gemm").compile(a, a, num_stages=stages, persistent=132).cuda_source
        epilogue = source[source.index("wait_wgmma<0>") : source.rindex("tma_store_wait")]
        assert f"for (int part = 0; part < {parts}; ++part)" in epilogue
        assert "tma_store_wait<1, true>" in epilogue and "tma_store_wait<0" not in epilogue
        assert "tma_store(C_desc, (&(((half_t*)C_s)[((part" in epilogue  # the part's buffer


def test_a_persistent_gemm_keeps_its_blocks_resident_and_loops_over_the_tiles():
    a = tb.place(4096, 4096, dtype=torch.float16)
    kernel = templates.kernel("gemm").compile(a, a, num_stages=3, persistent=132)
    resources = kernel.artifacts().resources
    assert resources.grid == (132, 1, 1) and resources.threads_per_block == 256 + 128
    assert not resources.over_limits
    # 512 tiles of 128 x 256 over 132 blocks: 4 rounds, the producer's TMA loads inside the loop over them
    source = kernel.cuda_source
    assert "for (int wave = 0; wave < 4; ++wave)" in source
    assert source.index("wave < 4") < source.index("tma_load(A_desc")


def test_a_deferred_epilogue_stores_each_tile_while_the_next_tiles_first_mmas_run():
    a = tb.place(4096, 4096, dtype=torch.float16)
    gemm = templates.kernel("gemm")
    kernel = gemm.compile(a, a, num_stages=4, persistent=128, epilogue="deferred")
    artifacts = kernel.artifacts()
    artifacts.ensure_ptx()  # ptxas: the fp16 copy of the tile fits beside the accumulators
    assert artifacts.resources.grid == (128, 1, 1) and artifacts.resources.spill_store_bytes == 0
    source = kernel.cuda_source
    consumers = source[source.index("warpgroup_reg_alloc<232>") :]
    loop = consumers[: consumers.index("wait_wgmma<0>")]
    # inside the K loop, once the first step's MMAs are issued: the last tile, if there is one
    first = loop[loop.index("warpgroup_commit_batch") :]
    assert first.index("if (k_1 == 0)") < first.index("0 <= last[0]") < first.index("tma_store(C_desc")
    # the finished tile becomes fp16 registers, and the block's last tile is stored after the loop
    after = consumers[consumers.index("wait_wgmma<0>") :]
    assert after.index("__float22half2_rn") < after.index("last[0] = ") < after.index("tma_store(C_desc")
    assert "wave_1 < 4" in consumers and "tma_store(C_desc" not in after[: after.index("last[0] = ")]
    with pytest.raises(ValueError, match="epilogue='later'"):
        gemm.compile(a, a, epilogue="later")


def loop_start(source: str, name: str) -> int:
    """Where the key-tile loop over `name` starts in a kernel's CUDA source."""
    return source.index(f"for (int {name} = 1;")


def test_the_written_out_attention_overlaps_the_softmax_with_the_next_scores_and_the_last_values():
    q = tb.place(8, 4096, 32, 128, dtype=torch.float16)
    attention = templates.kernel("attention")
    source = attention.compile(q, q, q, overlap="intra").cuda_source
    loop = source[loop_start(source, "k_1") :]
    # Q K^T of this tile and P V of the last are issued (wgmma_ss, wgmma_rs) before the wait for the first
    scores, values = loop.index("wgmma_ss"), loop.index("wgmma_rs")
    first_done = loop.index("wait_wgmma<1>")
    assert scores < values < first_done < loop.index("k_empty[", first_done) < loop.index("exp2")
    # the output is rescaled after P V is waited for (measured faster than under Q K^T)
    assert "rescale[" not in loop[scores:values]
    freed = loop.index("v_empty[")
    assert "rescale[" in loop[freed : loop.index("__float22half2_rn", freed)]
    # the softmax (exp2) runs before P V is waited for, and its V stage is freed only after that wait
    assert first_done < loop.index("exp2") < loop.index("wait_wgmma<0>") < loop.index("v_empty[")
    assert "__named_barrier_arrive" not in source
    # each thread keeps its part of a row's sum: the one sum across threads comes after the last key tile
    assert source.count("tl::SumOp") == 1 and source.index("tl::SumOp") > loop_start(source, "k_1")
    assert "tl::MaxOp" in loop
    # its output is staged in Q's tile: the TMA store reads the buffer Q was loaded into
    q_tile = re.search(r"tma_load\(Q_desc, q_full\[0\], \(&\(\(\(half_t\*\)(\w+)\)", source).group(1)
    assert f"tma_store(O_desc, (&(((half_t*){q_tile})" in source
    # pingpong: the two consumer warpgroups take turns (named barriers 2 and 3) around their GEMMs
    pingpong = attention.compile(q, q, q, overlap="pingpong").cuda_source
    turn = pingpong.index("__sync_thread_partial(((((int)threadIdx.x) >> 7) + 1), 256)")
    handover = pingpong.index("__named_barrier_arrive((4 - (((int)threadIdx.x) >> 7)), 256)")
    assert turn < pingpong.index("wgmma_ss", turn) < pingpong.index("wgmma_rs", turn) < handover
    # tilelang's own warp specialization waits for each GEMM instead
    automatic = attention.compile(q, q, q, overlap="none").cuda_source
    assert "wait_wgmma<1>" not in automatic and "warpgroup_wait<0>" in automatic


def test_persistent_attention_blocks_load_the_next_row_tile_while_they_finish_this_one():
    q = tb.place(8, 4096, 32, 128, dtype=torch.float16)
    kernel = templates.kernel("attention").compile(q, q, q, overlap="intra", persistent=132)
    assert kernel.artifacts().resources.grid[0] == 132
    source = kernel.cuda_source
    producer, consumers = source.split("warpgroup_reg_alloc", 1)
    # the producer loads a row tile's Q once the last row tile's Q K^T are all done
    assert producer.index("q_empty[0].wait(") < producer.index("tma_load(Q_desc")
    # the consumers say so after the last Q K^T of a row tile, before its last P V and its output
    released = consumers.index("q_empty[0].arrive()")
    assert consumers.rindex("wait_wgmma<1>", 0, released) > loop_start(consumers, "k_1")
    assert released < consumers.rindex("wgmma_rs") < consumers.index("tma_store(O_desc")
    # the output has a tile of its own: Q's is loaded again meanwhile
    q_tile = re.search(r"tma_load\(Q_desc, q_full\[0\], \(&\(\(\(half_t\*\)(\w+)\)", source).group(1)
    assert "tma_store(O_desc" in source and f"tma_store(O_desc, (&(((half_t*){q_tile})" not in source
    assert templates.module("attention").attention_fits(dict(CONFIG_128, persistent=132))
    assert templates.module("attention").attention_fits(dict(CONFIG_128, persistent=132, is_causal=True))


CONFIG_128 = dict(block_M=128, block_N=128, num_stages=2, threads=256, overlap="intra", epilogue="shared")


def test_the_written_out_causal_attention_masks_the_scores_after_the_gemm_that_clears_them():
    """Q K^T starts from zero in the wgmma itself (no clearing of S before it is issued), and the tiles
    crossing the diagonal are masked once it is done."""
    q = tb.place(2, 1024, 4, 128, dtype=torch.float16)
    source = templates.kernel("attention").compile(q, q, q, is_causal=True, overlap="intra").cuda_source
    scores = re.findall(r"wgmma_ss<[^>]*>\((.*?)\);", source)
    # the first key tile's, the loop's, the last key tile's (apart: it lets the producer load the next Q)
    assert len(scores) == 3 and all(call.endswith("? 1 : 0)") for call in scores), scores
    loop = source[loop_start(source, "k_1") :]
    assert (
        loop.index("wgmma_ss")
        < loop.index("wait_wgmma<1>")
        < loop.index("-CUDART_INF_F")
        < loop.index("exp2")
    )
    assert "broadcast_var" not in loop[: loop.index("wgmma_ss")]


def causal_row_tiles(seq_len: int, heads: int, batch: int, mirrored: bool) -> list[tuple[int, ...]]:
    """(first row, head, batch, key tiles) of each causal row tile of 128 rows, in row_tile's order."""
    from tvm.arith import Analyzer

    analyzer, group = Analyzer(), 4 if heads * batch % 4 == 0 else 1
    order_groups = heads * batch // group if mirrored else None
    count = -(-seq_len // 128) * heads * batch
    return [
        tuple(
            int(analyzer.simplify(v))
            for v in ATTENTION.row_tile(t, seq_len, heads, 128, 128, True, (group, order_groups))
        )
        for t in range(count)
    ]


@pytest.mark.parametrize("seq_len, heads, batch", [(4096, 32, 8), (1000, 3, 2), (2048, 6, 2)])
def test_persistent_causal_blocks_take_every_row_tile_once_and_stay_abreast(seq_len, heads, batch):
    """row_tile's causal order is a permutation of the row tiles, mirrored or not; mirrored (every other
    head group shortest first), 132 persistent blocks stay within one row tile's work of each other after
    every round, where in plain order they drift eight row tiles apart (and read 90 MB of keys at once),
    and they end together: the last group runs longest first."""
    for mirrored in (True, False):
        tiles = causal_row_tiles(seq_len, heads, batch, mirrored)
        assert len({tile[:3] for tile in tiles}) == len(tiles) == -(-seq_len // 128) * heads * batch
        assert all(0 <= row0 <= seq_len - min(seq_len, 128) and steps >= 1 for row0, _, _, steps in tiles)
    if seq_len != 4096:
        return
    m_tiles, spread = seq_len // 128, {}
    for mirrored in (True, False):
        tiles, work = causal_row_tiles(seq_len, heads, batch, mirrored), [0] * 132
        spread[mirrored] = 0
        for n, (_, _, _, steps) in enumerate(tiles):
            work[n % 132] += steps + 1  # its key tiles, and about one for its output
            if n % 132 == 131:
                spread[mirrored] = max(spread[mirrored], max(work) - min(work))
        if mirrored:  # every tile counted: the blocks end within 1% of each other
            assert max(work) <= 1.01 * sum(work) / 132, (max(work), sum(work) / 132)
    assert spread[True] <= m_tiles + 1 < 4 * m_tiles < spread[False], spread


def test_the_tuner_compiles_every_structure_of_the_templates_in_its_workers():
    """The tuner compiles in worker processes from the PrimFunc's serialized form: each structure must
    survive that as it does a compile in this process."""
    q = tb.place(1, 256, 2, 128, dtype=torch.float16)
    overlap = tb.tune(["none", "intra", "pingpong"])
    result = templates.kernel("attention").tune(q, q, q, num_stages=tb.tune([1, 2]), overlap=overlap)
    a = tb.place(512, 512, dtype=torch.float16)
    structures = dict(
        warp_specialized=tb.tune([True, False]),
        persistent=tb.tune([0, 4]),
        cluster_size=tb.tune([1, 2]),
        epilogue=tb.tune(["shared", "deferred"]),
    )
    gemm = templates.kernel("gemm").tune(
        a, a, num_stages=3, tune_options={"constraint": GEMM.gemm_fits}, **structures
    )
    for records in (result.records, gemm.records):
        assert records and {r.status for r in records} == {"skipped"}, [(r.config, r.status) for r in records]
    assert len(result.records) == 6 and len(gemm.records) == 6


@pytest.mark.parametrize("block_M, threads", [(128, 256), (192, 384)])
def test_the_attention_fences_only_the_registers_its_probabilities_hold(block_M, threads):
    """P's fence (after P V is waited for) names a thread's share of P: counted over the whole tile, it
    fenced 8192 registers of a 32-register array, undefined behaviour that doubled nvcc's time."""
    q = tb.place(2, 1024, 4, 128 if threads == 256 else 64, dtype=torch.float16)
    source = templates.kernel("attention").compile(q, q, q, block_M=block_M, threads=threads).cuda_source
    held = {name: int(size) for name, size in re.findall(r"half_t (P\w*)\[(\d+)\];", source)}
    fences = re.findall(
        r"warpgroup_fence_operand\(reinterpret_cast<uint32_t\*>\((P\w*) \+ 0\), (\d+)\)", source
    )
    assert held and fences
    for name, count in fences:
        assert int(count) * 2 <= held[name], (name, count, held[name])


def test_three_consumer_warpgroups_take_192_rows():
    q = tb.place(2, 1024, 4, 128, dtype=torch.float16)
    kernel = templates.kernel("attention").compile(q, q, q, block_M=192, threads=384, epilogue="direct")
    resources = kernel.artifacts().resources
    assert resources.threads_per_block == 384 + 128 and not resources.over_limits
    assert resources.grid[0] == -(-1024 // 192) * 4 * 2  # a block per row tile (a partial last one)


@pytest.mark.parametrize(
    "notebook, name", [("02_autotune.ipynb", "gemm"), ("04_flash_attention.ipynb", "attention")]
)
def test_the_notebooks_tune_the_templates_as_they_stand(notebook, name):
    cells = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / notebook).read_text())["cells"]
    bodies = [
        "".join(cell["source"]).partition("\n")[2]
        for cell in cells
        if "".join(cell["source"]).startswith("%%tilelang") and "--tune" in "".join(cell["source"])
    ]
    assert [body.rstrip() for body in bodies] == [templates.source(name).rstrip()]
