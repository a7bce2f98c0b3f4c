"""The tiny generated GGUF models against the real engine, through llama.cpp's low-level API.

What the rest of the model tier relies on: the file loads, text round-trips through the
tokenizer, special tokens are single ids, batches decode, and greedy decoding is peaked enough to
give the same tokens in any batch shape and context, without stopping early.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import gguf
import jinja2
import llama_cpp
import numpy as np
import pytest

from llamay.testing import (
    CHATML,
    CHATML_THINK,
    ENDOFTEXT,
    IM_END,
    IM_START,
    THINK_CLOSE,
    THINK_OPEN,
    tiny_vocab,
    write_tiny_llama,
)


@llama_cpp.llama_log_callback
def _quiet(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """Drops llama.cpp's log lines (module-level: llama.cpp keeps the pointer)."""


llama_cpp.llama_log_set(_quiet, ctypes.c_void_p(0))
llama_cpp.llama_backend_init()

PROMPTS = [
    "Hello!",
    "What is the capital of France?",
    "Tell me a joke about a cat.",
    "Please help me with my homework",
    "The quick brown fox",
    "Good morning, friend",
    "Can you explain how a river is made?",
]


class Engine:
    """One model and one context (n_ctx 512, 8 sequences, unified KV), driven token by token."""

    def __init__(self, path: Path) -> None:
        self.model = llama_cpp.llama_model_load_from_file(
            str(path).encode(), llama_cpp.llama_model_default_params()
        )
        assert self.model, f"llama.cpp could not load {path}"
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_seq_max, params.kv_unified = 512, 512, 8, True
        self.ctx = llama_cpp.llama_init_from_model(self.model, params)
        assert self.ctx, "llama.cpp could not create a context"
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)

    def close(self) -> None:
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)

    def tokenize(self, text: str, parse_special: bool = True) -> list[int]:
        data = text.encode()
        out = (llama_cpp.llama_token * (len(data) + 1))()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), out, len(out), False, parse_special)
        assert n >= 0
        return list(out[:n])

    def detokenize(self, tokens: Sequence[int], special: bool = True) -> str:
        ids = (llama_cpp.llama_token * len(tokens))(*tokens)
        buf = ctypes.create_string_buffer(16 * len(tokens) + 16)
        n = llama_cpp.llama_detokenize(self.vocab, ids, len(tokens), buf, len(buf), False, special)
        assert n >= 0
        return buf.raw[:n].decode()

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        assert n >= 0
        return buf.raw[:n]

    def decode(self, items: Sequence[tuple[int, int, int]], logits_for: set[int]) -> dict[int, np.ndarray]:
        """Decode (token, position, sequence) items as one batch; logits of the ``logits_for`` items."""
        batch = llama_cpp.llama_batch_init(len(items), 0, 8)
        try:
            for i, (token, pos, seq) in enumerate(items):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
                batch.seq_id[i][0], batch.logits[i] = seq, i in logits_for
            batch.n_tokens = len(items)
            assert llama_cpp.llama_decode(self.ctx, batch) == 0
            return {
                i: np.ctypeslib.as_array(
                    llama_cpp.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,)
                ).copy()
                for i in logits_for
            }
        finally:
            llama_cpp.llama_batch_free(batch)

    def greedy(self, prompts: Sequence[Sequence[int]], n: int) -> tuple[list[list[int]], list[float]]:
        """Greedy continuations of all prompts, decoded side by side, and every step's top-1 margin."""
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)
        items = [(tok, pos, seq) for seq, prompt in enumerate(prompts) for pos, tok in enumerate(prompt)]
        ends = list(np.cumsum([len(p) for p in prompts]) - 1)
        logits = self.decode(items, set(ends))
        current = [logits[i] for i in ends]
        outputs: list[list[int]] = [[] for _ in prompts]
        margins: list[float] = []
        for step in range(n):
            for seq, row in enumerate(current):
                top2 = np.sort(row)[-2:]
                margins.append(float(top2[1] - top2[0]))
                outputs[seq].append(int(np.argmax(row)))
            logits = self.decode(
                [
                    (out[-1], len(p) + step, seq)
                    for seq, (p, out) in enumerate(zip(prompts, outputs, strict=True))
                ],
                set(range(len(prompts))),
            )
            current = [logits[i] for i in range(len(prompts))]
        return outputs, margins


