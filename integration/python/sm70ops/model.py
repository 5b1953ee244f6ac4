"""The served model, Qwen3.8-Flash-Next (shared/spec/ops.md v2, "The model the fast paths are
for"), its per-rank shapes and the op descriptors they give: the Python twin of
integration/cli/model_shapes.c, so `python -m sm70ops check` asks the plugin exactly what
`sm70ops check` asks. V1 keeps the shapes contract version 1 had guessed, for the benches' --shapes
v1."""
import dataclasses
import math

from . import _abi, generic, ops
from .dlpack import describe


@dataclasses.dataclass(frozen=True)
class Model:
    """The whole model, as one GPU (TP 1) holds it."""

    name: str
    hidden: int  # H
    q_heads: int  # Hq of the sparse-attention layers
    kv_heads: int  # Hkv
    head_dim: int  # D
    attention_gate: bool  # out *= sigmoid(gate), the gate from the q projection
    index_heads: int  # QSA indexer, replicated on every rank
    index_dim: int
    index_weighted: bool  # per-head index weights (DeepSeek-V3.2 style), else weight-free
    compress_ratio: int  # c: tokens per index key
    index_topk: int  # B: tokens each row selects
    experts: int  # E
    expert_topk: int  # experts routed per token
    expert_inter: int  # I of a routed expert
    shared_inter: int  # the fp16 shared expert's intermediate size (0: none)
    max_context: int  # tokens


QWEN38_FLASH_NEXT = Model(name="Qwen3.8-Flash-Next", hidden=2560, q_heads=24, kv_heads=2,
                          head_dim=256, attention_gate=True, index_heads=4, index_dim=128,
                          index_weighted=False, compress_ratio=4, index_topk=2048, experts=512,
                          expert_topk=10, expert_inter=640, shared_inter=640, max_context=262144)
V1 = Model(name="contract version 1", hidden=2048, q_heads=16, kv_heads=2, head_dim=256,
           attention_gate=False, index_heads=4, index_dim=128, index_weighted=True,
           compress_ratio=1, index_topk=2048, experts=512, expert_topk=10, expert_inter=512,
           shared_inter=0, max_context=131072)
MODELS = {"model": QWEN38_FLASH_NEXT, "v1": V1}  # the benches' --shapes


@dataclasses.dataclass(frozen=True)
class ModelShape(Model):
    """Per tensor-parallel rank: the attention heads and every expert's intermediate size are
    split TP ways (a KV head is replicated where TP exceeds Hkv); the indexer and the router are
    replicated."""

    tp: int = 1
    page_size: int = 64  # P: tokens per KV page, the engine's (SGLang 64, vLLM-style blocks 16)


