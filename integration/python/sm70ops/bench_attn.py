"""python -m sm70ops bench qsa_attn: the plugin against a generic torch path in one run, and the
K/V bytes the kernel's row tiles gather.

The model's TP4 rank (ops.md v2: 6 query heads, 1 KV head, head dim 256, the sigmoid gate; --shapes
v1 gives contract version 1's 4/1 ungated) on 64- and 16-token pages, over whole 8K, 32K and 128K
prompts in chunks of 8192 rows: the last chunk of each and the whole prompt are reported.

Selections are op 1's token sets (ops.md): B = 2048 tokens, B/c groups of c tokens and the tail of
the incomplete group, from sm70ops.data's selection generators (--selection; default runs): runs
of 16 tokens whose scores drift slowly along the rows, or groups kept from the row before with
probability 0.8 (the union of a tile's rows grows fast). Both share about 70% of a row's pages
with its neighbour's at 128K; the Jaccard is measured and printed.

Per prompt: plugin and generic ms (CUDA-event medians), their rel-L2 and the roofline floor
(attn_work: QK and PV over the selected tokens; K and V of the context once a chunk, q, gate, out,
selection; bench.py); then, for each row-tile height, the K/V bytes a tile gathers per row
(the union of its rows' tokens, once) against the floor's bytes per row, and the time those bytes
take at the copy bandwidth measured in the same run and at a V100's (bench.V100). The
height this build runs (check()'s message) carries the kernel's time; measurement builds that run
every group at one height (kernels/qsa_attn/BUILD) are picked with --library.
"""
import dataclasses
import re

from . import data, generic, model, ops
from .bench import (EXIT_CANNOT_RUN, EXIT_FAILED, EXIT_OK, PluginCalls, V100, Work, ceilings_line,
                    cuda_torch, device_ceiling, floor_columns, median_ms, print_comparison)
from .plugin import Plugin

TP = 4  # the model is served at TP4 (ops.md)
PROMPTS = (8192, 32768, 131072)
TILE_ROWS = (8, 16, 32, 64)  # heights whose gathered bytes are printed, besides the kernel's
KERNEL_MMA_ROWS = (48, 96)  # the kernel's tiles: rows x query heads of a KV head, 32 rows at most
MAX_TILE_ROWS = 32
GENERIC_ROWS = 512  # rows per generic call: 512 x 2051 tokens x 256 x 2 B = 0.5 GB of K, as of V
REL_L2_LIMIT = 5e-3  # two fp16 paths against each other: each is within ~2e-3 of fp64


