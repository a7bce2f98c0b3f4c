"""Converted tiny BERT GGUFs in the real llama.cpp, against a numpy forward pass of the HF weights.

The embedding model must give the HF model's pooled vector, and the cross-encoder the HF model's
score: ``classifier(tanh(pooler(h[CLS])))``.  The score check also shows that leaving the pooler
out (what llama.cpp's own converter does) would be caught.

llama.cpp gives every token segment (token type) 0, where HF gives the second text of a pair
segment 1; the reference here uses segment 0 throughout, the input llama.cpp actually runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import llama_cpp
import numpy as np
import pytest
from safetensors.numpy import load_file

from llamay.convert import Dtype, convert_bert
from llamay.testing.tiny_bert import tiny_bert_vocab, write_tiny_bert


@llama_cpp.llama_log_callback
def _quiet(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """Drops llama.cpp's log lines (module-level: llama.cpp keeps the pointer)."""


llama_cpp.llama_log_set(_quiet, ctypes.c_void_p(0))
llama_cpp.llama_backend_init()

TEXTS = [
    "how do I fork a context?",
    "Context forking and copy-on-write pages",
    "the best route from Pune to Mumbai",
    "Hello world",
]
QUERY = "how do I fork a context?"
DOCS = ["Context forking and copy-on-write pages", "the best route from Pune to Mumbai", "hello"]
#: Agreement with the fp32 reference: exact-ish for f32/f16, looser for 8-bit weights.
EMBED_COS = {"f32": 0.999, "f16": 0.999, "q8_0": 0.995}
SCORE_TOL = {"f32": 1e-2, "f16": 1e-2, "q8_0": 5e-2}


# ---------------------------------------------------------------- numpy reference


def _layer_norm(w: dict[str, np.ndarray], name: str, x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[f"{name}.weight"] + w[f"{name}.bias"]


def _linear(w: dict[str, np.ndarray], name: str, x: np.ndarray) -> np.ndarray:
    return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]


_erf = np.vectorize(math.erf)


def _gelu(x: np.ndarray) -> np.ndarray:
    """HF's "gelu": the exact erf form (llama.cpp runs a tanh approximation of it)."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def hf_hidden(w: dict[str, np.ndarray], ids: Sequence[int], n_head: int = 4) -> np.ndarray:
    """Last hidden states (tokens, hidden) of BertModel for one sequence, all segments 0."""
    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][list(ids)]
    x = x + w["embeddings.position_embeddings.weight"][:n] + w["embeddings.token_type_embeddings.weight"][0]
    x = _layer_norm(w, "embeddings.LayerNorm", x)
    n_layer = len({k.split(".")[2] for k in w if k.startswith("encoder.layer.")})
    for i in range(n_layer):
        p = f"encoder.layer.{i}."
        # (heads, tokens, head_dim) for each of query, key, value.
        q, k, v = (
            _linear(w, p + f"attention.self.{part}", x).reshape(n, n_head, -1).transpose(1, 0, 2)
            for part in ("query", "key", "value")
        )
        att = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        mixed = (att @ v).transpose(1, 0, 2).reshape(n, -1)
        x = _layer_norm(
            w, p + "attention.output.LayerNorm", x + _linear(w, p + "attention.output.dense", mixed)
        )
        ff = _linear(w, p + "output.dense", _gelu(_linear(w, p + "intermediate.dense", x)))
        x = _layer_norm(w, p + "output.LayerNorm", x + ff)
    return x


def hf_score(w: dict[str, np.ndarray], ids: Sequence[int], *, pooler: bool = True) -> float:
    """BertForSequenceClassification's logit; `pooler=False` is the head without the pooler."""
    enc = {k.removeprefix("bert."): v for k, v in w.items()}
    h = hf_hidden(enc, ids)[0]
    if pooler:
        h = np.tanh(h @ enc["pooler.dense.weight"].T + enc["pooler.dense.bias"])
    return float((h @ w["classifier.weight"].T + w["classifier.bias"])[0])


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


# ---------------------------------------------------------------- llama.cpp side


