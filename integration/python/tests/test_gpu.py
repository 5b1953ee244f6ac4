"""The plugin's execute against the generic torch path on a CUDA GPU, through the Python API
(ops.md v2's gates). Skipped, with the reason printed, without torch.cuda, or when the plugin
declines on this GPU (on the H200 set SM70OPS_ALLOW_ARCH=90). test_gpu_index_data.py runs the
index on every kind of data."""
import math

import pytest

from sm70ops import gates, generic, ops


@pytest.fixture(scope="module")
def ctx(cuda_torch, plugin):
    with plugin.context(cuda_torch.cuda.current_device()) as c:
        yield c


def accepted(ctx, op, args):
    d = ctx.check(op, args)
    if not d.accepted:
        pytest.skip(f"the plugin declines {op} here: {d.reason}: {d.message}")
    return d


def scattered_table(torch, g, seq_lens, page):
    """block_table [R, max pages] over a shuffled pool holding every request's pages."""
    pages = [math.ceil(n / page) for n in seq_lens]
    order = torch.randperm(sum(pages), generator=g, device="cuda").int()
    table = torch.zeros((len(seq_lens), max(pages)), dtype=torch.int32, device="cuda")
    for r, n in enumerate(pages):
        table[r, :n] = order[sum(pages[:r]):sum(pages[:r]) + n]
    return table, sum(pages)


def index_problem(torch, c, page, weighted, rows=601, seq_lens=(3001, 5003)):
    """Two requests of about rows / 2 rows each, random keys on scattered pages."""
    g = torch.Generator(device="cuda").manual_seed(7 + c + page)
    table, pool = scattered_table(torch, g, seq_lens, page)
    first = rows // 2
    weights = torch.rand((rows, 4), generator=g, device="cuda") * 2 - 1 if weighted else None
    inputs = dict(
        q=torch.randn((rows, 4, 128), generator=g, device="cuda").half(), weights=weights,
        k_index=torch.randn((pool, page // c, 128), generator=g, device="cuda").half(),
        query_start_loc=torch.tensor([0, first, rows], dtype=torch.int32, device="cuda"),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device="cuda"), block_table=table)
    lengths = torch.cat([n - count + 1 + torch.arange(count, device="cuda")
                         for n, count in zip(seq_lens, (first, rows - first))])
    return inputs, lengths, max(seq_lens), max(first, rows - first)


@pytest.mark.parametrize("c, page, weighted, budget", [(1, 64, True, 512), (4, 16, False, 2048),
                                                       (4, 64, False, 512), (2, 32, True, 1024)])
def test_qsa_index_plugin_matches_generic(cuda_torch, ctx, c, page, weighted, budget):
    torch = cuda_torch
    inputs, lengths, max_len, max_rows = index_problem(torch, c, page, weighted)
    rows = inputs["q"].shape[0]
    nb = generic.selection_width(budget, c, page, max_len)
    out = dict(topk_idx=torch.full((rows, budget + c - 1), -7, dtype=torch.int32, device="cuda"),
               sel_blocks=torch.full((rows, nb), -7, dtype=torch.int32, device="cuda"),
               sel_mask=torch.full((rows, nb), 7, dtype=torch.int64, device="cuda"),
               sel_count=torch.full((rows,), -7, dtype=torch.int32, device="cuda"))
    args = ops.qsa_index(**inputs, **out, topk=budget, compress_ratio=c, max_seq_len=max_len,
                         max_query_len=max_rows)
    d = accepted(ctx, "qsa_index", args)
    workspace = torch.empty(max(d.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
    ctx.execute("qsa_index", args, torch.cuda.current_stream(), workspace)
    scores = generic.qsa_index_scores(**inputs, compress_ratio=c, precise=True)
    want = generic.token_set(generic.topk_positions(scores, torch.isfinite(scores), budget // c),
                             lengths, c)
    differing, excused = gates.judge_index(out["topk_idx"], want, scores, lengths, c)
    print(f"qsa_index c {c} P {page}: {differing} of {rows} rows differ from fp64, "
          f"{excused} near ties")
    assert differing == excused
    blocks, masks, counts = generic.expand_selection(out["topk_idx"], nb, page)  # its own set
    assert torch.equal(out["sel_blocks"], blocks) and torch.equal(out["sel_count"], counts)
    assert torch.equal(out["sel_mask"], masks.view(torch.int64))


@pytest.mark.parametrize("q_heads, kv_heads, page, gated", [(4, 1, 64, False), (6, 1, 16, True),
                                                          (12, 1, 64, True), (24, 2, 16, True)])
def test_qsa_attn_plugin_matches_generic(cuda_torch, ctx, q_heads, kv_heads, page, gated):
    torch = cuda_torch
    g = torch.Generator(device="cuda").manual_seed(8 + q_heads + page)
    rows, seq_len, dim, budget = 300, 4001, 256, 512
    table, pages = scattered_table(torch, g, [seq_len], page)
    nb = generic.selection_width(budget, 4, page, seq_len)
    meta = dict(query_start_loc=torch.tensor([0, rows], dtype=torch.int32, device="cuda"),
                seq_lens=torch.tensor([seq_len], dtype=torch.int32, device="cuda"),
                block_table=table)
    q = torch.randn((rows, q_heads, dim), generator=g, device="cuda").half()
    kv = torch.randn((2, pages, page, kv_heads, dim), generator=g, device="cuda").half()
    gate = torch.randn((rows, q_heads, dim), generator=g, device="cuda").half() if gated else None
    scores = torch.rand((rows, seq_len // 4), generator=g, device="cuda")
    lengths = seq_len - rows + 1 + torch.arange(rows, device="cuda")
    valid = torch.arange(seq_len // 4, device="cuda") < (lengths // 4)[:, None]
    token_set = generic.token_set(generic.topk_positions(scores, valid, budget // 4), lengths, 4)
    blocks, masks, counts = generic.expand_selection(token_set, nb, page)
    out = torch.full((rows, q_heads, dim), float("nan"), dtype=torch.float16, device="cuda")
    lse = torch.full((rows, q_heads), float("nan"), device="cuda")
    args = ops.qsa_attn(q, kv[0], kv[1], **meta, sel_blocks=blocks, sel_mask=masks,
                        sel_count=counts, out=out, lse=lse, gate=gate, sm_scale=dim**-0.5,
                        max_seq_len=seq_len, max_query_len=rows)
    d = accepted(ctx, "qsa_attn", args)
    workspace = torch.empty(max(d.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
    ctx.execute("qsa_attn", args, torch.cuda.current_stream(), workspace)
    want_o, want_lse = generic.qsa_attn(q, kv[0], kv[1], **meta, sel_blocks=blocks,
                                        sel_mask=masks, sel_count=counts, sm_scale=dim**-0.5,
                                        gate=gate)
    err = (out.float() - want_o.float()).norm() / want_o.float().norm()
    print(f"qsa_attn {q_heads}/{kv_heads} P {page} gate {gated}: rel-L2 {err.item():.2e}")
    assert torch.isfinite(out).all() and err.item() <= 2e-3
    assert torch.allclose(lse, want_lse, rtol=1e-3, atol=1e-3)