@pytest.fixture(scope="module")
def engine(tiny_model_path: Path) -> Iterator[Engine]:
    e = Engine(tiny_model_path)
    yield e
    e.close()


def chat_prompt(e: Engine, text: str, template: str = CHATML) -> list[int]:
    rendered = (
        jinja2.Environment()
        .from_string(template)
        .render(messages=[{"role": "user", "content": text}], add_generation_prompt=True)
    )
    return e.tokenize(rendered)


def test_writing_is_fast_and_deterministic(tmp_path: Path, tiny_model_path: Path) -> None:
    start = time.perf_counter()
    again = write_tiny_llama(tmp_path / "again.gguf")
    assert time.perf_counter() - start < 1.0
    assert again.read_bytes() == tiny_model_path.read_bytes()
    assert write_tiny_llama(tmp_path / "seed1.gguf", seed=1).read_bytes() != again.read_bytes()


def test_metadata(tiny_model_path: Path) -> None:
    reader = gguf.GGUFReader(tiny_model_path)

    def value(key: str) -> object:
        field = reader.fields[key]
        return field.contents()

    vocab = tiny_vocab()
    assert value("general.architecture") == "llama"
    assert value("tokenizer.ggml.model") == "gpt2"
    assert value("tokenizer.chat_template") == CHATML
    assert value("tokenizer.ggml.eos_token_id") == vocab.id(IM_END)
    assert value("tokenizer.ggml.add_bos_token") is False
    assert 300 <= vocab.n_vocab <= 600
    assert len(value("tokenizer.ggml.tokens")) == vocab.n_vocab  # type: ignore[arg-type]


def test_loads_with_the_expected_vocabulary(engine: Engine) -> None:
    vocab = tiny_vocab()
    assert engine.n_vocab == vocab.n_vocab
    assert (vocab.id(ENDOFTEXT), vocab.id(IM_START), vocab.id(IM_END)) == (0, 1, 2)
    assert llama_cpp.llama_vocab_eos(engine.vocab) == 2
    assert llama_cpp.llama_vocab_bos(engine.vocab) == 0
    eog = [t for t in range(engine.n_vocab) if llama_cpp.llama_vocab_is_eog(engine.vocab, t)]
    assert eog == [0, 2]  # <|endoftext|> and <|im_end|>
    assert llama_cpp.llama_vocab_is_control(engine.vocab, 1)


@pytest.mark.parametrize(
    "text",
    [
        "Hello world, how are you today? I think the answer is 42.",
        "  spaces , before punctuation ; and\ttabs\n\nnew lines  ",
        "héllo wörld, naïve café — 日本語 🙂",
    ],
)
def test_tokenization_round_trips(engine: Engine, text: str) -> None:
    tokens = engine.tokenize(text)
    assert engine.detokenize(tokens) == text
    # Piece by piece, as a streaming server sees it (a piece may be part of a UTF-8 character).
    assert b"".join(engine.piece(t) for t in tokens) == text.encode()


def test_merges_make_multi_byte_tokens(engine: Engine) -> None:
    text = "The user asked the assistant a question about the world, 42 times!"
    tokens = engine.tokenize(text)
    assert len(tokens) < len(text) / 2.5
    assert tiny_vocab().encode(text) == tokens  # the Python tokenizer agrees with llama.cpp


def test_special_tokens_are_single_ids(engine: Engine) -> None:
    tokens = engine.tokenize("<|im_start|>user\nHi<|im_end|>\n<|endoftext|>")
    assert tokens[0] == 1 and 2 in tokens and tokens[-1] == 0
    assert engine.detokenize(tokens) == "<|im_start|>user\nHi<|im_end|>\n<|endoftext|>"
    assert engine.detokenize(tokens, special=False) == "user\nHi\n"
    # Without parse_special, control-token text is plain text.
    assert not {0, 1, 2} & set(engine.tokenize("<|im_start|><|im_end|>", parse_special=False))


def test_think_tokens_are_user_defined(tiny_think_model_path: Path) -> None:
    e = Engine(tiny_think_model_path)
    try:
        vocab = tiny_vocab((), (THINK_OPEN, THINK_CLOSE))
        ids = e.tokenize("<think>\nhmm\n</think>\n\nok", parse_special=False)
        assert ids[0] == vocab.id(THINK_OPEN) and vocab.id(THINK_CLOSE) in ids
        assert e.detokenize(ids, special=False) == "<think>\nhmm\n</think>\n\nok"
    finally:
        e.close()


