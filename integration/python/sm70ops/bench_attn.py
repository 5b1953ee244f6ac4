"""python -m sm70ops bench qsa_attn: the plugin against a generic torch path in one run.

The per-rank TP4 shape of ops.md (4 query heads, 1 KV head, head dim 256, top-2048 tokens), the
last 8192-row chunk of an 8K, 32K and 128K prompt, with realistic selections: runs of 16 tokens,
each row keeping about 80% of its neighbour's runs (the seed measured 82% page overlap between
adjacent rows); the overlap is measured and printed. The generic path gathers each row's
selected tokens and runs torch's scaled_dot_product_attention (fp16, boolean mask) on them, in
row chunks that fit memory. CUDA-event medians; the outputs of both paths are compared.
"""
import dataclasses

from . import ops
from .bench import EXIT_CANNOT_RUN, EXIT_MISMATCH, EXIT_OK, cuda_torch, median_ms, print_comparison
from .plugin import Plugin

ROWS, HQ, HKV, DIM, PAGE, TOPK, RUN = 8192, 4, 1, 256, 64, 2048, 16
PROMPTS = (8192, 32768, 131072)
GENERIC_ROWS = 512  # rows per SDPA call: 512 x 2048 tokens x 256 x 2 B x 2 = 1 GiB of K and V
REL_L2_LIMIT = 5e-3  # two fp16 paths against each other: each is within ~2e-3 of fp64


@dataclasses.dataclass
class Row:
    prompt: int
    overlap: float
    plugin_ms: float
    generic_ms: float
    rel_l2: float
    note: str = ""


