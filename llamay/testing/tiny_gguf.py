r"""Tiny, deterministic GGUF models that llama.cpp loads and runs in milliseconds.

The model test tier, the benchmarks and the setup self-check need a real GGUF file that the real
engine loads, tokenizes with, decodes batches with and samples from; a downloaded model is too big
and too slow for that. ``write_tiny_llama`` writes a ~0.6 MB "llama" model with a byte-level BPE
tokenizer (``tokenizer.ggml.model`` "gpt2", pre-tokenizer "smollm", like SmolLM2) and a ChatML
chat template.

The weights are random (seeded) but wired so that greedy decoding is peaked, varied and depends
on the prompt; near-uniform logits would make greedy output flip on the float differences between
batch shapes (~1e-4 relative here), and tests compare greedy output alone and batched.

* Chain: every printable ordinary token ``t`` has a fixed successor, and the successors form one
  long cycle (~430 tokens), so greedy text is readable ASCII that does not repeat within 40
  tokens.  The residual stream carries ``t``'s embedding and ``output.weight[succ(t)]`` is aligned
  with it, so the successor wins by ~5 logits (median; 1% of steps under ~2).
* Copy head: every token has a distinct salience (embedding channel 1); layer 0's attention looks
  only at salience and copies half the content channels of the most salient token in the context
  (``c*``; digits outrank words), a weaker vote for ``succ(c*)``.  ``"\n"`` (the end of the
  ChatML generation prompt) has no successor link and no content, so a chat reply opens with
  ``succ(c*)``: a word of the conversation picks it (template tokens have low salience), and so
  do another request's KV cells if they leak in.  After that the chain decides; later layers only
  nudge the logits.  Prompts whose most salient token is the same get the same reply.
* Bias channel: channel 0 is a constant nothing writes to, so ``output.weight[:, 0]`` is a
  per-token logit bias: control tokens, non-ASCII bytes and ``<|im_end|>`` get a negative one, so
  greedy decoding does not stop or emit them mid-text.  ``<|im_end|>`` is still reachable: it is
  the strong successor of ``EOS_TRIGGER`` "~", which also has the top salience, so a raw prompt
  ending in "~", or a conversation containing it, ends at once; sampling and logit biases can
  reach it too.
* Thinking variant (``</think>`` in the vocabulary): ``"\n" -> 10 tokens -> "</think>" ->
  "\n\n"`` with extra-strong links, so a reply to a prompt ending in ``<think>\n`` is a fixed
  reasoning block, ``</think>\n\n``, then an answer opening with ``succ(c*)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from llamay.testing._tiny_vocab import ENDOFTEXT, IM_END, IM_START, TinyVocab, tiny_vocab, token_bytes

__all__ = [
    "CHATML",
    "CHATML_THINK",
    "ENDOFTEXT",
    "EOS_TRIGGER",
    "IM_END",
    "IM_START",
    "THINK_CLOSE",
    "THINK_OPEN",
    "TinyVocab",
    "add_tiny_tokenizer",
    "tiny_vocab",
    "write_tiny_llama",
    "write_tiny_think_llama",
]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
#: Single-byte token whose greedy successor is ``<|im_end|>``: a raw completion of "...~" stops.
EOS_TRIGGER = "~"

#: ChatML as SmolLM2 and Qwen2 use it, without an injected default system prompt.
CHATML = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

#: ChatML for a reasoning model, modelled on Qwen3's template.  Assistant turns after the last user
#: message keep their reasoning (``reasoning_content``, or a ``<think>`` block already inside
#: ``content``) as ``<think>\n...\n</think>\n\n``; older assistant turns lose it, as in Qwen3, so
#: a multi-turn prompt is not a prefix extension of the previous one.  The generation prompt opens
#: a ``<think>\n`` block unless ``enable_thinking`` is false, which renders an empty block instead.
CHATML_THINK = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- for message in messages -%}"
    "{%- set content = message['content'] or '' -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- set reasoning = message.get('reasoning_content') or '' -%}"
    "{%- if '</think>' in content -%}"
    "{%- set reasoning = content.split('</think>')[0].split('<think>')[-1] -%}"
    "{%- set content = content.split('</think>')[-1] -%}"
    "{%- endif -%}"
    "{%- set reasoning = reasoning.strip('\\n') -%}{%- set content = content.lstrip('\\n') -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if loop.index0 > ns.last_user and reasoning -%}"
    "{{- '<think>\\n' + reasoning + '\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{{- content + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- else -%}{{- '<think>\\n' -}}{%- endif -%}"
    "{%- endif -%}"
)

# Weight scales, tuned with llama.cpp over several seeds and chat and raw prompts (see the tests).
_CHAIN_GAIN = 0.15  # output row of succ(t) = gain * content of t's embedding: logit ~ 0.15 * 61
_STRONG_GAIN = 0.21  # links that must win whatever the context: the reasoning path
_TRIGGER_CODE = 4.0  # the EOS trigger's value in its own embedding channel
_TRIGGER_GAIN = 8.0  # <|im_end|>'s weight on it: beats any chain link, even as a copy vote
_COPY_GAIN = 0.5  # the copy head adds this times the attended token's copied channels
_COPY_SHARPNESS = 600.0  # query size: attention ratio e^(600 * salience gap / sqrt(head_dim))
_SALIENCE_MAX = 3.0  # ordinary tokens' saliences spread over (0, 3]; the rest over [-3, -1]
_CONTEXT_SCALE = 0.2  # random attention of the later layers: nudges logits by context
_FFN_SCALE = 0.1  # random FFNs: exercised, but too small to change a greedy choice
_HIDDEN_BIAS = -4.0  # logit offset of tokens greedy decoding must not produce
_EOS_BIAS = -2.0
_REASONING_LEN = 10  # tokens between "<think>\n" and "</think>" in the reasoning path
_ROLE_WORDS = ("system", "user", "assistant", "tool")


def _links(vocab: TinyVocab, rng: np.random.Generator) -> tuple[dict[int, int], set[int], set[int], int]:
    """The successor map, the tails of its strong links, the low-salience tokens, the free token."""
    trigger, newline, blank = vocab.id(EOS_TRIGGER), vocab.id("\n"), vocab.id("\n\n")
    think = THINK_CLOSE in vocab.tokens
    free = blank if think else newline
    printable = set(range(0x20, 0x7F)) | {0x0A}
    cycle = [
        i
        for i, text in enumerate(vocab.tokens)
        if vocab.token_types[i] == gguf.TokenType.NORMAL
        and i not in (trigger, newline, free)
        and set(token_bytes(text)) <= printable
    ]
    cycle = [cycle[i] for i in rng.permutation(len(cycle))]
    path: list[int] = []
    if think:  # "<think>\n" -> reasoning -> "</think>" -> "\n\n"; the reasoning tokens leave the cycle
        path = [newline, *cycle[:_REASONING_LEN], vocab.id(THINK_CLOSE), blank]
        cycle = cycle[_REASONING_LEN:]
    succ = dict(zip(cycle, cycle[1:] + cycle[:1], strict=True)) | dict(zip(path, path[1:], strict=False))
    roles = {i for word in _ROLE_WORDS for i in vocab.encode(word)}
    low = set(range(vocab.n_vocab)) - set(cycle) - {trigger} | roles
    return succ, set(path), low, free


def _weights(
    vocab: TinyVocab,
    rng: np.random.Generator,
    n_embd: int,
    n_layer: int,
    n_head: int,
    n_head_kv: int,
    n_ff: int,
) -> dict[str, np.ndarray]:
    """The structured random weights described in the module docstring, as f32 (out, in) arrays."""
    n_vocab, head_dim, f32 = vocab.n_vocab, n_embd // n_head, np.float32
    succ, strong, low, free = _links(vocab, rng)

    # Channel 0: constant 1 (bias channel); channel 1: salience; channel 2: the EOS trigger's own
    # channel; the rest: random content, scaled so every embedding has RMS 1 and so comes out of
    # RMSNorm unchanged.  Each token has its own salience, so a context always has one most salient
    # token.  The free token has no content.
    trigger, im_end = vocab.id(EOS_TRIGGER), vocab.id(IM_END)
    salience = np.empty(n_vocab, dtype=np.float64)
    high = sorted(set(range(n_vocab)) - low)
    salience[high] = _SALIENCE_MAX * (1 + rng.permutation(len(high))) / len(high)
    salience[sorted(low)] = -1 - 2 * (1 + rng.permutation(len(low))) / len(low)
    # Digits outrank words (prompts that differ in a number get different replies: tests tend to
    # number their requests), and a "~" anywhere outranks everything.
    digits = [vocab.id(d) for d in "0123456789"]
    salience[digits] = _SALIENCE_MAX + 0.05 * (1 + rng.permutation(10))
    salience[trigger] = _SALIENCE_MAX + 0.75
    content = rng.standard_normal((n_vocab, n_embd - 3))
    content[free] = 0.0
    trigger_channel = np.zeros(n_vocab)
    trigger_channel[trigger] = _TRIGGER_CODE
    energy = n_embd - 1 - salience**2 - trigger_channel**2
    content *= np.sqrt(energy / np.maximum((content**2).sum(axis=1), 1e-9))[:, None]
    columns = [np.ones(n_vocab), salience, trigger_channel]
    embd = np.concatenate([np.stack(columns, axis=1), content], axis=1).astype(f32)

    # output[s] points along the content of s's predecessor.  The free token has no link, so what
    # follows it is up to the copy head.  Only the trigger channel (as embedded or copied) drives
    # <|im_end|>, so nothing else makes its logit noisy.
    output = np.zeros((n_vocab, n_embd), dtype=f32)
    for prev, nxt in succ.items():
        output[nxt, 3:] = (_STRONG_GAIN if prev in strong else _CHAIN_GAIN) * embd[prev, 3:]
    output[:, 0] = _HIDDEN_BIAS
    output[sorted(set(succ.values())), 0] = 0.0
    output[im_end, 2] = _TRIGGER_GAIN
    output[im_end, 0] = _EOS_BIAS  # low, but within reach of sampling and logit biases

    def matrix(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * (scale / np.sqrt(cols))).astype(f32)

    # Layer 0's attention is a copy head.  Queries (constant, from channel 0) and keys (channel 1)
    # sit in each head's last RoPE pair, which barely rotates (freq_base 1e6), so every head attends
    # to the most salient token in the context.  Values copy n_head_kv * head_dim content channels,
    # and the output projection writes them back in place: a vote for the successor of that token.
    group, pair = n_head // n_head_kv, head_dim - 2
    n_copy = min(n_head_kv * head_dim, n_embd - 2)
    wq, wk = np.zeros((n_head * head_dim, n_embd), f32), np.zeros((n_head_kv * head_dim, n_embd), f32)
    wv, wo = np.zeros((n_head_kv * head_dim, n_embd), f32), np.zeros((n_embd, n_head * head_dim), f32)
    wq[np.arange(n_head) * head_dim + pair, 0] = _COPY_SHARPNESS
    wk[np.arange(n_head_kv) * head_dim + pair, 1] = 1.0
    wv[np.arange(n_copy), 2 + np.arange(n_copy)] = 1.0
    for head in range(n_head):
        dims = np.arange(n_copy) - (head // group) * head_dim
        keep = (dims >= 0) & (dims < head_dim)
        wo[2 + np.arange(n_copy)[keep], head * head_dim + dims[keep]] = _COPY_GAIN / group

    tensors: dict[str, np.ndarray] = {"token_embd.weight": embd}
    for layer in range(n_layer):
        if layer > 0:  # later layers: random attention, so the context nudges every logit a little
            wq = matrix(n_head * head_dim, n_embd, 2.0)
            wk = matrix(n_head_kv * head_dim, n_embd, 2.0)
            wv = matrix(n_head_kv * head_dim, n_embd, 1.0)
            wo = matrix(n_embd, n_head * head_dim, _CONTEXT_SCALE)
        ffn_down = matrix(n_embd, n_ff, _FFN_SCALE)
        # Nothing but the copy head writes to channels 0-2: bias, salience and trigger stay clean.
        if layer > 0:
            wo[:3] = 0.0
        ffn_down[:3] = 0.0
        tensors |= {
            f"blk.{layer}.attn_norm.weight": np.ones(n_embd, dtype=f32),
            f"blk.{layer}.attn_q.weight": wq,
            f"blk.{layer}.attn_k.weight": wk,
            f"blk.{layer}.attn_v.weight": wv,
            f"blk.{layer}.attn_output.weight": wo,
            f"blk.{layer}.ffn_norm.weight": np.ones(n_embd, dtype=f32),
            f"blk.{layer}.ffn_gate.weight": matrix(n_ff, n_embd, 1.0),
            f"blk.{layer}.ffn_up.weight": matrix(n_ff, n_embd, 1.0),
            f"blk.{layer}.ffn_down.weight": ffn_down,
        }
    tensors["output_norm.weight"] = np.ones(n_embd, dtype=f32)
    tensors["output.weight"] = output
    return tensors


def write_tiny_llama(
    path: str | Path,
    *,
    seed: int = 0,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    n_ctx_train: int = 2048,
    chat_template: str | None = CHATML,
    extra_tokens: Sequence[str] = (),
    user_tokens: Sequence[str] = (),
    name: str = "tiny-llama",
    tool_use_template: str | None = None,
) -> Path:
    """Write a tiny f32 "llama" GGUF model to ``path`` and return ``path`` as a ``Path``.

    The same arguments always give the same bytes.  ``extra_tokens`` are added as control tokens
    (parsed only with ``parse_special``, rendered only when special tokens are), ``user_tokens`` as
    user-defined ones (always parsed and rendered as text, like ``<think>`` in Qwen3); both come
    after the shared vocabulary (see ``TinyVocab``).  ``eos`` and ``eot`` are ``<|im_end|>``;
    ``bos``, ``pad`` and ``unk`` are ``<|endoftext|>``, which llama.cpp also treats as
    end-of-generation; no BOS or EOS is added when tokenizing.  ``chat_template=None`` writes none;
    ``tool_use_template`` is written beside it as the named template ``tool_use`` (Command R's files).
    With ``</think>`` among the tokens the reasoning path is wired in (see the module docstring).
    Raises ``ValueError`` for shapes the wiring needs but does not get (n_embd >= 32, even heads).
    """
    if n_embd % n_head or n_head % n_head_kv or (n_embd // n_head) % 2 or n_embd < 32:
        raise ValueError("need n_embd >= 32 split into even-sized heads, and n_head into n_head_kv groups")
    vocab = tiny_vocab(tuple(extra_tokens), tuple(user_tokens))
    tensors = _weights(vocab, np.random.default_rng(seed), n_embd, n_layer, n_head, n_head_kv, n_ff)

    path = Path(path)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(vocab.n_vocab)
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_rope_freq_base(1e6)
    writer.add_layer_norm_rms_eps(1e-5)

    add_tiny_tokenizer(writer, vocab)
    if chat_template is not None and tool_use_template is not None:
        named = [
            {"name": "default", "template": chat_template},
            {"name": "tool_use", "template": tool_use_template},
        ]
        writer.add_chat_template(named)
    elif chat_template is not None:
        writer.add_chat_template(chat_template)

    for tensor_name, data in tensors.items():
        writer.add_tensor(tensor_name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def add_tiny_tokenizer(writer: gguf.GGUFWriter, vocab: TinyVocab) -> None:
    """Write `vocab` as the model's tokenizer: byte-level BPE, no BOS or EOS added."""
    writer.add_tokenizer_model("gpt2")
    # "smollm": GPT-2 splitting with single digits, and no clean-up of spaces before punctuation
    # on detokenization (the "gpt-2" and "default" types would turn "a ," into "a,").
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(list(vocab.tokens))
    writer.add_token_types(list(vocab.token_types))
    writer.add_token_merges(list(vocab.merges))
    writer.add_bos_token_id(vocab.id(ENDOFTEXT))
    writer.add_eos_token_id(vocab.id(IM_END))
    writer.add_eot_token_id(vocab.id(IM_END))
    writer.add_pad_token_id(vocab.id(ENDOFTEXT))
    writer.add_unk_token_id(vocab.id(ENDOFTEXT))
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)


def write_tiny_think_llama(path: str | Path, **kwargs: Any) -> Path:
    """``write_tiny_llama`` for a reasoning model: ``<think>``/``</think>`` and ``CHATML_THINK``.

    The think tokens are user-defined tokens, as in Qwen3 and DeepSeek-R1 GGUFs, so they show up
    in detokenized text.  Keyword arguments other than the template and tokens pass through.
    """
    kwargs.setdefault("chat_template", CHATML_THINK)
    kwargs.setdefault("name", "tiny-think-llama")
    kwargs.setdefault("user_tokens", (THINK_OPEN, THINK_CLOSE))
    return write_tiny_llama(path, **kwargs)
