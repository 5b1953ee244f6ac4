"""The plain-Python references of tests/reference.py on hand-worked cases (no torch), so the
yardstick of test_generic.py is itself checked wherever the tests run."""
import math

import pytest

import reference as ref
from sm70ops import generic


def test_rows_of_places_rows_at_the_end_of_their_context():
    assert ref.rows_of([0, 2, 3], [5, 1]) == [(0, 3, 4), (0, 4, 5), (1, 0, 1)]


def test_best_ties_go_to_the_lower_index():
    assert ref.best([1.0, 3.0, 3.0, 2.0, 3.0], 2) == [1, 2]
    assert ref.best([0.0, 0.0, 0.0], 5) == [0, 1, 2]


def test_token_set_is_the_groups_then_the_tail():
    assert ref.token_set([0, 2], 13, 4) == [0, 1, 2, 3, 8, 9, 10, 11, 12]
    assert ref.token_set([1], 8, 4) == [4, 5, 6, 7]  # L = c*G: no tail
    assert ref.token_set([], 3, 4) == [0, 1, 2]  # L < c: the tail alone
    assert ref.token_set([5, 9], 12, 1) == [5, 9]  # c = 1: tokens are groups


def test_expand_sorts_pages_and_sets_bits():
    pages, masks = ref.expand([3, 64, 65, 63, 200], 64)
    assert pages == [0, 1, 3]
    assert masks == [(1 << 3) | (1 << 63), 0b11, 1 << (200 - 192)]
    assert ref.expand([3, 16, 17, 40], 16) == ([0, 1, 2], [1 << 3, 0b11, 1 << 8])


def test_index_scores_on_one_page():
    q = [[[1.0, 0.0], [0.0, -1.0]]]  # one row, two heads, dim 2
    k = [[[2.0, 1.0], [-1.0, 3.0]] + [[0.0, 0.0]] * 62]
    scores = ref.index_scores(q, [[0.5, 2.0]], k, [0, 1], [2], [[0]], 1)
    assert scores == [[0.5 * 2.0 + 2.0 * 0.0, 0.5 * 0.0 + 2.0 * 0.0]]


def test_weight_free_scores_weigh_each_head_by_one_over_sqrt_dim():
    q = [[[1.0, 1.0], [2.0, 0.0]]]
    k = [[[3.0, -1.0]]]  # one key a page: P = c = 1
    [[score]] = ref.index_scores(q, None, k, [0, 1], [1], [[0]], 1)
    assert score == pytest.approx((2.0 + 6.0) / math.sqrt(2), rel=1e-15)