def test_batch_decode_matches_token_by_token(engine: Engine) -> None:
    prompt = chat_prompt(engine, "What is the capital of France?")
    memory = llama_cpp.llama_get_memory(engine.ctx)
    llama_cpp.llama_memory_clear(memory, True)
    whole = engine.decode([(t, i, 0) for i, t in enumerate(prompt)], set(range(len(prompt))))
    llama_cpp.llama_memory_clear(memory, True)
    for i, t in enumerate(prompt):
        single = engine.decode([(t, i, 0)], {0})[0]
        # Batch shapes take different matmul paths and round K/V to f16 differently: ~1e-4 relative.
        np.testing.assert_allclose(single, whole[i], atol=0.02)
        assert np.argmax(single) == np.argmax(whole[i])


def test_greedy_is_deterministic_across_contexts_and_batches(engine: Engine, tiny_model_path: Path) -> None:
    prompts = [chat_prompt(engine, p) for p in PROMPTS]
    together, _ = engine.greedy(prompts, 40)
    other = Engine(tiny_model_path)
    try:
        for prompt, expected in zip(prompts, together, strict=True):
            alone, _ = other.greedy([prompt], 40)
            assert alone[0] == expected
    finally:
        other.close()


def test_greedy_output_is_varied_and_does_not_stop(engine: Engine) -> None:
    prompts = [chat_prompt(engine, p) for p in PROMPTS] + [engine.tokenize("Once upon a time")]
    outputs, _ = engine.greedy(prompts, 40)
    for out in outputs:
        assert not any(llama_cpp.llama_vocab_is_eog(engine.vocab, t) for t in out)
        assert len(set(out)) == 40, engine.detokenize(out)  # the successor cycle is long
        engine.detokenize(out).encode("ascii")  # readable text, no stray UTF-8 fragments
    # The first token of a chat reply depends on the conversation (its most salient token).
    assert len({out[0] for out in outputs[:-1]}) >= 4


def test_logits_are_peaked(engine: Engine) -> None:
    _, margins = engine.greedy([chat_prompt(engine, p) for p in PROMPTS], 40)
    assert np.median(margins) > 3.0
    assert np.mean(np.array(margins) > 0.5) > 0.95


def test_eos_trigger_ends_the_reply(engine: Engine) -> None:
    prompts = [
        engine.tokenize("Say goodbye~"),
        chat_prompt(engine, "Hello ~ there"),
        chat_prompt(engine, "Hello"),
    ]
    outputs, _ = engine.greedy(prompts, 1)
    assert [out[0] for out in outputs] == [2, 2, outputs[2][0]] and outputs[2][0] != 2


def test_thinking_model_reasons_then_answers(tiny_think_model_path: Path) -> None:
    e = Engine(tiny_think_model_path)
    try:
        outputs, _ = e.greedy([chat_prompt(e, p, CHATML_THINK) for p in PROMPTS[:3]], 30)
        texts = [e.detokenize(out, special=False) for out in outputs]
        reasoning = {t.split(THINK_CLOSE + "\n\n")[0] for t in texts}
        assert len(reasoning) == 1 and THINK_CLOSE not in reasoning.pop()  # a fixed, closed block
        assert len({t.split(THINK_CLOSE)[1] for t in texts}) >= 2  # answers depend on the question
    finally:
        e.close()


def test_chat_templates_render_like_chatml() -> None:
    env = jinja2.Environment()
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "reasoning_content": "greet back"},
        {"role": "user", "content": "Bye"},
    ]
    assert env.from_string(CHATML).render(messages=history, add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
    )
    think = env.from_string(CHATML_THINK)
    # Reasoning of turns before the last user message is dropped, as in Qwen3.
    assert think.render(messages=history, add_generation_prompt=True).endswith(
        "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )
    assert think.render(messages=history[:2], add_generation_prompt=True, enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    tool_loop = [*history, {"role": "assistant", "content": "<think>\nlook up\n</think>\n\nOK"}]
    assert think.render(messages=tool_loop).endswith(
        "<|im_start|>assistant\n<think>\nlook up\n</think>\n\nOK<|im_end|>\n"
    )
