"""The plugin's execute against the generic torch path on a CUDA GPU, through the Python API
(ops.md's gates). Skipped, with the reason printed, without torch.cuda, or when the plugin
declines on this GPU (on the H200 set SM70OPS_ALLOW_ARCH=90)."""
import math

import pytest

from sm70ops import bench, generic, ops


@pytest.fixture(scope="module")
def ctx(cuda_torch, plugin):
    with plugin.context(cuda_torch.cuda.current_device()) as c:
        yield c


def accepted(ctx, op, args):
    d = ctx.check(op, args)
    if not d.accepted:
        pytest.skip(f"the plugin declines {op} here: {d.reason}: {d.message}")
    return d


def index_problem(torch, rows=600, seq_lens=(3000, 5000), topk=512):
    """Two requests of rows // 2 rows each, random keys on scattered pages."""
    g = torch.Generator(device="cuda").manual_seed(7)
    pages = [math.ceil(n / 64) for n in seq_lens]
    pool = sum(pages)
    order = torch.randperm(pool, generator=g, device="cuda").int()
    table = torch.full((len(seq_lens), max(pages)), 0, dtype=torch.int32, device="cuda")
    table[0, : pages[0]], table[1, : pages[1]] = order[: pages[0]], order[pages[0] :]
    half = rows // 2
    return dict(
        q=torch.randn((rows, 4, 128), generator=g, device="cuda").half(),
        weights=torch.rand((rows, 4), generator=g, device="cuda") * 2 - 1,
        k_index=torch.randn((pool, 64, 128), generator=g, device="cuda").half(),
        query_start_loc=torch.tensor([0, half, rows], dtype=torch.int32, device="cuda"),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device="cuda"),
        block_table=table), topk, max(seq_lens), half


def test_qsa_index_plugin_matches_generic(cuda_torch, ctx):
    torch = cuda_torch
    inputs, topk, max_len, max_rows = index_problem(torch)
    rows = inputs["q"].shape[0]
    nb = min(topk, math.ceil(max_len / 64))
    out = dict(topk_idx=torch.full((rows, topk), -7, dtype=torch.int32, device="cuda"),
               sel_blocks=torch.full((rows, nb), -7, dtype=torch.int32, device="cuda"),
               sel_mask=torch.full((rows, nb), 7, dtype=torch.int64, device="cuda"),
               sel_count=torch.full((rows,), -7, dtype=torch.int32, device="cuda"))
    args = ops.qsa_index(**inputs, **out, topk=topk, max_seq_len=max_len, max_query_len=max_rows)
    d = accepted(ctx, "qsa_index", args)
    workspace = torch.empty(max(d.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
    ctx.execute("qsa_index", args, torch.cuda.current_stream(), workspace)
    want = generic.qsa_index(**inputs, topk=topk, nb=nb)
    scores = generic.qsa_index_scores(**inputs, precise=True)
    differing, excused = bench.judge_topk(torch, out["topk_idx"], want.topk_idx, scores, topk)
    print(f"qsa_index: {differing} of {rows} rows differ from generic, {excused} near ties")
    assert differing == excused
    blocks, masks, counts = generic.expand_selection(out["topk_idx"], nb)  # the plugin's own set
    assert torch.equal(out["sel_blocks"], blocks) and torch.equal(out["sel_count"], counts)
    assert torch.equal(out["sel_mask"], masks.view(torch.int64))


def test_qsa_attn_plugin_matches_generic(cuda_torch, ctx):
    torch = cuda_torch
    g = torch.Generator(device="cuda").manual_seed(8)
    rows, seq_len, q_heads, kv_heads, dim, topk = 300, 4000, 4, 1, 256, 512
    pages = math.ceil(seq_len / 64)
    nb = min(topk, pages)
    meta = dict(query_start_loc=torch.tensor([0, rows], dtype=torch.int32, device="cuda"),
                seq_lens=torch.tensor([seq_len], dtype=torch.int32, device="cuda"),
                block_table=torch.randperm(pages, generator=g, device="cuda").int().view(1, -1))
    q = torch.randn((rows, q_heads, dim), generator=g, device="cuda").half()
    kv = torch.randn((2, pages, 64, kv_heads, dim), generator=g, device="cuda").half()
    scores = torch.rand((rows, seq_len), generator=g, device="cuda")
    valid = torch.arange(seq_len, device="cuda") <= (seq_len - rows
                                                     + torch.arange(rows, device="cuda"))[:, None]
    blocks, masks, counts = generic.expand_selection(generic.topk_positions(scores, valid, topk),
                                                     nb)
    out = torch.full((rows, q_heads, dim), float("nan"), dtype=torch.float16, device="cuda")
    lse = torch.full((rows, q_heads), float("nan"), device="cuda")
    args = ops.qsa_attn(q, kv[0], kv[1], **meta, sel_blocks=blocks, sel_mask=masks,
                        sel_count=counts, out=out, lse=lse, sm_scale=dim**-0.5,
                        max_seq_len=seq_len, max_query_len=rows)
    d = accepted(ctx, "qsa_attn", args)
    workspace = torch.empty(max(d.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
    ctx.execute("qsa_attn", args, torch.cuda.current_stream(), workspace)
    want_o, want_lse = generic.qsa_attn(q, kv[0], kv[1], **meta, sel_blocks=blocks,
                                        sel_mask=masks, sel_count=counts, sm_scale=dim**-0.5)
    err = (out.float() - want_o.float()).norm() / want_o.float().norm()
    print(f"qsa_attn: rel-L2 {err.item():.2e} against generic")
    assert torch.isfinite(out).all() and err.item() <= 2e-3
    assert torch.allclose(lse, want_lse, rtol=1e-3, atol=1e-3)
