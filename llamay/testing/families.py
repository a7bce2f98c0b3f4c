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
(embedding channel 0 is a constant 1) that gives every control token a large negative logit,
so greedy and sampled text never stops or emits a marker on its own: what the server does
about markers (force a close, trigger a call) is all that puts them in the output.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import gguf
import numpy as np

__all__ = ["FAMILIES", "Family", "llama_cpp_models", "family_template", "write_family"]

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
    control tokens to add beyond those its template spells. ``thinks``: the template has a
    think block (or channel). ``vocab_note``: why a stand-in vocabulary, when it is one."""

    name: str
    template: str
    vocab: str
    eos: str
    bos: str | None = None
    extra: tuple[str, ...] = ()
    thinks: bool = False
    vocab_note: str = ""


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
    _f("qwen3", "Qwen-Qwen3-0.6B", _QWEN, "<|im_end|>", thinks=True),
    _f("qwq", "Qwen-QwQ-32B", _QWEN, "<|im_end|>", thinks=True),
    _f("qwen3-coder", "Qwen3-Coder", _QWEN, "<|im_end|>"),
    _f("qwen-3.5", "Qwen3.5-4B", "qwen35", "<|im_end|>", thinks=True),
    _f("deepseek-r1-llama", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", _LLAMA, "<｜end▁of▁sentence｜>",
       bos="<｜begin▁of▁sentence｜>", thinks=True),
    _f("deepseek-r1-qwen", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", _QWEN, "<｜end▁of▁sentence｜>",
       bos="<｜begin▁of▁sentence｜>", thinks=True),
    _f("deepseek-v3.1", "deepseek-ai-DeepSeek-V3.1", "deepseek-llm", "<｜end▁of▁sentence｜>", thinks=True,
       vocab_note="DeepSeek LLM's vocabulary stands in for V3's (same family of byte-level BPE)"),
    _f("mistral-nemo", "mistralai-Mistral-Nemo-Instruct-2407", _LLAMA, "</s>", bos="<s>", extra=("<s>", "</s>"),
       vocab_note="Llama 3's vocabulary stands in for Tekken (not in llama.cpp's tree)"),
    _f("mistral-small-3.2", "Mistral-Small-3.2-24B-Instruct-2506", _LLAMA, "</s>", bos="<s>", extra=("<s>", "</s>"),
       vocab_note="Llama 3's vocabulary stands in for Tekken"),
    _f("devstral", "unsloth-mistral-Devstral-Small-2507", _LLAMA, "</s>", bos="<s>", extra=("<s>", "</s>"),
       vocab_note="Llama 3's vocabulary stands in for Tekken"),
    _f("ministral-reasoning", "mistralai-Ministral-3-14B-Reasoning-2512", _LLAMA, "</s>", bos="<s>",
       extra=("<s>", "</s>"), thinks=True, vocab_note="Llama 3's vocabulary stands in for Tekken"),
    _f("phi-3.5", "microsoft-Phi-3.5-mini-instruct", "phi-3", "<|end|>"),
    _f("gemma-2", "google-gemma-2-2b-it", "gemma-4", "<end_of_turn>", bos="<bos>",
       extra=("<start_of_turn>", "<end_of_turn>"), vocab_note="Gemma 4's vocabulary stands in for Gemma 2's"),
    _f("gemma-4", "google-gemma-4-31B-it", "gemma-4", "<turn|>", bos="<bos>", thinks=True),
    _f("command-r-plus", "CohereForAI-c4ai-command-r-plus-tool_use", "command-r", "<|END_OF_TURN_TOKEN|>",
       bos="<BOS_TOKEN>"),
    _f("command-r7b", "CohereForAI-c4ai-command-r7b-12-2024-tool_use", "command-r", "<|END_OF_TURN_TOKEN|>",
       bos="<BOS_TOKEN>", thinks=True, vocab_note="Command-R's vocabulary stands in for R7B's"),
    _f("granite-3.3", "ibm-granite-granite-3.3-2B-Instruct", "starcoder", "<|end_of_text|>", thinks=True,
       vocab_note="StarCoder's vocabulary stands in for Granite's (Granite's derives from it)"),
    _f("granite-4", "ibm-granite-granite-4.0", "starcoder", "<|end_of_text|>",
       vocab_note="StarCoder's vocabulary stands in for Granite's"),
    _f("functionary-3.1", "meetkai-functionary-medium-v3.1", _LLAMA, "<|eot_id|>",
       extra=("<|eom_id|>", "<|python_tag|>")),
    _f("functionary-3.2", "meetkai-functionary-medium-v3.2", _LLAMA, "<|eot_id|>"),
    _f("firefunction-2", "fireworks-ai-llama-3-firefunction-v2", _LLAMA, "<|eot_id|>"),
    _f("smollm3", "HuggingFaceTB-SmolLM3-3B", _LLAMA, "<|im_end|>", thinks=True,
       vocab_note="Llama 3's vocabulary stands in for SmolLM3's (derived from it)"),
    _f("gpt-oss", "openai-gpt-oss-120b", _LLAMA, "<|return|>", extra=("<|constrain|>",), thinks=True,
       vocab_note="Llama 3's vocabulary stands in for o200k_harmony"),
    _f("kimi-k2", "moonshotai-Kimi-K2", _QWEN, "<|im_end|>", vocab_note="Qwen 2's vocabulary stands in for Kimi's"),
    _f("glm-4.6", "GLM-4.6", _QWEN, "<|user|>", extra=("<|endoftext|>", "[gMASK]", "<sop>"), thinks=True,
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


def family_template(family: Family) -> str:
    """The family's chat template text."""
    return (llama_cpp_models() / "templates" / f"{family.template}.jinja").read_text(encoding="utf-8")


