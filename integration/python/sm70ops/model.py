"""The served model, Qwen3.8-Flash-Next (shared/spec/ops.md v2, "The model the fast paths are
for"), its per-rank shapes and the op descriptors they give: the Python twin of
integration/cli/model_shapes.c, so `python -m sm70ops check` asks the plugin exactly what
`sm70ops check` asks. The shapes and check's plan come from models.txt beside this file, which the
C tool embeds too; V1 keeps the shapes contract version 1 had guessed, for the benches' --shapes
v1."""
import dataclasses
import math
import pathlib
import re

from . import _abi, generic, ops
from .dlpack import describe

MODELS_FILE = pathlib.Path(__file__).with_name("models.txt")


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


class ModelsFileError(ValueError):
    """models.txt departs from its format (described at its top); the message says where."""


# What each key of a section holds: text, an integer, 0 or 1, or a list of positive integers.
_PLAN_KEYS = {"tp_sizes": "list", "page_sizes": "list", "prefill_lengths": "list",
              "chunk_rows": "int"}
_SHAPES_KEYS = {f.name: {str: "name", bool: "flag", int: "int"}[f.type]
                for f in dataclasses.fields(Model)}
_INT32_MAX = 2**31 - 1  # the C tool's int32_t
_BLANK = " \t\r"  # what both parsers strip around lines, keys and values
# The C tool's capacities (integration/cli/model_file.h), in bytes where they count text.
_MAX_SHAPES, _MAX_LIST, _ID_BYTES, _NAME_BYTES, _MAX_LINE = 4, 8, 16, 48, 256


def _int(text):
    if not re.fullmatch(r"[0-9]+", text) or int(text) > _INT32_MAX:
        raise ValueError(f"'{text}' is not a decimal integer below 2^31")
    return int(text)


def _value(kind, text):
    if kind == "name":
        if not text:
            raise ValueError("empty name")
        if len(text.encode()) >= _NAME_BYTES:
            raise ValueError(f"name longer than {_NAME_BYTES - 1} characters")
        return text
    if kind == "list":
        values = re.split(r"[ \t]+", text)
        if not all(re.fullmatch(r"[0-9]+", v) and int(v) > 0 for v in values):
            raise ValueError(f"'{text}' is not a list of positive integers")
        for i, v in enumerate(values):  # each below 2^31 up to the capacity, as the C tool reads
            _int(v)
            if i == _MAX_LIST:
                raise ValueError(f"more than {_MAX_LIST} values")
        return tuple(int(v) for v in values)
    value = _int(text)
    if kind == "flag" and value > 1:
        raise ValueError(f"'{text}' is not 0 or 1")
    return bool(value) if kind == "flag" else value


class _Section:
    def __init__(self, header, line):
        self.header, self.line, self.values = header, line, {}
        self.keys = _PLAN_KEYS if header == "plan" else _SHAPES_KEYS

    def add(self, text):
        key, sep, value = (part.strip(_BLANK) for part in text.partition("="))
        if not sep or not key:
            raise ValueError(f"'{text}' is not key = value")
        if key not in self.keys:
            raise ValueError(f"unknown key '{key}' in [{self.header}]")
        if key in self.values:
            raise ValueError(f"key '{key}' given twice in [{self.header}]")
        self.values[key] = _value(self.keys[key], value)

    def missing(self):
        return [key for key in self.keys if key not in self.values]


def _header(line, sections):
    """The new section's header, inside the brackets."""
    match = re.fullmatch(r"\[(plan|shapes ([a-z0-9_]+))\]", line)
    if not match:
        raise ValueError(f"'{line}' is not a section header ([plan] or [shapes ID])")
    header, shape_id = match.groups()
    if header in sections:
        raise ValueError(f"section [{header}] given twice")
    if shape_id is not None:
        if sum(h != "plan" for h in sections) == _MAX_SHAPES:
            raise ValueError(f"more than {_MAX_SHAPES} [shapes] sections")
        if len(shape_id) >= _ID_BYTES:
            raise ValueError(f"id '{shape_id}' longer than {_ID_BYTES - 1} characters")
    return header


def _sections(text):
    """{header: _Section} of the text, each line checked; ValueError(line, message)."""
    sections, current = {}, None
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip(_BLANK)
        try:
            if len(line.encode()) >= _MAX_LINE:
                raise ValueError(f"line longer than {_MAX_LINE - 1} characters")
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                header = _header(line, sections)
                current = sections[header] = _Section(header, number)
            elif current is None:
                raise ValueError("key = value before any section")
            else:
                current.add(line)
        except ValueError as e:
            raise ValueError(number, str(e)) from None
    return sections


