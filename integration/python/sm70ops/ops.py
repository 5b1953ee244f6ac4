"""Builders of the four ops' argument structs (abi/sm70ops.h, ABI 1.2; shared/spec/ops.md v2).

Every tensor argument is a torch tensor (viewed with dlpack.from_torch) or a dlpack.TensorView
(dlpack.describe gives NULL-data descriptors for check()). Each builder returns an OpArgs that
holds the ctypes struct and every view it points to: keep it alive until the call returns.
T rows, R requests; varlen metadata vLLM style: query_start_loc [R+1] int32, seq_lens [R] int32
(context including this chunk), block_table [R, max_pages] int32; the page size P (16, 32 or 64
tokens) is the caches'.
max_seq_len / max_query_len are the host-side bounds of seq_lens and of the rows per request.
"""
import ctypes

from . import _abi
from .dlpack import as_view


class OpArgs:
    """An op's args struct (`struct`) and what it points to; pass it to Context.check/execute."""

    def __init__(self, op, struct, keep):
        self.op = op
        self.struct = struct
        self._keep = keep

    @property
    def address(self):
        return ctypes.addressof(self.struct)


def _pointers(tensors, dtypes=None):
    """{name: view} and {name: DLTensor pointer or None} for a {name: tensor} dict."""
    dtypes = dtypes or {}
    views = {name: as_view(t, dtypes.get(name)) for name, t in tensors.items()}
    pointers = {name: (v.pointer if v is not None else None) for name, v in views.items()}
    return views, pointers


def qsa_index(q, weights, k_index, query_start_loc, seq_lens, block_table, *, topk, max_seq_len,
              max_query_len, compress_ratio=1, topk_idx=None, sel_blocks=None, sel_mask=None,
              sel_count=None, max_workspace_bytes=0):
    """Op 1, QSA index: the budget topk / c best groups of c = compress_ratio tokens by s[t,g] =
    sum_h w[t,h] * relu(q[t,h,:] . k[g,:]) (ties to the lower group), the tail tokens of the
    row's incomplete group, the expansion to pages + 64-bit masks.

    q [T, 4, 128] fp16 (norm and RoPE applied); weights [T, 4] fp32 (scales folded in) or None
    (every head weighs 1/sqrt(128)); k_index [num_pages, P / c, 128] fp16, one key per group.
    Outputs, each optional, at least topk_idx or the sel_* triple:
    topk_idx [T, topk + c - 1] int32, the token set, request-local positions ascending, -1
    padded; sel_blocks [T, NB] int32, sorted unique logical pages, -1 padded; sel_mask [T, NB]
    uint64 (torch.uint64, or int64 holding the bits), bit b: token P*page+b; sel_count [T]
    int32. NB >= generic.selection_width(topk, c, P, max_seq_len). max_workspace_bytes 0: the
    plugin's 256 MiB.
    """
    views, p = _pointers(
        dict(q=q, weights=weights, k_index=k_index, query_start_loc=query_start_loc,
             seq_lens=seq_lens, block_table=block_table, topk_idx=topk_idx,
             sel_blocks=sel_blocks, sel_mask=sel_mask, sel_count=sel_count),
        {"sel_mask": "uint64"})
    struct = _abi.new_struct(_abi.sm70ops_qsa_index_args, topk=topk, max_seq_len=max_seq_len,
                             max_query_len=max_query_len, compress_ratio=compress_ratio,
                             max_workspace_bytes=max_workspace_bytes, **p)
    return OpArgs(_abi.Op.QSA_INDEX, struct, views)


