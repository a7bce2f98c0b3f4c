r"""Tiny random-weight GGUFs of the model families people run, each with its family's real
chat template and real tokenizer, read from the llama.cpp source the engine is built from.

llama.cpp keeps ~70 real chat templates (``models/templates/*.jinja``) and the tokenizers of
the main families (``models/ggml-vocab-*.gguf``: vocabulary, merges, pre-tokenizer) in its
source tree. ``setup.sh`` keeps a copy of both next to the engine's wheel cache
(``llama_cpp_models()``), so tests reach them without building anything.

``write_family(family, path)`` writes a "llama" model with that tokenizer and template and
random weights. Its text is noise; its template, its tokens, its tool-call dialect, its think
markers and everything the server guarantees (a constrained call, a schema-valid object, a
closed think block) are real. Where a family's own tokenizer is not in llama.cpp's tree
(``FAMILIES[...].vocab_note`` says so: Mistral's Tekken, gpt-oss's o200k, Kimi, GLM, MiniMax,
Granite, LFM2, Gemma 2, ...) the closest one there stands in, and the family's special tokens
that vocabulary lacks are added as control tokens: every token its template writes in
special-token spelling (``<|...|>``, ``<｜...｜>``, ``[UPPER_CASE]``, ``<think>``, ``<tool_call>``
...), plus the ``extra`` tokens listed per family.

The weights: one layer, tiny widths, output rows random except for one "bias" channel
(embedding channel 0 is a constant 1) that gives every control token but the end of turn a
large negative logit, so free text never emits a marker on its own: what the server does about
markers (force a close, trigger a call) is all that puts them in the output. The end of turn
is one token among ~150k in free text, and one of a few where a constraint allows it (after
a call, so parallel calls end). A family's ``opener`` is wired in as a chain of successors.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from llamay.testing._gguf_raw import (
    BOOL,
    FLOAT32,
    INT32,
    STRING,
    UINT32,
    RawValue,
    number_array,
    read_kv,
    scalar,
    string_array,
    write_gguf,
)

__all__ = ["FAMILIES", "Family", "llama_cpp_models", "llama_cpp_template", "family_template", "write_family"]

LLAMA_CPP_VERSION = "0.3.36"  # setup.sh's LLAMA_CPP_VERSION

# A token a template writes in special-token spelling.
_SPECIAL = re.compile(
    r"<\|[^|<>\s'\"]{1,40}\|>|<｜[^｜]{1,40}｜>|\[/?[A-Z_]{3,30}\]"
    r"|</?(?:think|tool_call|tool_response|tools|arg_key|arg_value|minimax:tool_call)>"
)
_CONTROL_BIAS = -12.0  # logit offset of control tokens: never chosen unless forced


@dataclass(frozen=True)
class Family:
    """One model family: its template file (a stem in ``models/templates``), the vocabulary
    it uses (a ``ggml-vocab-<vocab>.gguf``), its BOS and end-of-turn tokens (text), and
    control tokens to add beyond those its template spells. ``thinks``: the model thinks
    before answering (its template opens the think block, or the weights do: ``opener``).
    ``off_switch``: the template closes the block when ``enable_thinking`` is false.
    ``vocab_note``: why a stand-in vocabulary, when it is one. ``opener``: the token that ends
    the generation prompt, then the tokens the model writes to open its think block, which
    the weights make each one's successor (vocabulary spellings: "Ċ" is a newline in a
    byte-level BPE)."""

    name: str
    template: str
    vocab: str
    eos: str
    bos: str | None = None
    extra: tuple[str, ...] = ()
    thinks: bool = False
    vocab_note: str = ""
    opener: tuple[str, ...] = ()
    off_switch: bool = False


_LLAMA = "llama-bpe"
_QWEN = "qwen2"


def _f(*args: Any, **kwargs: Any) -> Family:
    return Family(*args, **kwargs)


FAMILIES: dict[str, Family] = {f.name: f for f in (
    _f("llama-3.1", "meta-llama-Llama-3.1-8B-Instruct", _LLAMA, "<|eot_id|>", extra=("<|eom_id|>",)),
    _f("llama-3.2", "meta-llama-Llama-3.2-3B-Instruct", _LLAMA, "<|eot_id|>", extra=("<|python_tag|>", "<|eom_id|>")),
    _f("llama-3.3", "meta-llama-Llama-3.3-70B-Instruct", _LLAMA, "<|eot_id|>", extra=("<|eom_id|>",)),
    _f("hermes-2-pro", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", _LLAMA, "<|im_end|>"),
    _f("hermes-3", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", _LLAMA, "<|im_end|>"),
    _f("qwen-2.5", "Qwen-Qwen2.5-7B-Instruct", _QWEN, "<|im_end|>"),
    _f("qwen3", "Qwen-Qwen3-0.6B", _QWEN, "<|im_end|>", thinks=True, opener=("Ċ", "<think>"), off_switch=True),
    _f("qwq", "Qwen-QwQ-32B", _QWEN, "<|im_end|>", thinks=True, off_switch=True),
    _f("qwen3-coder", "Qwen3-Coder", _QWEN, "<|im_end|>"),
    _f("qwen-3.5", "Qwen3.5-4B", "qwen35", "<|im_end|>", thinks=True, off_switch=True),
    _f("deepseek-r1-llama", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", _LLAMA, "<｜end▁of▁sentence｜>",
       bos="<｜begin▁of▁sentence｜>", thinks=True),
    _f("deepseek-r1-qwen", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", _QWEN, "<｜end▁of▁sentence｜>",
       bos="<｜begin▁of▁sentence｜>", thinks=True),
    _f("deepseek-v3.1", "deepseek-ai-DeepSeek-V3.1", "deepseek-llm", "<｜end▁of▁sentence｜>", thinks=True,
       off_switch=True,
       vocab_note="DeepSeek LLM's vocabulary stands in for V3's (same family of byte-level BPE)"),
    _f("mistral-nemo", "mistralai-Mistral-Nemo-Instruct-2407", _LLAMA, "</s>", bos="<s>", extra=("<s>", "</s>"),
       vocab_note="Llama 3's vocabulary stands in for Tekken (not in llama.cpp's tree)"),
    _f("mistral-small-3.2", "Mistral-Small-3.2-24B-Instruct-2506", _LLAMA, "</s>", bos="<s>", extra=("<s>", "</s>"),
       vocab_note="Llama 3's vocabulary stands in for Tekken"),
    _f("devstral", "unsloth-mistral-Devstral-Small-2507", _LLAMA, "</s>", bos="<s>", extra=("<s>", "</s>"),
       vocab_note="Llama 3's vocabulary stands in for Tekken"),
    _f("ministral-reasoning", "mistralai-Ministral-3-14B-Reasoning-2512", _LLAMA, "</s>", bos="<s>",
       extra=("<s>", "</s>"), thinks=True, opener=("[/INST]", "[THINK]"),
       vocab_note="Llama 3's vocabulary stands in for Tekken"),
    _f("phi-3.5", "microsoft-Phi-3.5-mini-instruct", "phi-3", "<|end|>"),
    _f("gemma-2", "google-gemma-2-2b-it", "gemma-4", "<end_of_turn>", bos="<bos>",
       extra=("<start_of_turn>", "<end_of_turn>"), vocab_note="Gemma 4's vocabulary stands in for Gemma 2's"),
    _f("gemma-4", "google-gemma-4-31B-it", "gemma-4", "<turn|>", bos="<bos>"),
    _f("command-r-plus", "CohereForAI-c4ai-command-r-plus-tool_use", "command-r", "<|END_OF_TURN_TOKEN|>",
       bos="<BOS_TOKEN>"),
    _f("command-r7b", "CohereForAI-c4ai-command-r7b-12-2024-tool_use", "command-r", "<|END_OF_TURN_TOKEN|>",
       bos="<BOS_TOKEN>", vocab_note="Command-R's vocabulary stands in for R7B's"),
    _f("granite-3.3", "ibm-granite-granite-3.3-2B-Instruct", "starcoder", "<|end_of_text|>",
       vocab_note="StarCoder's vocabulary stands in for Granite's (Granite's derives from it)"),
    _f("granite-4", "ibm-granite-granite-4.0", "starcoder", "<|end_of_text|>",
       vocab_note="StarCoder's vocabulary stands in for Granite's"),
    _f("functionary-3.1", "meetkai-functionary-medium-v3.1", _LLAMA, "<|eot_id|>",
       extra=("<|eom_id|>", "<|python_tag|>")),
    _f("functionary-3.2", "meetkai-functionary-medium-v3.2", _LLAMA, "<|eot_id|>"),
    _f("firefunction-2", "fireworks-ai-llama-3-firefunction-v2", _LLAMA, "<|eot_id|>"),
    _f("smollm3", "HuggingFaceTB-SmolLM3-3B", _LLAMA, "<|im_end|>", thinks=True, opener=("Ċ", "<think>"),
       off_switch=True,
       vocab_note="Llama 3's vocabulary stands in for SmolLM3's (derived from it)"),
    _f("gpt-oss", "openai-gpt-oss-120b", _LLAMA, "<|return|>", extra=("<|constrain|>", "<|call|>"), thinks=True,
       opener=("assistant", "<|channel|>", "analysis", "<|message|>"),
       vocab_note="Llama 3's vocabulary stands in for o200k_harmony"),
    _f("kimi-k2", "moonshotai-Kimi-K2", _QWEN, "<|im_end|>", vocab_note="Qwen 2's vocabulary stands in for Kimi's"),
    _f("glm-4.6", "GLM-4.6", _QWEN, "<|user|>", extra=("<|endoftext|>", "[gMASK]", "<sop>"), thinks=True,
       opener=("<|assistant|>", "<think>"), off_switch=True,
       vocab_note="Qwen 2's vocabulary stands in for GLM's"),
    _f("minimax-m2", "MiniMax-M2", _QWEN, "[e~[", extra=("]~!b[", "]~b]", "[e~["), thinks=True,
       vocab_note="Qwen 2's vocabulary stands in for MiniMax's"),
    _f("lfm2", "LFM2-8B-A1B", _LLAMA, "<|im_end|>",
       extra=("<|startoftext|>", "<|tool_call_start|>", "<|tool_call_end|>"),
       vocab_note="Llama 3's vocabulary stands in for LFM2's"),
)}  # fmt: skip


def llama_cpp_models() -> Path:
    """The folder holding llama.cpp's ``templates/`` and ``ggml-vocab-*.gguf``:
    ``$LLAMAY_LLAMA_CPP_MODELS``, else the copy setup.sh keeps beside the wheel cache.
    Raises FileNotFoundError (naming the fix) when it is missing."""
    env = os.environ.get("LLAMAY_LLAMA_CPP_MODELS")
    if env:
        root = Path(env)
    else:
        wheels = Path(os.environ.get("LLAMAY_WHEEL_CACHE", Path.home() / ".cache/llamay/wheels"))
        root = wheels / f"llama.cpp-{LLAMA_CPP_VERSION}-models"
    if not (root / "templates").is_dir():
        raise FileNotFoundError(
            f"llama.cpp's templates and vocabularies are not in {root}: run ./setup.sh "
            "(or point LLAMAY_LLAMA_CPP_MODELS at the models/ folder of llama.cpp's source)"
        )
    return root


def llama_cpp_template(stem: str) -> Path:
    """The path of one of llama.cpp's chat templates, by its file's stem."""
    return llama_cpp_models() / "templates" / f"{stem}.jinja"


def family_template(family: Family) -> str:
    """The family's chat template text."""
    return llama_cpp_template(family.template).read_text(encoding="utf-8")


