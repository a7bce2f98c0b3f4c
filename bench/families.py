"""The family matrix (tests/model/test_families.py) against llamay and against llama.cpp's
own `llama-server --jinja`, built from the same llama.cpp source (bench/serve/llama_server.py),
on the same tiny models: every family x route x check, both counts side by side.

    .venv/bin/python -m bench.families                     # all families
    .venv/bin/python -m bench.families qwen3 hermes-3      # some

Both servers get the same context, eight parallel slots and a thinking budget of the
matrix's size (`-reasoning-budget` / `--reasoning-budget`). llama-server has no Ollama API,
so its Ollama cells fail; the JSON says how many cells each route has. Prints one JSON
object: per family the cells passed by each server and the ones llamay failed, then totals.
"""

from __future__ import annotations

import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import print_json
from bench.serve.llama_server import build, server_argv
from llamay.testing.families import FAMILIES, write_family
from llamay.testing.server import free_port, llamay_serve_argv, start_server
from tests.model.family_cells import BUDGET, CHECKS, Server
from tests.model.test_families import CELLS


def run_cells(base: str, family: str) -> dict[str, str]:
    """Each cell's failure (its last line) or "" when it passed, against the server at `base`."""
    server = Server(base, FAMILIES[family])

    def run(cell: tuple[str, str]) -> str:
        route, check = cell
        try:
            CHECKS[route][check](server)
        except Exception:
            return traceback.format_exc().strip().splitlines()[-1][:300]
        return ""

    with ThreadPoolExecutor(8) as pool:
        return dict(zip([f"{r}/{c}" for r, c in CELLS], pool.map(run, CELLS), strict=True))


def measure(family: str, folder: Path, exe: Path) -> dict[str, Any]:
    model = write_family(family, folder / f"{family}.gguf")
    port = free_port()
    argv = llamay_serve_argv(model, port, "-ctx", "8192", "-concurrency", "8", "-reasoning-budget", str(BUDGET))
    with start_server("llamay", argv, port, env={"LLAMAY_HOME": str(folder / "home")}):
        ours = run_cells(f"http://127.0.0.1:{port}", family)
    port = free_port()
    argv = [*server_argv(exe, model, port, threads=2, n_ctx=8192, parallel=8), "--jinja",
            "--reasoning-budget", str(BUDGET)]  # fmt: skip
    with start_server("llama-server", argv, port):
        theirs = run_cells(f"http://127.0.0.1:{port}", family)
    return {
        "cells": len(CELLS),
        "llamay": sum(not v for v in ours.values()),
        "llama_server": sum(not v for v in theirs.values()),
        "llamay_failed": {k: v for k, v in ours.items() if v},
        "llama_server_failed": sorted(k for k, v in theirs.items() if v),
    }


def main(argv: list[str]) -> None:
    names = argv or list(FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise SystemExit(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
    exe = build()
    t0 = time.perf_counter()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-families-") as tmp:
        for name in names:
            folder = Path(tmp) / name
            folder.mkdir()
            results[name] = measure(name, folder, exe)
            print(f"{name}: llamay {results[name]['llamay']}, llama-server {results[name]['llama_server']} "
                  f"of {len(CELLS)}", file=sys.stderr, flush=True)  # fmt: skip
    routes = {r: sum(1 for rr, _ in CELLS if rr == r) for r in CHECKS}
    print_json({
        "families": results,
        "cells_per_family": len(CELLS),
        "cells_per_route": routes,
        "total": {
            "cells": len(CELLS) * len(names),
            "llamay": sum(r["llamay"] for r in results.values()),
            "llama_server": sum(r["llama_server"] for r in results.values()),
        },
        "seconds": round(time.perf_counter() - t0, 1),
    })  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
