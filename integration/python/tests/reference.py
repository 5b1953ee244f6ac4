"""Plain-Python references of the three ops, written from shared/spec/ops.md version 2 (fp64,
lists, no torch), small enough to read against the spec line by line. test_generic.py holds the
torch implementations to them; test_reference.py checks them on hand-worked cases.

Caches are nested lists [page][slot]...: the KV cache holds P tokens a page, the index cache P / c
group keys a page (c the compress ratio), so a page of either covers the same P tokens."""
import math


def rows_of(query_start_loc, seq_lens):
    """[(request, position, L)] per row: pos = seq_len - query_len + i, L = pos + 1."""
    out = []
    for r, seq_len in enumerate(seq_lens):
        count = query_start_loc[r + 1] - query_start_loc[r]
        for i in range(count):
            pos = seq_len - count + i
            out.append((r, pos, pos + 1))
    return out


def entry(cache, block_table, request, index):
    """Entry `index` of a request in a paged cache: its page block_table[r][index // per_page]."""
    per_page = len(cache[0])
    return cache[block_table[request][index // per_page]][index % per_page]


def index_scores(q, w, k_index, query_start_loc, seq_lens, block_table, c):
    """s[t][g] = sum_h w[t][h] * relu(q[t][h] . k[g]) for the G = L_t // c complete groups; w
    None weighs every head 1/sqrt(dim)."""
    scores = []
    for t, (r, _, length) in enumerate(rows_of(query_start_loc, seq_lens)):
        heads = len(q[t])
        weights = w[t] if w is not None else [len(q[t][0]) ** -0.5] * heads
        row = []
        for g in range(length // c):
            key = entry(k_index, block_table, r, g)
            row.append(sum(weights[h] * max(0.0, sum(a * b for a, b in zip(q[t][h], key)))
                           for h in range(heads)))
        scores.append(row)
    return scores


def best(scores, k):
    """Ascending indices of the k largest scores, ties to the lower index."""
    order = sorted(range(len(scores)), key=lambda j: (-scores[j], j))
    return sorted(order[:k])


def token_set(groups, length, c):
    """The tokens of the selected groups, then the tail c*G .. L-1 (G = L // c), ascending."""
    return [c * g + i for g in groups for i in range(c)] + list(range(length // c * c, length))


def expand(positions, page):
    """(sorted unique pages, their masks: bit b = token page_size * page + b)."""
    masks = {}
    for p in positions:
        masks[p // page] = masks.get(p // page, 0) | (1 << (p % page))
    pages = sorted(masks)
    return pages, [masks[p] for p in pages]


def qsa_index(q, w, k_index, query_start_loc, seq_lens, block_table, budget, nb, c):
    """(scores, topk_idx [T][budget + c - 1] -1 padded, sel_blocks [T][nb] -1 padded, sel_mask
    [T][nb] 0 padded, sel_count [T]) at page size P = c * (keys a page)."""
    page = c * len(k_index[0])
    scores = index_scores(q, w, k_index, query_start_loc, seq_lens, block_table, c)
    topk_idx, blocks, masks, counts = [], [], [], []
    for row, (_, _, length) in zip(scores, rows_of(query_start_loc, seq_lens)):
        chosen = token_set(best(row, budget // c), length, c)
        pages, bits = expand(chosen, page)
        topk_idx.append(chosen + [-1] * (budget + c - 1 - len(chosen)))
        blocks.append(pages + [-1] * (nb - len(pages)))
        masks.append(bits + [0] * (nb - len(bits)))
        counts.append(len(pages))
    return scores, topk_idx, blocks, masks, counts


def selected_positions(blocks, masks, count, length, page):
    """A row's key set: selected tokens with position < L, each once, ascending."""
    chosen = set()
    for p, mask in zip(blocks[:count], masks[:count]):
        chosen.update(p * page + b for b in range(page) if mask >> b & 1)
    return sorted(p for p in chosen if p < length)


def attend(q_head, keys, values, scale):
    """(o, lse) of softmax(scale * q . k) v over the given keys; empty: (0, -inf)."""
    if not keys:
        return [0.0] * len(q_head), -math.inf
    logits = [scale * sum(a * b for a, b in zip(q_head, key)) for key in keys]
    peak = max(logits)
    weights = [math.exp(x - peak) for x in logits]
    total = sum(weights)
    o = [sum(p * v[d] for p, v in zip(weights, values)) / total for d in range(len(q_head))]
    return o, math.log(total) + peak


def sigmoid(z):
    return 1 / (1 + math.exp(-z))


def qsa_attn(q, k_cache, v_cache, query_start_loc, seq_lens, block_table, sel_blocks, sel_mask,
             sel_count, sm_scale, gate=None):
    """(o [T][Hq][D], lse [T][Hq]); query head h reads KV head h // (Hq / Hkv); with a gate, o
    is multiplied by sigmoid(gate) (lse stays that of the ungated sums)."""
    out, lse = [], []
    page, kv_heads = len(k_cache[0]), len(k_cache[0][0])
    for t, (r, _, length) in enumerate(rows_of(query_start_loc, seq_lens)):
        positions = selected_positions(sel_blocks[t], sel_mask[t], sel_count[t], length, page)
        group = len(q[t]) // kv_heads
        o_row, lse_row = [], []
        for h, q_head in enumerate(q[t]):
            kv = h // group
            keys = [entry(k_cache, block_table, r, p)[kv] for p in positions]
            values = [entry(v_cache, block_table, r, p)[kv] for p in positions]
            o, s = attend(q_head, keys, values, sm_scale)
            if gate is not None:
                o = [x * sigmoid(z) for x, z in zip(o, gate[t][h])]
            o_row.append(o)
            lse_row.append(s)
        out.append(o_row)
        lse.append(lse_row)
    return out, lse


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e2m1(nibble):
    return -E2M1[nibble & 7] if nibble & 8 else E2M1[nibble & 7]


def e4m3(byte):
    """float8 e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; S.1111.111 is NaN."""
    sign = -1.0 if byte >> 7 else 1.0
    exponent, mantissa = byte >> 3 & 15, byte & 7
    if exponent == 15 and mantissa == 7:
        return math.nan
    if exponent == 0:
        return sign * 2.0**-6 * mantissa / 8
    return sign * 2.0 ** (exponent - 7) * (1 + mantissa / 8)


def dequantize(packed_rows, scale_rows, scale_2):
    """W[n][k] = e2m1(nibble k of row n; low nibble = even k) * e4m3(scale[n][k // 16]) * s2."""
    out = []
    for packed, scales in zip(packed_rows, scale_rows):
        row = []
        for k in range(2 * len(packed)):
            nibble = packed[k // 2] & 15 if k % 2 == 0 else packed[k // 2] >> 4
            row.append(e2m1(nibble) * e4m3(scales[k // 16]) * scale_2)
        out.append(row)
    return out


def silu(z):
    return z / (1 + math.exp(-z))


def nvfp4_moe(x, topk_ids, topk_weights, w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2):
    """out[t] = sum_j topk_weights[t][j] * y_{topk_ids[t][j]}(x[t]) in fp64."""
    inter = len(w13[0]) // 2
    out = []
    for t, x_row in enumerate(x):
        acc = [0.0] * len(x_row)
        for e, weight in zip(topk_ids[t], topk_weights[t]):
            gate = dequantize(w13[e][:inter], w13_scale[e][:inter], w13_scale_2[e][0])
            up = dequantize(w13[e][inter:], w13_scale[e][inter:], w13_scale_2[e][1])
            down = dequantize(w2[e], w2_scale[e], w2_scale_2[e])
            a = [silu(sum(g * v for g, v in zip(gr, x_row))) * sum(u * v for u, v in
                 zip(ur, x_row)) for gr, ur in zip(gate, up)]
            for n, row in enumerate(down):
                acc[n] += weight * sum(wv * av for wv, av in zip(row, a))
        out.append(acc)
    return out
