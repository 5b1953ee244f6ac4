"""vLLM's QSA calls for Qwen3.8-Flash-Next (vllm/models/qwen4_exp/nvidia/ops/), same names,
argument order and shapes; a fork replaces

    from vllm.models.qwen4_exp.nvidia.ops.qsa_indexer import (expand_qsa_block_indices,
                                                              qsa_select_paged_prefill)
    from vllm.models.qwen4_exp.nvidia.ops.qsa import qsa_sparse_paged_attention

with `from sm70ops.engines.vllm import (...)`. The indexer selects B/c groups of c tokens, the
expansion packs each row's tokens, and the attention reads the packed buffer:
`logical_indices` [T, B + c] int32, request-relative token ids, the selected groups' tokens first
(in block_indices order), then the open group's tail c * visible_blocks .. pos, -1 padding
compacted to the end, the last column each row's count of valid entries.

vLLM passes neither seq_lens to the select nor positions to the attention; each drop-in derives
the varlen metadata sm70ops takes from what it gets (on the device, so the calls stay
capturable): the select from visible_blocks, the attention from token_to_req and the ids.
"""


def _requests_of_rows(query_start_loc, rows):
    """The request of each of `rows` rows (int64 [T]), vLLM's query_start_loc [R+1] ascending."""
    import torch

    ends = query_start_loc[1:].long()
    return torch.searchsorted(ends, torch.arange(rows, device=ends.device), right=True)


