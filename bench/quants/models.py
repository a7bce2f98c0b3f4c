"""The benchmark's models: Llama-3.2-shaped random weights with Llama 3's tokenizer, quantised by
llama.cpp's own quantiser, cached between runs; and what a decoded token reads of them.

Random weights make no sense as text but cost exactly what trained ones do: the same tensors,
shapes, types and kernels. Llama 3.2 1B and 3B tie the output matrix to the token embeddings,
so these do too (llama.cpp then keeps that matrix in Q6_K, or Q8_0 in a Q8_0 file).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import gguf
import numpy as np

from llamay.testing import quantize_gguf

from ..serve.llama_server import VERSION

__all__ = ["SHAPES", "Shape", "bytes_per_token", "cache_dir", "ensure_models", "llama3_vocab"]

VOCAB_MEMBER = "vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf"  # Llama 3's tokenizer


@dataclass(frozen=True)
class Shape:
    """A Llama architecture's sizes."""

    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int


SHAPES = {
    "1b": Shape(n_embd=2048, n_layer=16, n_head=32, n_head_kv=8, n_ff=8192),  # Llama 3.2 1B
    "3b": Shape(n_embd=3072, n_layer=28, n_head=24, n_head_kv=8, n_ff=8192),  # Llama 3.2 3B
}


def cache_dir() -> Path:
    """Where models are kept between runs (beside the engine's wheel cache)."""
    root = Path(os.environ.get("LLAMAY_WHEEL_CACHE", Path.home() / ".cache/llamay/wheels")).parent
    return root / "bench-models"


def llama3_vocab() -> Path:
    """Llama 3's tokenizer as a vocab-only GGUF, taken once from the llama-cpp-python source
    package (`pip download`) into the cache."""
    out = cache_dir() / "ggml-vocab-llama-bpe.gguf"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-quants-") as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"llama-cpp-python=={VERSION}",
                "-d",
                tmp,
            ],  # fmt: skip
            check=True,
        )
        with tarfile.open(Path(tmp) / f"llama_cpp_python-{VERSION}.tar.gz") as tar:
            member = tar.extractfile(f"llama_cpp_python-{VERSION}/{VOCAB_MEMBER}")
            if member is None:
                raise RuntimeError(f"{VOCAB_MEMBER} is not in llama-cpp-python {VERSION}")
            part = out.with_suffix(".part")
            part.write_bytes(member.read())
            part.replace(out)
    return out


def _copy_tokenizer(writer: gguf.GGUFWriter, vocab: Path) -> int:
    """Copy every tokenizer.* key of `vocab` into `writer`; returns the vocabulary size."""
    reader = gguf.GGUFReader(vocab)
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = field.contents()
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, value)
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(value)
        else:
            writer.add_key_value(key, value, field.types[0])
    return n_vocab


def _tensors(shape: Shape, n_vocab: int) -> list[tuple[str, tuple[int, ...], float]]:
    """(name, numpy shape (out, in), scale) of every tensor; matrices get N(0, 1/in) weights."""
    head = shape.n_embd // shape.n_head
    kv = shape.n_head_kv * head
    out: list[tuple[str, tuple[int, ...], float]] = [("token_embd.weight", (n_vocab, shape.n_embd), 1.0)]
    for i in range(shape.n_layer):
        e, f = shape.n_embd, shape.n_ff
        out += [
            (f"blk.{i}.attn_norm.weight", (e,), 0.0),
            (f"blk.{i}.attn_q.weight", (e, e), e**-0.5),
            (f"blk.{i}.attn_k.weight", (kv, e), e**-0.5),
            (f"blk.{i}.attn_v.weight", (kv, e), e**-0.5),
            (f"blk.{i}.attn_output.weight", (e, e), e**-0.5),
            (f"blk.{i}.ffn_norm.weight", (e,), 0.0),
            (f"blk.{i}.ffn_gate.weight", (f, e), e**-0.5),
            (f"blk.{i}.ffn_up.weight", (f, e), e**-0.5),
            (f"blk.{i}.ffn_down.weight", (e, f), f**-0.5),
        ]
    out.append(("output_norm.weight", (shape.n_embd,), 0.0))
    return out


def write_random_llama(path: Path, shape: Shape, vocab: Path, seed: int = 0) -> Path:
    """An F16 llama GGUF of `shape` with seeded random weights (norms: ones) and `vocab`'s
    tokenizer, written tensor by tensor (a 3B model does not fit in memory twice)."""
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(f"random-llama-{shape.n_embd}x{shape.n_layer}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    n_vocab = _copy_tokenizer(writer, vocab)
    writer.add_vocab_size(n_vocab)
    writer.add_context_length(131072)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(shape.n_embd // shape.n_head)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    specs = _tensors(shape, n_vocab)
    for name, dims, scale in specs:
        dtype = np.float32 if scale == 0.0 else np.float16
        writer.add_tensor_info(name, dims, np.dtype(dtype), int(np.prod(dims)) * np.dtype(dtype).itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _name, dims, scale in specs:
        if scale == 0.0:
            writer.write_tensor_data(np.ones(dims, dtype=np.float32))
            continue
        data = np.empty(dims, dtype=np.float16)
        for r in range(0, dims[0], 4096):  # a few rows at a time: bounded float32 scratch
            data[r : r + 4096] = (
                rng.standard_normal((min(4096, dims[0] - r), dims[1]), dtype=np.float32) * scale
            )
        writer.write_tensor_data(data)
    writer.close()
    return path


def ensure_models(shape_name: str, quants: list[str], log: object = None) -> dict[str, Path]:
    """The `shape_name` model in each of `quants`, written and quantised on first use (the F16
    source is removed once every quantisation of it exists). Files are named by a digest of
    the shape and the writer's seed, so a changed shape makes new ones."""
    shape = SHAPES[shape_name]
    key = hashlib.sha256(repr(sorted(asdict(shape).items())).encode()).hexdigest()[:8]
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    paths = {q: root / f"llama-{shape_name}-{key}-{q}.gguf" for q in quants}
    missing = [q for q, p in paths.items() if not p.is_file()]
    if missing:
        f16 = root / f"llama-{shape_name}-{key}-F16.gguf"
        if not f16.is_file():
            _say(f"writing the {shape_name} random-weight model (F16)")
            write_random_llama(f16.with_suffix(".part"), shape, llama3_vocab()).replace(f16)
        for q in missing:
            _say(f"quantising the {shape_name} model to {q}")
            quantize_gguf(f16, paths[q].with_suffix(".part"), q).replace(paths[q])
        f16.unlink()
    return paths


def bytes_per_token(path: Path) -> int:
    """Bytes of weights one decoded token reads: every matrix a layer multiplies by and the
    output matrix (the token embedding when it is tied), not the embedding rows looked up."""
    reader = gguf.GGUFReader(path)
    names = {t.name: int(t.n_bytes) for t in reader.tensors}
    total = sum(n for name, n in names.items() if name != "token_embd.weight")
    if "output.weight" not in names:
        total += names.get("token_embd.weight", 0)
    return total


def _say(text: str) -> None:
    print(f"bench.quants: {text}", file=sys.stderr, flush=True)
