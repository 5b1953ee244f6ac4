"""The benches' roofline floor (sm70ops.bench) and what each bench counts as its work
(bench_index.index_work, bench_attn.attn_work, bench_moe.moe_work): sizes worked by hand, and the
floors README.md and docs/performance.md quote (pure arithmetic: no torch, no GPU); and the MoE
bench's cuBLAS loop on CPU torch."""
import types

import pytest

from sm70ops import bench, bench_attn, bench_index, bench_moe, model
from sm70ops.bench import V100, Work, ceiling_for, floor_cells, floor_ms

H200 = ceiling_for(90, "NVIDIA H200")


def test_the_ceilings_by_hand():
    """A 4096^3 fp16 GEMM (137.44 GFLOP) takes 1.100 ms at a V100's 125 TFLOP/s and 0.213 ms at
    an H200's 645; a GB read 1.176 ms at 0.85 TB/s and 0.252 ms at 3.97 TB/s."""
    assert (V100.device, H200.device) == ("V100-SXM2", "H200") and ceiling_for(80) is None
    assert ceiling_for(90, "NVIDIA H100 80GB HBM3").tbytes_s == 2.97
    assert ceiling_for(90, "NVIDIA H800") is None and ceiling_for(70, "Tesla V100-PCIE") is V100
    gemm, gigabyte = Work(flops=2 * 4096**3), Work(bytes=1e9)
    assert [round(floor_ms(gemm, c), 3) for c in (V100, H200)] == [1.100, 0.213]
    assert [round(floor_ms(gigabyte, c), 3) for c in (V100, H200)] == [1.176, 0.252]


def test_the_floor_is_the_slower_of_compute_and_memory():
    assert floor_ms(Work(flops=125e12), V100) == pytest.approx(1000)
    assert floor_ms(Work(bytes=0.85e12), V100) == pytest.approx(1000)
    assert floor_ms(Work(flops=125e12, bytes=0.85e9), V100) == pytest.approx(1000)
    assert floor_ms(Work(flops=125e9, bytes=0.85e12), V100) == pytest.approx(1000)


def test_works_add_up():
    assert sum([Work(1, 2), Work(3, 4)], Work()) == Work(4, 6)


def test_floor_cells():
    w = Work(flops=64.5e9)  # 0.1 ms at an H200's 645 TFLOP/s, 0.516 ms at a V100's 125
    assert floor_cells(w, 0.2, H200) == ("322.5", "0.100", "50%", "0.516")
    assert floor_cells(w, None, H200) == ("-", "0.100", "-", "0.516")
    assert floor_cells(w, 0.2, None) == ("322.5", "-", "-", "0.516")
    assert len(bench.floor_text(w, 0.2, H200)) == len(bench.floor_header())


def test_floor_columns_read_each_rows_work_and_plugin_time():
    columns = bench.floor_columns(H200)
    row = types.SimpleNamespace(work=Work(flops=64.5e9), plugin_ms=0.2)
    assert list(columns) == ["TFLOP/s", "floor ms", "floor%", "V100 floor ms"]
    assert [cell(row) for _, cell in columns.values()] == ["322.5", "0.100", "50%", "0.516"]


def test_ceilings_line_names_both_ceilings():
    assert bench.ceilings_line(H200).startswith("floors: H200 645 TFLOP/s, 3.97 TB/s (measured")
    assert bench.ceilings_line(H200).endswith("V100 column: 125 TFLOP/s, 0.85 TB/s")
    assert "no ceiling known" in bench.ceilings_line(None)


def test_index_work_by_hand():
    model_index = bench_index.Setting(compress_ratio=4, page_size=64, topk=2048, weighted=False)
    # 3 rows ending at token 9 see 8, 9, 10 tokens: 2 complete groups each; NB = 1 page.
    assert bench_index.index_work(model_index, 4, 128, 3, 10) == Work(
        flops=2 * 6 * 4 * 128,
        bytes=3 * 4 * 128 * 2 + 2 * 128 * 2 + 3 * (2051 * 4 + 1 * 12 + 4))
    v1 = bench_index.Setting(compress_ratio=1, page_size=16, topk=8, weighted=True)
    # 2 rows see 4 and 5 keys; q and an fp32 weight per head; NB = min(8, 1 page).
    assert bench_index.index_work(v1, 2, 16, 2, 5) == Work(
        flops=2 * 9 * 2 * 16, bytes=2 * 2 * (16 * 2 + 4) + 5 * 16 * 2 + 2 * (8 * 4 + 12 + 4))


