"""Per-model parameters: Ollama's option names and types, parsing, and GGUF sampling defaults.

A manifest's `params` use Ollama's option names (`temperature`, `top_k`, `stop`, `num_ctx`, ...)
so that `/api/show` can report them and a request's `options` can override them key by key.
A GGUF file may carry its author's recommended sampling settings as `general.sampling.*`
metadata; `gguf_sampling_defaults` maps those to the same names. Effective parameters are the
GGUF defaults overlaid by the manifest's params (see `ModelStore.params`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from struct import error as struct_error
from typing import Any

from llamay.errors import InvalidRequest
from llamay.store.gguf_header import read_header

__all__ = ["PARAM_TYPES", "gguf_sampling_defaults", "parse_params", "validate_params"]

# Option name -> type: Ollama's model and runner options, plus llama.cpp's XTC sampler.
PARAM_TYPES: dict[str, type] = {
    "num_ctx": int, "num_batch": int, "num_keep": int, "num_predict": int, "num_thread": int,
    "num_gpu": int, "main_gpu": int, "seed": int, "top_k": int, "repeat_last_n": int,
    "mirostat": int, "temperature": float, "top_p": float, "min_p": float, "typical_p": float,
    "repeat_penalty": float, "presence_penalty": float, "frequency_penalty": float,
    "mirostat_tau": float, "mirostat_eta": float, "xtc_probability": float,
    "xtc_threshold": float, "penalize_newline": bool, "use_mmap": bool, "use_mlock": bool,
    "stop": list,
}  # fmt: skip

# general.sampling.<key> -> option name
_GGUF_SAMPLING = {
    "temp": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
    "xtc_probability": "xtc_probability", "xtc_threshold": "xtc_threshold",
    "penalty_last_n": "repeat_last_n", "penalty_repeat": "repeat_penalty",
    "mirostat": "mirostat", "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta",
}  # fmt: skip
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def _coerce(key: str, value: Any) -> Any:
    kind = PARAM_TYPES.get(key)
    if kind is None:
        known = ", ".join(sorted(PARAM_TYPES))
        raise InvalidRequest(f"unknown parameter {key!r} (known: {known})", param=key)
    try:
        if kind is list:
            items = value if isinstance(value, list) else [value]
            return [str(item) for item in items]
        if kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text not in _TRUE | _FALSE:
                raise ValueError(text)
            return text in _TRUE
        if isinstance(value, bool):
            raise ValueError(value)
        if kind is int:
            number = float(value)
            if not number.is_integer():
                raise ValueError(value)
            return int(number)
        return float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"parameter {key!r} needs a {kind.__name__}, got {value!r}", param=key) from exc


def parse_params(items: Iterable[str]) -> dict[str, Any]:
    """Parse `key=value` strings (as given to `llamay create -param`) into typed params.
    Values may be quoted; `stop` may repeat and accumulates into a list. InvalidRequest on an
    unknown key, a missing `=`, or a value of the wrong type."""
    params: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().lower()
        if not sep or not key:
            raise InvalidRequest(f"parameter {item!r} is not key=value", param="param")
        value = _coerce(key, _unquote(raw.strip()))
        if key == "stop":
            params.setdefault("stop", []).extend(value)
        else:
            params[key] = value
    return params


def validate_params(params: dict[str, Any]) -> dict[str, Any]:
    """Typed copy of a params mapping (JSON values, e.g. from an API request); InvalidRequest
    on an unknown key or a value of the wrong type."""
    return {key: _coerce(key, value) for key, value in params.items()}


_defaults_cache: dict[tuple[str, int, int], dict[str, Any]] = {}


def gguf_sampling_defaults(path: Path) -> dict[str, Any]:
    """The `general.sampling.*` metadata of the GGUF file at `path`, as option names ->
    values (`general.sampling.temp` -> `temperature`, `penalty_repeat` -> `repeat_penalty`,
    ...). {} if the file carries none, or cannot be read as GGUF. Cached per file version."""
    try:
        st = path.stat()
    except OSError:
        return {}
    key = (str(path), st.st_size, st.st_mtime_ns)
    cached = _defaults_cache.get(key)
    if cached is None:
        cached = _defaults_cache[key] = _read_sampling(path)
    return dict(cached)


def _read_sampling(path: Path) -> dict[str, Any]:
    try:
        meta = read_header(path, max_array=0).metadata
    except (OSError, ValueError, KeyError, struct_error, UnicodeError):
        return {}
    found: dict[str, Any] = {}
    for suffix, option in _GGUF_SAMPLING.items():
        raw = meta.get(f"general.sampling.{suffix}")
        if raw is None:
            continue
        try:
            value = _coerce(option, raw)
            # float32 in the file: 0.6 reads back as 0.6000000238; keep what the author wrote.
            found[option] = float(f"{value:.6g}") if isinstance(value, float) else value
        except (InvalidRequest, ValueError, TypeError, IndexError):
            continue  # a malformed value is no default at all
    return found
