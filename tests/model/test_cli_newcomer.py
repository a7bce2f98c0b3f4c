"""The CLI a newcomer meets, against a real `llamay serve` process and, where the terminal
matters, in a pseudo-terminal: `run TEXT` as a prompt, the way to pull a missing model, one
server address for every verb, `ps` saying Forever, `show`'s summary, plain `rm` errors, a
mistyped flag answered by its verb, and no asyncio noise at exit."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.model.test_run_interactive import Terminal, answer_of
from tests.serverproc import ServerProc, free_port, start_server

NOWHERE = f"127.0.0.1:{free_port()}"  # no server answers here
NOISE = (b"Task was destroyed", b"Traceback", b"was never awaited", b"Exception ignored")


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "llamay", *args]


def env_of(home: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("LLAMAY_HOST", "LLAMAY_URL", "LLAMAY_API_KEY")}
    return {**base, "LLAMAY_HOME": str(home), "TERM": "xterm", **extra}


def run(argv: list[str], env: dict[str, str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, **kw)  # type: ignore[call-overload, no-any-return]


def screen_at_exit(t: Terminal, timeout: float = 120.0) -> tuple[int, bytes]:
    """Everything the process printed on its terminal until it closed it, and its exit status."""
    chunks = [t.seen]
    ready = True
    while ready:
        ready = bool(select.select([t.fd], [], [], timeout)[0])
        try:
            chunk = os.read(t.fd, 65536) if ready else b""
        except OSError:  # the process closed the terminal
            chunk = b""
        if not chunk:
            break
        chunks.append(chunk)
    assert ready, f"still running after {timeout:.0f}s; the screen:\n{b''.join(chunks)!r}"
    code = t.close()
    return code, b"".join(chunks).replace(b"\r\n", b"\n")


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    with start_server(tiny_model_path, home=tmp_path_factory.mktemp("newcomer-server")) as s:
        yield s


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def host_of(server: ServerProc) -> str:
    return server.base.removeprefix("http://")


def test_run_text_alone_is_a_prompt_for_the_default_model(server: ServerProc, home: Path) -> None:
    env = env_of(home, LLAMAY_HOST=host_of(server))
    t = Terminal(cli("run", "Say hello.", "-temp", "0", "-n", "8"), env)
    code, screen = screen_at_exit(t)
    assert code == 0, screen
    assert b">>>" not in screen and b"not found" not in screen  # one answer, no chat opened
    assert not any(noise in screen for noise in NOISE), screen
    named = run(cli("run", "", "Say hello.", "-temp", "0", "-n", "8"), env, check=True)
    assert screen.decode().strip("\n") == named.stdout.strip("\n") and named.stdout.strip()
    word = run(cli("run", "hello", "-temp", "0", "-n", "8"), env, check=True)
    assert word.stdout == run(cli("run", "", "hello", "-temp", "0", "-n", "8"), env, check=True).stdout


def test_a_missing_model_names_the_pull_before_any_chat(server: ServerProc, home: Path) -> None:
    t = Terminal(cli("run", "nosuch:model"), env_of(home, LLAMAY_HOST=host_of(server)))
    code, screen = screen_at_exit(t)
    assert code == 1 and b">>>" not in screen  # no chat opened with a model that is not there
    assert b"model 'nosuch:model' not found" in screen and b"llamay pull nosuch:model" in screen
    here = run(cli("run", "nosuch:model", "hi"), env_of(home, LLAMAY_HOST=NOWHERE))
    assert here.returncode == 1 and "llamay pull nosuch:model" in here.stderr
    assert "Traceback" not in here.stderr


def test_every_verb_finds_the_server_by_one_name(
    server: ServerProc, home: Path, tiny_think_model_path: Path
) -> None:
    by_flag = run(cli("ps", "-host", host_of(server)), env_of(home))
    by_env = run(cli("ps"), env_of(home, LLAMAY_HOST=host_of(server)))
    by_old_flag = run(cli("ps", "-url", server.base), env_of(home))
    by_old_env = run(cli("ps"), env_of(home, LLAMAY_URL=server.base))
    for out in (by_flag, by_env, by_old_flag, by_old_env):
        assert out.returncode == 0 and "tiny-llama" in out.stdout, out.stderr
    # The -m model stays loaded: Forever, not a date three centuries ahead.
    row = next(line for line in by_flag.stdout.splitlines() if "tiny-llama" in line)
    assert row.rstrip().endswith("Forever")
    assert run(cli("ps"), env_of(home, LLAMAY_HOST=NOWHERE)).stderr.startswith("llamay: no server is running")
    pulled = run(cli("pull", str(tiny_think_model_path), "second", "-host", host_of(server)), env_of(home))
    assert pulled.returncode == 0, pulled.stderr
    tags = httpx.get(server.base + "/api/tags").json()["models"]
    assert "second:latest" in {m["name"] for m in tags}  # on the server's store, not here
    assert not (home / "models").exists()
    ctx = run(cli("ctx", "ls", "-host", host_of(server)), env_of(home))
    assert ctx.returncode == 0 and ctx.stdout.startswith("ID"), ctx.stderr
    assert run(cli("rm", "second"), env_of(home, LLAMAY_HOST=host_of(server))).returncode == 0


def test_rm_of_a_missing_model_says_so_plainly(server: ServerProc, home: Path) -> None:
    on_server = run(cli("rm", "absent", "-host", host_of(server)), env_of(home))
    here = run(cli("rm", "absent"), env_of(home, LLAMAY_HOST=NOWHERE))
    for out in (on_server, here):
        assert out.returncode == 1
        assert out.stderr.startswith("llamay: model 'absent' not found"), out.stderr
        assert "DELETE" not in out.stderr and "/api/" not in out.stderr and "404" not in out.stderr


def test_show_prints_a_summary_and_json_on_request(tiny_model_path: Path, home: Path) -> None:
    env = env_of(home, LLAMAY_HOST=NOWHERE)
    assert run(cli("pull", str(tiny_model_path), "tiny"), env).returncode == 0
    shown = run(cli("show", "tiny"), env)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    for line in ("architecture", "parameters", "context length", "quantization"):
        assert line in text
    assert "llama" in text and "Capabilities" in text and "completion" in text
    from llamay.store.gguf_header import read_header

    meta = read_header(tiny_model_path).metadata
    assert f"context length    {meta['llama.context_length']}" in text
    assert "Template" in text and "present" in text and "-template prints it" in text
    assert "{%" not in text  # the template is named, not dumped
    template = run(cli("show", "tiny", "-template"), env).stdout
    assert template.strip() == meta["tokenizer.chat_template"].strip()
    raw = json.loads(run(cli("show", "tiny", "-json"), env).stdout)
    assert raw["name"] == "tiny:latest" and f"sha256:{raw['sha256'][:12]}" in text
    missing = run(cli("show", "nosuch"), env)
    assert missing.returncode == 1 and "llamay pull nosuch" in missing.stderr


def test_a_mistyped_flag_in_a_terminal_gets_that_verbs_usage(home: Path) -> None:
    t = Terminal(cli("run", "-tmep", "0", "hi"), env_of(home, LLAMAY_HOST=NOWHERE))
    code, screen = screen_at_exit(t)
    assert code == 2
    assert screen.startswith(b"usage: llamay run") and b"did you mean -temp?" in screen


def test_a_chat_stopped_mid_answer_leaves_without_asyncio_noise(server: ServerProc, home: Path) -> None:
    t = Terminal(cli("run", "-temp", "0", "-n", "1500"), env_of(home, LLAMAY_HOST=host_of(server)))
    t.expect(b">>> ")
    t.send("write a long story\n")
    t.expect(b"write a long story")
    t.expect(b" ")  # the answer has begun
    t.send("\x03")
    assert b"(stopped)" in t.expect(b">>> ", timeout=60)
    t.send("hello\n")
    assert answer_of(t.expect(b">>> "), "hello")
    t.send("/bye\n")
    code, screen = screen_at_exit(t)
    assert code == 0
    assert not any(noise in screen for noise in NOISE), screen
