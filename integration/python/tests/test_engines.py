"""sm70ops.engines: vLLM's and SGLang's QSA calls with their own names and buffers, against the
engines' semantics as engines_reference.py writes them from issue 31 (the packed buffer's count
column, tail, -1 padding and request-relative ids; SGLang's -1 padded ids; the gated attention).
On CPU the drop-ins run through torch.ops.sm70ops to the generic path (the plugin declines CPU
tensors); on a GPU where the plugin runs, the token-id attention must equal the triple's bit for
bit. Three requests, the last shorter than the budget, pages scattered, c 1, 2 and 4, P 16, 32
and 64. Torch tests skip without torch; the import test needs none."""
import math
import random
import subprocess
import sys

import pytest

import engines_reference as eref
import reference as ref
from conftest import package_env

QSL, LENS = [0, 3, 8, 10], [70, 130, 9]  # rows 3, 5 and 2; the last request's L < BUDGET
BUDGET = 16
HEADS, KV_HEADS, DIM = 4, 2, 16
CASES = [(4, 16), (4, 64), (2, 32), (1, 16), (1, 64)]  # (c, P)


def test_engines_import_neither_an_engine_nor_torch():
    code = ("import sys, sm70ops.engines.vllm, sm70ops.engines.sglang; "
            "print(sorted(m for m in ('vllm', 'sglang', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=package_env(), check=True)
    assert done.stdout.strip() == "[]"


def rows():
    """[(request, pos)] per row."""
    return [(r, pos) for r, pos, _ in ref.rows_of(QSL, LENS)]


class Batch:
    """The batch on CPU at compress ratio c and page size P: index keys and queries whose
    scores are exact integers times one constant (so ties fall alike everywhere), fp16 KV caches
    on a shuffled pool of pages, gates."""

    def __init__(self, torch, c, page, seed=5):
        self.torch, self.c, self.page = torch, c, page
        rng = random.Random(seed)
        pages = [math.ceil(n / page) for n in LENS]
        pool = list(range(sum(pages) + 2))
        rng.shuffle(pool)
        self.table, used = [], 0
        for n in pages:
            self.table.append(pool[used:used + n] + [0] * (max(pages) - n))
            used += n
        self.pool = len(pool)
        t = QSL[-1]
        head = [[[float(rng.randint(-2, 2)) for _ in range(128)] for _ in range(t)]]
        self.q_index = [[head[0][r]] * 4 for r in range(t)]  # every head alike
        self.k_index = [[[float(rng.randint(-2, 2)) for _ in range(128)]
                         for _ in range(page // c)] for _ in range(self.pool)]
        self.q = self._randn(t, HEADS, DIM)
        self.gate = self._randn(t, HEADS, DIM)
        self.k_cache = self._randn(self.pool, page, KV_HEADS, DIM)
        self.v_cache = self._randn(self.pool, page, KV_HEADS, DIM)
        self.positions = [pos for _, pos in rows()]
        self.token_to_req = [r for r, _ in rows()]

    def _randn(self, *shape):
        g = self.torch.Generator().manual_seed(sum(shape))
        return self.torch.randn(*shape, generator=g).to(self.torch.float16)

    def i32(self, values):
        return self.torch.tensor(values, dtype=self.torch.int32)

    def visible(self):
        return [(pos + 1) // self.c for pos in self.positions]

    def attention_reference(self, ids, gate, scale):
        as_list = lambda x: x.double().tolist()  # noqa: E731
        out = eref.gated_attention(as_list(self.q), as_list(self.k_cache), as_list(self.v_cache),
                                   ids, self.table, self.token_to_req,
                                   None if gate is None else as_list(gate), scale)
        return self.torch.tensor(out, dtype=self.torch.float64)


@pytest.fixture(scope="module")
def engines(torch):
    from sm70ops import library
    from sm70ops.engines import sglang, vllm

    return library, vllm, sglang


@pytest.mark.parametrize("c, page", CASES)
def test_vllm_select_then_expand_is_the_packed_buffer(torch, engines, c, page):
    _, vllm, _ = engines
    b = Batch(torch, c, page)
    k_cache = torch.tensor(b.k_index, dtype=torch.float16).unsqueeze(2)  # [blocks, P/c, 1, 128]
    block_indices = torch.full((QSL[-1], BUDGET // c), 77, dtype=torch.int32)
    vllm.qsa_select_paged_prefill(torch.tensor(b.q_index, dtype=torch.float16), k_cache,
                                  b.i32(b.table), b.i32(QSL), b.i32(b.visible()), BUDGET, c,
                                  max(QSL[i + 1] - QSL[i] for i in range(3)), block_indices,
                                  max(LENS))
    scores = ref.index_scores(b.q_index, None, b.k_index, QSL, LENS, b.table, c)
    want = [eref.select(s, g, BUDGET, c) for s, g in zip(scores, b.visible())]
    assert block_indices.tolist() == want
    out = torch.full((QSL[-1], BUDGET + c), 99, dtype=torch.int32)
    vllm.expand_qsa_block_indices(block_indices, b.i32(b.positions), b.i32(b.visible()), c,
                                  BUDGET, out)
    assert out.tolist() == [eref.packed_row(g, pos, c, BUDGET)
                            for g, pos in zip(want, b.positions)]


def test_vllm_expand_keeps_the_groups_order_and_skips_their_padding(torch, engines):
    _, vllm, _ = engines
    c, budget = 4, 24
    groups = [[5, -1, 2, 9, -1, -1], [-1, -1, -1, -1, -1, -1], [0, 3, 1, 7, 8, 4]]
    positions = [45, 2, 38]
    out = torch.zeros((3, budget + c), dtype=torch.int32)
    vllm.expand_qsa_block_indices(torch.tensor(groups, dtype=torch.int32),
                                  torch.tensor(positions, dtype=torch.int32),
                                  torch.tensor([(p + 1) // c for p in positions]), c, budget, out)
    assert out.tolist() == [eref.packed_row(g, p, c, budget) for g, p in zip(groups, positions)]
    assert out[0, -1] == 3 * c + 2 and out[1, :3].tolist() == [0, 1, 2] and out[1, -1] == 3


def packed_buffer(b, rng, junk_after_count=()):
    """A packed buffer [T, BUDGET + c] of random sets of each row's positions (shuffled), -1
    padded, or for rows in junk_after_count with unlisted ids past the count."""
    width = BUDGET + b.c - 1
    out = []
    for t, pos in enumerate(b.positions):
        ids = rng.sample(range(pos + 1), min(pos + 1, rng.randint(1, width)))
        rest = [p for p in range(pos + 1) if p not in ids] if t in junk_after_count else []
        tail = (rest * width)[: width - len(ids)] if rest else [-1] * (width - len(ids))
        out.append(ids + tail + [len(ids)])
    return out


@pytest.mark.parametrize("c, page", CASES)
def test_vllm_attention_is_the_gated_reference(torch, engines, c, page):
    _, vllm, _ = engines
    b = Batch(torch, c, page)
    packed = packed_buffer(b, random.Random(c * page), junk_after_count={1, 8})
    out = torch.full(b.q.shape, float("nan"), dtype=torch.float16)
    got = vllm.qsa_sparse_paged_attention(b.q, b.k_cache, b.v_cache, b.i32(packed),
                                          b.i32(b.table), b.i32(b.token_to_req), True, out=out,
                                          output_gate=b.gate)
    assert got is out
    want = b.attention_reference([eref.packed_ids(row) for row in packed], b.gate, DIM**-0.5)
    assert torch.allclose(out.double(), want, rtol=2e-3, atol=2e-3), (out.double() - want).abs().max()


def test_sglang_indexer_gives_op1s_token_sets(torch, engines):
    _, _, sglang = engines
    for c, page in CASES:
        b = Batch(torch, c, page)
        got = sglang.qsa_topk_indices(torch.tensor(b.q_index, dtype=torch.float16),
                                      torch.tensor(b.k_index, dtype=torch.float16),
                                      b.i32(b.table), b.i32(QSL), b.i32(LENS), BUDGET, c,
                                      max(LENS), 5)
        _, want, *_ = ref.qsa_index(b.q_index, None, b.k_index, QSL, LENS, b.table, BUDGET, 1, c)
        assert got.tolist() == want, (c, page)


class FakePool:
    """SGLang's token-slot KV pool as forward_extend reads it: a slot per token, page_size
    slots a page."""

    def __init__(self, k, v, page_size):
        self.k, self.v, self.page_size = k, v, page_size

    def get_key_buffer(self, layer_id):
        return self.k

    def get_value_buffer(self, layer_id):
        return self.v

    def set_kv_buffer(self, layer, loc, cache_k, cache_v):
        self.k[loc.long()] = cache_k
        self.v[loc.long()] = cache_v


@pytest.mark.parametrize("c, page", CASES[:3])
def test_sglang_forward_extend_saves_the_rows_then_attends_their_ids(torch, engines, c, page):
    from types import SimpleNamespace

    _, _, sglang = engines
    b = Batch(torch, c, page)
    slot = lambda r, p: b.table[r][p // page] * page + p % page  # noqa: E731
    width = max(len(row) for row in b.table) * page
    req_to_token = [[slot(r, p) if p < LENS[r] else 0 for p in range(width)] for r in range(3)]
    new_k, new_v = b._randn(QSL[-1], KV_HEADS, DIM + 1)[..., :DIM], b._randn(QSL[-1], KV_HEADS, DIM)
    pool = FakePool(b.k_cache.flatten(0, 1).clone(), b.v_cache.flatten(0, 1).clone(), page)
    batch = SimpleNamespace(
        token_to_kv_pool=pool, req_to_token_pool=SimpleNamespace(req_to_token=b.i32(req_to_token)),
        req_pool_indices=torch.tensor([0, 1, 2]), seq_lens=torch.tensor(LENS),
        extend_seq_lens=torch.tensor([QSL[i + 1] - QSL[i] for i in range(3)]),
        out_cache_loc=torch.tensor([slot(r, pos) for r, pos in rows()]))
    layer = SimpleNamespace(layer_id=3, tp_q_head_num=HEADS, tp_k_head_num=KV_HEADS, head_dim=DIM,
                            v_head_dim=DIM, scaling=0.3)
    rng = random.Random(page)
    ids = []
    for pos in b.positions:  # SGLang's layout: ids and -1s in any order
        row = rng.sample(range(pos + 1), min(pos + 1, BUDGET)) + [-1] * (c - 1)
        row += [-1] * (BUDGET + c - 1 - len(row))
        rng.shuffle(row)
        ids.append(row)
    got = sglang.QsaAttnBackend().forward_extend(b.q.flatten(1), new_k, new_v, layer, batch,
                                                 topk_indices=b.i32(ids))
    assert got.shape == (QSL[-1], HEADS * DIM)
    b.k_cache = pool.k.view(b.k_cache.shape)
    b.v_cache = pool.v.view(b.v_cache.shape)
    assert torch.equal(b.k_cache.flatten(0, 1)[batch.out_cache_loc], new_k)
    want = b.attention_reference([eref.sglang_ids(row) for row in ids], None, 0.3)
    assert torch.allclose(got.view(b.q.shape).double(), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("op", ["qsa_index_token_set", "qsa_attn_token_ids"])
def test_opcheck_of_the_ops_the_drop_ins_call(torch, engines, op):
    """torch.library.opcheck (schema, fake implementation, autograd registration) on CPU, on
    test_library's problem: two requests, c 4, 16-token pages, 6 / 1 heads."""
    from test_library import Problem

    p = Problem(torch, "cpu")
    index_args = p.args("qsa_index")
    ids = torch.ops.sm70ops.qsa_index_token_set(*index_args)
    m, n = p.meta, p.ints
    args = index_args if op == "qsa_index_token_set" else (
        p.q, p.k_cache, p.v_cache, m["query_start_loc"], m["seq_lens"], m["block_table"], ids,
        False, p.q.shape[-1] ** -0.5, n["max_seq_len"], n["max_query_len"], p.gate)
    torch.library.opcheck(getattr(torch.ops.sm70ops, op), args)


def test_drop_ins_decide_in_library(torch, engines):
    """Every drop-in call goes through torch.ops.sm70ops, whose decisions library.paths counts
    (on CPU: no plugin context, the generic path)."""
    library, vllm, _ = engines
    before = library.paths.copy()
    test_vllm_attention_is_the_gated_reference(torch, engines, 4, 16)
    assert library.paths - before == {("qsa_attn", library.NO_CONTEXT): 1}


def test_on_the_plugin_token_ids_equal_the_triple(cuda_torch, plugin, engines, require_plugin):
    """Where the plugin runs (a GPU; SM70OPS_ALLOW_ARCH=90 on the H200): op 2 from vLLM's packed
    buffer equals op 2 from the triple of the same sets bit for bit, and the vLLM drop-in runs on
    the plugin within fp16 rounding of it. The model's TP4 rank: 6 / 1 heads of 256, c 4, B 512,
    16-token pages, two requests."""
    torch = cuda_torch
    library, vllm, _ = engines
    from sm70ops import generic

    c, budget, page, lens, counts = 4, 512, 16, [3001, 700], [40, 9]
    g = torch.Generator(device="cuda").manual_seed(3)
    rows = sum(counts)
    pages = [-(-n // page) for n in lens]
    table = torch.randperm(sum(pages), device="cuda", generator=g).to(torch.int32)
    block_table = torch.stack([torch.nn.functional.pad(part, (0, max(pages) - part.numel()))
                               for part in table.split(pages)])
    qsl = torch.tensor([0, counts[0], rows], dtype=torch.int32, device="cuda")
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    randn = lambda *s: torch.randn(*s, device="cuda", generator=g).half()  # noqa: E731
    q, gate = randn(rows, 6, 256), randn(rows, 6, 256)
    k_cache, v_cache = randn(sum(pages), page, 1, 256), randn(sum(pages), page, 1, 256)
    lengths = generic.row_lengths(qsl, seq_lens, "cuda")
    groups = (torch.rand(rows, budget // c, device="cuda", generator=g)
              * (lengths // c)[:, None]).long().sort(dim=1).values
    groups = torch.where(torch.cat([torch.ones_like(groups[:, :1], dtype=torch.bool),
                                    groups[:, 1:] != groups[:, :-1]], 1), groups, -1)
    groups = torch.gather(groups, 1, torch.sort((groups < 0).int(), dim=1, stable=True).indices)
    packed = torch.zeros((rows, budget + c), dtype=torch.int32, device="cuda")
    vllm.expand_qsa_block_indices(groups.int(), (lengths - 1).int(), (lengths // c).int(), c,
                                  budget, packed)
    triple = generic.token_ids_selection(packed, True, lengths, page)
    o = torch.ops.sm70ops
    before = library.paths.copy()
    from_ids = o.qsa_attn_token_ids(q, k_cache, v_cache, qsl, seq_lens, block_table, packed, True,
                                    256**-0.5, max(lens), max(counts), gate)
    from_triple = o.qsa_attn(q, k_cache, v_cache, qsl, seq_lens, block_table, *triple, 256**-0.5,
                             max(lens), max(counts), gate)
    token_to_req = torch.repeat_interleave(torch.arange(2, device="cuda"),
                                           torch.tensor(counts, device="cuda"))
    drop_in = vllm.qsa_sparse_paged_attention(q, k_cache, v_cache, packed, block_table,
                                              token_to_req, True, output_gate=gate)
    require_plugin(library.paths - before, ("qsa_attn",))
    assert torch.equal(from_ids, from_triple)
    assert torch.allclose(drop_in.float(), from_triple.float(), rtol=2e-3, atol=2e-3)


# A fork's first calls, in a process that registered nothing: the model's TP4 rank (index heads
# 4 x 128, attention 6 / 1 heads of 256, gated), c 4, B 512, 16-token pages, two requests.
FRESH_PROCESS_CALLS = r"""
import json, types
import torch
from sm70ops import library
from sm70ops.engines import sglang, vllm

c, budget, page, lens, counts = 4, 512, 16, [3001, 700], [40, 9]
g = torch.Generator(device="cuda").manual_seed(11)
randn = lambda *s: torch.randn(*s, device="cuda", generator=g).half()
i32 = lambda v: torch.tensor(v, dtype=torch.int32, device="cuda")
rows, pages = sum(counts), [-(-n // page) for n in lens]
perm = torch.randperm(sum(pages), device="cuda", generator=g).to(torch.int32)
table = torch.stack([torch.nn.functional.pad(p, (0, max(pages) - p.numel()))
                     for p in perm.split(pages)])
qsl = i32([0, counts[0], rows])
positions = i32([lens[0] - counts[0] + i for i in range(counts[0])]
                + [lens[1] - counts[1] + i for i in range(counts[1])])
visible = (positions + 1) // c
q_index, k_index = randn(rows, 4, 128), randn(sum(pages), page // c, 1, 128)
q, gate = randn(rows, 6, 256), randn(rows, 6, 256)
k_cache, v_cache = randn(sum(pages), page, 1, 256), randn(sum(pages), page, 1, 256)

groups = torch.full((rows, budget // c), -1, dtype=torch.int32, device="cuda")
vllm.qsa_select_paged_prefill(q_index, k_index, table, qsl, visible, budget, c, max(counts),
                              groups, max(lens))
packed = torch.zeros((rows, budget + c), dtype=torch.int32, device="cuda")
vllm.expand_qsa_block_indices(groups, positions, visible, c, budget, packed)
token_to_req = torch.repeat_interleave(torch.arange(2, device="cuda"), i32(counts))
vllm.qsa_sparse_paged_attention(q, k_cache, v_cache, packed, table, token_to_req, True,
                                output_gate=gate)

ids = sglang.qsa_topk_indices(q_index, k_index, table, qsl, i32(lens), budget, c, max(lens),
                              max(counts))
pool = types.SimpleNamespace(page_size=page, get_key_buffer=lambda _: k_cache.flatten(0, 1),
                             get_value_buffer=lambda _: v_cache.flatten(0, 1))
slots = table.repeat_interleave(page, dim=1) * page + torch.arange(
    table.shape[1] * page, device="cuda", dtype=torch.int32) % page
batch = types.SimpleNamespace(token_to_kv_pool=pool,
                              req_to_token_pool=types.SimpleNamespace(req_to_token=slots),
                              req_pool_indices=torch.arange(2, device="cuda"),
                              seq_lens=i32(lens), extend_seq_lens=i32(counts))
layer = types.SimpleNamespace(layer_id=0, tp_q_head_num=6, tp_k_head_num=1, head_dim=256,
                              v_head_dim=256, scaling=256 ** -0.5)
sglang.QsaAttnBackend().forward_extend(q.flatten(1), None, None, layer, batch,
                                       save_kv_cache=False, topk_indices=ids)
torch.cuda.synchronize()
print(json.dumps(sorted([op, path, n] for (op, path), n in library.paths.items())))
"""


def test_drop_ins_reach_the_plugin_in_a_fresh_process(cuda_torch, library, require_plugin):
    """What a fork gets from the one import the README gives: vLLM's three calls and SGLang's
    two in a new interpreter that registered no context run on the plugin, every one of them
    (library.py creates the device's context at the first call)."""
    import json
    import os

    done = subprocess.run([sys.executable, "-c", FRESH_PROCESS_CALLS], capture_output=True,
                          text=True, timeout=600,
                          env=dict(os.environ, SM70OPS_LIBRARY=library, **package_env()))
    assert done.returncode == 0, done.stderr
    paths = {(op, path): n for op, path, n in json.loads(done.stdout.splitlines()[-1])}
    require_plugin(paths, ("qsa_index", "qsa_attn"))
    assert paths == {("qsa_index", "plugin"): 2, ("qsa_attn", "plugin"): 2}, done.stderr