@cache
def _vocab(name: str) -> dict[str, Any]:
    reader = gguf.GGUFReader(llama_cpp_models() / f"ggml-vocab-{name}.gguf")
    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.ggml."):
            out[key] = field.contents()
    return out


def added_tokens(family: Family) -> list[str]:
    """The control tokens ``write_family`` adds: what the template spells as special tokens
    and the family's ``extra``, less what the vocabulary already has, in a stable order."""
    have = set(_vocab(family.vocab)["tokenizer.ggml.tokens"])
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
    tokens = list(vocab["tokenizer.ggml.tokens"])
    types = [int(t) for t in vocab["tokenizer.ggml.token_type"]]
    added = added_tokens(fam)
    tokens += added
    types += [int(gguf.TokenType.CONTROL)] * len(added)
    ids = {t: i for i, t in enumerate(tokens)}
    n_vocab = len(tokens)

    path = Path(path)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(f"tiny-{fam.name}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    n_head, n_head_kv, n_ff = 4, 2, 64
    writer.add_vocab_size(n_vocab)
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(1)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_rope_freq_base(1e6)
    writer.add_layer_norm_rms_eps(1e-5)

    writer.add_tokenizer_model(str(vocab["tokenizer.ggml.model"]))
    if "tokenizer.ggml.pre" in vocab:
        writer.add_tokenizer_pre(str(vocab["tokenizer.ggml.pre"]))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if "tokenizer.ggml.merges" in vocab:
        writer.add_token_merges(list(vocab["tokenizer.ggml.merges"]))
    if "tokenizer.ggml.scores" in vocab:
        writer.add_token_scores([float(s) for s in vocab["tokenizer.ggml.scores"]] + [0.0] * len(added))
    bos = ids[fam.bos] if fam.bos is not None else vocab.get("tokenizer.ggml.bos_token_id")
    if bos is not None:
        writer.add_bos_token_id(int(bos))
    writer.add_eos_token_id(ids[fam.eos])
    writer.add_eot_token_id(ids[fam.eos])
    for key, add in (("unknown", writer.add_unk_token_id), ("padding", writer.add_pad_token_id)):
        value = vocab.get(f"tokenizer.ggml.{key}_token_id")
        if value is not None:
            add(int(value))
    writer.add_add_bos_token(bool(vocab.get("tokenizer.ggml.add_bos_token", False)))
    writer.add_add_eos_token(False)
    writer.add_chat_template(family_template(fam))

    for name, data in _weights(types, np.random.default_rng(seed), n_embd, n_head, n_head_kv, n_ff).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _weights(
    types: list[int], rng: np.random.Generator, n_embd: int, n_head: int, n_head_kv: int, n_ff: int
) -> dict[str, np.ndarray]:
    n_vocab, head_dim = len(types), n_embd // n_head
    f16, f32 = np.float16, np.float32
    embd = rng.standard_normal((n_vocab, n_embd), dtype=f32)
    embd[:, 0] = 1.0  # the bias channel (see the module docstring)
    output = rng.standard_normal((n_vocab, n_embd), dtype=f32) * f32(3.0 / np.sqrt(n_embd))
    special = np.array([t not in (int(gguf.TokenType.NORMAL), int(gguf.TokenType.BYTE)) for t in types])
    output[:, 0] = np.where(special, _CONTROL_BIAS, 0.0)

    def matrix(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * (scale / np.sqrt(cols))).astype(f32)

    wo, down = matrix(n_embd, n_head * head_dim, 0.3), matrix(n_embd, n_ff, 0.3)
    wo[0] = down[0] = 0.0  # nothing writes to the bias channel
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