def test_a_cases_work_sums_its_chunks():
    s = bench_index.Setting(compress_ratio=4, page_size=16, topk=8, weighted=False)
    problem = types.SimpleNamespace(q=types.SimpleNamespace(shape=(4, 1, 2)))  # 1 head of 2
    case = bench_index.Case("prefill", 6, problem, [(4, 2), (6, 2)])
    # Rows see 3, 4 then 5, 6 tokens: 0 + 1 + 1 + 1 complete groups, 2 FLOPs x 2 each: 12.
    # Each chunk: q 2 rows x 4 B, the one complete group's key 4 B, and per row topk_idx
    # 11 x 4 B, one page of selection 12 B and its count 4 B: 8 + 4 + 120 = 132 bytes.
    assert bench_index.case_work(s, case) == Work(flops=12, bytes=264)


def test_index_floor_of_the_readme():
    """README: 1024 rows x 128K tokens, floor 0.05 ms on the H200; docs/performance.md: the
    scorer's FLOPs bound it at 0.27 ms on a V100."""
    s = bench_index.Setting(compress_ratio=4, page_size=64, topk=2048, weighted=False)
    m = model.QWEN38_FLASH_NEXT
    w = bench_index.index_work(s, m.index_heads, m.index_dim, 1024, 131072)
    assert round(floor_ms(w, H200), 2) == 0.05
    assert round(floor_ms(w, V100), 2) == 0.27 == round(w.flops / 125e9, 2)


def test_attn_work_by_hand():
    s = model.shape(4, 64)  # 6 query heads, 1 KV head, D 256, gated
    # 2 rows of a 100-token context, 150 tokens selected in all, NB 2: QK and PV, 2 x 2 x 256
    # FLOPs a token and head (921,600); q, gate and out 12 x 1536 B (no lse: the bench asks for
    # none), 2 x (2 pages x 12 B + 4 B) of selection, K and V 100 x 1024 B: 120,888 bytes.
    assert bench_attn.attn_work(s, 150, 100, 2, 2) == Work(flops=921600, bytes=120888)
    ungated = model.shape(4, 64, model.V1)  # 4 query heads: q and out 8 x 1024 B
    assert bench_attn.attn_work(ungated, 150, 100, 2, 2).bytes == 110648


def test_moe_work_by_hand():
    m = types.SimpleNamespace(experts=4, expert_topk=2, hidden=32, expert_inter=16)
    # 4 experts x 3 x 16 x 32 = 6144 weights at 4.5 bits (a 4-bit code, an 8-bit scale per 16).
    assert bench_moe.nvfp4_bytes(m) == 3456
    # 3 tokens, 6 (token, expert) pairs on 2 of the 4 experts: 6 x 3 GEMVs of 2 x 512 FLOPs;
    # half the weights read once (1728 B), x and out 3 x 128 B, ids and weights 6 x 8 B.
    assert bench_moe.moe_work(m, 3, 2) == Work(flops=18432, bytes=2160)


@pytest.mark.parametrize("shapes, tp, floor", [(model.QWEN38_FLASH_NEXT, 4, 0.31),
                                               (model.QWEN38_FLASH_NEXT, 1, 1.25),
                                               (model.V1, 4, 0.20), (model.V1, 1, 0.80)])
def test_moe_floors_of_the_docs(shapes, tp, floor):
    """docs/performance.md's nvfp4_moe floors (T 8192, every expert routed) on the H200."""
    m = model.shape(tp=tp, model=shapes)
    assert round(floor_ms(bench_moe.moe_work(m, 8192, m.experts), H200), 2) == floor


def test_the_cublas_baselines_grouped_gemms(torch):
    """bench_moe's cuBLAS loop on CPU: each expert's rows through its two GEMMs, the down GEMM on
    the first I columns of the gate/up output."""
    g = torch.Generator().manual_seed(3)
    w13 = (torch.randn((3, 8, 16), generator=g) / 4).half()  # E 3, I 4, H 16
    w2 = (torch.randn((3, 16, 4), generator=g) / 4).half()
    counts = [2, 0, 3]
    gemms, y = bench_moe.grouped_gemms(torch, (w13, w2), counts)
    gemms()
    x = torch.ones((1, 16))
    for e, rows in ((0, slice(0, 2)), (2, slice(2, 5))):
        want = (x @ w13[e].float().t())[:, :4].half().float() @ w2[e].float().t()
        assert torch.allclose(y[rows].float(), want.expand(rows.stop - rows.start, -1),
                              rtol=1e-2, atol=1e-2)
