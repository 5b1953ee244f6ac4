"""The host's generic torch implementations of the three ops, written from shared/spec/ops.md
(version 2): what an engine runs when the plugin declines. They run on CPU or CUDA tensors, read
the varlen metadata and the routed experts on the host (device-to-host copies, so they
synchronise) and bound their large temporaries by working in row chunks (a few times
SCRATCH_ELEMENTS; a request's gathered K/V context, or the MoE's fp32 sum [T, H], comes on top).
Each function imports torch itself, so the package imports without it.

Shapes as in ops.md: T rows, R requests; query_start_loc [R+1] int32, seq_lens [R] int32
(context including this chunk), block_table [R, max_pages] int32, shared by the KV cache and the
index cache. Row i of request r sits at pos = seq_len_r - query_len_r + i and sees the L = pos + 1
tokens 0..pos. The page size P is read from the caches: k_cache [pages, P, Hkv, D], and k_index
[pages, P / c, 128] with one key per group of c tokens (c, the compress ratio, is an argument).
"""
import collections
import functools

SCRATCH_ELEMENTS = 1 << 26  # per row chunk: 256 MiB of fp32 scores, the unit of every bound

QsaIndexResult = collections.namedtuple("QsaIndexResult",
                                        "topk_idx sel_blocks sel_mask sel_count")


def _requests(query_start_loc, seq_lens):
    """[(first_row, rows, seq_len)] per request, on the host."""
    starts, lens = query_start_loc.tolist(), seq_lens.tolist()
    return [(starts[r], starts[r + 1] - starts[r], lens[r]) for r in range(len(lens))]


