"""torch_ops.TorchOps, the eager host's dispatch over torch.ops.sm70ops (test_library.py tests
the ops themselves): each op runs on the plugin when its check accepts and on generic.py when it
declines, and `paths` says which and why. On CPU tensors the plugin always declines (ops.md:
tensors are kDLCUDA), so the fallback is tested everywhere torch is; the plugin path needs a CUDA
GPU the plugin accepts (on the H200: SM70OPS_ALLOW_ARCH=90)."""
import math

import pytest

from sm70ops import generic
from sm70ops.torch_ops import TorchOps
from test_generic import random_moe


def index_inputs(torch, device, rows=40, seq_len=300, seed=3):
    g = torch.Generator(device=device).manual_seed(seed)
    pages = math.ceil(seq_len / 64)
    return dict(
        q=torch.randn((rows, 4, 128), generator=g, device=device).half(),
        weights=torch.rand((rows, 4), generator=g, device=device) * 2 - 1,
        k_index=torch.randn((pages, 64, 128), generator=g, device=device).half(),
        query_start_loc=torch.tensor([0, rows], dtype=torch.int32, device=device),
        seq_lens=torch.tensor([seq_len], dtype=torch.int32, device=device),
        block_table=torch.randperm(pages, generator=g, device=device).int().view(1, -1)), dict(
            max_seq_len=seq_len, max_query_len=rows)


def attn_inputs(torch, device, rows, seq_len, q_heads=4, kv_heads=1, dim=128, seed=4, page=64):
    g = torch.Generator(device=device).manual_seed(seed)
    pages = math.ceil(seq_len / page)
    return (torch.randn((rows, q_heads, dim), generator=g, device=device).half(),
            torch.randn((pages, page, kv_heads, dim), generator=g, device=device).half(),
            torch.randn((pages, page, kv_heads, dim), generator=g, device=device).half())


def rel_l2(got, want):
    return float((got.float() - want.float()).norm() / want.float().norm())


def test_without_a_context_every_op_is_generic(torch):
    ops = TorchOps(None)
    inputs, bounds = index_inputs(torch, "cpu")
    sel = ops.qsa_index(**inputs, topk=100, **bounds)
    want = generic.qsa_index(**inputs, topk=100)
    assert torch.equal(sel.sel_blocks, want.sel_blocks)
    assert torch.equal(sel.sel_mask.view(torch.int64), want.sel_mask.view(torch.int64))
    q, k, v = attn_inputs(torch, "cpu", 40, 300)
    meta = {n: inputs[n] for n in ("query_start_loc", "seq_lens", "block_table")}
    out = ops.qsa_attn(q, k, v, **meta, sel=sel, sm_scale=0.1, **bounds)
    assert torch.equal(out, generic.qsa_attn(q, k, v, **meta, sel_blocks=sel.sel_blocks,
                                             sel_mask=sel.sel_mask, sel_count=sel.sel_count,
                                             sm_scale=0.1)[0])
    x, ids, weights, w = random_moe(torch, 11)
    assert ops.prepare(w) is None
    assert torch.equal(ops.nvfp4_moe(x, ids, weights, w), generic.nvfp4_moe(x, ids, weights, **w))
    assert set(ops.paths) == {(op, "generic: no plugin context") for op in (
        "qsa_index", "qsa_attn", "nvfp4_moe", "nvfp4_moe_prepare")}


def test_int64_metadata_falls_back_to_the_generic_path(torch, plugin):
    """int64 seq_lens (op 1) and topk_ids (op 3) are the plugin's to decline, never a TypeError
    of the binding: the generic path answers, and `paths` names the reason."""
    with plugin.context(compute_capability=70) as ctx:
        ops = TorchOps(ctx)
        inputs, bounds = index_inputs(torch, "cpu")
        inputs["seq_lens"] = inputs["seq_lens"].long()
        sel = ops.qsa_index(**inputs, topk=100, **bounds)
        want = generic.qsa_index(**inputs, topk=100)
        assert torch.equal(sel.sel_blocks, want.sel_blocks)
        x, ids, weights, w = random_moe(torch, 11)
        out = ops.nvfp4_moe(x, ids.long(), weights, w)
        assert torch.equal(out, generic.nvfp4_moe(x, ids, weights, **w))
    assert set(ops.paths) == {("qsa_index", "generic: INVALID_ARGUMENT"),
                              ("nvfp4_moe", "generic: INVALID_ARGUMENT")}