def _selections(np, prompt, seed=0):
    """Token positions [ROWS, TOPK] (-1 padded) of the last ROWS rows of a `prompt`-token prompt,
    and the mean Jaccard overlap of adjacent rows' page sets."""
    rng = np.random.default_rng(seed)
    runs = TOPK // RUN
    tokens = np.full((ROWS, TOPK), -1, dtype=np.int64)
    starts = None
    overlap, previous = 0.0, None
    for r in range(ROWS):
        length = prompt - ROWS + r + 1
        if length <= TOPK:
            chosen = np.arange(length)
        else:
            fresh = rng.integers(0, length - RUN + 1, size=runs)
            starts = fresh if starts is None else np.where(
                (rng.random(runs) < 0.2) | (starts + RUN > length), fresh, starts)
            chosen = np.unique((starts[:, None] + np.arange(RUN)).ravel())
        tokens[r, :chosen.size] = chosen
        pages = set((chosen // PAGE).tolist())
        if previous is not None:
            overlap += len(pages & previous) / max(1, len(pages | previous))
        previous = pages
    return tokens, overlap / (ROWS - 1)


def _expansion(torch, np, tokens, prompt):
    """sel_blocks, sel_mask (int64 bits), sel_count tensors of width ceil(prompt / 64)."""
    nb = -(-prompt // PAGE)
    blocks = np.full((ROWS, nb), -1, dtype=np.int32)
    masks = np.zeros((ROWS, nb), dtype=np.uint64)
    count = np.zeros(ROWS, dtype=np.int32)
    for r in range(ROWS):
        row = tokens[r][tokens[r] >= 0]
        pages = np.unique(row // PAGE)
        bits = np.zeros(pages.size, dtype=np.uint64)
        np.bitwise_or.at(bits, np.searchsorted(pages, row // PAGE),
                         np.left_shift(np.uint64(1), (row % PAGE).astype(np.uint64)))
        blocks[r, :pages.size], masks[r, :pages.size], count[r] = pages, bits, pages.size
    cuda = dict(device="cuda")
    return (torch.from_numpy(blocks).to(**cuda), torch.from_numpy(masks.view(np.int64)).to(**cuda),
            torch.from_numpy(count).to(**cuda))


def _generic(torch, q, k_cache, v_cache, table, tokens, sm_scale):
    """Gather each row's selected tokens, then fp16 SDPA with a padding mask."""
    import torch.nn.functional as F

    out = torch.empty_like(q)
    flat_k, flat_v = k_cache.view(-1, DIM), v_cache.view(-1, DIM)  # Hkv = 1
    valid = tokens >= 0
    safe = tokens.clamp(min=0)
    physical = table[safe // PAGE].long() * PAGE + safe % PAGE
    for t0 in range(0, ROWS, GENERIC_ROWS):
        t1 = t0 + GENERIC_ROWS
        keys = flat_k[physical[t0:t1]].unsqueeze(1).expand(-1, HQ, -1, -1)
        values = flat_v[physical[t0:t1]].unsqueeze(1).expand(-1, HQ, -1, -1)
        mask = valid[t0:t1].view(-1, 1, 1, TOPK)
        o = F.scaled_dot_product_attention(q[t0:t1].unsqueeze(2), keys, values, attn_mask=mask,
                                           scale=sm_scale)
        out[t0:t1] = o.squeeze(2)
    return out


def _measure(torch, np, ctx, prompt):
    tokens_np, overlap = _selections(np, prompt)
    pages = -(-prompt // PAGE)
    g = torch.Generator(device="cuda").manual_seed(prompt)
    q = torch.randn((ROWS, HQ, DIM), generator=g, device="cuda").half()
    k_cache = torch.randn((pages, PAGE, HKV, DIM), generator=g, device="cuda").half()
    v_cache = torch.randn((pages, PAGE, HKV, DIM), generator=g, device="cuda").half()
    table = ((torch.arange(pages, device="cuda") * 7919) % pages).int()
    sel_blocks, sel_mask, sel_count = _expansion(torch, np, tokens_np, prompt)
    tokens = torch.from_numpy(tokens_np).cuda()
    sm_scale = DIM ** -0.5
    out = torch.empty_like(q)
    args = ops.qsa_attn(
        q, k_cache, v_cache, torch.tensor([0, ROWS], dtype=torch.int32, device="cuda"),
        torch.tensor([prompt], dtype=torch.int32, device="cuda"), table.view(1, pages),
        sel_blocks, sel_mask, sel_count, out, sm_scale=sm_scale, max_seq_len=prompt,
        max_query_len=ROWS)
    generic_ms = median_ms(torch, lambda: _generic(torch, q, k_cache, v_cache, table, tokens,
                                                   sm_scale), warmup=1, reps=3)
    d = ctx.check("qsa_attn", args)
    if not d.accepted:
        return Row(prompt, overlap, None, generic_ms, float("nan"),
                   f"{d.reason}: {d.message}")
    stream = torch.cuda.current_stream()
    workspace = torch.empty(max(d.workspace_bytes, 1), dtype=torch.uint8, device="cuda")

    def run_plugin():
        ctx.execute("qsa_attn", args, stream, workspace, d.workspace_bytes)

    plugin_ms = median_ms(torch, run_plugin, warmup=1, reps=5)
    want = _generic(torch, q, k_cache, v_cache, table, tokens, sm_scale).float()
    rel_l2 = float((out.float() - want).norm() / want.norm())
    return Row(prompt, overlap, plugin_ms, generic_ms, rel_l2)


def main(opts):
    torch = cuda_torch("bench")
    if torch is None:
        return EXIT_CANNOT_RUN
    import numpy as np

    device = torch.cuda.current_device()
    with Plugin(opts.library) as plugin, plugin.context(device) as ctx:
        print(f"bench qsa_attn: device {device} ({torch.cuda.get_device_name(device)}), the last "
              f"{ROWS} rows of each prompt, {HQ} query heads, {HKV} KV head, D {DIM}, top-{TOPK} "
              f"tokens in runs of {RUN}")
        rows = [_measure(torch, np, ctx, prompt) for prompt in PROMPTS]
    failed = print_comparison(
        {"prompt": (8, lambda r: r.prompt), "overlap": (8, lambda r: f"{r.overlap:.2f}")},
        {"rel-L2": (8, lambda r: r.rel_l2)}, rows, REL_L2_LIMIT)
    print("check: " + (f"MISMATCH: {failed} prompts beyond rel-L2 {REL_L2_LIMIT}" if failed
                       else f"plugin output within rel-L2 {REL_L2_LIMIT} of the generic path"))
    return EXIT_MISMATCH if failed else EXIT_OK