def _gather(cache, block_table_row, count):
    """The first `count` entries of one request from a paged cache [pages, per_page, ...]: its
    tokens from the KV cache, its group keys from the index cache."""
    pages = block_table_row[: -(-count // cache.shape[1])].long()
    return cache.index_select(0, pages).flatten(0, 1)[:count]


def _row_chunks(rows, width):
    """(start, end) row ranges of at most SCRATCH_ELEMENTS / width rows."""
    step = max(1, SCRATCH_ELEMENTS // max(1, width))
    return [(start, min(rows, start + step)) for start in range(0, rows, step)]


def _bit_values(device):
    """int64 tensor [64]: the value of bit b of a uint64 held in an int64 (bit 63: -2**63)."""
    import torch

    return torch.tensor([1 << b if b < 63 else -(1 << 63) for b in range(64)],
                        dtype=torch.int64, device=device)


# Op 1: QSA index ---------------------------------------------------------------------------------


def selection_width(topk, compress_ratio, page_size, max_seq_len):
    """NB, a sel_* width that always suffices (ops.md): min(B/c + 1, ceil(max L / P)), where the
    + 1 is the tail's page (c = 1 has no tail: min(B, ...))."""
    groups = topk // compress_ratio + (compress_ratio > 1)
    return min(groups, -(-max_seq_len // page_size))


def _score_chunk(q, w, keys, groups_seen, precise=False):
    """s[t, g] = sum_h w[t,h] * relu(q[t,h,:] . k[g,:]) in fp32, -inf where g >= groups_seen[t];
    w None weighs every head 1/sqrt(dim) (the weight-free indexer).

    On CUDA the dot products are one fp16 GEMM with fp32 accumulation, rounded to fp16 (a
    relative 2**-11 per head, inside ops.md's 1e-3 score gate); on CPU an fp32 GEMM of the
    (exactly converted) fp16 inputs; when `precise`, an fp64 GEMM (immune to TF32 settings).
    """
    import torch

    rows, heads, dim = q.shape
    flat_q = q.reshape(rows * heads, dim)
    if precise:
        logits = torch.matmul(flat_q.double(), keys.double().t())
    elif q.is_cuda:
        logits = torch.matmul(flat_q, keys.t())
    else:
        logits = torch.matmul(flat_q.float(), keys.float().t())
    logits = logits.view(rows, heads, -1)
    scores = torch.zeros(rows, keys.shape[0], dtype=torch.float32, device=q.device)
    for h in range(heads):
        weight = dim ** -0.5 if w is None else w[:, h : h + 1].float()
        scores += weight * logits[:, h].float().relu()
    g = torch.arange(keys.shape[0], device=q.device)
    return scores.masked_fill(g.unsqueeze(0) >= groups_seen.unsqueeze(1), float("-inf"))


def topk_positions(scores, valid, k):
    """Ascending positions of the k largest scores among `valid` ones per row, ties to the lower
    position, -1 padded to k columns (int32). All valid positions when a row has <= k.

    Exact despite torch.topk's unspecified tie order: topk only finds the K-th largest value;
    everything above it is taken, then the lowest-positioned entries equal to it fill the rest.
    """
    import torch

    rows, width = scores.shape
    masked = scores.masked_fill(~valid, float("-inf"))
    take = min(k, width)
    out = torch.full((rows, k), -1, dtype=torch.int32, device=scores.device)
    if take == 0:
        return out
    kth = masked.topk(take, dim=1, sorted=False).values.amin(dim=1, keepdim=True)
    above = (masked > kth) & valid
    tied = (masked == kth) & valid
    room = take - above.sum(dim=1, keepdim=True)
    selected = above | (tied & (tied.cumsum(dim=1) <= room))
    row_of, position = selected.nonzero(as_tuple=True)  # row-major: positions ascend per row
    counts = selected.sum(dim=1)
    slot = torch.arange(row_of.numel(), device=scores.device) - (counts.cumsum(0) - counts)[row_of]
    out[row_of, slot] = position.to(torch.int32)
    return out


def token_set(groups, lengths, compress_ratio):
    """Each row's token set S (ops.md): the tokens of its selected groups [n, W] (ascending, -1
    padded) followed by its tail, the tokens c*G .. L-1 of the incomplete group (G = L // c,
    lengths [n] the rows' L). Returns [n, W*c + c - 1] int32, ascending, -1 padded."""
    import torch

    c, (rows, width) = compress_ratio, groups.shape
    device = groups.device
    g = groups.long().unsqueeze(-1)
    member = torch.arange(c, device=device)
    out = torch.full((rows, width * c + c - 1), -1, dtype=torch.int32, device=device)
    out[:, : width * c] = torch.where(g >= 0, g * c + member, -1).flatten(1)
    lengths = lengths.long().to(device)
    tail_start = lengths // c * c
    in_tail = member[: c - 1] < (lengths - tail_start).unsqueeze(1)  # [n, c - 1]
    row_of, i = in_tail.nonzero(as_tuple=True)
    first_slot = (groups >= 0).sum(dim=1) * c  # the tail follows the groups' tokens
    out[row_of, first_slot[row_of] + i] = (tail_start[row_of] + i).to(torch.int32)
    return out


def expand_selection(topk_idx, nb, page_size):
    """ops.md's expansion of a token set [T, W] (ascending, -1 padded) at page size P:
    sel_blocks [T, nb] int32 (sorted unique pages, -1 padded), sel_mask [T, nb] (bit b: token
    P*page+b; torch.uint64 where torch has it, else int64 with the same bits; 0 padded),
    sel_count [T] int32. ValueError when a row needs more than nb pages."""
    import torch

    from .dlpack import uint64_dtype

    rows, device = topk_idx.shape[0], topk_idx.device
    valid = topk_idx >= 0
    index = topk_idx.long()
    page = torch.where(valid, index // page_size, torch.full_like(index, -1))
    previous = torch.cat([torch.full_like(page[:, :1], -1), page[:, :-1]], dim=1)
    first = valid & (page != previous)  # positions ascend, so each page's entries are adjacent
    count = first.sum(dim=1)
    if rows and int(count.max()) > nb:
        row = int(count.argmax())
        raise ValueError(f"qsa_index: row {row} selects {int(count[row])} pages, NB is {nb}")
    slot = first.cumsum(dim=1) - 1
    sel_blocks = torch.full((rows, nb), -1, dtype=torch.int32, device=device)
    row_of, column = first.nonzero(as_tuple=True)
    sel_blocks[row_of, slot[row_of, column]] = page[row_of, column].to(torch.int32)
    bits = _bit_values(device)[index.clamp(min=0) % page_size]
    masks = torch.zeros((rows, nb + 1), dtype=torch.int64, device=device)
    masks.scatter_add_(1, torch.where(valid, slot, torch.full_like(slot, nb)),
                       torch.where(valid, bits, torch.zeros_like(bits)))
    sel_mask = masks[:, :nb].contiguous().view(uint64_dtype())
    return sel_blocks, sel_mask, count.to(torch.int32)


def _index_chunks(q, weights, k_index, query_start_loc, seq_lens, block_table, compress_ratio,
                  precise=False):
    """(first row, end row, L [n], scores [n, G], valid [n, G]) per row chunk of every request,
    G the request's complete groups."""
    import torch

    for r, (first, rows, seq_len) in enumerate(_requests(query_start_loc, seq_lens)):
        groups = seq_len // compress_ratio
        keys = _gather(k_index, block_table[r], groups)
        lengths = seq_len - rows + 1 + torch.arange(rows, device=q.device)
        for start, end in _row_chunks(rows, groups * q.shape[1]):
            t0, t1 = first + start, first + end
            seen = lengths[start:end] // compress_ratio
            w = None if weights is None else weights[t0:t1]
            scores = _score_chunk(q[t0:t1], w, keys, seen, precise)
            valid = torch.arange(groups, device=q.device) < seen[:, None]
            yield t0, t1, lengths[start:end], scores, valid


def qsa_index_scores(q, weights, k_index, query_start_loc, seq_lens, block_table,
                     compress_ratio=1, precise=False):
    """Group scores [T, max G] fp32 as qsa_index computes them (fp64 dot products when
    `precise`), -inf beyond each row's G_t. For validation: it holds every row's whole score
    vector."""
    import torch

    width = max(seq_lens.tolist(), default=0) // compress_ratio
    out = torch.full((q.shape[0], width), float("-inf"), dtype=torch.float32, device=q.device)
    for t0, t1, _, scores, _ in _index_chunks(q, weights, k_index, query_start_loc, seq_lens,
                                               block_table, compress_ratio, precise):
        out[t0:t1, : scores.shape[1]] = scores
    return out


def qsa_index(q, weights, k_index, query_start_loc, seq_lens, block_table, topk, nb=None,
              compress_ratio=1):
    """Op 1 (QSA index): group scores, the B/c best groups (ties to the lower group), the tail,
    the expansion at the KV page size.

    q [T, 4, 128] fp16; weights [T, 4] fp32 or None (every head weighs 1/sqrt(128));
    k_index [num_pages, P / c, 128] fp16, one key per group of c = compress_ratio tokens;
    topk the budget B in tokens (a multiple of c); nb the sel_* width (default
    selection_width). Returns QsaIndexResult: topk_idx [T, B + c - 1] int32 (the token set,
    request-local positions ascending, -1 padded), sel_blocks [T, NB] int32, sel_mask [T, NB]
    uint64 (see expand_selection), sel_count [T] int32.
    """
    import torch

    c = compress_ratio
    if topk % c:
        raise ValueError(f"qsa_index: the budget {topk} is not a multiple of c = {c}")
    page = k_index.shape[1] * c
    if nb is None:
        nb = selection_width(topk, c, page, max(seq_lens.tolist(), default=0))
    topk_idx = torch.full((q.shape[0], topk + c - 1), -1, dtype=torch.int32, device=q.device)
    for t0, t1, lengths, scores, valid in _index_chunks(q, weights, k_index, query_start_loc,
                                                        seq_lens, block_table, c):
        topk_idx[t0:t1] = token_set(topk_positions(scores, valid, topk // c), lengths, c)
    return QsaIndexResult(topk_idx, *expand_selection(topk_idx, nb, page))


# Op 2: QSA selected attention --------------------------------------------------------------------


def row_lengths(query_start_loc, seq_lens, device):
    """Each row's L_t = pos + 1 (int64 [T]), from the metadata on the host."""
    import torch

    lengths = [seq_len - rows + 1 + i for _, rows, seq_len in _requests(query_start_loc, seq_lens)
               for i in range(rows)]
    return torch.tensor(lengths, dtype=torch.int64, device=device)


def token_ids_selection(token_ids, count_column, lengths, page_size):
    """ABI 1.2's token ids [T, W] as op 2's sel_* triple at page size P: row t's ids (its leading
    count when count_column, the last column holding the count; every column else), in any order,
    with -1 and every id outside [0, L_t) (lengths [T]) left out and a repeat counted once, as
    the plugin reads them. NB = min(ids a row holds, ceil(max L / P))."""
    import torch

    ids = token_ids.long()
    if count_column:
        count = ids[:, -1].clamp(0, ids.shape[1] - 1)
        ids = ids[:, :-1]
        ids = ids.masked_fill(torch.arange(ids.shape[1], device=ids.device) >= count[:, None], -1)
    lengths = lengths.to(ids.device)
    valid = (ids >= 0) & (ids < lengths[:, None])
    past = torch.iinfo(torch.int64).max  # sorts after every position
    key = torch.where(valid, ids, past).sort(dim=1).values
    repeated = torch.zeros_like(key, dtype=torch.bool)
    repeated[:, 1:] = key[:, 1:] == key[:, :-1]
    key = key.masked_fill(repeated, past).sort(dim=1).values
    tokens = torch.where(key == past, -1, key)
    longest = int(lengths.max()) if lengths.numel() else 0
    nb = max(1, min(ids.shape[1], -(-longest // page_size)))
    return expand_selection(tokens, nb, page_size)


def selected_positions(sel_blocks, sel_mask, sel_count, bound, page_size):
    """Each row's selected positions below bound [n] (its L_t), pages of page_size tokens:
    (positions [n, W] int64 ascending, valid [n, W] bool), W the largest count; a position
    selected twice counts once, padding is position 0 and not valid."""
    import torch

    rows, nb = sel_blocks.shape
    device = sel_blocks.device
    masks = sel_mask if sel_mask.dtype == torch.int64 else sel_mask.view(torch.int64)
    bits = (masks.unsqueeze(-1) & _bit_values(device)[:page_size]) != 0  # [n, NB, P]
    counted = torch.arange(nb, device=device) < sel_count.unsqueeze(1).long()
    position = sel_blocks.long().unsqueeze(-1) * page_size + torch.arange(page_size,
                                                                          device=device)
    keep = bits & counted.unsqueeze(-1) & (position >= 0) & (position < bound.view(-1, 1, 1))
    past = torch.iinfo(torch.int64).max  # sorts after every position
    key = torch.where(keep, position, past).flatten(1).sort(dim=1).values
    repeated = torch.zeros_like(key, dtype=torch.bool)
    repeated[:, 1:] = key[:, 1:] == key[:, :-1]
    key = key.masked_fill(repeated, past).sort(dim=1).values
    valid = key != past
    width = int(valid.sum(dim=1).max()) if rows else 0
    return key[:, :width].masked_fill(~valid[:, :width], 0), valid[:, :width]


def _attend(q, keys, values, valid, sm_scale):
    """Softmax attention of each row of q [n, Hq, D] over its own keys, values [n, W, Hkv, D]
    where valid [n, W], fp32 throughout: (o [n, Hq, D] fp32, lse [n, Hq]). An empty set gives
    o = 0, lse = -inf."""
    import torch

    n, q_heads, dim = q.shape
    kv_heads = keys.shape[2]
    qf = q.float().reshape(n, kv_heads, q_heads // kv_heads, dim)
    logits = torch.einsum("nkgd,nwkd->nkgw", qf, keys.float()) * sm_scale
    logits = logits.masked_fill(~valid.view(n, 1, 1, -1), float("-inf"))
    peak = logits.amax(dim=-1, keepdim=True)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    p = torch.exp(logits - peak)
    total = p.sum(dim=-1, keepdim=True)
    tiny = torch.finfo(torch.float32).tiny  # an empty set: 0 / tiny = 0
    o = torch.einsum("nkgw,nwkd->nkgd", p, values.float()) / total.clamp(min=tiny)
    lse = torch.log(total) + peak
    return o.reshape(n, q_heads, dim), lse.reshape(n, q_heads)


def qsa_attn(q, k_cache, v_cache, query_start_loc, seq_lens, block_table, sel_blocks, sel_mask,
             sel_count, sm_scale, gate=None):
    """Op 2 (QSA selected attention): each row gathers its selected tokens with position < L_t
    and attends over them, fp32 logits, softmax and accumulation; with a gate, o *=
    sigmoid(gate) in fp32.

    q [T, Hq, D] fp16; k_cache, v_cache [num_pages, P, Hkv, D] fp16; sel_blocks [T, NB]
    int32, sel_mask [T, NB] uint64 (or int64 bits; bit b: token P*page+b), sel_count [T] int32;
    gate [T, Hq, D] fp16 or None. Query head h reads KV head h // (Hq / Hkv). Returns (out [T,
    Hq, D] fp16, lse [T, Hq] fp32, natural log of the ungated sums); an empty key set gives 0
    and -inf.
    """
    import torch

    rows, q_heads, dim = q.shape
    page, kv_heads, nb = k_cache.shape[1], k_cache.shape[2], sel_blocks.shape[1]
    out = torch.zeros((rows, q_heads, dim), dtype=torch.float16, device=q.device)
    lse = torch.full((rows, q_heads), float("-inf"), dtype=torch.float32, device=q.device)
    for r, (first, count, seq_len) in enumerate(_requests(query_start_loc, seq_lens)):
        keys = _gather(k_cache, block_table[r], seq_len)
        values = _gather(v_cache, block_table[r], seq_len)
        bound = seq_len - count + 1 + torch.arange(count, device=q.device)  # L_t
        for start, end in _row_chunks(count, 4 * nb * page):  # the NB x P expansion, int64
            positions, valid = selected_positions(sel_blocks[first + start:first + end],
                                                  sel_mask[first + start:first + end],
                                                  sel_count[first + start:first + end],
                                                  bound[start:end], page)
            width = positions.shape[1]  # fp32 K and V of `width` tokens per row
            if width == 0:
                continue  # every row's set is empty: out stays 0, lse -inf
            for a, b in _row_chunks(end - start, 2 * width * (kv_heads * dim + q_heads)):
                t0, t1 = first + start + a, first + start + b
                o, row_lse = _attend(q[t0:t1], keys[positions[a:b]], values[positions[a:b]],
                                     valid[a:b], sm_scale)
                if gate is not None:
                    o = o * torch.sigmoid(gate[t0:t1].float())
                out[t0:t1] = o.to(torch.float16)
                lse[t0:t1] = row_lse
    return out, lse


# Op 3: grouped NVFP4 MoE -------------------------------------------------------------------------

_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # magnitudes; bit 3 of the nibble is the sign


def e4m3_value(byte):
    """The float8 e4m3 (fn) value of one byte: bias 7, subnormals, S.1111.111 is NaN."""
    sign = -1.0 if byte & 0x80 else 1.0
    exponent, mantissa = (byte >> 3) & 0xF, byte & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return float("nan")
    if exponent == 0:
        return sign * mantissa * 2.0**-9
    return sign * (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)


@functools.lru_cache(maxsize=None)
def _code_tables(device):
    """(e2m1 [16], e4m3 [256]) fp32 values of every code, on `device`."""
    import torch

    e2m1 = torch.tensor(_E2M1 + tuple(-v for v in _E2M1), dtype=torch.float32, device=device)
    e4m3 = torch.tensor([e4m3_value(b) for b in range(256)], dtype=torch.float32, device=device)
    return e2m1, e4m3


def dequantize(packed, scales):
    """NVFP4 [rows, cols/2] uint8 (low nibble = even k) with e4m3 scales [rows, cols/16]
    (uint8 or float8_e4m3fn) -> fp32 [rows, cols] = e2m1 * e4m3, exact; scale_2 is the
    caller's."""
    import torch

    e2m1, e4m3 = _code_tables(packed.device)
    codes = packed.long()
    nibbles = torch.stack([codes & 0xF, codes >> 4], dim=-1).flatten(-2)
    scale = e4m3[scales.view(torch.uint8).long()].repeat_interleave(16, dim=-1)
    return e2m1[nibbles] * scale


def _expert_weights(e, w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2):
    """Expert e dequantized, scale_2 applied: (w_in [2I, H], w_out [H, I]) fp32."""
    inter = w13.shape[1] // 2
    w_in = dequantize(w13[e], w13_scale[e])
    w_in[:inter] *= w13_scale_2[e, 0].float()
    w_in[inter:] *= w13_scale_2[e, 1].float()
    return w_in, dequantize(w2[e], w2_scale[e]) * w2_scale_2[e].float()


def _routed_sum(x, topk_ids, topk_weights, experts, expert_weights):
    """out [T, H] fp16 = sum_j topk_weights[t,j] * y_e(x[t]) in fp32, with (w_in, w_out) =
    expert_weights(e) for each routed expert e; y_e is computed in the weights' dtype. The
    (token, slot) pairs are sorted by expert once; each routed expert's weights are asked for
    once, and its pairs go through in chunks that keep the gathered rows within
    SCRATCH_ELEMENTS. The fp32 sum [T, H] is held for the whole call."""
    import torch

    ids = topk_ids.long()
    if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < experts:
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise ValueError(f"nvfp4_moe: topk_ids holds expert {bad}, outside 0..{experts - 1}")
    flat = ids.flatten()
    order = flat.argsort(stable=True)
    token = order // ids.shape[1]
    pair_weight = topk_weights.flatten()[order].float().unsqueeze(1)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    end = 0
    for e, n in enumerate(torch.bincount(flat, minlength=experts).tolist()):
        if n == 0:
            continue
        begin, end = end, end + n
        w_in, w_out = expert_weights(e)
        for a, b in _row_chunks(n, x.shape[1]):
            rows = slice(begin + a, begin + b)
            out.index_add_(0, token[rows], _expert_ffn(x[token[rows]], w_in, w_out)
                           * pair_weight[rows])
    return out.to(torch.float16)


def _expert_ffn(x, w_in, w_out):
    """(silu(x W_gate^T) * (x W_up^T)) W_out^T in the weights' dtype, W_gate and W_up the halves
    of w_in [2I, H]."""
    import torch

    inter = w_in.shape[0] // 2
    h = x.to(w_in.dtype) @ w_in.t()
    return (torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]) @ w_out.t()


def nvfp4_moe(x, topk_ids, topk_weights, w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2):
    """Op 3 (grouped NVFP4 W4A16 MoE) on the routed experts only, fp32 throughout.

    x [T, H] fp16; topk_ids [T, k] int32; topk_weights [T, k] fp32; w13 [E, 2I, H/2] uint8
    (rows 0..I-1 gate, I..2I-1 up), w13_scale [E, 2I, H/16] e4m3, w13_scale_2 [E, 2] fp32
    (gate, up); w2 [E, H, I/2] uint8, w2_scale [E, H, I/16] e4m3, w2_scale_2 [E] fp32.
    W[n,k] = e2m1 * e4m3 * scale_2; out[t] = sum_j topk_weights[t,j] *
    (silu(x W_gate^T) * (x W_up^T)) W2^T of expert topk_ids[t,j]; returns out [T, H] fp16.
    Dequantizes each routed expert on every call: the reference, and a host's fallback when
    it has no memory for an fp16 copy (dequantize_experts).
    """
    weights = (w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2)
    return _routed_sum(x, topk_ids, topk_weights, w13.shape[0],
                       lambda e: _expert_weights(e, *weights))


def dequantize_experts(w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2):
    """The fp16 copy of every expert a host without the plugin makes at load, when it has the
    memory (3.6x the NVFP4 bytes): (w13 [E, 2I, H], w2 [E, H, I]) fp16, scale_2 applied in fp32
    before the rounding to fp16."""
    import torch

    experts, two_inter, hidden = w13.shape[0], w13.shape[1], w2.shape[1]
    w13_dense = torch.empty((experts, two_inter, hidden), dtype=torch.float16, device=w13.device)
    w2_dense = torch.empty((experts, hidden, two_inter // 2), dtype=torch.float16,
                           device=w13.device)
    for e in range(experts):
        w_in, w_out = _expert_weights(e, w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2)
        w13_dense[e], w2_dense[e] = w_in, w_out
    return w13_dense, w2_dense


def moe_dense(x, topk_ids, topk_weights, w13_dense, w2_dense):
    """Op 3 on dequantize_experts' fp16 copy: fp16 GEMMs (fp32 accumulation on CUDA), fp32
    combine. Same out as nvfp4_moe within fp16 rounding of h and a."""
    return _routed_sum(x, topk_ids, topk_weights, w13_dense.shape[0],
                       lambda e: (w13_dense[e], w2_dense[e]))
