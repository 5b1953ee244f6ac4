"""The generic torch implementations (sm70ops.generic) on CPU against the plain-Python
references written from ops.md v2, on tiny inputs: varlen batches, scattered pages of 16, 32 and
64 tokens, compress ratios 1, 2 and 4 with their tails, ties, empty key sets, the gate, bit 63 of
the masks. Skipped, with the reason printed, where torch is missing."""
import math
import random

import pytest

import reference as ref
from sm70ops import generic

U64 = (1 << 64) - 1

# Two requests, 3 and 5 rows, contexts 70 and 130: with c = 4 their rows' L leave tails of 0..3.
QSL, LENS = [0, 3, 8], [70, 130]


def scattered_table(page, seed):
    """block_table [R, max pages] over a shuffled pool of every request's pages, and the pool
    size."""
    pages = [math.ceil(n / page) for n in LENS]
    pool = list(range(sum(pages)))
    random.Random(seed).shuffle(pool)
    table, used = [], 0
    for n in pages:
        table.append(pool[used:used + n] + [0] * (max(pages) - n))
        used += n
    return table, len(pool)


def integer_inputs(seed, rows, pool, keys_a_page, heads=4, dim=128):
    """q, k in {-2..2} and w in quarters: every score is exact in fp16, fp32 and fp64, and ties
    are frequent."""
    rng = random.Random(seed)
    q = [[[float(rng.randint(-2, 2)) for _ in range(dim)] for _ in range(heads)]
         for _ in range(rows)]
    k = [[[float(rng.randint(-2, 2)) for _ in range(dim)] for _ in range(keys_a_page)]
         for _ in range(pool)]
    w = [[rng.choice([-1.0, -0.5, 0.25, 0.75, 1.0]) for _ in range(heads)] for _ in range(rows)]
    return q, w, k


def tensors(torch, q, w, k, qsl, lens, table):
    return dict(q=torch.tensor(q, dtype=torch.float16),
                weights=None if w is None else torch.tensor(w, dtype=torch.float32),
                k_index=torch.tensor(k, dtype=torch.float16),
                query_start_loc=torch.tensor(qsl, dtype=torch.int32),
                seq_lens=torch.tensor(lens, dtype=torch.int32),
                block_table=torch.tensor(table, dtype=torch.int32))


def mask_ints(torch, sel_mask):
    return [[v & U64 for v in row] for row in sel_mask.view(torch.int64).tolist()]


def test_selection_width_is_the_pages_a_row_can_touch():
    assert generic.selection_width(2048, 4, 64, 131072) == 513  # 512 groups and the tail's page
    assert generic.selection_width(2048, 1, 64, 131072) == 2048  # no tail with c = 1
    assert generic.selection_width(2048, 4, 16, 4097) == 257  # the context's pages
    assert generic.selection_width(8, 4, 16, 38) == 3


# (c, P, budget): the model's c = 4 at both engine page sizes, c = 2, and c = 1 (version 1).
INDEX_CASES = [(4, 16, 8), (4, 16, 64), (4, 64, 128), (2, 32, 22), (1, 64, 16), (1, 64, 67),
               (1, 64, 128)]


