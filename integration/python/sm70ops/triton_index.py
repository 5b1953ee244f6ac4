"""The second baseline of `python -m sm70ops bench qsa_index`, beside the generic torch path: what
the seed's host fell back to on a V100. A fused paged-logits kernel in Triton gathers each key
through the block table and writes the weighted-ReLU scores [rows, G] in fp32 (the causal bound
applied, -inf past a row's groups); torch.topk picks the B/c best groups (ties in torch's order,
not the lower group: a baseline is timed, not trusted), and generic's token set and expansion
finish in torch. One request; q, weights and k_index dense. Triton is imported when the kernel is
first built, so this module imports without it.
"""
import functools

BLOCK_ROWS, BLOCK_KEYS = 64, 64


@functools.lru_cache(maxsize=None)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def logits(q, w, keys, table, out, rows, groups, first_length, ratio, keys_a_page, scale,
               HEADS: tl.constexpr, DIM: tl.constexpr, WEIGHTED: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        row = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        group = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        dim = tl.arange(0, DIM)
        page = tl.load(table + group // keys_a_page, mask=group < groups, other=0)
        slot = page.to(tl.int64) * keys_a_page + group % keys_a_page
        k = tl.load(keys + slot[:, None] * DIM + dim[None, :], mask=(group < groups)[:, None],
                    other=0.0)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for h in tl.static_range(HEADS):
            qh = tl.load(q + (row[:, None] * HEADS + h) * DIM + dim[None, :],
                         mask=(row < rows)[:, None], other=0.0)
            dot = tl.maximum(tl.dot(qh, tl.trans(k)), 0.0)
            if WEIGHTED:
                acc += tl.load(w + row * HEADS + h, mask=row < rows, other=0.0)[:, None] * dot
            else:
                acc += scale * dot
        seen = (first_length + row) // ratio  # complete groups of each row
        acc = tl.where(group[None, :] < seen[:, None], acc, float("-inf"))
        tl.store(out + row[:, None].to(tl.int64) * groups + group[None, :], acc,
                 mask=(row < rows)[:, None] & (group < groups)[None, :])

    return logits


def paged_logits(q, weights, k_index, block_table_row, seq_len, compress_ratio):
    """Scores [rows, seq_len // c] fp32 of the last rows of one request (-inf past each row's
    complete groups)."""
    import torch
    import triton

    rows, heads, dim = q.shape
    groups = seq_len // compress_ratio
    out = torch.empty((rows, groups), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(rows, BLOCK_ROWS), triton.cdiv(groups, BLOCK_KEYS))
    _kernel()[grid](q, weights, k_index, block_table_row, out, rows, groups, seq_len - rows + 1,
                    compress_ratio, k_index.shape[1], dim ** -0.5, HEADS=heads, DIM=dim,
                    WEIGHTED=weights is not None, BLOCK_M=BLOCK_ROWS, BLOCK_N=BLOCK_KEYS)
    return out


def qsa_index(q, weights, k_index, block_table_row, seq_len, topk, compress_ratio, nb):
    """Op 1 for the last q.shape[0] rows of one `seq_len`-token request: generic.QsaIndexResult
    (token set, sel_blocks, sel_mask, sel_count) at the index cache's page size."""
    import torch

    from . import generic

    c = compress_ratio
    scores = paged_logits(q, weights, k_index, block_table_row, seq_len, c)
    best = scores.topk(min(topk // c, scores.shape[1]), dim=1)
    groups = torch.where(torch.isfinite(best.values), best.indices, scores.shape[1])
    groups = groups.sort(dim=1).values  # -inf picks sort last, then become -1
    groups = torch.where(groups < scores.shape[1], groups, -1)
    lengths = seq_len - q.shape[0] + 1 + torch.arange(q.shape[0], device=q.device)
    token_set = generic.token_set(groups, lengths, c)
    if token_set.shape[1] < topk + c - 1:  # a context of fewer than B/c groups
        pad = torch.full((q.shape[0], topk + c - 1 - token_set.shape[1]), -1,
                         dtype=token_set.dtype, device=q.device)
        token_set = torch.cat([token_set, pad], dim=1)
    page = k_index.shape[1] * c
    return generic.QsaIndexResult(token_set, *generic.expand_selection(token_set, nb, page))
