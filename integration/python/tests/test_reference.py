"""The plain-Python references of tests/reference.py on hand-worked cases (no torch), so the
yardstick of test_generic.py is itself checked wherever the tests run."""
import math

import reference as ref
from sm70ops import generic


def test_rows_of_places_rows_at_the_end_of_their_context():
    assert ref.rows_of([0, 2, 3], [5, 1]) == [(0, 3, 4), (0, 4, 5), (1, 0, 1)]


def test_topk_ties_go_to_the_lower_position():
    assert ref.topk([1.0, 3.0, 3.0, 2.0, 3.0], 2) == [1, 2]
    assert ref.topk([0.0, 0.0, 0.0], 5) == [0, 1, 2]


def test_expand_sorts_pages_and_sets_bits():
    pages, masks = ref.expand([3, 64, 65, 63, 200])
    assert pages == [0, 1, 3]
    assert masks == [(1 << 3) | (1 << 63), 0b11, 1 << (200 - 192)]


def test_index_scores_on_one_page():
    q = [[[1.0, 0.0], [0.0, -1.0]]]  # one row, two heads, dim 2
    k = [[[2.0, 1.0], [-1.0, 3.0]] + [[0.0, 0.0]] * 62]
    scores = ref.index_scores(q, [[0.5, 2.0]], k, [0, 1], [2], [[0]])
    assert scores == [[0.5 * 2.0 + 2.0 * 0.0, 0.5 * 0.0 + 2.0 * 0.0]]


def test_selected_positions_apply_the_causal_bound_once():
    assert ref.selected_positions([1, 1, 0], [0b101, 0b1, 1 << 63], 3, 66) == [63, 64]


def test_attend_empty_and_single_key():
    assert ref.attend([1.0], [], [], 1.0) == ([0.0], -math.inf)
    o, lse = ref.attend([1.0, 2.0], [[3.0, 0.0]], [[5.0, 7.0]], 0.5)
    assert o == [5.0, 7.0] and lse == 1.5


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
