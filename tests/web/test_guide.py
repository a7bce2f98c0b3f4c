"""The integration guide: served at /docs and /api/docs, printed by `llamay docs`, and every
example in it run against a real server (tiny chat model, tiny embedder, an index, keys).

Fenced blocks: `python` and `sh` run with the guide's base URL replaced by the test server's
and LLAMAY_API_KEY set, and must exit 0; `json` must parse (the keys file is the one the
server uses); `text` lines that are llamay commands must parse with llamay's own arguments."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from llamay.api.web import guide_text
from llamay.cli.docs import guide
from llamay.cli.main import build_parser
from tests.serverproc import ServerProc

GUIDE_BASE = "http://localhost:11435"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def blocks(kind: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(guide()) if lang == kind]


def keys_file_of_guide() -> dict[str, object]:
    (only,) = blocks("json")
    return dict(json.loads(only))


@pytest.fixture(scope="module")
def guide_server(indexed_server: ServerProc) -> ServerProc:
    return indexed_server


def admin_key() -> str:
    entries = keys_file_of_guide()["keys"]
    assert isinstance(entries, list)
    return next(str(e["key"]) for e in entries if e.get("role") == "admin")


def test_the_guide_is_served_and_printed(guide_server: ServerProc) -> None:
    md = httpx.get(guide_server.base + "/api/docs")
    assert md.status_code == 200 and md.headers["content-type"].startswith("text/markdown")
    assert md.text == guide() == guide_text()
    page = httpx.get(guide_server.base + "/docs").text
    for heading in ["OpenAI clients", "Anthropic clients", "Ollama clients", "Streaming", "Tools, tool_choice",
                    "Thinking", "Structured output", "Contexts and sessions", "The Responses API",
                    "Retrieval", "Keys"]:
        assert f">{heading}" in page, heading
    out = subprocess.run([sys.executable, "-m", "llamay", "docs"], capture_output=True, text=True, check=True)
    assert out.stdout == guide()


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_examples_run(guide_server: ServerProc, index: int, tmp_path: Path) -> None:
    code = blocks("python")[index].replace(GUIDE_BASE, guide_server.base)
    env = {**os.environ, "LLAMAY_API_KEY": admin_key()}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert done.returncode == 0, f"{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert done.stdout.strip()


@pytest.mark.parametrize("index", range(len(blocks("sh"))))
def test_shell_examples_run(guide_server: ServerProc, index: int, tmp_path: Path) -> None:
    code = blocks("sh")[index].replace(GUIDE_BASE, guide_server.base)
    env = {**os.environ, "LLAMAY_API_KEY": admin_key(),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, f"{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    json.loads(done.stdout)  # each one prints the server's JSON answer


def test_command_lines_parse() -> None:
    lines = [ln for body in blocks("text") for ln in body.splitlines() if ln.startswith("llamay ")]
    assert lines
    for line in lines:
        build_parser().parse_args(shlex.split(line)[1:])


def test_examples_without_a_key_are_refused(guide_server: ServerProc) -> None:
    """The examples pass because of the key they send: the server does want one."""
    r = httpx.post(guide_server.base + "/v1/chat/completions", json={"messages": []})
    assert r.status_code == 401
