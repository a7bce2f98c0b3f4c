"""A tiny Gemma 3 GGUF: sliding-window attention (SWA) with a window of a few tokens, so tests
reach past it in a few dozen positions.

Gemma 2 and 3 (and other models llama.cpp runs with an interleaved SWA KV cache) keep two
caches: one for the layers that see the whole context and one for the layers that see only the
last `sliding_window` positions. The weights are seeded random (no chain of successors as in
``write_tiny_llama``): tests of this model compare logits, not text.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from llamay.testing.tiny_gguf import add_tiny_tokenizer, tiny_vocab

__all__ = ["write_tiny_gemma3"]


def write_tiny_gemma3(
    path: str | Path,
    *,
    seed: int = 0,
    n_embd: int = 256,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 512,
    sliding_window: int = 16,
    swa_pattern: int = 2,
) -> Path:
    """Write a tiny f32 "gemma3" GGUF to `path` and return it as a Path. Layers whose index
    modulo `swa_pattern` is below `swa_pattern - 1` attend over the last `sliding_window`
    positions only (with the defaults: layer 0), the others over everything. The output
    matrix is tied to the token embeddings, as in Gemma 3. The same arguments give the same
    bytes."""
    vocab = tiny_vocab()
    rng = np.random.default_rng(seed)
    head_dim = n_embd // n_head
    f32 = np.float32

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(f32)

    path = Path(path)
    writer = gguf.GGUFWriter(path, "gemma3")
    writer.add_name("tiny-gemma3")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1e6)
    writer.add_sliding_window(sliding_window)
    writer.add_sliding_window_pattern(swa_pattern)
    add_tiny_tokenizer(writer, vocab)

    ones = np.ones(n_embd, dtype=f32)
    writer.add_tensor("token_embd.weight", rng.standard_normal((vocab.n_vocab, n_embd)).astype(f32))
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        writer.add_tensor(f"blk.{i}.attn_q.weight", matrix(n_head * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", matrix(n_head_kv * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", matrix(n_head_kv * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", matrix(n_embd, n_head * head_dim))
        writer.add_tensor(f"blk.{i}.attn_q_norm.weight", np.ones(head_dim, dtype=f32))
        writer.add_tensor(f"blk.{i}.attn_k_norm.weight", np.ones(head_dim, dtype=f32))
        writer.add_tensor(f"blk.{i}.post_attention_norm.weight", ones)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", matrix(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", matrix(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", matrix(n_embd, n_ff))
        writer.add_tensor(f"blk.{i}.post_ffw_norm.weight", ones)
    writer.add_tensor("output_norm.weight", ones)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