def _check_values(sections):
    """The values check plans with, as the C tool checks them: sizes of each section in the file's
    order (shared_inter may be 0), then each model's c (it divides every page and B), then the
    prompts against the served model's context; ValueError(line, message)."""
    for s in sections.values():
        for key, kind in s.keys.items():
            if kind == "int" and key != "shared_inter" and s.values[key] <= 0:
                raise ValueError(s.line, f"[{s.header}] {key} must be positive")
    plan = sections["plan"]
    for s in sections.values():
        if s is plan:
            continue
        c = s.values["compress_ratio"]
        for what, value in [("page size", p) for p in plan.values["page_sizes"]] + [
                ("index_topk", s.values["index_topk"])]:
            if value % c:
                raise ValueError(
                    s.line, f"[{s.header}] compress_ratio {c} does not divide {what} {value}")
    max_context = sections["shapes model"].values["max_context"]
    for prefill in plan.values["prefill_lengths"]:
        if prefill > max_context:
            raise ValueError(plan.line, f"[plan] prefill length {prefill} exceeds [shapes model] "
                                        f"max_context {max_context}")


def parse_models(text, path="models.txt"):
    """({id: Model} of the [shapes ID] sections, {key: value} of [plan]) from models.txt's text;
    ModelsFileError, naming `path` and the line, when the text departs from the format."""
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise ModelsFileError(f"{path}:{line}: line holds a NUL byte")
    try:
        sections = _sections(text)
    except ValueError as e:
        raise ModelsFileError(f"{path}:{e.args[0]}: {e.args[1]}") from None
    for required in ("plan", "shapes model"):
        if required not in sections:
            raise ModelsFileError(f"{path}: no [{required}] section")
    for s in sections.values():
        if s.missing():
            raise ModelsFileError(f"{path}:{s.line}: [{s.header}] lacks '{s.missing()[0]}'")
    try:
        _check_values(sections)
    except ValueError as e:
        raise ModelsFileError(f"{path}:{e.args[0]}: {e.args[1]}") from None
    models = {h.split()[1]: Model(**s.values) for h, s in sections.items() if h != "plan"}
    return models, sections["plan"].values


MODELS, _PLAN = parse_models(MODELS_FILE.read_text(), MODELS_FILE)  # MODELS: the benches' --shapes
QWEN38_FLASH_NEXT = MODELS["model"]
V1 = MODELS["v1"]
TP_SIZES = _PLAN["tp_sizes"]  # what check plans
PAGE_SIZES = _PLAN["page_sizes"]
PAGE_SIZE = max(PAGE_SIZES)  # where no page size is given: the plan's largest
PREFILL_LENGTHS = _PLAN["prefill_lengths"]  # prompt lengths that matter, shortest first
OPS = (_abi.Op.QSA_INDEX, _abi.Op.QSA_ATTN, _abi.Op.NVFP4_MOE, _abi.Op.NVFP4_MOE_PREPARE)
CHUNK_ROWS = _PLAN["chunk_rows"]  # vLLM's chunked prefill runs a prompt as chunks of at most these
NVFP4_BLOCK = 16  # one e4m3 scale per 16 weights; two weights per byte


@dataclasses.dataclass(frozen=True)
class ModelShape(Model):
    """Per tensor-parallel rank: the attention heads and every expert's intermediate size are
    split TP ways (a KV head is replicated where TP exceeds Hkv); the indexer and the router are
    replicated."""

    tp: int = 1
    page_size: int = PAGE_SIZE  # P: tokens per KV page, the engine's (SGLang 64, vLLM-style 16)


def shape(tp=1, page_size=PAGE_SIZE, model=QWEN38_FLASH_NEXT):
    """`model`'s shapes on one rank of `tp`."""
    return ModelShape(**dict(dataclasses.asdict(model), q_heads=model.q_heads // tp,
                             kv_heads=max(1, model.kv_heads // tp),
                             expert_inter=model.expert_inter // tp),
                      tp=tp, page_size=page_size)


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


def model_call(op, prefill=CHUNK_ROWS, tp=4, device=0, page_size=PAGE_SIZE,
               model=QWEN38_FLASH_NEXT):
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
                      case.page_size or PAGE_SIZE)
