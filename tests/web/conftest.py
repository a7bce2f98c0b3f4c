"""Fixtures of the web tier: real servers on tiny models, and headless Chromium driven by
Playwright. Chromium comes from the system's packages (`setup.sh test` installs Debian's when
it runs as root); without it the browser tests are skipped and say why."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llamay.cli.main import main
from llamay.convert import convert_bert
from llamay.testing import write_tiny_llama, write_tiny_think_llama
from llamay.testing.tiny_bert import write_tiny_bert
from tests.serverproc import ServerProc, start_server

USER_KEY = "user-key-0123456789"
ADMIN_KEY = "admin-key-0123456789"


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny-model") / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    """A server without keys (the single local user, an admin). A big context, so a reply
    whose end-of-generation tokens are banned streams until the test stops it."""
    home = tmp_path_factory.mktemp("web-home")
    with start_server(tiny_model_path, "-ctx", "8192", "-concurrency", "4", home=home) as s:
        yield s


@pytest.fixture(scope="session")
def think_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    """A server on the tiny reasoning model (`<think>` ... `</think>` before its answer)."""
    root = tmp_path_factory.mktemp("web-think")
    with start_server(write_tiny_think_llama(root / "think.gguf"), "-ctx", "4096", home=root / "h") as s:
        yield s


@pytest.fixture(scope="session")
def indexed_server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    """A server with keys (the guide's own keys file), a tiny embedder and an index of one
    Markdown file, so retrieval answers."""
    from .test_guide import keys_file_of_guide  # the guide is the source of the keys file

    root = tmp_path_factory.mktemp("web-indexed")
    embed = convert_bert(write_tiny_bert(root / "embed-hf"), root / "embed.gguf").path
    docs = root / "docs"
    docs.mkdir()
    (docs / "contexts.md").write_text(
        "# Contexts\n\nHow do I fork a context? A fork shares its pages.\n\n"
        "Snapshots <b>move</b> a context to another server.\n"
    )
    index = root / "docs.sqlite"
    assert main(["index", "build", str(docs), "-o", str(index), "-embed", str(embed), "-threads", "1"]) == 0
    keys = root / "keys.json"
    keys.write_text(json.dumps(keys_file_of_guide()))
    args = ["-keys", str(keys), "-index", str(index), "-embed", str(embed), "-ctx", "4096"]
    with start_server(tiny_model_path, *args, home=root / "home") as s:
        yield s


@pytest.fixture(scope="session")
def keyed_server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    home = tmp_path_factory.mktemp("web-keyed")
    keys = home / "keys.json"
    keys.write_text(
        json.dumps(
            {
                "keys": [
                    {"key": USER_KEY, "principal": "ana", "groups": ["sales"], "role": "user"},
                    {"key": ADMIN_KEY, "principal": "ops", "role": "admin"},
                ]
            }
        )
    )
    with start_server(tiny_model_path, "-keys", str(keys), home=home / "h") as s:
        yield s


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    exe = chromium_path()
    if exe is None:
        pytest.skip("no Chromium here: `./setup.sh test` installs Debian's chromium when run as root")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (it is in the 'test' extra)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    """A fresh desktop-sized tab that fails the test on any script error or alert."""
    context = browser.new_context(viewport={"width": 1280, "height": 800}, accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(20_000)
    problems: list[str] = []
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    pg.problems = problems
    yield pg
    context.close()
    assert not problems, problems
