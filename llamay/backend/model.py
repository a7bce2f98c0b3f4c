"""A loaded GGUF model: weights, metadata and vocabulary.

Thread-safety: tokenize/detokenize only read the vocabulary and may be called from any
thread; the model must outlive every Context made from it.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ContextOverflow, InvalidRequest
from .memory import read_into_memory
from .native import ensure_backend, llama_cpp

if TYPE_CHECKING:
    from ..grammar.constraint import CompileCache

__all__ = ["Model", "ModelInfo"]


@dataclass(frozen=True)
class ModelInfo:
    """What the server reports about a model."""

    path: Path
    arch: str
    description: str
    n_params: int
    size_bytes: int
    n_ctx_train: int
    n_vocab: int
    n_embd: int
    chat_template: str | None
    bos_token: str
    eos_token: str
    metadata: dict[str, str]

    @property
    def tool_template(self) -> str | None:
        """The GGUF's template for requests with tools (`tokenizer.chat_template.tool_use`,
        as Command R's files carry beside the default), if it has one."""
        return self.metadata.get("tokenizer.chat_template.tool_use")


class Model:
    """Owns a `llama_model`. Close with `close()` or use as a context manager."""

    def __init__(
        self, path: str | os.PathLike[str], progress: Callable[[float], object] | None = None
    ) -> None:
        """Load the GGUF at `path`; `progress` (if given) is called with the fraction of the
        weights loaded so far, 0.0 to 1.0, on this thread while they load; returning False
        stops the load (ValueError)."""
        ensure_backend()
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"model file not found: {self.path}")
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = 0
        read = read_into_memory(self.path.stat().st_size)
        params.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE if read else llama_cpp.LLAMA_LOAD_MODE_MMAP
        if progress is not None:
            # llama.cpp calls back with the loaded fraction; true lets the load go on.
            def report(fraction: float, _user: object) -> bool:
                return progress(float(fraction)) is not False

            callback = llama_cpp.llama_progress_callback(report)  # referenced until loaded
            params.progress_callback = callback
        ptr = llama_cpp.llama_model_load_from_file(str(self.path).encode(), params)
        if not ptr:
            raise ValueError(f"llama.cpp could not load {self.path} (not a GGUF model it supports?)")
        self._ptr = ptr
        self.vocab = llama_cpp.llama_model_get_vocab(ptr)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.pieces = self._all_pieces()
        self.eog_ids = frozenset(
            t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.vocab, t)
        )
        self.bos_id = int(llama_cpp.llama_vocab_bos(self.vocab))
        self.eos_id = int(llama_cpp.llama_vocab_eos(self.vocab))
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
        self.info = self._read_info()
        self._ll_tokenizer: Any = None
        self._compile_cache: CompileCache | None = None
        self._ll_lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def ptr(self) -> int:
        if not self._ptr:
            raise RuntimeError("model is closed")
        return self._ptr

    def close(self) -> None:
        if self._ptr:
            llama_cpp.llama_model_free(self._ptr)
            self._ptr = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- vocabulary ------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Text -> token ids. `add_special` adds BOS when the model asks for it (and the
        text does not already start with it); `parse_special` turns special-token text
        such as `<|im_start|>` into its single id."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            raise InvalidRequest("text could not be tokenized")
        ids = list(buf[:n])
        # A template that already wrote the BOS text must not get a second BOS.
        if add_special and self.add_bos and len(ids) >= 2 and ids[0] == ids[1] == self.bos_id:
            ids = ids[1:]
        return ids

    @property
    def ll_tokenizer(self) -> Any:
        """This vocabulary as an llguidance tokenizer, built once (~0.25 s for 49k tokens)."""
        with self._ll_lock:
            self._build_ll()
            return self._ll_tokenizer

    @property
    def compile_cache(self) -> CompileCache:
        """Grammars compiled for `ll_tokenizer` (created with it, on first use)."""
        with self._ll_lock:
            self._build_ll()
            assert self._compile_cache is not None
            return self._compile_cache

    def _build_ll(self) -> None:
        if self._ll_tokenizer is not None:
            return
        from llguidance.llamacpp import lltokenizer_from_vocab

        from ..grammar.constraint import CompileCache

        # Every end-of-generation token ends a constrained answer, not only vocab_eos.
        eos = sorted(self.eog_ids) or None
        tokenizer = lltokenizer_from_vocab(self.vocab, n_vocab=self.n_vocab, eos_token=eos)
        self._compile_cache = CompileCache(tokenizer)
        self._ll_tokenizer = tokenizer

    def special_id(self, text: str) -> int | None:
        """The id of `text` when it is exactly one control or user-defined token of this
        vocabulary (e.g. "<tool_call>", "</think>"), else None."""
        ids = self.tokenize(text, add_special=False, parse_special=True)
        if len(ids) != 1:
            return None
        attr = int(llama_cpp.llama_vocab_get_attr(self.vocab, ids[0]))
        special = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
        return ids[0] if attr & special else None

    def piece(self, token: int) -> bytes:
        """The bytes one token stands for (special tokens render as their text)."""
        return self.pieces[token]

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.pieces[t] for t in tokens).decode("utf-8", errors="replace")

    def fim_tokens(self) -> tuple[int, int, int] | None:
        """(prefix, suffix, middle) fill-in-the-middle token ids, as the GGUF declares them
        (tokenizer.ggml.fim_*_token_id) or llama.cpp finds them by name (<|fim_prefix|>,
        <fim_prefix>, <PRE> ...); None for a model without all three."""
        ids = (
            int(llama_cpp.llama_vocab_fim_pre(self.vocab)),
            int(llama_cpp.llama_vocab_fim_suf(self.vocab)),
            int(llama_cpp.llama_vocab_fim_mid(self.vocab)),
        )
        return ids if all(0 <= t < self.n_vocab for t in ids) else None

    def check_tokens(self, tokens: list[int]) -> None:
        """Raise InvalidRequest if a token id is outside the vocabulary."""
        bad = [t for t in tokens if not 0 <= t < self.n_vocab]
        if bad:
            raise InvalidRequest(f"token id {bad[0]} is outside the vocabulary (0..{self.n_vocab - 1})")

    def check_fits(self, n_prompt: int, n_ctx: int) -> None:
        if n_prompt >= n_ctx:
            raise ContextOverflow(
                f"the prompt has {n_prompt} tokens but the context holds {n_ctx} "
                f"(at least one token must be left to generate)",
                param="messages",
            )

    def _all_pieces(self) -> list[bytes]:
        buf = ctypes.create_string_buffer(256)
        out: list[bytes] = []
        for t in range(self.n_vocab):
            n = llama_cpp.llama_token_to_piece(self.vocab, t, buf, 256, 0, True)
            if n < 0:
                big = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self.vocab, t, big, -n, 0, True)
                out.append(big.raw[:n])
            else:
                out.append(buf.raw[:n])
        return out

    # -- metadata --------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(4096)
        n = llama_cpp.llama_model_meta_val_str(self.ptr, key.encode(), buf, 4096)
        if n < 0:
            return None
        if n >= 4096:
            big = ctypes.create_string_buffer(n + 1)
            llama_cpp.llama_model_meta_val_str(self.ptr, key.encode(), big, n + 1)
            return big.value.decode("utf-8", errors="replace")
        return buf.value.decode("utf-8", errors="replace")

    def _all_meta(self) -> dict[str, str]:
        out: dict[str, str] = {}
        buf = ctypes.create_string_buffer(512)
        for i in range(llama_cpp.llama_model_meta_count(self.ptr)):
            n = llama_cpp.llama_model_meta_key_by_index(self.ptr, i, buf, 512)
            if n < 0:
                continue
            key = buf.value.decode("utf-8", errors="replace")
            # The vocabulary arrays are huge and useless as strings.
            if key.startswith("tokenizer.ggml.") and key.endswith(
                ("tokens", "merges", "scores", "token_type")
            ):
                continue
            value = self.meta(key)
            if value is not None:
                out[key] = value
        return out

    def _read_info(self) -> ModelInfo:
        desc = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.ptr, desc, 256)
        meta = self._all_meta()
        template = meta.get("tokenizer.chat_template")
        return ModelInfo(
            path=self.path,
            arch=meta.get("general.architecture", "unknown"),
            description=desc.value.decode("utf-8", errors="replace"),
            n_params=int(llama_cpp.llama_model_n_params(self.ptr)),
            size_bytes=int(llama_cpp.llama_model_size(self.ptr)),
            n_ctx_train=int(llama_cpp.llama_model_n_ctx_train(self.ptr)),
            n_vocab=self.n_vocab,
            n_embd=int(llama_cpp.llama_model_n_embd(self.ptr)),
            chat_template=template,
            bos_token=self._special_text(self.bos_id),
            eos_token=self._special_text(self.eos_id),
            metadata=meta,
        )

    def _special_text(self, token: int) -> str:
        if 0 <= token < self.n_vocab:
            return self.pieces[token].decode("utf-8", errors="replace")
        return ""

    def logits_view(self, ptr: ctypes._Pointer[ctypes.c_float]) -> np.ndarray:
        """A read-only zero-copy numpy view of one row of logits."""
        arr = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
        arr.setflags(write=False)
        return arr
