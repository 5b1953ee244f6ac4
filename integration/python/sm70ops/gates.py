"""ops.md's numerical gate of op 1, for the GPU tests and the benches: two token sets may differ
only at near ties.

A row may differ from the reference when (a) its set is well formed: whole groups, min(B/c, G)
of them, then exactly the row's tail, ascending, -1 padded; (b) the reference's B/c-th and next
group scores nearly tie: within REL_TOL of each other, or within ABS_TOL of the row's largest
|score| (scores of exactly zero tie, and relu makes many); and (c) every group in one set and not
the other scores that near the B/c-th.
"""
from . import generic

REL_TOL = 1e-3
ABS_TOL = 1e-5


def _groups(token_sets, lengths, compress_ratio, width):
    """[n, width] bool: the complete groups whose first token a token set holds."""
    import torch

    c = compress_ratio
    tokens = token_sets.long()
    whole = (tokens >= 0) & (tokens % c == 0) & (tokens + c <= lengths.long().unsqueeze(1))
    index = torch.where(whole, tokens // c, width).clamp(max=width)
    out = torch.zeros((tokens.shape[0], width + 1), dtype=torch.bool, device=tokens.device)
    return out.scatter_(1, index, True)[:, :width]


def judge_index(got, want, scores, lengths, compress_ratio):
    """(rows that differ, of which near ties ops.md allows) between op 1's token sets `got` and
    `want` [T, B + c - 1], given the reference's group scores [T, G] (-inf past a row's groups)
    and the rows' lengths L [T]."""
    import torch

    c = compress_ratio
    differ = (got != want).any(dim=1).nonzero().flatten()
    if differ.numel() == 0:
        return 0, 0
    k = (got.shape[1] - c + 1) // c  # B / c
    s, lengths = scores[differ].double(), lengths[differ]
    width = s.shape[1]
    if width <= k:  # every row selects all its groups: no tie can excuse a difference
        return differ.numel(), 0
    mine = _groups(got[differ], lengths, c, width)
    theirs = _groups(want[differ], lengths, c, width)
    rebuilt = generic.token_set(generic.topk_positions(mine.float(), mine, k), lengths, c)
    counted = mine.sum(dim=1) == (lengths.long() // c).clamp(max=k)  # min(B/c, G) groups
    well_formed = (rebuilt == got[differ]).all(dim=1) & counted
    top = s.topk(k + 1, dim=1).values
    kth, after = top[:, k - 1 : k], top[:, k : k + 1]
    largest = s.masked_fill(~torch.isfinite(s), 0).abs().amax(dim=1, keepdim=True)

    def near(a, b):  # finite, and within the relative or the absolute tolerance
        slack = torch.maximum(REL_TOL * torch.maximum(a.abs(), b.abs()), ABS_TOL * largest)
        return ((a - b).abs() <= slack) & torch.isfinite(a) & torch.isfinite(b)

    swapped = mine ^ theirs
    allowed = well_formed & near(kth, after).flatten() & (near(s, kth) | ~swapped).all(dim=1)
    return differ.numel(), int(allowed.sum())