def qsa_attn(q, k_cache, v_cache, query_start_loc, seq_lens, block_table, sel_blocks, sel_mask,
             sel_count, out, *, sm_scale, max_seq_len, max_query_len, lse=None, gate=None,
             token_ids=None, token_ids_count_column=False):
    """Op 2, QSA selected attention over op 1's expansion; the op applies the causal bound.

    q [T, Hq, D] fp16, D in {128, 256}, Hq a multiple of Hkv; k_cache, v_cache
    [num_pages, P, Hkv, D] fp16 (may view one [2, num_pages, P, Hkv, D] buffer);
    sel_blocks [T, NB] int32, sel_mask [T, NB] uint64, sel_count [T] int32 (op 1's at the same
    P), or all three None and token_ids [T, W] int32 (ABI 1.2: request-relative positions in any
    order, -1 padded; with token_ids_count_column the last column holds the row's count of
    leading ids, vLLM's packed buffer); out [T, Hq, D] fp16; lse [T, Hq] fp32, natural log of
    the ungated sums, optional; gate [T, Hq, D] fp16, optional: out *= sigmoid(gate).
    """
    views, p = _pointers(
        dict(q=q, k_cache=k_cache, v_cache=v_cache, query_start_loc=query_start_loc,
             seq_lens=seq_lens, block_table=block_table, sel_blocks=sel_blocks,
             sel_mask=sel_mask, sel_count=sel_count, out=out, lse=lse, gate=gate,
             token_ids=token_ids),
        {"sel_mask": "uint64"})
    struct = _abi.new_struct(_abi.sm70ops_qsa_attn_args, sm_scale=sm_scale,
                             max_seq_len=max_seq_len, max_query_len=max_query_len,
                             token_ids_count_column=int(token_ids_count_column), **p)
    return OpArgs(_abi.Op.QSA_ATTN, struct, views)


class Nvfp4Weights:
    """sm70ops_nvfp4_weights and its views (see nvfp4_weights)."""

    def __init__(self, struct, views):
        self.struct = struct
        self._keep = views


def nvfp4_weights(w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2):
    """NVFP4 experts in the ModelOpt/vLLM checkpoint layout (unswizzled); e4m3 scales travel as
    uint8 (a float8_e4m3fn tensor is viewed as its bytes).

    w13 [E, 2I, H/2] uint8 (rows 0..I-1 gate, I..2I-1 up; low nibble = even k);
    w13_scale [E, 2I, H/16] e4m3; w13_scale_2 [E, 2] fp32 (gate, up);
    w2 [E, H, I/2] uint8; w2_scale [E, H, I/16] e4m3; w2_scale_2 [E] fp32.
    """
    views, p = _pointers(
        dict(w13=w13, w13_scale=w13_scale, w13_scale_2=w13_scale_2, w2=w2, w2_scale=w2_scale,
             w2_scale_2=w2_scale_2),
        {"w13": "uint8", "w13_scale": "uint8", "w2": "uint8", "w2_scale": "uint8"})
    return Nvfp4Weights(_abi.new_struct(_abi.sm70ops_nvfp4_weights, **p), views)


def _weights(weights):
    if not isinstance(weights, Nvfp4Weights):
        weights = nvfp4_weights(**weights) if isinstance(weights, dict) else nvfp4_weights(
            *weights)
    return weights


def nvfp4_moe(x, topk_ids, topk_weights, weights, out, prepared=None):
    """Op 3, grouped NVFP4 (W4A16) MoE: out[t] = sum_j topk_weights[t,j] *
    expert_{topk_ids[t,j]}(x[t]), expert(x) = (silu(x W_gate^T) * (x W_up^T)) W2^T.

    x [T, H] fp16; topk_ids [T, k] int32; topk_weights [T, k] fp32; weights: Nvfp4Weights (or
    the six tensors as a tuple/dict; their shapes are always read, their data only when
    `prepared` is None); prepared: op 4's output [bytes] uint8 or None; out [T, H] fp16 (a
    partial sum at TP > 1).
    """
    weights = _weights(weights)
    views, p = _pointers(dict(x=x, topk_ids=topk_ids, topk_weights=topk_weights,
                              prepared=prepared, out=out), {"prepared": "uint8"})
    struct = _abi.new_struct(_abi.sm70ops_nvfp4_moe_args,
                             weights=ctypes.pointer(weights.struct), **p)
    return OpArgs(_abi.Op.NVFP4_MOE, struct, [views, weights])


def nvfp4_moe_prepare(weights, prepared=None):
    """Op 4: one-time repack of checkpoint weights into `prepared` [output_bytes] uint8 (check's
    output_bytes gives the size; None is enough for check())."""
    weights = _weights(weights)
    views, p = _pointers(dict(prepared=prepared), {"prepared": "uint8"})
    struct = _abi.new_struct(_abi.sm70ops_nvfp4_moe_prepare_args,
                             weights=ctypes.pointer(weights.struct), **p)
    return OpArgs(_abi.Op.NVFP4_MOE_PREPARE, struct, [views, weights])