@dataclasses.dataclass
class Row:
    """One prompt's line of the plugin-vs-generic table, and what its tiles gather."""

    prompt: int
    page: int
    chunks: int  # 1: the prompt's last chunk; else the whole prompt
    overlap: float = 0.0
    plugin_ms: float = 0.0
    generic_ms: float = 0.0
    rel_l2: float = 0.0
    work: Work = Work()  # the floor's
    rows: int = 0
    gathered: dict = dataclasses.field(default_factory=dict)  # tile rows -> K/V bytes
    note: str = ""

    def add(self, other):
        """Sums a chunk's measurements into a whole prompt's."""
        for name in ("overlap", "plugin_ms", "generic_ms", "work", "rows"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.rel_l2 = max(self.rel_l2, other.rel_l2)
        for rows, value in other.gathered.items():
            self.gathered[rows] = self.gathered.get(rows, 0.0) + value
        self.note = self.note or other.note


_POPCOUNT = [bin(i).count("1") for i in range(256)]


def _popcount(torch, words):
    """Set bits of an int64 tensor, summed."""
    table = torch.tensor(_POPCOUNT, dtype=torch.int64, device=words.device)
    return int(table[words.contiguous().view(torch.uint8).long()].sum())


def page_masks(torch, tokens, pages, page):
    """Each row's token set as 64-bit masks over every page [n, pages] (int64 bits)."""
    valid = tokens >= 0
    safe = tokens.clamp(min=0)
    column = torch.where(valid, safe // page, pages)  # invalid tokens land in a spare column
    bits = torch.where(valid, torch.ones_like(safe) << (safe % page), 0)
    masks = torch.zeros((tokens.shape[0], pages + 1), dtype=torch.int64, device=tokens.device)
    masks.scatter_add_(1, column, bits)  # a set's bits are disjoint: + is |
    return masks[:, :pages].contiguous()


def tile_tokens(torch, masks, rows):
    """Tokens in the union of each `rows`-row tile's selections (tiles from the first row),
    summed over tiles: what a kernel with such tiles gathers."""
    pad = -masks.shape[0] % rows
    if pad:
        masks = torch.cat([masks, masks.new_zeros(pad, masks.shape[1])])
    tiles = masks.view(-1, rows, masks.shape[1])
    union = tiles[:, 0].clone()
    for i in range(1, rows):
        union |= tiles[:, i]
    return _popcount(torch, union)


def _generic(torch, q, gate, k_cache, v_cache, table, tokens, sm_scale):
    """Gather each row's selected tokens, then fp16 SDPA per KV head (its query heads as the
    queries) with a padding mask, times sigmoid(gate) in fp32."""
    import torch.nn.functional as F

    rows, q_heads, dim = q.shape
    page, kv_heads = k_cache.shape[1], k_cache.shape[2]
    flat_k, flat_v = k_cache.flatten(0, 1), v_cache.flatten(0, 1)
    valid = tokens >= 0
    safe = tokens.clamp(min=0)
    physical = table[safe // page].long() * page + safe % page
    out = torch.empty_like(q)
    for t0 in range(0, rows, GENERIC_ROWS):
        t1 = min(rows, t0 + GENERIC_ROWS)
        keys = flat_k[physical[t0:t1]].transpose(1, 2)  # [r, Hkv, W, D]
        values = flat_v[physical[t0:t1]].transpose(1, 2)
        queries = q[t0:t1].view(t1 - t0, kv_heads, q_heads // kv_heads, dim)
        mask = valid[t0:t1].view(t1 - t0, 1, 1, -1)
        o = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, scale=sm_scale)
        o = o.reshape(t1 - t0, q_heads, dim)
        out[t0:t1] = o if gate is None else (o.float() * gate[t0:t1].float().sigmoid()).half()
    return out


def attn_work(s, selected, end, nb, rows):
    """The floor's work of a chunk of `rows` rows ending at position end - 1 whose token sets
    hold `selected` tokens in all: FLOPs, QK and PV of every query head over its row's tokens;
    bytes, q, gate, out (fp16), the selection and K and V of the context once (no lse: the bench
    asks for none)."""
    heads = rows * s.q_heads * s.head_dim * 2 * (3 if s.attention_gate else 2)
    return Work(flops=4.0 * selected * s.q_heads * s.head_dim,
                bytes=heads + rows * (nb * 12 + 4) + end * s.kv_heads * s.head_dim * 4)


class Prompt:
    """One prompt's device data: q and gate of a chunk, the paged K/V cache, a scattered block
    table."""

    def __init__(self, torch, shape, prompt):
        self.shape, self.pages = shape, prompt // shape.page_size
        g = torch.Generator(device="cuda").manual_seed(prompt)
        rows, heads, dim = model.CHUNK_ROWS, shape.q_heads, shape.head_dim
        cache = (self.pages, shape.page_size, shape.kv_heads, dim)
        self.q = torch.randn((rows, heads, dim), generator=g, device="cuda").half()
        self.gate = (torch.randn((rows, heads, dim), generator=g, device="cuda").half()
                     if shape.attention_gate else None)
        self.k_cache = torch.randn(cache, generator=g, device="cuda").half()
        self.v_cache = torch.randn(cache, generator=g, device="cuda").half()
        self.table = ((torch.arange(self.pages, device="cuda") * 7919) % self.pages).int()


def _measure_chunk(torch, ctx, p, selector, end):
    """The chunk of rows ending at position end - 1."""
    s, rows = p.shape, model.CHUNK_ROWS
    lengths = torch.arange(end - rows + 1, end + 1, device="cuda")
    tokens = selector.tokens(lengths)
    masks = page_masks(torch, tokens, -(-end // s.page_size), s.page_size)
    nb = generic.selection_width(s.index_topk, s.compress_ratio, s.page_size, end)
    blocks, bits, count = generic.expand_selection(tokens, nb, s.page_size)
    heights = sorted(set(TILE_ROWS) | {min(m // (s.q_heads // s.kv_heads), MAX_TILE_ROWS)
                                       for m in KERNEL_MMA_ROWS})
    token_bytes = s.kv_heads * s.head_dim * 4  # its K and V rows, fp16
    row = Row(end, s.page_size, 1, overlap=data.neighbour_overlap(blocks, count), rows=rows,
              work=attn_work(s, int((tokens >= 0).sum()), end, nb, rows),
              gathered={h: tile_tokens(torch, masks, h) * token_bytes for h in heights})
    out = torch.empty_like(p.q)
    sm_scale = s.head_dim ** -0.5
    args = ops.qsa_attn(
        p.q, p.k_cache, p.v_cache, torch.tensor([0, rows], dtype=torch.int32, device="cuda"),
        torch.tensor([end], dtype=torch.int32, device="cuda"), p.table.view(1, -1), blocks, bits,
        count, out, sm_scale=sm_scale, max_seq_len=end, max_query_len=rows, gate=p.gate)

    def run_generic():
        return _generic(torch, p.q, p.gate, p.k_cache, p.v_cache, p.table, tokens, sm_scale)

    row.generic_ms = median_ms(torch, run_generic, warmup=1, reps=3)
    plugin = PluginCalls(torch, ctx, "qsa_attn", [args], p.q.device)
    d = plugin.decisions[0]
    if plugin.note:
        row.plugin_ms, row.note = None, plugin.note
        return row, d
    row.plugin_ms = median_ms(torch, plugin, warmup=1, reps=5)
    want = run_generic().float()
    row.rel_l2 = float((out.float() - want).norm() / want.norm())
    return row, d


def _measure_prompt(torch, ctx, shape, prompt, selection):
    """(the last chunk's Row, the whole prompt's Row, check()'s decision on the last chunk)."""
    p = Prompt(torch, shape, prompt)
    selector = data.SELECTIONS[selection](torch, prompt, shape.index_topk, shape.compress_ratio,
                                          seed=prompt + shape.page_size)
    whole = Row(prompt, shape.page_size, prompt // model.CHUNK_ROWS)
    for end in range(model.CHUNK_ROWS, prompt + 1, model.CHUNK_ROWS):
        last, d = _measure_chunk(torch, ctx, p, selector, end)
        if last.plugin_ms is None:
            return last, None, d
        whole.add(last)
    whole.overlap /= whole.chunks
    return last, whole, d


def copy_tbytes_s(torch):
    """Device copy bandwidth (read + write), TB/s: a 1 GiB device-to-device copy."""
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    return 2 * x.numel() / (median_ms(torch, lambda: y.copy_(x), warmup=2, reps=10) * 1e-3) / 1e12


def kernel_rows(decision):
    """Rows of the tiles this build runs, from check()'s message ("16-row tiles x 6 query
    heads"); None when it does not say."""
    found = re.match(r"(\d+)-row tiles", decision.message) if decision.accepted else None
    return int(found.group(1)) if found else None


def _label(r):
    return f"{r.prompt // 1024}K " + ("last chunk" if r.chunks == 1 else f"whole ({r.chunks})")


def print_gathered(r, tbytes_s, built, shape):
    """What each tile height gathers for one prompt, and the kernel's time at its height."""
    at = lambda b, rate: b / (rate * 1e12) * 1e3  # noqa: E731  bytes -> ms
    group = shape.q_heads // shape.kv_heads
    runnable = {min(m // group, MAX_TILE_ROWS) for m in KERNEL_MMA_ROWS}
    print(f"  {_label(r)}: floor {r.work.bytes / r.rows / 1e3:.1f} KB a row, "
          f"{at(r.work.bytes, tbytes_s):.3f} ms at {tbytes_s:.2f} TB/s "
          f"(V100 {at(r.work.bytes, V100.tbytes_s):.3f} ms)")
    print(f"  {'tile rows':>9} {'K/V a row':>10} {'x floor':>8} {'at copy bw':>11} "
          f"{'V100':>9}  kernel")
    for rows, b in sorted(r.gathered.items()):
        ms = at(b, tbytes_s)
        if rows == built and r.plugin_ms is not None:
            kernel = f"{r.plugin_ms:.3f} ms, {r.plugin_ms / ms:.2f}x its bytes' time"
        else:
            kernel = "another build" if rows in runnable else "-"
        print(f"  {rows:9d} {b / r.rows / 1e3:7.1f} KB {b / r.work.bytes:7.1f}x "
              f"{ms:8.3f} ms {at(b, V100.tbytes_s):6.2f} ms  {kernel}")


def main(opts):
    torch = cuda_torch("bench")
    if torch is None:
        return EXIT_CANNOT_RUN
    m = model.MODELS[getattr(opts, "shapes", "model")]
    device = torch.cuda.current_device()
    tbytes_s, ceiling = copy_tbytes_s(torch), device_ceiling(torch, device)
    rows, built = [], set()
    chosen = getattr(opts, "selection", "runs")
    selections = data.SELECTIONS if chosen == "all" else [chosen]
    with Plugin(opts.library) as plugin, plugin.context(device) as ctx:
        for selection, page in ((s, page) for s in selections for page in model.PAGE_SIZES[::-1]):
            shape = model.shape(TP, page, m)
            print(f"bench qsa_attn: device {device} ({torch.cuda.get_device_name(device)}), "
                  f"{m.name} TP{TP} rank: {shape.q_heads} query heads, {shape.kv_heads} KV head, "
                  f"D {shape.head_dim}{', gated' if shape.attention_gate else ''}; {page}-token "
                  f"pages; {shape.index_topk}-token sets (c = {shape.compress_ratio}), selections "
                  f"{selection}; chunks of {model.CHUNK_ROWS} rows; copy {tbytes_s:.2f} TB/s "
                  "(measured)")
            for prompt in PROMPTS:
                last, whole, d = _measure_prompt(torch, ctx, shape, prompt, selection)
                tile = kernel_rows(d)
                built |= {tile} - {None}
                whole_too = whole is not None and whole.chunks > 1  # else the last chunk is all
                for r in (last, whole) if whole_too else (last,):
                    rows.append(r)
                    print_gathered(r, tbytes_s, tile, shape)
    print(f"this build: {', '.join(map(str, sorted(built)))}-row tiles" if built
          else "this build: tile height not reported")
    failed = print_comparison(
        {"prompt": (16, _label), "P": (3, lambda r: r.page),
         "Jaccard": (8, lambda r: f"{r.overlap:.2f}")},
        {"rel-L2": (8, lambda r: r.rel_l2), **floor_columns(ceiling)}, rows, REL_L2_LIMIT)
    print(ceilings_line(ceiling))
    print("check: " + (f"MISMATCH: {failed} prompts beyond rel-L2 {REL_L2_LIMIT}" if failed
                       else f"plugin output within rel-L2 {REL_L2_LIMIT} of the generic path"))
    return EXIT_FAILED if failed else EXIT_OK