@cache
def _vocab(name: str) -> dict[str, RawValue]:
    return {
        k: v
        for k, v in read_kv(llama_cpp_models() / f"ggml-vocab-{name}.gguf").items()
        if k.startswith("tokenizer.ggml.")
    }


@cache
def _tokens(name: str) -> tuple[list[str], list[int]]:
    vocab = _vocab(name)
    types = vocab["tokenizer.ggml.token_type"]
    count = types.count
    return vocab["tokenizer.ggml.tokens"].strings(), list(struct.unpack_from(f"<{count}i", types.data, 12))


def added_tokens(family: Family) -> list[str]:
    """The control tokens ``write_family`` adds: what the template spells as special tokens
    and the family's ``extra``, less what the vocabulary already has, in a stable order."""
    have = set(_tokens(family.vocab)[0])
    wanted = list(family.extra) + sorted(set(_SPECIAL.findall(family_template(family))))
    for t in (family.eos, family.bos):
        if t is not None:
            wanted.append(t)
    out: list[str] = []
    for t in wanted:
        if t not in have and t not in out:
            out.append(t)
    return out


def write_family(
    family: Family | str, path: str | Path, *, seed: int = 0, n_embd: int = 32, n_ctx_train: int = 4096
) -> Path:
    """Write ``family``'s tiny model to ``path`` (same arguments, same bytes) and return it."""
    fam = FAMILIES[family] if isinstance(family, str) else family
    vocab = _vocab(fam.vocab)
    tokens, types = _tokens(fam.vocab)
    added = added_tokens(fam)
    ids = {t: i for i, t in enumerate(tokens)} | {t: len(tokens) + i for i, t in enumerate(added)}
    types = types + [int(gguf.TokenType.CONTROL)] * len(added)
    n_head, n_head_kv, n_ff = 4, 2, 64

    kv: dict[str, RawValue] = {
        "general.architecture": scalar(STRING, "llama"),
        "general.name": scalar(STRING, f"tiny-{fam.name}"),
        "general.file_type": scalar(UINT32, int(gguf.LlamaFileType.MOSTLY_F16)),
        "llama.vocab_size": scalar(UINT32, len(types)),
        "llama.context_length": scalar(UINT32, n_ctx_train),
        "llama.embedding_length": scalar(UINT32, n_embd),
        "llama.block_count": scalar(UINT32, 1),
        "llama.feed_forward_length": scalar(UINT32, n_ff),
        "llama.attention.head_count": scalar(UINT32, n_head),
        "llama.attention.head_count_kv": scalar(UINT32, n_head_kv),
        "llama.rope.dimension_count": scalar(UINT32, n_embd // n_head),
        "llama.rope.freq_base": scalar(FLOAT32, 1e6),
        "llama.attention.layer_norm_rms_epsilon": scalar(FLOAT32, 1e-5),
        "tokenizer.ggml.model": vocab["tokenizer.ggml.model"],
    }
    if "tokenizer.ggml.pre" in vocab:
        kv["tokenizer.ggml.pre"] = vocab["tokenizer.ggml.pre"]
    kv["tokenizer.ggml.tokens"] = string_array(added, prefix=vocab["tokenizer.ggml.tokens"])
    kv["tokenizer.ggml.token_type"] = number_array(
        INT32, types[len(tokens) :], prefix=vocab["tokenizer.ggml.token_type"]
    )
    if "tokenizer.ggml.merges" in vocab:
        kv["tokenizer.ggml.merges"] = vocab["tokenizer.ggml.merges"]
    if "tokenizer.ggml.scores" in vocab:
        kv["tokenizer.ggml.scores"] = number_array(
            FLOAT32, [0.0] * len(added), prefix=vocab["tokenizer.ggml.scores"]
        )
    bos = ids[fam.bos] if fam.bos is not None else None
    if bos is None and "tokenizer.ggml.bos_token_id" in vocab:
        bos = int(vocab["tokenizer.ggml.bos_token_id"].scalar())
    if bos is not None:
        kv["tokenizer.ggml.bos_token_id"] = scalar(UINT32, bos)
    kv["tokenizer.ggml.eos_token_id"] = scalar(UINT32, ids[fam.eos])
    kv["tokenizer.ggml.eot_token_id"] = scalar(UINT32, ids[fam.eos])
    for key in ("tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"):
        if key in vocab:
            kv[key] = vocab[key]
    add_bos = vocab.get("tokenizer.ggml.add_bos_token")
    kv["tokenizer.ggml.add_bos_token"] = scalar(
        BOOL, bool(add_bos.scalar()) if add_bos is not None else False
    )
    kv["tokenizer.ggml.add_eos_token"] = scalar(BOOL, False)
    kv["tokenizer.chat_template"] = scalar(STRING, family_template(fam))
    weights = _weights(types, np.random.default_rng(seed), n_embd, n_head, n_head_kv, n_ff)
    output = weights["output.weight"]
    output[ids[fam.eos], 0] = 0.0  # reachable, so a constraint can end an answer
    blank = [i for i, t in enumerate(tokens) if types[i] == int(gguf.TokenType.NORMAL) and _is_blank(t)]
    output[blank, 0] = _CONTROL_BIAS  # whitespace only where a format demands it: compact answers
    _link(weights, [ids[t] for t in fam.opener])
    return write_gguf(path, kv, weights)


def _weights(
    types: list[int], rng: np.random.Generator, n_embd: int, n_head: int, n_head_kv: int, n_ff: int
) -> dict[str, np.ndarray]:
    n_vocab, head_dim = len(types), n_embd // n_head
    f16, f32 = np.float16, np.float32
    embd = rng.standard_normal((n_vocab, n_embd), dtype=f32)
    embd[:, 0] = 1.0  # the bias channel (see the module docstring)
    embd[:, 1 : 1 + _LINKS] = 0.0  # the link channels (see _link)
    output = rng.standard_normal((n_vocab, n_embd), dtype=f32) * f32(3.0 / np.sqrt(n_embd))
    special = np.array([t not in (int(gguf.TokenType.NORMAL), int(gguf.TokenType.BYTE)) for t in types])
    output[:, 0] = np.where(special, _CONTROL_BIAS, 0.0)

    def matrix(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * (scale / np.sqrt(cols))).astype(f32)

    wo, down = matrix(n_embd, n_head * head_dim, 0.3), matrix(n_embd, n_ff, 0.3)
    wo[: 1 + _LINKS] = down[: 1 + _LINKS] = 0.0  # nothing writes to the bias and link channels
    return {
        "token_embd.weight": embd.astype(f16),
        "blk.0.attn_norm.weight": np.ones(n_embd, dtype=f32),
        "blk.0.attn_q.weight": matrix(n_head * head_dim, n_embd, 1.0),
        "blk.0.attn_k.weight": matrix(n_head_kv * head_dim, n_embd, 1.0),
        "blk.0.attn_v.weight": matrix(n_head_kv * head_dim, n_embd, 1.0),
        "blk.0.attn_output.weight": wo,
        "blk.0.ffn_norm.weight": np.ones(n_embd, dtype=f32),
        "blk.0.ffn_gate.weight": matrix(n_ff, n_embd, 1.0),
        "blk.0.ffn_up.weight": matrix(n_ff, n_embd, 1.0),
        "blk.0.ffn_down.weight": down,
        "output_norm.weight": np.ones(n_embd, dtype=f32),
        "output.weight": output.astype(f16),
    }


def _is_blank(token: str) -> bool:
    """A token of whitespace only, in the byte-level spelling ("Ġ" space, "Ċ" newline, "ĉ"
    tab, "č" return) or SentencePiece's ("▁")."""
    return bool(token) and all(c in " \t\n\rĠĊĉč▁" for c in token)


_LINKS = 3  # channels that carry a chain link (a family's opener has at most three)
_LINK_MARK = 6.0  # a predecessor's value in its link channel
_LINK_GAIN = 8.0  # its successor's weight on it: ~+30 logits after the predecessor, 0 elsewhere


def _link(weights: dict[str, np.ndarray], chain: list[int]) -> None:
    """Make each token of `chain` the greedy successor of the one before it: link i marks
    its predecessor in embedding channel 1 + i, which nothing else writes, and its successor
    reads that channel; elsewhere the successor keeps the control tokens' negative bias."""
    embd, output = weights["token_embd.weight"], weights["output.weight"]
    if len(chain) - 1 > _LINKS:
        raise ValueError(f"an opener chain of {len(chain)} tokens is longer than {_LINKS + 1}")
    for i, (prev, nxt) in enumerate(zip(chain, chain[1:], strict=False)):
        embd[prev, 1 + i] = _LINK_MARK
        output[nxt, 1 + i] = _LINK_GAIN
        output[nxt, 0] = _CONTROL_BIAS
