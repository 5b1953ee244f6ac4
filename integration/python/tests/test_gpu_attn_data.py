"""sm70ops.data's token sets for the attention's benches (issue 30), on a CUDA GPU: each row of
both generators holds exactly op 1's token set (B/c whole groups ascending, then the tail), the
neighbours of both share about 70% of their pages, and the growing generator's tiles of 16 rows
hold a larger union than the drifting runs' (what the benches compare). Skipped without
torch.cuda."""
import pytest

from sm70ops import bench_attn, data, generic

PROMPT, ROWS, BUDGET, C, PAGE = 131072, 256, 2048, 4, 64


def token_sets(torch, name):
    selections = data.SELECTIONS[name](torch, PROMPT, BUDGET, C, seed=5)
    lengths = torch.arange(PROMPT - ROWS + 1, PROMPT + 1, device="cuda")
    return selections.tokens(lengths), lengths


@pytest.mark.parametrize("name", list(data.SELECTIONS))
def test_every_row_holds_a_token_set(cuda_torch, name):
    torch = cuda_torch
    tokens, lengths = token_sets(torch, name)
    assert tokens.shape == (ROWS, BUDGET + C - 1)
    for row, length in zip(tokens.tolist(), lengths.tolist()):
        tail = list(range(length // C * C, length))
        valid = [t for t in row if t >= 0]
        assert row[len(valid):] == [-1] * (len(row) - len(valid))  # -1 padding at the end
        groups, rest = valid[:BUDGET], valid[BUDGET:]
        assert rest == tail
        assert len(set(groups)) == BUDGET and groups == sorted(groups)
        assert all(g < length // C * C for g in groups)
        assert all(groups[i] % C == i % C and groups[i] - groups[i - i % C] == i % C
                   for i in range(BUDGET))  # whole groups of c tokens


def test_neighbours_alike_and_the_growing_union_larger(cuda_torch):
    torch = cuda_torch
    unions = {}
    for name in data.SELECTIONS:
        tokens, _ = token_sets(torch, name)
        nb = generic.selection_width(BUDGET, C, PAGE, PROMPT)
        blocks, _, count = generic.expand_selection(tokens, nb, PAGE)
        overlap = data.neighbour_overlap(blocks, count)
        assert 0.6 <= overlap <= 0.85, (name, overlap)
        masks = bench_attn.page_masks(torch, tokens, PROMPT // PAGE, PAGE)
        unions[name] = bench_attn.tile_tokens(torch, masks, 16)
        print(f"{name}: neighbour Jaccard {overlap:.2f}, 16-row union "
              f"{unions[name] / (ROWS // 16) / BUDGET:.2f} sets")
    assert unions["growing"] > 1.3 * unions["runs"]
