"""The served model's shapes (shared/spec/ops.md, "The model the fast paths are for") and the op
descriptors they give at each prefill length: the Python twin of integration/cli/model_shapes.c,
so `python -m sm70ops check` asks the plugin exactly what `sm70ops check` asks."""
import dataclasses
import math

from . import _abi, ops
from .dlpack import describe


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """Per tensor-parallel rank."""

    tp: int
    hidden: int  # H
    q_heads: int  # Hq of the sparse-attention layers
    kv_heads: int  # Hkv
    head_dim: int  # D
    index_heads: int  # QSA indexer, replicated on every rank
    index_dim: int
    index_topk: int  # tokens each row selects
    page_size: int  # tokens per KV page
    experts: int  # E
    expert_topk: int  # experts routed per token
    expert_inter: int  # I, this rank's slice


MODEL_SHAPES = {
    # The whole model on one GPU.
    1: ModelShape(tp=1, hidden=2048, q_heads=16, kv_heads=2, head_dim=256, index_heads=4,
                  index_dim=128, index_topk=2048, page_size=64, experts=512, expert_topk=10,
                  expert_inter=512),
    # The target: four V100-SXM2-32GB, attention heads and expert slices split four ways.
    4: ModelShape(tp=4, hidden=2048, q_heads=4, kv_heads=1, head_dim=256, index_heads=4,
                  index_dim=128, index_topk=2048, page_size=64, experts=512, expert_topk=10,
                  expert_inter=128),
}

PREFILL_LENGTHS = (8192, 32768, 131072)  # prompt lengths that matter, shortest first
OPS = (_abi.Op.QSA_INDEX, _abi.Op.QSA_ATTN, _abi.Op.NVFP4_MOE, _abi.Op.NVFP4_MOE_PREPARE)
CHUNK_ROWS = 8192  # vLLM's chunked prefill runs a prompt as chunks of at most this many rows
NVFP4_BLOCK = 16  # one e4m3 scale per 16 weights; two weights per byte


@dataclasses.dataclass(frozen=True)
class Chunk:
    """The last chunk of a prompt: its rows see the whole prompt so far."""

    rows: int
    seq_len: int
    pages: int  # of the block table, and of the cache pool
    selected_pages: int  # NB, the width of the sel_* expansion


def last_chunk(m, prefill):
    pages = -(-prefill // m.page_size)
    return Chunk(rows=min(prefill, CHUNK_ROWS), seq_len=prefill, pages=pages,
                 selected_pages=min(pages, m.index_topk))


def _varlen(c, device):
    requests = 1
    return dict(query_start_loc=describe((requests + 1,), "int32", device),
                seq_lens=describe((requests,), "int32", device),
                block_table=describe((requests, c.pages), "int32", device))


def _selection(c, device):
    return dict(sel_blocks=describe((c.rows, c.selected_pages), "int32", device),
                sel_mask=describe((c.rows, c.selected_pages), "uint64", device),
                sel_count=describe((c.rows,), "int32", device))


def _qsa_index(m, c, device):
    args = ops.qsa_index(
        q=describe((c.rows, m.index_heads, m.index_dim), "float16", device),
        weights=describe((c.rows, m.index_heads), "float32", device),
        k_index=describe((c.pages, m.page_size, m.index_dim), "float16", device),
        topk=m.index_topk, max_seq_len=c.seq_len, max_query_len=c.rows,
        **_varlen(c, device), **_selection(c, device))
    return args, f"{c.rows} x {c.seq_len}"


def _qsa_attn(m, c, device):
    cache = (c.pages, m.page_size, m.kv_heads, m.head_dim)
    args = ops.qsa_attn(
        q=describe((c.rows, m.q_heads, m.head_dim), "float16", device),
        k_cache=describe(cache, "float16", device), v_cache=describe(cache, "float16", device),
        out=describe((c.rows, m.q_heads, m.head_dim), "float16", device),
        sm_scale=1.0 / math.sqrt(m.head_dim), max_seq_len=c.seq_len, max_query_len=c.rows,
        **_varlen(c, device), **_selection(c, device))
    return args, f"{c.rows} x {min(c.seq_len, m.index_topk)}"


def weight_shapes(m):
    """The checkpoint layout: w13 [E, 2I, H/2], w2 [E, H, I/2], e4m3 scales per 16 weights."""
    e, h, i = m.experts, m.hidden, m.expert_inter
    return dict(w13=((e, 2 * i, h // 2), "uint8"),
                w13_scale=((e, 2 * i, h // NVFP4_BLOCK), "uint8"),
                w13_scale_2=((e, 2), "float32"),
                w2=((e, h, i // 2), "uint8"),
                w2_scale=((e, h, i // NVFP4_BLOCK), "uint8"),
                w2_scale_2=((e,), "float32"))


def _weights(m, device):
    return ops.nvfp4_weights(**{name: describe(shape, dtype, device)
                                for name, (shape, dtype) in weight_shapes(m).items()})


def _nvfp4_moe(m, c, device):
    args = ops.nvfp4_moe(
        x=describe((c.rows, m.hidden), "float16", device),
        topk_ids=describe((c.rows, m.expert_topk), "int32", device),
        topk_weights=describe((c.rows, m.expert_topk), "float32", device),
        weights=_weights(m, device), out=describe((c.rows, m.hidden), "float16", device))
    return args, f"{c.rows} x {m.expert_topk} experts"


def _nvfp4_moe_prepare(m, device):
    """`prepared` is sized like the checkpoint's payload and scales plus each expert's scale_2
    (16 bytes with padding; the repacked layout at these shapes): check reports the real size
    (output_bytes) only for a descriptor that already has one."""
    shapes = weight_shapes(m)
    total = sum(math.prod(shapes[name][0]) for name in ("w13", "w13_scale", "w2", "w2_scale"))
    total += 16 * m.experts
    args = ops.nvfp4_moe_prepare(_weights(m, device), describe((total,), "uint8", device))
    return args, f"{m.experts} experts"


def model_call(op, prefill, tp=4, device=0):
    """(OpArgs with NULL data, "rows x keys" for people) for `op` on the last chunk of one
    `prefill`-token prompt (one request) under vLLM's chunked prefill."""
    m = MODEL_SHAPES[tp]
    c = last_chunk(m, prefill)
    op = _abi.op_from(op)
    if op == _abi.Op.QSA_INDEX:
        return _qsa_index(m, c, device)
    if op == _abi.Op.QSA_ATTN:
        return _qsa_attn(m, c, device)
    if op == _abi.Op.NVFP4_MOE:
        return _nvfp4_moe(m, c, device)
    return _nvfp4_moe_prepare(m, device)