def shape(tp=1, page_size=64, model=QWEN38_FLASH_NEXT):
    """`model`'s shapes on one rank of `tp`."""
    return ModelShape(**dict(dataclasses.asdict(model), q_heads=model.q_heads // tp,
                             kv_heads=max(1, model.kv_heads // tp),
                             expert_inter=model.expert_inter // tp),
                      tp=tp, page_size=page_size)


TP_SIZES = (1, 2, 4, 8)  # what check plans
PAGE_SIZES = (16, 64)
PREFILL_LENGTHS = (8192, 32768, 131072, 262144)  # prompt lengths that matter, shortest first
OPS = (_abi.Op.QSA_INDEX, _abi.Op.QSA_ATTN, _abi.Op.NVFP4_MOE, _abi.Op.NVFP4_MOE_PREPARE)
CHUNK_ROWS = 8192  # vLLM's chunked prefill runs a prompt as chunks of at most this many rows
NVFP4_BLOCK = 16  # one e4m3 scale per 16 weights; two weights per byte


@dataclasses.dataclass(frozen=True)
class Case:
    """One descriptor of check's plan; None where the op's descriptor does not depend on it (the
    index is replicated on every rank, the MoE knows no pages and sees chunks of CHUNK_ROWS)."""

    op: _abi.Op
    tp: int = None
    page_size: int = None
    prefill: int = None


def plan(tp=None, page_size=None):
    """check's cases, op by op, restricted to one TP size or page size when given."""
    tps = TP_SIZES if tp is None else (tp,)
    pages = PAGE_SIZES if page_size is None else (page_size,)
    index = [Case(_abi.Op.QSA_INDEX, None, p, n) for p in pages for n in PREFILL_LENGTHS]
    attn = [Case(_abi.Op.QSA_ATTN, t, p, n) for t in tps for p in pages for n in PREFILL_LENGTHS]
    moe = [Case(op, t) for op in (_abi.Op.NVFP4_MOE, _abi.Op.NVFP4_MOE_PREPARE) for t in tps]
    return index + attn + moe


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
                 selected_pages=generic.selection_width(m.index_topk, m.compress_ratio,
                                                        m.page_size, prefill))


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
    weights = describe((c.rows, m.index_heads), "float32", device) if m.index_weighted else None
    args = ops.qsa_index(
        q=describe((c.rows, m.index_heads, m.index_dim), "float16", device), weights=weights,
        k_index=describe((c.pages, m.page_size // m.compress_ratio, m.index_dim), "float16",
                         device),
        topk=m.index_topk, max_seq_len=c.seq_len, max_query_len=c.rows,
        compress_ratio=m.compress_ratio, **_varlen(c, device), **_selection(c, device))
    return args, f"{c.rows} x {c.seq_len}"


def _qsa_attn(m, c, device):
    cache = (c.pages, m.page_size, m.kv_heads, m.head_dim)
    heads = (c.rows, m.q_heads, m.head_dim)
    args = ops.qsa_attn(
        q=describe(heads, "float16", device),
        k_cache=describe(cache, "float16", device), v_cache=describe(cache, "float16", device),
        out=describe(heads, "float16", device),
        gate=describe(heads, "float16", device) if m.attention_gate else None,
        sm_scale=1.0 / math.sqrt(m.head_dim), max_seq_len=c.seq_len, max_query_len=c.rows,
        **_varlen(c, device), **_selection(c, device))
    keys = min(c.seq_len, m.index_topk + m.compress_ratio - 1)  # the token set's bound
    return args, f"{c.rows} x {keys}"


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
    return ops.nvfp4_weights(**{name: describe(shape_, dtype, device)
                                for name, (shape_, dtype) in weight_shapes(m).items()})


def _nvfp4_moe(m, c, device):
    args = ops.nvfp4_moe(
        x=describe((c.rows, m.hidden), "float16", device),
        topk_ids=describe((c.rows, m.expert_topk), "int32", device),
        topk_weights=describe((c.rows, m.expert_topk), "float32", device),
        weights=_weights(m, device), out=describe((c.rows, m.hidden), "float16", device))
    return args, f"{c.rows} x {m.expert_topk} experts"


def _nvfp4_moe_prepare(m, device):
    """`prepared` is left out, as a host asks at load: check then reports its size
    (output_bytes)."""
    return ops.nvfp4_moe_prepare(_weights(m, device)), f"{m.experts} experts"


def model_call(op, prefill=CHUNK_ROWS, tp=4, device=0, page_size=64, model=QWEN38_FLASH_NEXT):
    """(OpArgs with NULL data, "rows x keys" for people) for `op` on the last chunk of one
    `prefill`-token prompt (one request) under vLLM's chunked prefill, at TP `tp` with
    `page_size`-token pages."""
    m = shape(tp, page_size, model)
    c = last_chunk(m, prefill)
    op = _abi.op_from(op)
    if op == _abi.Op.QSA_INDEX:
        return _qsa_index(m, c, device)
    if op == _abi.Op.QSA_ATTN:
        return _qsa_attn(m, c, device)
    if op == _abi.Op.NVFP4_MOE:
        return _nvfp4_moe(m, c, device)
    return _nvfp4_moe_prepare(m, device)


def case_call(case, device=0):
    """model_call for one of plan()'s cases (the index at any TP: it is replicated)."""
    return model_call(case.op, case.prefill or CHUNK_ROWS, case.tp or 1, device,
                      case.page_size or PAGE_SIZES[-1])
