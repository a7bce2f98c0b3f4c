"""Whether the loaded llama.cpp is the build llamay's native/ patches made.

Those patches give the batch invariance llamay promises (a request's logits do not depend on
what shares its batch or the KV cache). A llama_cpp from a plain `pip install llama-cpp-python`
runs just as well without them, so without this check the promise would be broken silently.
The last patch makes libllama export `llamay_patch_level()`, the number of patches in the
series; this module reads it through ctypes and needs nothing else of llama_cpp (so it is
tested against stub libraries).
"""

from __future__ import annotations

import ctypes
import logging
import os

__all__ = ["ALLOW_UNPATCHED", "PATCH_LEVEL", "UnpatchedEngine", "check_patch_level", "patch_level"]

# The number of patches in native/ (0007-patch-level.patch returns the same); raised with it.
PATCH_LEVEL = 22
# Set to 1 to run on an unpatched llama.cpp anyway: logged as "determinism off".
ALLOW_UNPATCHED = "LLAMAY_ALLOW_UNPATCHED"

_log = logging.getLogger("llamay")


class UnpatchedEngine(RuntimeError):
    """The loaded llama.cpp is not the build llamay's native/ patch series made."""


def patch_level(lib: ctypes.CDLL) -> int | None:
    """`lib`'s llamay_patch_level(), or None when it does not export one (unpatched)."""
    try:
        fn = lib.llamay_patch_level
    except AttributeError:
        return None
    fn.argtypes = []
    fn.restype = ctypes.c_int32
    return int(fn())


def check_patch_level(lib: ctypes.CDLL, allow_unpatched: bool | None = None) -> int | None:
    """The patch level of `lib` (libllama as llama_cpp loaded it) when it is PATCH_LEVEL.
    Otherwise UnpatchedEngine naming the library and the fix (./setup.sh), unless
    `allow_unpatched` (default: the LLAMAY_ALLOW_UNPATCHED environment variable is 1), in
    which case a warning says determinism is off and the level found (None: no marker) is
    returned."""
    level = patch_level(lib)
    if level == PATCH_LEVEL:
        return level
    found = (
        "does not export llamay_patch_level(), so it is not a build of llamay's native/ patch "
        "series (a plain `pip install llama-cpp-python`, or a build older than the series)"
        if level is None
        else f"was built with {level} of llamay's native/ patches, this llamay needs {PATCH_LEVEL}"
    )
    if allow_unpatched is None:
        allow_unpatched = os.environ.get(ALLOW_UNPATCHED, "") == "1"
    if allow_unpatched:
        _log.warning(
            "determinism off: llama.cpp at %s %s; a request's output may depend on what else "
            "the server is running (%s=1)",
            lib._name,
            found,
            ALLOW_UNPATCHED,
        )
        return level
    raise UnpatchedEngine(
        f"llama.cpp at {lib._name} {found}. Without them a request's output depends on what "
        "else the server is running. Run ./setup.sh in llamay's checkout to build and install "
        f"the patched engine, or set {ALLOW_UNPATCHED}=1 to run without that guarantee."
    )
