"""Process-wide llama.cpp set-up: backend init once, after checking that llama_cpp is the
build native/'s patches made (patchlevel.py), and llama.cpp's log lines routed into Python
logging (logger "llamay.llama") instead of the terminal."""

from __future__ import annotations

import ctypes
import logging
import os
import threading

# OpenMP workers spin between parallel regions. Spinning long (libgomp's default) starves the
# Python threads that serve HTTP and sample on a busy 2-core machine; not spinning at all
# (OMP_WAIT_POLICY=passive) costs ~30% of decode speed on an idle one (70 vs 105 tok/s,
# SmolLM2). A short spin keeps the full decode speed (110 tok/s) and then sleeps. libgomp
# reads these when llama.cpp's library loads, so they are set before the import; values the
# user set win.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")

import llama_cpp  # noqa: E402
import llama_cpp.llama_cpp  # noqa: E402  (its _lib: the loaded libllama)

from .patchlevel import check_patch_level  # noqa: E402

__all__ = ["ensure_backend", "llama_cpp"]

_log = logging.getLogger("llamay.llama")
_lock = threading.Lock()
_ready = False
# ggml log levels: 1 debug? The enum is NONE=0, DEBUG=1, INFO=2, WARN=3, ERROR=4, CONT=5.
_LEVELS = {1: logging.DEBUG, 2: logging.DEBUG, 3: logging.WARNING, 4: logging.ERROR}
_pending: list[str] = []
# Conditions llama.cpp warns of that the engine handles itself: a full KV cache makes it free
# idle KV or end (or requeue) a request with a clean finish reason (Engine._relieve_kv), so
# the warning is noise in an operator's log; it stays visible at DEBUG.
_HANDLED = ("failed to find a memory slot",)


def _on_log(level: int, text: bytes | None, _user: ctypes.c_void_p) -> None:
    # llama.cpp sends partial lines (level CONT); join them so each record is one line.
    if not text:
        return
    part = text.decode("utf-8", errors="replace")
    _pending.append(part)
    if not part.endswith("\n"):
        return
    line = "".join(_pending).rstrip()
    _pending.clear()
    if line:
        handled = any(h in line for h in _HANDLED)
        _log.log(logging.DEBUG if handled else _LEVELS.get(level, logging.DEBUG), "%s", line)


# Kept at module level: the C side holds only a raw pointer to this callback.
_callback = llama_cpp.llama_log_callback(_on_log)


def ensure_backend() -> None:
    """Initialise llama.cpp once per process and route its logging; safe to call often.
    UnpatchedEngine (a RuntimeError) when llama_cpp is not the patched build, unless
    LLAMAY_ALLOW_UNPATCHED=1 (then logged: determinism off)."""
    global _ready
    with _lock:
        if _ready:
            return
        check_patch_level(llama_cpp.llama_cpp._lib)
        llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _ready = True