def groups_problem(scores_by_group, c, keys_a_page, table):
    """One head of dim 1: q = 1 and group g's key is scores_by_group[g], so s[g] = relu(that)
    (w = 1); the groups lie on the pages of `table` in order."""
    pages = [[[0.0]] * keys_a_page for _ in range(max(table) + 1)]
    for g, value in enumerate(scores_by_group):
        pages[table[g // keys_a_page]][g % keys_a_page] = [value]
    return pages


def one_row(keys, length, budget, c, table, nb=8):
    """ref.qsa_index for a single row at position length - 1, q = 1, w = 1."""
    return ref.qsa_index([[[1.0]]], [[1.0]], keys, [0, 1], [length], [table], budget, nb, c)


def test_context_shorter_than_a_group_is_its_tail():
    keys = groups_problem([5.0], 4, 16, [0])
    _, idx, blocks, masks, counts = one_row(keys, 3, 8, 4, [0])
    assert idx == [[0, 1, 2] + [-1] * 8]
    assert (blocks[0][:1], masks[0][:1], counts) == ([0], [0b111], [1])


def test_whole_groups_and_no_tail():
    """L = c*G = 12, budget 2 groups: the best two, no tail."""
    keys = groups_problem([1.0, 3.0, 2.0], 4, 16, [0])
    _, idx, _, _, _ = one_row(keys, 12, 8, 4, [0])
    assert idx == [[4, 5, 6, 7, 8, 9, 10, 11] + [-1] * 3]


def test_every_group_fits_the_budget():
    """G = 2 <= B/c = 3: every group and the tail, the whole prefix."""
    keys = groups_problem([-1.0, 4.0], 4, 16, [0])
    _, idx, _, masks, _ = one_row(keys, 10, 12, 4, [0])
    assert idx == [list(range(10)) + [-1] * 5]
    assert masks[0][0] == (1 << 10) - 1


def test_ties_between_groups_go_to_the_lower_group():
    keys = groups_problem([2.0, 7.0, 2.0, 2.0, 7.0], 4, 16, [0, 1])
    _, idx, _, _, _ = one_row(keys, 21, 12, 4, [0, 1])
    assert idx == [[0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, -1, -1]]


def test_sixteen_token_pages_hold_four_groups_and_the_tail_can_stand_alone():
    """P = 16, c = 4: four keys a page, scattered pages; the best groups 1 and 6 (pages 0 and 1)
    and the tail token 37 alone on page 2."""
    table = [2, 0, 1]
    keys = groups_problem([0.5, 9.0, 1.0, 0.0, 2.0, 0.1, 8.0, 3.0, 0.0], 4, 4, table)
    _, idx, blocks, masks, counts = one_row(keys, 38, 8, 4, table)
    assert idx == [[4, 5, 6, 7, 24, 25, 26, 27, 36, 37, -1]]
    assert blocks == [[0, 1, 2, -1, -1, -1, -1, -1]]
    assert masks[0][:3] == [0xF0, 0xF00, 0b110000]
    assert counts == [3]


def test_selected_positions_apply_the_causal_bound_once():
    assert ref.selected_positions([1, 1, 0], [0b101, 0b1, 1 << 63], 3, 66, 64) == [63, 64]
    assert ref.selected_positions([2, 0], [0b11, 1 << 15], 2, 33, 16) == [15, 32]


def test_attend_empty_and_single_key():
    assert ref.attend([1.0], [], [], 1.0) == ([0.0], -math.inf)
    o, lse = ref.attend([1.0, 2.0], [[3.0, 0.0]], [[5.0, 7.0]], 0.5)
    assert o == [5.0, 7.0] and lse == 1.5


def test_the_gate_scales_the_output_and_not_the_lse():
    keys = [[[[3.0, 0.0]]]]  # one page of one token, one KV head
    values = [[[[5.0, 7.0]]]]
    args = ([[[1.0, 2.0]]], keys, values, [0, 1], [1], [[0]], [[0]], [[1]], [1], 0.5)
    o, lse = ref.qsa_attn(*args, gate=[[[0.0, math.log(3.0)]]])
    assert o == [[[2.5, 7.0 * 0.75]]] and lse == ref.qsa_attn(*args)[1] == [[1.5]]


def test_e4m3_and_e2m1_values():
    assert [ref.e4m3(b) for b in (0x00, 0x01, 0x08, 0x38, 0x7E, 0xB8)] == [
        0.0, 2.0**-9, 2.0**-6, 1.0, 448.0, -1.0]
    assert math.isnan(ref.e4m3(0x7F)) and math.isnan(ref.e4m3(0xFF))
    assert [ref.e2m1(n) for n in (0, 1, 7, 9, 15)] == [0.0, 0.5, 6.0, -0.5, -6.0]


def test_generic_e4m3_table_agrees_with_the_reference():
    for byte in range(256):
        a, b = generic.e4m3_value(byte), ref.e4m3(byte)
        assert a == b or (math.isnan(a) and math.isnan(b)), byte


def test_dequantize_low_nibble_is_even_k():
    row = ref.dequantize([[0x72] + [0] * 7], [[0x38]], 2.0)[0]
    assert row[:2] == [1.0 * 2.0, 6.0 * 2.0] and len(row) == 16