def test_the_models_index_and_gated_attention_fall_back_alike(torch):
    """c = 4 without weights on 16-token pages, the gate fused: TorchOps's generic path is
    generic's, at the width ops.md gives (B/c + 1 pages at most)."""
    ops = TorchOps(None)
    g = torch.Generator().manual_seed(6)
    rows, seq_len, page = 30, 299, 16
    pages = math.ceil(seq_len / page)
    meta = dict(query_start_loc=torch.tensor([0, rows], dtype=torch.int32),
                seq_lens=torch.tensor([seq_len], dtype=torch.int32),
                block_table=torch.randperm(pages, generator=g).int().view(1, -1))
    q = torch.randn((rows, 4, 128), generator=g).half()
    k_index = torch.randn((pages, page // 4, 128), generator=g).half()
    sel = ops.qsa_index(q, None, k_index, **meta, topk=64, compress_ratio=4, max_seq_len=seq_len,
                        max_query_len=rows)
    want = generic.qsa_index(q, None, k_index, **meta, topk=64, compress_ratio=4)
    assert sel.topk_idx is None and sel.sel_blocks.shape == (rows, 17)
    assert torch.equal(sel.sel_blocks, want.sel_blocks) and torch.equal(sel.sel_count,
                                                                        want.sel_count)
    qa, k, v = attn_inputs(torch, "cpu", rows, seq_len, q_heads=6, page=page)
    gate = torch.randn(qa.shape, generator=g).half()
    out = ops.qsa_attn(qa, k, v, **meta, sel=sel, sm_scale=0.1, gate=gate, max_seq_len=seq_len,
                       max_query_len=rows)
    assert torch.equal(out, generic.qsa_attn(qa, k, v, **meta, sel_blocks=sel.sel_blocks,
                                             sel_mask=sel.sel_mask, sel_count=sel.sel_count,
                                             sm_scale=0.1, gate=gate)[0])


def test_cpu_tensors_are_declined_and_fall_back(torch, plugin):
    with plugin.context(0, compute_capability=70) as ctx:
        ops = TorchOps(ctx)
        x, ids, weights, w = random_moe(torch, 12)
        out = ops.nvfp4_moe(x, ids, weights, w)
    assert torch.equal(out, generic.nvfp4_moe(x, ids, weights, **w))
    assert list(ops.paths) == [("nvfp4_moe", "generic: INVALID_ARGUMENT")]  # not kDLCUDA


def test_moe_dense_matches_nvfp4_moe(torch):
    x, ids, weights, w = random_moe(torch, 13)
    dense = generic.dequantize_experts(**w)
    assert dense[0].dtype == torch.float16 and dense[0].shape == (4, 32, 32)
    assert rel_l2(generic.moe_dense(x, ids, weights, *dense),
                  generic.nvfp4_moe(x, ids, weights, **w)) <= 5e-3


@pytest.fixture(scope="module")
def gpu_ops(cuda_torch, plugin):
    with plugin.context(cuda_torch.cuda.current_device()) as ctx:
        yield TorchOps(ctx)


def test_plugin_path_matches_generic(cuda_torch, gpu_ops, require_plugin):
    torch = cuda_torch
    inputs, bounds = index_inputs(torch, "cuda", rows=257, seq_len=3001)
    sel = gpu_ops.qsa_index(**inputs, topk=512, **bounds)
    require_plugin(gpu_ops.paths, ("qsa_index",))
    assert sel.topk_idx is None and sel.sel_blocks.shape == (257, 47)
    q, k, v = attn_inputs(torch, "cuda", 257, 3001, q_heads=8, kv_heads=2, dim=256)
    meta = {n: inputs[n] for n in ("query_start_loc", "seq_lens", "block_table")}
    out = gpu_ops.qsa_attn(q, k, v, **meta, sel=sel, sm_scale=256**-0.5, **bounds)
    require_plugin(gpu_ops.paths, ("qsa_attn",))
    want = generic.qsa_attn(q, k, v, **meta, sel_blocks=sel.sel_blocks, sel_mask=sel.sel_mask,
                            sel_count=sel.sel_count, sm_scale=256**-0.5)[0]
    assert rel_l2(out, want) <= 2e-3


def test_plugin_moe_on_prepared_weights(cuda_torch, gpu_ops, require_plugin):
    torch = cuda_torch
    g = torch.Generator(device="cuda").manual_seed(5)
    experts, hidden, inter, tokens, topk = 8, 128, 128, 77, 3

    def codes(*shape):
        return torch.randint(0, 256, shape, generator=g, device="cuda", dtype=torch.uint8)

    def scales(*shape):
        return torch.randint(0x30, 0x40, shape, generator=g, device="cuda", dtype=torch.uint8)

    w = dict(w13=codes(experts, 2 * inter, hidden // 2),
             w13_scale=scales(experts, 2 * inter, hidden // 16),
             w13_scale_2=torch.rand((experts, 2), generator=g, device="cuda") * 0.02 + 0.01,
             w2=codes(experts, hidden, inter // 2), w2_scale=scales(experts, hidden, inter // 16),
             w2_scale_2=torch.rand((experts,), generator=g, device="cuda") * 0.02 + 0.01)
    x = torch.randn((tokens, hidden), generator=g, device="cuda").half()
    ids = torch.stack([torch.randperm(experts, generator=g, device="cuda")[:topk]
                       for _ in range(tokens)]).int()
    weights = torch.rand((tokens, topk), generator=g, device="cuda")
    prepared = gpu_ops.prepare(w)
    out = gpu_ops.nvfp4_moe(x, ids, weights, w, prepared)
    require_plugin(gpu_ops.paths, ("nvfp4_moe_prepare", "nvfp4_moe"))
    assert prepared is not None
    assert rel_l2(out, generic.nvfp4_moe(x, ids, weights, **w)) <= 5e-3
