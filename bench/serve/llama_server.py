"""llama.cpp's own `llama-server`, the server people would pick instead of llamay: built
from the llama.cpp vendored in the same llama-cpp-python source package the engine uses,
with the same compiler flags, and cached outside the test command like the engine's wheel.

    .venv/bin/python -m bench.serve.llama_server          # build (once; ~6 minutes on 2 cores), print its path

It is built without llamay's native patch: the anchor is stock llama.cpp, as its users run it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

__all__ = ["binary", "build", "server_argv"]

VERSION = "0.3.36"  # the llama-cpp-python release setup.sh builds the engine from
AMX_OFF = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"  # as setup.sh: llama.cpp's AMX path crashes here
CMAKE_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    f"-DCMAKE_C_FLAGS={AMX_OFF}",
    f"-DCMAKE_CXX_FLAGS={AMX_OFF}",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_CURL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)


def _cache_dir() -> Path:
    key = hashlib.sha256(" ".join(CMAKE_ARGS).encode()).hexdigest()[:12]
    root = Path(os.environ.get("LLAMAY_WHEEL_CACHE", Path.home() / ".cache/llamay/wheels")).parent
    return root / "llama-server" / f"{VERSION}-{key}"


def binary() -> Path | None:
    """The cached llama-server, if built."""
    path = _cache_dir() / "llama-server"
    return path if path.is_file() else None


def _run(argv: list[str], cwd: Path | None = None) -> None:
    print("+", " ".join(argv), file=sys.stderr)
    subprocess.run(argv, cwd=cwd, check=True)


def build(jobs: int = 2) -> Path:
    """Build llama-server into the cache (if not there) and return its path. Needs pip,
    cmake and a C++ compiler; raises CalledProcessError when a step fails."""
    done = binary()
    if done is not None:
        return done
    out = _cache_dir()
    with tempfile.TemporaryDirectory(prefix="llama-server-build-") as tmp:
        work = Path(tmp)
        _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
              "--no-cache-dir", f"llama-cpp-python=={VERSION}", "-d", str(work)])  # fmt: skip
        with tarfile.open(work / f"llama_cpp_python-{VERSION}.tar.gz") as tar:
            tar.extractall(work, filter="data")
        src = work / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
        _run(["cmake", "-S", str(src), "-B", str(work / "build"), *CMAKE_ARGS])
        _run(["cmake", "--build", str(work / "build"), "--target", "llama-server", "-j", str(jobs)])
        out.mkdir(parents=True, exist_ok=True)
        tmp_bin = out / "llama-server.tmp"
        shutil.copy2(work / "build" / "bin" / "llama-server", tmp_bin)
        tmp_bin.replace(out / "llama-server")
    found = binary()
    assert found is not None
    return found


def server_argv(
    exe: Path, model: Path, port: int, *, threads: int, n_ctx: int, parallel: int, host: str = "127.0.0.1"
) -> list[str]:
    """llama-server serving `model` like llamay does: `parallel` slots sharing `n_ctx` cells,
    `threads` threads for decode and batch, prompt caching on, no web UI."""
    return [
        str(exe), "-m", str(model), "--host", host, "--port", str(port),
        "-t", str(threads), "-tb", str(threads), "-c", str(n_ctx), "-np", str(parallel),
        "--no-webui", "--log-disable",
    ]  # fmt: skip


if __name__ == "__main__":
    print(build())
