"""Vector helpers of llamay.embed: normalisation, `dimensions`, base64, the similarity table."""

from __future__ import annotations

import base64
import struct

import numpy as np
import pytest

from llamay.embed.vectors import (
    from_base64,
    l2_normalize,
    label,
    shorten,
    similarity_matrix,
    similarity_table,
    to_base64,
)

TEXTS = [
    "how do I fork a context",
    "context forking and copy-on-write pages",
    "the best route from Pune to Mumbai",
]
MATRIX = np.array([[1.0, 0.630, -0.038], [0.630, 1.0, -0.023], [-0.038, -0.023, 1.0]])
TABLE = (
    "                                        0      1      2\n"
    "how do I fork a context             1.000  0.630 -0.038\n"
    "context forking and copy-on-wri…    0.630  1.000 -0.023\n"
    "the best route from Pune to Mum…   -0.038 -0.023  1.000\n"
)


def test_similarity_table_matches_the_documented_layout() -> None:
    assert similarity_table(TEXTS, MATRIX) == TABLE


def test_similarity_table_pads_to_the_widest_short_label() -> None:
    out = similarity_table(["a", "bcd"], np.array([[1.0, 0.5], [0.5, 1.0]]))
    assert out == "           0      1\na      1.000  0.500\nbcd    0.500  1.000\n"


def test_labels_are_one_line_and_cut_to_32_characters() -> None:
    assert label("short") == "short"
    assert label("a\n  b\tc") == "a b c"
    exact = "x" * 32
    assert label(exact) == exact
    cut = label("y" * 40)
    assert len(cut) == 32 and cut.endswith("…") and cut.startswith("y" * 31)


def test_similarity_matrix_is_cosine() -> None:
    v = np.array([[3.0, 4.0], [4.0, 3.0], [-3.0, -4.0]], dtype=np.float32)
    m = similarity_matrix(v)
    assert m[0, 1] == pytest.approx(24 / 25, abs=1e-6)
    assert m[0, 2] == pytest.approx(-1.0, abs=1e-6)
    assert np.allclose(np.diag(m), 1.0, atol=1e-6)


def test_l2_normalize_unit_rows_and_zero_rows_stay_zero() -> None:
    v = l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert v.dtype == np.float32
    assert np.allclose(v, [[0.6, 0.8], [0.0, 0.0]])


def test_shorten_keeps_the_first_components_renormalised() -> None:
    v = l2_normalize(np.array([[1.0, 2.0, 2.0, 4.0]]))
    s = shorten(v, 3)
    assert s.shape == (1, 3)
    assert np.allclose(s, [[1 / 3, 2 / 3, 2 / 3]], atol=1e-6)
    assert shorten(v, None) is v and shorten(v, 4) is v


def test_base64_is_little_endian_float32() -> None:
    v = np.array([1.0, -0.5, 0.25], dtype=np.float32)
    text = to_base64(v)
    assert base64.b64decode(text) == struct.pack("<3f", 1.0, -0.5, 0.25)
    assert np.array_equal(from_base64(text), v)
