"""The most bytes a KV state of n positions can take, from a model's metadata alone."""

from __future__ import annotations

from llamay.kv.seqstate import CELL_ENTRY_MAX, MARGIN, KvShape, kv_shape, row_bytes


def meta_of(values: dict[str, str]) -> object:
    return lambda key: values.get(key)


def test_rows_follow_the_kv_heads_and_the_cache_type() -> None:
    meta = {"llama.block_count": "2", "llama.attention.head_count": "8", "llama.attention.head_count_kv": "2"}
    shape = kv_shape(meta_of(meta), "llama", 512, "f16")  # type: ignore[arg-type]
    assert shape.layer_bytes == (2 * (2 * 64 * 2),) * 2  # K and V: 2 heads of 64 at 2 bytes
    q8 = kv_shape(meta_of(meta), "llama", 512, "q8_0")  # type: ignore[arg-type]
    assert q8.layer_bytes == (2 * (128 // 32 * 34),) * 2
    assert row_bytes("q8_0", 33) == 2 * 34 and row_bytes("f32", 3) == 12


def test_per_layer_heads_explicit_lengths_and_missing_values() -> None:
    meta = {
        "x.block_count": "3",
        "x.attention.head_count": "4",
        "x.attention.head_count_kv": "[1, 0, 4]",
        "x.attention.key_length": "96",
        "x.attention.value_length": "64",
    }
    shape = kv_shape(meta_of(meta), "x", 256, "f32")  # type: ignore[arg-type]
    assert shape.layer_bytes == (4 * 160, 0, 4 * 4 * 160)
    # Without a head count for the KV, every head has one; without a layer count, 256 layers.
    wide = kv_shape(meta_of({}), "x", 64, "f16")  # type: ignore[arg-type]
    assert wide.layer_bytes == (2 * 64 * 2,) * 256


def test_the_bound_grows_by_one_position_at_a_time() -> None:
    shape = KvShape((100, 300))
    step = shape.max_state(11) - shape.max_state(10)
    assert step == 400 + 2 * CELL_ENTRY_MAX
    assert shape.max_state(0) > MARGIN
