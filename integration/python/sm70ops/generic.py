"""The host's generic torch implementations of the three ops, written from shared/spec/ops.md:
what an engine runs when the plugin declines. They run on CPU or CUDA tensors, read the varlen
metadata on the host (one device-to-host copy per call) and bound their scratch by working in
row chunks. Each function imports torch itself, so the package imports without it.

Shapes as in ops.md: T rows, R requests, 64-token pages; query_start_loc [R+1] int32,
seq_lens [R] int32 (context including this chunk), block_table [R, max_pages] int32. Row i of
request r sits at pos = seq_len_r - query_len_r + i and sees keys 0..pos (L = pos + 1).
"""
import collections

PAGE = 64
SCRATCH_ELEMENTS = 1 << 26  # per row chunk: 256 MiB of fp32 scores; bounds every temporary

QsaIndexResult = collections.namedtuple("QsaIndexResult",
                                        "topk_idx sel_blocks sel_mask sel_count")


def _requests(query_start_loc, seq_lens):
    """[(first_row, rows, seq_len)] per request, on the host."""
    starts, lens = query_start_loc.tolist(), seq_lens.tolist()
    return [(starts[r], starts[r + 1] - starts[r], lens[r]) for r in range(len(lens))]


def _gather_tokens(cache, block_table_row, tokens):
    """The first `tokens` tokens of one request from a paged cache [pages, 64, ...]."""
    pages = block_table_row[: -(-tokens // PAGE)].long()
    return cache.index_select(0, pages).flatten(0, 1)[:tokens]


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


def _score_chunk(q, w, keys, positions, precise=False):
    """s[t, j] = sum_h w[t,h] * relu(q[t,h,:] . k[j,:]) in fp32, -inf where j > positions[t].

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
        scores += w[:, h : h + 1].float() * logits[:, h].float().relu()
    j = torch.arange(keys.shape[0], device=q.device)
    return scores.masked_fill(j.unsqueeze(0) > positions.unsqueeze(1), float("-inf"))


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


def expand_selection(topk_idx, nb):
    """ops.md's expansion of topk_idx [T, K] (ascending, -1 padded): sel_blocks [T, nb] int32
    (sorted unique pages, -1 padded), sel_mask [T, nb] (bit b: token 64*page+b; torch.uint64
    where torch has it, else int64 with the same bits; 0 padded), sel_count [T] int32.
    ValueError when a row needs more than nb pages."""
    import torch

    from .dlpack import uint64_dtype

    rows, device = topk_idx.shape[0], topk_idx.device
    valid = topk_idx >= 0
    index = topk_idx.long()
    page = torch.where(valid, index // PAGE, torch.full_like(index, -1))
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
    bits = _bit_values(device)[index.clamp(min=0) % PAGE]
    masks = torch.zeros((rows, nb + 1), dtype=torch.int64, device=device)
    masks.scatter_add_(1, torch.where(valid, slot, torch.full_like(slot, nb)),
                       torch.where(valid, bits, torch.zeros_like(bits)))
    sel_mask = masks[:, :nb].contiguous().view(uint64_dtype())
    return sel_blocks, sel_mask, count.to(torch.int32)


def _index_chunks(q, weights, k_index, query_start_loc, seq_lens, block_table, precise=False):
    """(first row, end row, seq_len, scores, valid) per row chunk of every request."""
    import torch

    for r, (first, rows, seq_len) in enumerate(_requests(query_start_loc, seq_lens)):
        keys = _gather_tokens(k_index, block_table[r], seq_len)
        positions = seq_len - rows + torch.arange(rows, device=q.device)
        for start, end in _row_chunks(rows, seq_len * q.shape[1]):
            t0, t1 = first + start, first + end
            scores = _score_chunk(q[t0:t1], weights[t0:t1], keys, positions[start:end], precise)
            valid = torch.arange(seq_len, device=q.device) <= positions[start:end, None]
            yield t0, t1, seq_len, scores, valid


def qsa_index_scores(q, weights, k_index, query_start_loc, seq_lens, block_table, precise=False):
    """Scores [T, max L] fp32 as qsa_index computes them (fp64 dot products when `precise`),
    -inf beyond each row's L_t. For validation: it holds every row's whole score vector."""
    import torch

    width = max(seq_lens.tolist(), default=0)
    out = torch.full((q.shape[0], width), float("-inf"), dtype=torch.float32, device=q.device)
    for t0, t1, seq_len, scores, _ in _index_chunks(q, weights, k_index, query_start_loc,
                                                     seq_lens, block_table, precise):
        out[t0:t1, :seq_len] = scores
    return out


def qsa_index(q, weights, k_index, query_start_loc, seq_lens, block_table, topk, nb=None):
    """Op 1 (QSA index): scores, top-k with ties to the lower position, expansion.

    q [T, 4, 128] fp16; weights [T, 4] fp32; k_index [num_pages, 64, 128] fp16 (paged);
    topk K; nb the sel_* width (default min(K, ceil(max L / 64))). Returns QsaIndexResult:
    topk_idx [T, K] int32 (request-local positions ascending, -1 padded), sel_blocks [T, NB]
    int32, sel_mask [T, NB] uint64 (see expand_selection), sel_count [T] int32.
    """
    import torch

    if nb is None:
        nb = min(topk, -(-max(seq_lens.tolist(), default=0) // PAGE))
    topk_idx = torch.full((q.shape[0], topk), -1, dtype=torch.int32, device=q.device)
    for t0, t1, _, scores, valid in _index_chunks(q, weights, k_index, query_start_loc,
                                                  seq_lens, block_table):
        topk_idx[t0:t1] = topk_positions(scores, valid, topk)
    return QsaIndexResult(topk_idx, *expand_selection(topk_idx, nb))


# Op 2: QSA selected attention --------------------------------------------------------------------


def selected_tokens(sel_blocks, sel_mask, sel_count, width):
    """bool [T, width]: token p is in the row's set (a position selected twice counts once;
    positions >= width are dropped)."""
    import torch

    rows, nb = sel_blocks.shape
    device = sel_blocks.device
    masks = sel_mask if sel_mask.dtype == torch.int64 else sel_mask.view(torch.int64)
    bits = (masks.unsqueeze(-1) & _bit_values(device)) != 0  # [T, NB, 64]
    counted = torch.arange(nb, device=device) < sel_count.unsqueeze(1).long()
    position = sel_blocks.long().unsqueeze(-1) * PAGE + torch.arange(PAGE, device=device)
    keep = bits & counted.unsqueeze(-1) & (position >= 0) & (position < width)
    flat = torch.arange(rows, device=device).view(rows, 1, 1) * width + position
    dense = torch.zeros(rows * width, dtype=torch.bool, device=device)
    dense[flat[keep]] = True
    return dense.view(rows, width)


def _attend(q, keys, values, allowed, sm_scale):
    """Softmax attention of q [n, Hq, D] over keys, values [L, Hkv, D] where allowed [n, L],
    fp32 throughout: (o [n, Hq, D] fp32, lse [n, Hq]). An empty set gives o = 0, lse = -inf."""
    import torch

    n, q_heads, dim = q.shape
    kv_heads = keys.shape[1]
    qf = q.float().reshape(n, kv_heads, q_heads // kv_heads, dim)
    logits = torch.einsum("nkgd,lkd->nkgl", qf, keys) * sm_scale
    logits = logits.masked_fill(~allowed.view(n, 1, 1, -1), float("-inf"))
    peak = logits.amax(dim=-1, keepdim=True)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    p = torch.exp(logits - peak)
    total = p.sum(dim=-1, keepdim=True)
    tiny = torch.finfo(torch.float32).tiny  # an empty set: 0 / tiny = 0
    o = torch.einsum("nkgl,lkd->nkgd", p, values) / total.clamp(min=tiny)
    lse = torch.log(total) + peak
    return o.reshape(n, q_heads, dim), lse.reshape(n, q_heads)


def qsa_attn(q, k_cache, v_cache, query_start_loc, seq_lens, block_table, sel_blocks, sel_mask,
             sel_count, sm_scale):
    """Op 2 (QSA selected attention): dense masked attention over each row's selected tokens
    with position < L_t, fp32 logits, softmax and accumulation.

    q [T, Hq, D] fp16; k_cache, v_cache [num_pages, 64, Hkv, D] fp16; sel_blocks [T, NB]
    int32, sel_mask [T, NB] uint64 (or int64 bits), sel_count [T] int32. Query head h reads KV
    head h // (Hq / Hkv). Returns (out [T, Hq, D] fp16, lse [T, Hq] fp32, natural log); an
    empty key set gives 0 and -inf.
    """
    import torch

    rows, q_heads, dim = q.shape
    out = torch.zeros((rows, q_heads, dim), dtype=torch.float16, device=q.device)
    lse = torch.full((rows, q_heads), float("-inf"), dtype=torch.float32, device=q.device)
    for r, (first, count, seq_len) in enumerate(_requests(query_start_loc, seq_lens)):
        keys = _gather_tokens(k_cache, block_table[r], seq_len).float()
        values = _gather_tokens(v_cache, block_table[r], seq_len).float()
        positions = seq_len - count + torch.arange(count, device=q.device)
        # Per row: fp32 logits and weights over L keys per head, int64 NB x 64 expansions.
        per_row = 2 * max(seq_len * q_heads, sel_blocks.shape[1] * PAGE * 2)
        for start, end in _row_chunks(count, per_row):
            t0, t1 = first + start, first + end
            allowed = selected_tokens(sel_blocks[t0:t1], sel_mask[t0:t1], sel_count[t0:t1],
                                      seq_len)
            causal = torch.arange(seq_len, device=q.device) <= positions[start:end, None]
            o, row_lse = _attend(q[t0:t1], keys, values, allowed & causal, sm_scale)
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


def dequantize(packed, scales):
    """NVFP4 [rows, cols/2] uint8 (low nibble = even k) with e4m3 scales [rows, cols/16]
    (uint8 or float8_e4m3fn) -> fp32 [rows, cols] = e2m1 * e4m3, exact; scale_2 is the
    caller's."""
    import torch

    device = packed.device
    e2m1 = torch.tensor(_E2M1 + tuple(-v for v in _E2M1), dtype=torch.float32, device=device)
    e4m3 = torch.tensor([e4m3_value(b) for b in range(256)], dtype=torch.float32, device=device)
    codes = packed.long()
    nibbles = torch.stack([codes & 0xF, codes >> 4], dim=-1).flatten(-2)
    scale = e4m3[scales.view(torch.uint8).long()].repeat_interleave(16, dim=-1)
    return e2m1[nibbles] * scale


def nvfp4_moe(x, topk_ids, topk_weights, w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2):
    """Op 3 (grouped NVFP4 W4A16 MoE) on the routed experts only, fp32 accumulation.

    x [T, H] fp16; topk_ids [T, k] int32; topk_weights [T, k] fp32; w13 [E, 2I, H/2] uint8
    (rows 0..I-1 gate, I..2I-1 up), w13_scale [E, 2I, H/16] e4m3, w13_scale_2 [E, 2] fp32
    (gate, up); w2 [E, H, I/2] uint8, w2_scale [E, H, I/16] e4m3, w2_scale_2 [E] fp32.
    W[n,k] = e2m1 * e4m3 * scale_2; out[t] = sum_j topk_weights[t,j] *
    (silu(x W_gate^T) * (x W_up^T)) W2^T of expert topk_ids[t,j]; returns out [T, H] fp16.
    """
    import torch

    experts, inter = w13.shape[0], w13.shape[1] // 2
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    xf = x.float()
    for e in torch.unique(topk_ids).tolist():
        if not 0 <= e < experts:
            raise ValueError(f"nvfp4_moe: topk_ids holds expert {e}, outside 0..{experts - 1}")
        token, slot = (topk_ids == e).nonzero(as_tuple=True)
        w_in = dequantize(w13[e], w13_scale[e])
        w_in[:inter] *= w13_scale_2[e, 0].float()
        w_in[inter:] *= w13_scale_2[e, 1].float()
        w_out = dequantize(w2[e], w2_scale[e]) * w2_scale_2[e].float()
        h = xf[token] @ w_in.t()
        y = (torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]) @ w_out.t()
        out.index_add_(0, token, y * topk_weights[token, slot].float().unsqueeze(1))
    return out.to(torch.float16)
