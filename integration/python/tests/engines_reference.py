"""Plain-Python references of the engines' QSA calls (fp64, lists, no torch), written from the
facts of issue 31 alone, that test_engines.py holds sm70ops.engines to.

vLLM: the indexer selects, per row, the B / c best of its visible_blocks = (pos + 1) // c
complete groups; the expansion packs a row into [B + c] int32: request-relative token ids, the
selected groups' tokens first, then the open group's tail, -1 padding compacted to the end, and a
last column counting the valid entries; the attention is softmax(q . k / sqrt(D)) v over a row's
ids, times sigmoid(gate) elementwise. SGLang: the indexer returns [rows, B + c - 1] int32 ids,
-1 padded, which its backend's forward_extend attends over."""
import reference as ref


def select(scores, visible, budget, c):
    """vLLM's block_indices row: the budget / c best groups of the `visible` complete ones,
    ascending, -1 padded to budget / c."""
    groups = ref.best(scores[:visible], budget // c)
    return groups + [-1] * (budget // c - len(groups))


def packed_row(groups, pos, c, budget):
    """vLLM's packed buffer row for the selected groups (-1s skipped, order kept) of a row at
    request position pos."""
    tokens = [c * g + i for g in groups if g >= 0 for i in range(c)]
    tokens += list(range((pos + 1) // c * c, pos + 1))
    return tokens + [-1] * (budget + c - 1 - len(tokens)) + [len(tokens)]


def gated_attention(q, k_cache, v_cache, ids, block_table, token_to_req, gate, scale):
    """o [T][H][D] = softmax(scale * q . k) v over each row's ids (request-relative, through
    block_table[token_to_req[t]]), times sigmoid(gate) when a gate is given; query head h reads
    KV head h // (H / Hkv)."""
    out = []
    kv_heads = len(k_cache[0][0])
    for t, row_ids in enumerate(ids):
        r, group = token_to_req[t], len(q[t]) // kv_heads
        o_row = []
        for h, q_head in enumerate(q[t]):
            keys = [ref.entry(k_cache, block_table, r, p)[h // group] for p in row_ids]
            values = [ref.entry(v_cache, block_table, r, p)[h // group] for p in row_ids]
            o, _ = ref.attend(q_head, keys, values, scale)
            if gate is not None:
                o = [x * ref.sigmoid(z) for x, z in zip(o, gate[t][h])]
            o_row.append(o)
        out.append(o_row)
    return out


def packed_ids(row):
    """The ids of a packed buffer row: its first count entries."""
    return row[: row[-1]]


def sglang_ids(row):
    """The ids of an SGLang indexer row: its entries other than -1."""
    return [p for p in row if p >= 0]
