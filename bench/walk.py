"""The walk of one request: which llamay files its code runs in, outside the engine thread.

    .venv/bin/python -m bench.walk [--rounds N]

Serves a tiny model with `llamay serve` in this process, sends one streamed OpenAI chat
request with a `json_schema` (greedy, `max_tokens` 32) from another thread, and records
with a profiler, from the request's first byte to its last: the llamay files whose code runs
(`files`), the distinct caller -> callee file pairs (`hand_offs`), the calls from one file
into another (`crossings`) and the entries into llamay code on a worker thread with no llamay code below it on that thread's stack
(`worker_hops`: each is a job handed to a thread pool). The engine
thread's own loop is left out: it is the same whatever the front end. A warm-up request
runs first, so one-off work (compiling the schema, loading lazily imported modules) is not
counted. Prints one JSON object; `features_since` lists the files on the path that exist for
features added after the route-built path was first measured, and `*_without_features`
leaves those out (and the hand-offs in FEATURE_PAIRS), so two commits compare on the same
features.

It imports only `llamay.cli` and `llamay.testing`, so the same file measures any commit:
run it with that commit's tree first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

# Files and file pairs on this path that exist for features added after the route-built
# path was first measured, so the two can be compared on the same features.
FEATURES_SINCE = (
    "api/variance.py",  # the batch-invariance header
    "engine/tenants.py",  # fair admission by tenant
    "grammar/layout.py",  # the JSON layout
    "grammar/closing.py",  # its shortest endings
    "chat/polyfill.py",  # template polyfills for other families
)
FEATURE_PAIRS = frozenset(
    {
        ("chat/pipeline.py", "auth.py"),  # the principal as the request's tenant
        ("api/openai/schemas.py", "chat/flow.py"),  # reasoning effort as a thinking budget
        ("chat/flow.py", "engine/engine.py"),  # the room check: the context's size,
        ("chat/flow.py", "engine/request.py"),  # whether the plan is judged,
        ("chat/flow.py", "grammar/constraint.py"),  # the shortest answer
    }
)

SCHEMA = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}

MAX_TOKENS = 32


class Walk:
    """A profile hook that records file crossings while `on` is set, on every thread but the
    engine's (and encoders')."""

    def __init__(self, root: Path) -> None:
        self.root = str(root) + os.sep
        self.on = False
        self.files: set[str] = set()
        self.pairs: set[tuple[str, str]] = set()
        self.crossings = 0
        self.worker_hops = 0
        self.main = threading.main_thread()
        self._names: dict[str, str | None] = {}

    def _name(self, filename: str) -> str | None:
        name = self._names.get(filename, "")
        if name == "":
            name = filename[len(self.root) :] if filename.startswith(self.root) else None
            self._names[filename] = name
        return name

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not self.on:
            return
        thread = threading.current_thread()
        if thread.name.startswith(("llamay-engine", "encoder-")):
            return
        callee = self._name(frame.f_code.co_filename)
        if callee is None:
            return
        self.files.add(callee)
        back = frame.f_back
        caller = self._name(back.f_code.co_filename) if back is not None else None
        if caller is None:
            if thread is not self.main and thread.name != "walk-client" and not self._inside(back):
                self.worker_hops += 1
            return
        if caller != callee:
            self.pairs.add((caller, callee))
            self.crossings += 1

    def _inside(self, frame: FrameType | None) -> bool:
        """Whether llamay code is below `frame` on its stack (a callback from a library that
        llamay code called, such as Jinja's, is not a new hop)."""
        while frame is not None:
            if self._name(frame.f_code.co_filename) is not None:
                return True
            frame = frame.f_back
        return False

    def install(self) -> None:
        sys.setprofile(self.hook)
        threading.setprofile(self.hook)

    def report(self) -> dict[str, Any]:
        def without(names: set[str]) -> set[str]:
            return {n for n in names if not n.endswith(FEATURES_SINCE)}

        pairs = sorted(self.pairs)
        kept = [
            p
            for p in pairs
            if p not in FEATURE_PAIRS and not (p[0].endswith(FEATURES_SINCE) or p[1].endswith(FEATURES_SINCE))
        ]
        return {
            "files": len(self.files),
            "hand_offs": len(pairs),
            "worker_hops": self.worker_hops,
            "crossings": self.crossings,
            "features_since": sorted(n for n in self.files if n.endswith(FEATURES_SINCE)),
            "files_without_features": len(without(self.files)),
            "hand_offs_without_features": len(kept),
            "file_list": sorted(self.files),
            "hand_off_list": [f"{a} -> {b}" for a, b in pairs],
        }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _request(client: httpx.Client, base: str, model: str) -> None:
    body = {
        "model": model,
        "stream": True,
        "temperature": 0,
        "max_tokens": MAX_TOKENS,
        "messages": [{"role": "user", "content": "Name a person and their age."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}},
    }
    with client.stream("POST", f"{base}/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{resp.status_code}: {resp.read()[:300]!r}")
        for _ in resp.iter_lines():
            pass


def _client(base: str, walk: Walk, rounds: int, out: dict[str, Any], done: Callable[[], None]) -> None:
    try:
        with httpx.Client(timeout=60) as client:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if client.get(f"{base}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the server did not come up in 120 s")
                time.sleep(0.1)
            model = client.get(f"{base}/v1/models").json()["data"][0]["id"]
            _request(client, base, model)  # warm-up: compile, lazy imports
            walk.on = True
            for _ in range(rounds):
                _request(client, base, model)
            walk.on = False
    except BaseException as exc:  # reported, then the server is stopped either way
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        done()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=1, help="requests recorded (default 1)")
    args = parser.parse_args(argv)
    import llamay
    from llamay.cli.main import main as cli_main
    from llamay.testing.tiny_gguf import write_tiny_llama

    root = Path(llamay.__file__).resolve().parent
    walk = Walk(root)
    out: dict[str, Any] = {"llamay": str(root)}
    with tempfile.TemporaryDirectory() as tmp:
        model = write_tiny_llama(Path(tmp) / "tiny.gguf")
        os.environ["LLAMAY_HOME"] = str(Path(tmp) / "home")
        base = f"http://127.0.0.1:{_free_port()}"
        port = base.rsplit(":", 1)[1]
        stop = lambda: os.kill(os.getpid(), signal.SIGINT)  # noqa: E731 - serve stops on Ctrl-C
        client = threading.Thread(
            target=_client, args=(base, walk, args.rounds, out, stop), name="walk-client", daemon=True
        )
        walk.install()
        client.start()
        with contextlib.suppress(KeyboardInterrupt):
            cli_main(["serve", "-m", str(model), "-addr", f"127.0.0.1:{port}"])
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        client.join(timeout=30)
    out.update(walk.report())
    print(json.dumps(out, indent=2))
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main())
