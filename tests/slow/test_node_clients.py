"""The official Node SDKs against a real `llamay serve` on a tiny generated model: openai-node,
the Vercel AI SDK (its OpenAI and OpenAI-compatible providers), ollama-js and the Anthropic SDK
with its tool runner. Each script in tests/node is a `node:test` file run as a subprocess; the
pinned packages come from tests/node/package-lock.json, installed by `./setup.sh test`
(`npm ci --prefix tests/node`). Random weights say nothing sensible: the scripts check shapes
and what the server guarantees (valid JSON against the schema, well-formed calls, a stream that
assembles to the whole answer, usage counted once). The table these back is docs/clients.md."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamay.testing import write_tiny_llama
from tests.serverproc import ServerProc, start_server

pytestmark = pytest.mark.slow

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
MODEL = "tiny-llama"


@pytest.fixture(scope="module")
def node() -> str:
    """The node binary, with the pinned packages installed; a failure (not a skip) otherwise."""
    found = shutil.which("node")
    if found is None:
        pytest.fail("node is not installed: ./setup.sh test installs it (Node.js 20 or newer)")
    if not (NODE_DIR / "node_modules" / ".package-lock.json").is_file():
        pytest.fail(
            f"the Node packages are not installed: run `npm ci --prefix {NODE_DIR}` (./setup.sh test does)"
        )
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    model = write_tiny_llama(tmp_path_factory.mktemp("model") / f"{MODEL}.gguf")
    with start_server(model, "-ctx", "4096", home=tmp_path_factory.mktemp("home")) as s:
        yield s


@pytest.mark.parametrize("script", ["openai.mjs", "ai-sdk.mjs", "ollama.mjs", "anthropic.mjs"])
def test_node_client(script: str, node: str, server: ServerProc) -> None:
    env = {**os.environ, "LLAMAY_BASE": server.base, "LLAMAY_MODEL": MODEL, "NO_COLOR": "1"}
    # The scripts name the server and a key themselves: the variables the SDKs would read instead
    # are dropped, so the caller's environment cannot change what runs.
    for name in (
        "OPENAI_BASE_URL",
        "ANTHROPIC_BASE_URL",
        "OLLAMA_HOST",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
    ):
        env.pop(name, None)
    try:
        done = subprocess.run(
            [node, "--test-reporter=spec", script],
            cwd=NODE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except subprocess.TimeoutExpired as e:
        # The output so far comes as bytes on POSIX, text=True or not.
        parts = (
            x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in (e.stdout, e.stderr)
        )
        out = "".join(parts)
        pytest.fail(f"{script} did not finish in {e.timeout} s:\n{out}")
    if done.returncode != 0:
        pytest.fail(f"{script} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    # node:test's summary: every test ran and passed (none skipped or left as todo).
    counts = dict(re.findall(r"^ℹ (tests|pass|fail|skipped|todo|cancelled) (\d+)$", done.stdout, re.M))
    assert int(counts.get("tests", 0)) > 0 and counts.get("pass") == counts["tests"], done.stdout