class Encoder:
    """A GGUF encoder in llama.cpp: embeddings context, pooling from the file, n_ubatch = n_batch
    (a non-causal model must see each sequence whole in one ubatch)."""

    def __init__(self, path: Path, n_ctx: int = 64, n_seq: int = 4) -> None:
        self.model = llama_cpp.llama_model_load_from_file(
            str(path).encode(), llama_cpp.llama_model_default_params()
        )
        assert self.model, f"llama.cpp could not load {path}"
        params = llama_cpp.llama_context_default_params()
        params.embeddings = True
        params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = n_ctx, n_ctx, n_ctx, n_seq
        self.ctx = llama_cpp.llama_init_from_model(self.model, params)
        assert self.ctx, "llama.cpp could not create a context"
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.pooling = llama_cpp.llama_pooling_type(self.ctx)

    def close(self) -> None:
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)

    def tokenize(self, text: str, add_special: bool) -> list[int]:
        data = text.encode()
        out = (llama_cpp.llama_token * (len(data) + 2))()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), out, len(out), add_special, False)
        assert n >= 0
        return list(out[:n])

    def pair(self, query: str, doc: str) -> list[int]:
        """[CLS] query [SEP] doc [SEP], from the vocabulary's BOS and EOS (BERT: [CLS], [SEP])."""
        bos, eos = llama_cpp.llama_vocab_bos(self.vocab), llama_cpp.llama_vocab_eos(self.vocab)
        return [bos, *self.tokenize(query, False), eos, *self.tokenize(doc, False), eos]

    def run(self, sequences: Sequence[Sequence[int]], width: int) -> list[np.ndarray]:
        """All sequences in one batch (one llama.cpp sequence each); `width` floats per sequence."""
        n = sum(len(s) for s in sequences)
        batch = llama_cpp.llama_batch_init(n, 0, 1)
        try:
            i = 0
            for seq, tokens in enumerate(sequences):
                for pos, token in enumerate(tokens):
                    batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
                    batch.seq_id[i][0], batch.logits[i] = seq, True
                    i += 1
            batch.n_tokens = n
            assert llama_cpp.llama_decode(self.ctx, batch) == 0
            return [
                np.ctypeslib.as_array(llama_cpp.llama_get_embeddings_seq(self.ctx, s), shape=(width,)).copy()
                for s in range(len(sequences))
            ]
        finally:
            llama_cpp.llama_batch_free(batch)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-bert-hf")
    return {
        "mean": write_tiny_bert(root / "mean"),
        "cls": write_tiny_bert(root / "cls", pooling="cls", seed=1),
        "rank": write_tiny_bert(root / "rank", classifier=True, seed=2),
    }


@pytest.fixture(scope="module", params=["f32", "f16", "q8_0"])
def dtype(request: pytest.FixtureRequest) -> Dtype:
    value: Dtype = request.param
    return value


@contextlib.contextmanager
def converted(folders: dict[str, Path], kind: str, dtype: Dtype, tmp: Path) -> Iterator[Encoder]:
    """The `kind` folder converted to `dtype` and loaded in llama.cpp, freed on exit."""
    result = convert_bert(folders[kind], tmp / f"{kind}-{dtype}.gguf", dtype=dtype)
    e = Encoder(result.path)
    try:
        yield e
    finally:
        e.close()


@pytest.fixture()
def mean_encoder(folders: dict[str, Path], dtype: Dtype, tmp_path: Path) -> Iterator[Encoder]:
    with converted(folders, "mean", dtype, tmp_path) as e:
        yield e


@pytest.fixture()
def rank_encoder(folders: dict[str, Path], dtype: Dtype, tmp_path: Path) -> Iterator[Encoder]:
    with converted(folders, "rank", dtype, tmp_path) as e:
        yield e


def test_tokenizer_matches_the_vocabulary(folders: dict[str, Path], tmp_path: Path) -> None:
    vocab = tiny_bert_vocab()
    ids = [vocab.index(t) for t in ("[CLS]", "hello", "world", "fox", "##e", "##s", ",", "!", "[SEP]")]
    with converted(folders, "mean", "f16", tmp_path) as e:
        # Upper case folds to lower case, unknown words split into pieces, punctuation stands alone.
        assert e.tokenize("Hello WORLD foxes,!", True) == ids


def test_mean_embedding_matches_hf(folders: dict[str, Path], mean_encoder: Encoder, dtype: Dtype) -> None:
    assert mean_encoder.pooling == llama_cpp.LLAMA_POOLING_TYPE_MEAN
    w = load_file(str(folders["mean"] / "model.safetensors"))
    seqs = [mean_encoder.tokenize(t, True) for t in TEXTS]
    for ids, got in zip(seqs, mean_encoder.run(seqs, 32), strict=True):
        assert ids[0] == 2 and ids[-1] == 3  # [CLS] ... [SEP]
        assert cosine(got, hf_hidden(w, ids).mean(0)) >= EMBED_COS[dtype]


def test_cls_embedding_matches_hf(folders: dict[str, Path], tmp_path: Path) -> None:
    w = load_file(str(folders["cls"] / "model.safetensors"))
    with converted(folders, "cls", "f16", tmp_path) as e:
        assert e.pooling == llama_cpp.LLAMA_POOLING_TYPE_CLS
        seqs = [e.tokenize(t, True) for t in TEXTS]
        for ids, got in zip(seqs, e.run(seqs, 32), strict=True):
            assert cosine(got, hf_hidden(w, ids)[0]) >= EMBED_COS["f16"]


def test_rank_score_matches_hf_with_the_pooler(
    folders: dict[str, Path], rank_encoder: Encoder, dtype: Dtype
) -> None:
    assert rank_encoder.pooling == llama_cpp.LLAMA_POOLING_TYPE_RANK
    assert llama_cpp.llama_model_n_cls_out(rank_encoder.model) == 1
    w = load_file(str(folders["rank"] / "model.safetensors"))
    pairs = [rank_encoder.pair(QUERY, d) for d in DOCS]
    scores = [float(s[0]) for s in rank_encoder.run(pairs, 1)]
    expected = [hf_score(w, ids) for ids in pairs]
    without_pooler = [hf_score(w, ids, pooler=False) for ids in pairs]
    for got, want, dropped in zip(scores, expected, without_pooler, strict=True):
        assert got == pytest.approx(want, abs=SCORE_TOL[dtype])
        # Dropping the pooler would have been far outside the tolerance: the check has teeth.
        assert abs(dropped - want) > 0.3
    # The scores differ between documents, so a constant output would not pass either.
    assert max(expected) - min(expected) > 0.3