@pytest.mark.parametrize("c, page, budget", INDEX_CASES)
def test_qsa_index_matches_the_reference(torch, c, page, budget):
    table, pool = scattered_table(page, seed=page + c)
    q, w, keys = integer_inputs(seed=budget + c, rows=8, pool=pool, keys_a_page=page // c)
    nb = generic.selection_width(budget, c, page, max(LENS))
    scores, topk_idx, blocks, masks, counts = ref.qsa_index(q, w, keys, QSL, LENS, table,
                                                            budget, nb, c)
    inputs = tensors(torch, q, w, keys, QSL, LENS, table)
    got = generic.qsa_index(**inputs, topk=budget, compress_ratio=c)
    assert got.topk_idx.dtype == torch.int32 and got.topk_idx.tolist() == topk_idx
    assert got.sel_blocks.tolist() == blocks
    assert mask_ints(torch, got.sel_mask) == masks
    assert got.sel_count.tolist() == counts
    got_scores = generic.qsa_index_scores(**inputs, compress_ratio=c)
    for t, row in enumerate(scores):
        assert got_scores[t, : len(row)].tolist() == row
        assert all(s == -math.inf for s in got_scores[t, len(row) :].tolist())


def test_weight_free_is_every_head_weighing_one_over_sqrt_128(torch):
    table, pool = scattered_table(16, seed=3)
    q, _, keys = integer_inputs(seed=4, rows=8, pool=pool, keys_a_page=4)
    inputs = tensors(torch, q, None, keys, QSL, LENS, table)
    free = generic.qsa_index(**inputs, topk=16, compress_ratio=4)
    weighted = generic.qsa_index(**dict(inputs, weights=torch.full((8, 4), 128 ** -0.5)),
                                 topk=16, compress_ratio=4)
    assert torch.equal(free.topk_idx, weighted.topk_idx)
    assert torch.equal(free.sel_blocks, weighted.sel_blocks)
    assert mask_ints(torch, free.sel_mask) == mask_ints(torch, weighted.sel_mask)


def test_qsa_index_ties_go_to_the_lower_group(torch):
    q, _, _ = integer_inputs(seed=1, rows=3, pool=0, keys_a_page=0)
    same_key = [[[1.0] * 128 for _ in range(16)] for _ in range(2)]
    inputs = tensors(torch, q, [[1.0] * 4] * 3, same_key, [0, 3], [101], [[1, 0]])
    got = generic.qsa_index(**inputs, topk=12, compress_ratio=4)
    tails = ([96, 97, 98], [], [100])  # rows at L 99, 100, 101
    assert got.topk_idx.tolist() == [list(range(12)) + tail + [-1] * (3 - len(tail))
                                     for tail in tails]


def test_the_budget_must_be_whole_groups(torch):
    table, pool = scattered_table(16, seed=5)
    q, w, keys = integer_inputs(seed=6, rows=8, pool=pool, keys_a_page=4)
    with pytest.raises(ValueError, match="multiple of c = 4"):
        generic.qsa_index(**tensors(torch, q, w, keys, QSL, LENS, table), topk=10,
                          compress_ratio=4)


def test_token_set_places_the_tail_after_the_groups(torch):
    groups = torch.tensor([[0, 2, -1], [-1, -1, -1], [0, 1, 2]], dtype=torch.int32)
    got = generic.token_set(groups, torch.tensor([15, 2, 12]), 4)
    assert got.tolist() == [[0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14] + [-1] * 4,
                            [0, 1] + [-1] * 13, list(range(12)) + [-1] * 3]


def test_topk_positions_exact_ties_and_short_rows(torch):
    scores = torch.tensor([[5.0, 1.0, 5.0, 5.0, 0.0], [2.0, 2.0, 2.0, 2.0, 2.0]])
    valid = torch.tensor([[True] * 5, [True, True, False, False, False]])
    got = generic.topk_positions(scores, valid, 3)
    assert got.tolist() == [[0, 2, 3], [0, 1, -1]]


@pytest.mark.parametrize("page", [16, 64])
def test_expansion_sets_the_last_bit_and_pads(torch, page):
    topk_idx = torch.tensor([[0, page - 1, page, 3 * page + 8], [5, -1, -1, -1]],
                            dtype=torch.int32)
    blocks, masks, counts = generic.expand_selection(topk_idx, 4, page)
    assert blocks.tolist() == [[0, 1, 3, -1], [0, -1, -1, -1]]
    assert mask_ints(torch, masks) == [[1 | 1 << (page - 1), 1, 1 << 8, 0], [1 << 5, 0, 0, 0]]
    assert counts.dtype == torch.int32 and counts.tolist() == [3, 1]


def test_expansion_refuses_a_narrow_nb(torch):
    with pytest.raises(ValueError, match="NB is 1"):
        generic.expand_selection(torch.tensor([[1, 70]], dtype=torch.int32), 1, 64)


def random_attn_inputs(torch, seed, q_heads=4, kv_heads=2, dim=128, page=64):
    """q, paged K/V and a selection per row (some tokens beyond L, which the op drops; row 1
    selects nothing), as tensors and as the reference's lists."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    table, pool = scattered_table(page, seed)
    q = torch.randn((8, q_heads, dim), generator=gen).half()
    k_cache = torch.randn((pool, page, kv_heads, dim), generator=gen).half()
    v_cache = torch.randn((pool, page, kv_heads, dim), generator=gen).half()
    positions = []
    for r, _, length in ref.rows_of(QSL, LENS):
        chosen = rng.sample(range(min(length + 20, LENS[r])), min(12, length))
        positions.append([] if len(positions) == 1 else chosen)
    nb = math.ceil(max(LENS) / page)
    blocks, masks, counts = [], [], []
    for chosen in positions:
        pages_, bits = ref.expand(chosen, page)
        blocks.append(pages_ + [-1] * (nb - len(pages_)))
        masks.append(bits + [0] * (nb - len(bits)))
        counts.append(len(pages_))
    signed = [[m - (1 << 64) if m >> 63 else m for m in row] for row in masks]
    sel = dict(sel_blocks=torch.tensor(blocks, dtype=torch.int32),
               sel_mask=torch.tensor(signed, dtype=torch.int64),
               sel_count=torch.tensor(counts, dtype=torch.int32))
    meta = dict(query_start_loc=torch.tensor(QSL, dtype=torch.int32),
                seq_lens=torch.tensor(LENS, dtype=torch.int32),
                block_table=torch.tensor(table, dtype=torch.int32))
    return q, k_cache, v_cache, meta, sel, (table, blocks, masks, counts)


def rel_l2(got, want):
    num = sum((a - b) ** 2 for a, b in zip(got, want))
    den = sum(b * b for b in want)
    return math.sqrt(num / den) if den else math.sqrt(num)


def flat(nested):
    return [x for row in nested for head in row for x in head]


@pytest.mark.parametrize("q_heads, kv_heads, page, gated", [(4, 2, 64, False), (6, 1, 16, True),
                                                          (4, 1, 32, True)])
def test_qsa_attn_matches_the_reference(torch, q_heads, kv_heads, page, gated):
    q, k_cache, v_cache, meta, sel, (table, blocks, masks, counts) = random_attn_inputs(
        torch, 3, q_heads, kv_heads, page=page)
    gate = (torch.randn(q.shape, generator=torch.Generator().manual_seed(7)) * 2).half()
    gate = gate if gated else None
    out, lse = generic.qsa_attn(q, k_cache, v_cache, **meta, **sel, sm_scale=0.0883, gate=gate)
    want_o, want_lse = ref.qsa_attn(q.float().tolist(), k_cache.float().tolist(),
                                    v_cache.float().tolist(), QSL, LENS, table, blocks, masks,
                                    counts, 0.0883, gate.float().tolist() if gated else None)
    assert out.dtype == torch.float16 and lse.dtype == torch.float32
    assert rel_l2(flat(out.float().tolist()), flat(want_o)) <= 2e-3
    assert out[1].abs().max().item() == 0 and lse[1].tolist() == [-math.inf] * q_heads
    for got_row, want_row in zip(lse.tolist(), want_lse):
        for a, b in zip(got_row, want_row):
            assert a == b == -math.inf or abs(a - b) <= 1e-4 * max(1.0, abs(b))


@pytest.mark.parametrize("page", [16, 64])
def test_qsa_attn_selecting_everything_is_dense_causal_attention(torch, page):
    q, k_cache, v_cache, meta, _, (table, *_) = random_attn_inputs(torch, 4, page=page)
    pages = math.ceil(max(LENS) / page)
    every = dict(sel_blocks=torch.arange(pages, dtype=torch.int32).repeat(8, 1),
                 sel_mask=torch.full((8, pages), -1, dtype=torch.int64),
                 sel_count=torch.full((8,), pages, dtype=torch.int32))
    out, lse = generic.qsa_attn(q, k_cache, v_cache, **meta, **every, sm_scale=0.1)
    k_list, v_list, q_list = k_cache.float().tolist(), v_cache.float().tolist(), q.float().tolist()
    for t, (r, _, length) in enumerate(ref.rows_of(QSL, LENS)):
        for h in range(4):
            keys = [ref.entry(k_list, table, r, p)[h // 2] for p in range(length)]
            values = [ref.entry(v_list, table, r, p)[h // 2] for p in range(length)]
            o, s = ref.attend(q_list[t][h], keys, values, 0.1)
            assert rel_l2(out[t, h].float().tolist(), o) <= 2e-3
            assert abs(lse[t, h].item() - s) <= 1e-4 * abs(s) + 1e-5


def random_moe(torch, seed, experts=4, hidden=32, inter=16, tokens=5, topk=2):
    rng = random.Random(seed)

    def bytes_(*shape, lo=0, hi=255):
        return torch.tensor([[[rng.randint(lo, hi) for _ in range(shape[2])]
                              for _ in range(shape[1])] for _ in range(shape[0])],
                            dtype=torch.uint8)

    w = dict(w13=bytes_(experts, 2 * inter, hidden // 2),
             w13_scale=bytes_(experts, 2 * inter, hidden // 16, lo=0x28, hi=0x40),
             w13_scale_2=torch.tensor([[rng.uniform(0.5, 2), rng.uniform(0.5, 2)]
                                       for _ in range(experts)]),
             w2=bytes_(experts, hidden, inter // 2),
             w2_scale=bytes_(experts, hidden, inter // 16, lo=0x28, hi=0x40),
             w2_scale_2=torch.tensor([rng.uniform(0.5, 2) for _ in range(experts)]))
    x = (torch.randn((tokens, hidden), generator=torch.Generator().manual_seed(seed)) * 0.5).half()
    ids = torch.tensor([rng.sample(range(experts), topk) for _ in range(tokens)],
                       dtype=torch.int32)
    weights = torch.rand((tokens, topk), generator=torch.Generator().manual_seed(seed + 1))
    return x, ids, weights, w


def moe_error(out, x, ids, weights, w):
    """rel-L2 of out [T, H] against the reference on the same inputs."""
    want = ref.nvfp4_moe(x.float().tolist(), ids.tolist(), weights.tolist(),
                         *(w[n].tolist() for n in ("w13", "w13_scale", "w13_scale_2", "w2",
                                                   "w2_scale", "w2_scale_2")))
    got = [v for row in out.float().tolist() for v in row]
    return rel_l2(got, [v for row in want for v in row])


def test_nvfp4_moe_matches_the_reference(torch):
    x, ids, weights, w = random_moe(torch, 5)
    out = generic.nvfp4_moe(x, ids, weights, **w)
    assert out.dtype == torch.float16 and out.shape == x.shape
    assert moe_error(out, x, ids, weights, w) <= 5e-3


def test_nvfp4_moe_takes_any_multiple_of_16(torch):
    """ops.md v2: H and I any multiple of 16 (I 80 is the model's TP8 slice)."""
    x, ids, weights, w = random_moe(torch, 8, hidden=48, inter=80, tokens=7)
    assert moe_error(generic.nvfp4_moe(x, ids, weights, **w), x, ids, weights, w) <= 5e-3


def test_nvfp4_moe_takes_float8_scales(torch):
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    x, ids, weights, w = random_moe(torch, 6)
    as_fp8 = dict(w, w13_scale=w["w13_scale"].view(torch.float8_e4m3fn),
                  w2_scale=w["w2_scale"].view(torch.float8_e4m3fn))
    assert torch.equal(generic.nvfp4_moe(x, ids, weights, **w),
                       generic.nvfp4_moe(x, ids, weights, **as_fp8))


def test_e4m3_table_matches_torch(torch):
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    decoded = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().tolist()
    for byte, value in enumerate(decoded):
        mine = generic.e4m3_value(byte)
        assert mine == value or (math.isnan(mine) and math.isnan(value)), byte


def test_nvfp4_moe_refuses_unknown_experts(torch):
    x, ids, weights, w = random_moe(torch, 7)
    with pytest.raises(ValueError, match="outside"):
        generic.nvfp4_moe(x, ids + 10, weights, **w)


def spy_row_chunks(monkeypatch):
    """The chunk lists generic._row_chunks hands out from now on, so a test can tell that a
    split really happened."""
    handed_out, real = [], generic._row_chunks

    def spy(rows, width):
        chunks = list(real(rows, width))
        handed_out.append(chunks)
        return chunks

    monkeypatch.setattr(generic, "_row_chunks", spy)
    return handed_out


def test_qsa_attn_row_chunks_give_the_one_pass_result(torch, monkeypatch):
    """A scratch budget of 3 rows (NB 3) splits request 1's 5 rows into 3 + 2 for the expansion,
    and its gather into single rows: same results as one pass and the reference."""
    q, k_cache, v_cache, meta, sel, (table, blocks, masks, counts) = random_attn_inputs(torch, 9)
    one_pass = generic.qsa_attn(q, k_cache, v_cache, **meta, **sel, sm_scale=0.1)
    monkeypatch.setattr(generic, "SCRATCH_ELEMENTS", 4 * 3 * 64 * 3)
    assert generic._row_chunks(5, 4 * 3 * 64) == [(0, 3), (3, 5)]
    handed_out = spy_row_chunks(monkeypatch)
    out, lse = generic.qsa_attn(q, k_cache, v_cache, **meta, **sel, sm_scale=0.1)
    assert [(0, 3), (3, 5)] in handed_out, handed_out
    assert torch.allclose(out.float(), one_pass[0].float(), rtol=1e-3, atol=1e-3)
    assert torch.allclose(lse, one_pass[1], rtol=1e-5, atol=1e-5)
    want_o, _ = ref.qsa_attn(q.float().tolist(), k_cache.float().tolist(),
                             v_cache.float().tolist(), QSL, LENS, table, blocks, masks, counts,
                             0.1)
    assert rel_l2(flat(out.float().tolist()), flat(want_o)) <= 2e-3


def test_nvfp4_moe_expert_chunks_give_the_one_pass_result(torch, monkeypatch):
    """A scratch budget of 3 (token, slot) rows of H splits each expert's 7 or 8 routed pairs
    into 3 + 3 + a partial chunk: same out as one pass (within an fp16 ulp: the GEMMs see other
    row counts) and as the reference."""
    x, ids, weights, w = random_moe(torch, 14, experts=3, tokens=11)
    counts = torch.bincount(ids.flatten(), minlength=3).tolist()
    assert all(n > 6 and n % 3 for n in counts)
    one_pass = generic.nvfp4_moe(x, ids, weights, **w)
    monkeypatch.setattr(generic, "SCRATCH_ELEMENTS", 3 * x.shape[1])
    handed_out = spy_row_chunks(monkeypatch)
    out = generic.nvfp4_moe(x, ids, weights, **w)
    assert handed_out and all(len(chunks) == 3 for chunks in handed_out), handed_out
    assert torch.allclose(out.float(), one_pass.float(), rtol=1e-3, atol=1e-3)
    assert moe_error(out, x, ids, weights, w) <= 5e-3


def test_a_position_selected_twice_counts_once(torch):
    """Page 0 listed twice (masks overlapping on token 5): the set is {3, 5, 70}, as when listed
    once."""
    q = torch.randn((1, 2, 128), generator=torch.Generator().manual_seed(4)).half()
    k = torch.randn((2, 64, 1, 128), generator=torch.Generator().manual_seed(5)).half()
    v = torch.randn((2, 64, 1, 128), generator=torch.Generator().manual_seed(6)).half()
    meta = dict(query_start_loc=torch.tensor([0, 1], dtype=torch.int32),
                seq_lens=torch.tensor([100], dtype=torch.int32),
                block_table=torch.tensor([[1, 0]], dtype=torch.int32))

    def attend(blocks, masks):
        return generic.qsa_attn(q, k, v, **meta,
                                sel_blocks=torch.tensor([blocks], dtype=torch.int32),
                                sel_mask=torch.tensor([masks], dtype=torch.int64),
                                sel_count=torch.tensor([len(blocks)], dtype=torch.int32),
                                sm_scale=0.1)

    twice = attend([0, 0, 1], [1 << 3 | 1 << 5, 1 << 5, 1 << 6])
    once = attend([0, 1], [1 << 3 | 1 << 5, 1 << 6])
    assert torch.equal(twice[0], once[0]) and torch.equal(twice[1], once[1])