def _seq_lens_from_visible_blocks(query_start_loc, visible_blocks, compress_ratio):
    """seq_lens [R] int32 whose rows see exactly visible_blocks[t] = (pos_t + 1) // c complete
    groups: a request's last row has L = c * G_last + rho, rho < c the smallest residue for which
    every row of the request sees its own count (consecutive positions pin it; fewer than c rows
    may leave several, which select alike). All that the select reads of a row is its G."""
    import torch

    c, rows = compress_ratio, visible_blocks.shape[0]
    requests = query_start_loc.shape[0] - 1
    request = _requests_of_rows(query_start_loc, rows)
    last = (query_start_loc[1:].long() - 1).clamp(min=0)
    groups_last = visible_blocks.long()[last] if rows else last
    after = last[request] - torch.arange(rows, device=visible_blocks.device)  # rows after t
    bad = torch.zeros((requests, c), dtype=torch.int32, device=visible_blocks.device)
    for rho in range(c):
        length = c * groups_last[request] + rho - after
        wrong = (length < 1) | (length // c != visible_blocks.long())
        bad[:, rho].scatter_reduce_(0, request, wrong.to(torch.int32), "amax")
    rho = torch.argmin(bad, dim=1)  # the first residue no row contradicts
    return (c * groups_last + rho).to(torch.int32)


def qsa_select_paged_prefill(q, k_cache, page_table, query_start_loc, visible_blocks, token_topk,
                             compress_ratio, max_query_len, block_indices, max_seq_len):
    """vLLM's indexer select: for each row t the token_topk / c best of its visible_blocks[t]
    complete groups (scores: sum over the 4 heads of relu(q . k) / sqrt(128), ties to the lower
    group; all of them when there are fewer), written into block_indices [T, token_topk / c]
    int32 as request-relative group ids, ascending, -1 padded.

    q [T, 4, 128] fp16; k_cache [blocks, P / c, 1, 128] fp16, the compressed keys, paged by
    page_table [R, max_pages] int32 (the KV cache's); query_start_loc [R+1] int32;
    visible_blocks [T] int32 = (pos + 1) // c; max_query_len, max_seq_len host bounds."""
    import torch

    from .. import library  # noqa: F401  registers torch.ops.sm70ops

    c = compress_ratio
    seq_lens = _seq_lens_from_visible_blocks(query_start_loc, visible_blocks, c)
    tokens = torch.ops.sm70ops.qsa_index_token_set(q, None, k_cache[:, :, 0, :], query_start_loc,
                                                   seq_lens, page_table, token_topk, max_seq_len,
                                                   max_query_len, c)
    first = tokens[:, : token_topk : c].long()  # each slot's first token: c * group, or the tail
    groups = (c * visible_blocks.long())[:, None]
    block_indices.copy_(torch.where((first >= 0) & (first < groups), first // c, -1))
    return block_indices


def expand_qsa_block_indices(block_indices, query_positions, visible_blocks, compress_ratio,
                             token_topk, out):
    """vLLM's expansion into the packed buffer out [T, token_topk + c] int32: each row's
    selected groups' tokens (in block_indices order, its -1s skipped), then the tail
    c * visible_blocks .. pos (query_positions [T], request-relative; visible_blocks [T] =
    (pos + 1) // c, so the tail follows from pos), -1 padding, and in the last column the count
    of valid entries."""
    import torch

    from .. import generic

    c = compress_ratio
    width = token_topk + c - 1
    if out.shape[1] != width + 1:
        raise ValueError(f"expand_qsa_block_indices: out has {out.shape[1]} columns, the packed "
                         f"buffer of token_topk {token_topk} and c {c} has {width + 1}")
    valid_first = torch.sort((block_indices < 0).to(torch.int8), dim=1, stable=True).indices
    groups = torch.gather(block_indices, 1, valid_first)
    tokens = generic.token_set(groups, query_positions.long() + 1, c)
    out[:, :width] = tokens
    out[:, width] = (tokens >= 0).sum(dim=1).to(out.dtype)
    return out


def _varlen_from_token_to_req(logical_indices, token_to_req, requests):
    """(query_start_loc [R+1], seq_lens [R]) int32 for rows grouped by request in order: each
    row's L = pos + 1 at least one past its largest id, which is all the attention reads of it
    (vLLM's ids are the row's keys; the bound applies nothing more)."""
    import torch

    device = token_to_req.device
    request = token_to_req.long()
    rows = request.shape[0]
    counts = torch.zeros(requests, dtype=torch.int64, device=device)
    counts.index_add_(0, request, torch.ones_like(request))
    starts = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    ids, count = logical_indices[:, :-1].long(), logical_indices[:, -1:].long()
    listed = torch.arange(ids.shape[1], device=device) < count
    largest = torch.where(listed, ids, -1).amax(dim=1)
    after = starts[request + 1] - 1 - torch.arange(rows, device=device)
    seq_lens = counts.clone()
    seq_lens.scatter_reduce_(0, request, largest + 1 + after, "amax")
    return starts.to(torch.int32), seq_lens.to(torch.int32)


def qsa_sparse_paged_attention(q, k_cache, v_cache, logical_indices, block_table, token_to_req,
                               use_prefill_config, out=None, k_scale=None, v_scale=None, *,
                               output_gate):
    """vLLM's QSA attention: o[t, h] = softmax(q . k / sqrt(D)) v over the tokens of row t's
    packed buffer (logical_indices [T, B + c], see the module), times sigmoid(output_gate),
    fp32 math, fp16 out [T, H, D] (written into `out` when given).

    q [T, H, D] fp16; k_cache, v_cache [blocks, P, Hkv, D] fp16, paged by block_table
    [R, max_pages]; token_to_req [T] the row's request (rows grouped by request, in order);
    output_gate [T, H, D] fp16. use_prefill_config picks among vLLM's kernel configurations
    (unused here); k_scale and v_scale scale fp8 caches, and fp16 caches ignore them."""
    import torch

    from .. import library  # noqa: F401  registers torch.ops.sm70ops

    if k_cache.dtype != torch.float16 or v_cache.dtype != torch.float16:
        raise NotImplementedError(f"qsa_sparse_paged_attention: {k_cache.dtype} KV cache; "
                                  "sm70ops reads fp16 caches")
    requests, page = block_table.shape[0], k_cache.shape[1]
    query_start_loc, seq_lens = _varlen_from_token_to_req(logical_indices, token_to_req,
                                                          requests)
    max_seq_len = block_table.shape[1] * page
    result = torch.ops.sm70ops.qsa_attn_token_ids(
        q, k_cache, v_cache, query_start_loc, seq_lens, block_table, logical_indices, True,
        q.shape[-1] ** -0.5, max_seq_len, max(1, min(q.shape[0], max_seq_len)), output_gate)
    if out is None:
        return result
    return out.copy_(result)
