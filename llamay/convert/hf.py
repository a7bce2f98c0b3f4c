"""Reading a Hugging Face model folder without torch: config, safetensors weights, pooling config.

Every problem with the folder is a ValueError whose message names the file at fault, because the
caller is usually a person pointing the converter at a directory.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open

__all__ = ["read_json", "read_config", "iter_safetensors", "read_pooling_mode"]

#: safetensors dtypes numpy has no type for, read from the raw bytes instead.
_BF16 = "BF16"


def read_json(path: Path) -> Any:
    """The parsed JSON at `path`; ValueError if it is missing or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path.parent}: missing {path.name}") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not readable JSON ({e})") from None


def read_config(src: Path) -> dict[str, Any]:
    """`config.json` of the folder `src` as a dict; ValueError if `src` is not a model folder."""
    if not src.is_dir():
        raise ValueError(f"{src}: not a directory (expected a Hugging Face model folder)")
    config = read_json(src / "config.json")
    if not isinstance(config, dict):
        raise ValueError(f"{src / 'config.json'}: expected a JSON object")
    return config


def _weight_files(src: Path) -> list[Path]:
    """The safetensors files holding the weights: one file, or the shards an index names."""
    single = src / "model.safetensors"
    if single.is_file():
        return [single]
    index = src / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{index}: no weight_map")
        files = [src / name for name in sorted(set(weight_map.values()))]
        for f in files:
            if not f.is_file():
                raise ValueError(f"{src}: missing shard {f.name} named by {index.name}")
        return files
    if (src / "pytorch_model.bin").exists():
        raise ValueError(f"{src}: only pytorch_model.bin found; this converter reads safetensors weights")
    raise ValueError(f"{src}: missing model.safetensors")


def _read_bf16(path: Path, name: str) -> np.ndarray:
    """One BF16 tensor as float32, located through the file header (numpy has no bfloat16)."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        start, end = header[name]["data_offsets"]
        f.seek(8 + header_len + start)
        raw = np.frombuffer(f.read(end - start), dtype="<u2")
    # bfloat16 is the upper half of a float32.
    return (raw.astype(np.uint32) << 16).view(np.float32).reshape(header[name]["shape"])


def iter_safetensors(src: Path) -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor of the folder's safetensors weights as (name, array), float arrays as
    float32 (BF16 and F16 widened, so later rounding happens once, to the output type)."""
    for path in _weight_files(src):
        try:
            with safe_open(str(path), framework="numpy") as f:
                for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                    if f.get_slice(name).get_dtype() == _BF16:
                        yield name, _read_bf16(path, name)
                        continue
                    array = f.get_tensor(name)
                    if np.issubdtype(array.dtype, np.floating):
                        array = array.astype(np.float32, copy=False)
                    yield name, array
        except (OSError, SafetensorError) as e:
            raise ValueError(f"{path}: not a readable safetensors file ({e})") from None


def read_pooling_mode(src: Path) -> str | None:
    """The sentence-transformers pooling mode of the folder ("mean", "cls", "lasttoken", "max",
    "mean_sqrt_len_tokens", "weightedmean"), or None when the folder has no Pooling module.

    sentence-transformers lists its modules in `modules.json`; the Pooling module's folder holds
    a `config.json` with one `pooling_mode_*` flag set."""
    modules_path = src / "modules.json"
    if not modules_path.is_file():
        return None
    modules = read_json(modules_path)
    if not isinstance(modules, list):
        raise ValueError(f"{modules_path}: expected a JSON list")
    for module in modules:
        if isinstance(module, dict) and module.get("type") == "sentence_transformers.models.Pooling":
            config = read_json(src / str(module.get("path", "")) / "config.json")
            modes = [
                key.removeprefix("pooling_mode_").removesuffix("_token").removesuffix("_tokens")
                for key, value in config.items()
                if key.startswith("pooling_mode_") and value is True
            ]
            if len(modes) != 1:
                raise ValueError(
                    f"{src}: pooling config sets {len(modes)} pooling modes, expected exactly one"
                )
            return modes[0]
    return None
