"""`llamay run` as people use it: an interactive chat in a pseudo-terminal (in this process or on
a running server), one answer to a prompt, a prompt piped in."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.serverproc import ServerProc, free_port, start_server

NOWHERE = {"LLAMAY_HOST": f"127.0.0.1:{free_port()}"}  # no server answers here


def _own_terminal() -> None:
    """In the child: a new session whose controlling terminal is the pseudo-terminal, so
    that Ctrl-C typed there is a SIGINT to it, as in a real terminal. SIGINT is reset to its
    default, as a shell does for a job in the foreground: a test run started in the
    background (`cmd &` without job control) would otherwise pass down "ignore SIGINT"."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A process on a pseudo-terminal: what it prints is read as a terminal shows it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, preexec_fn=_own_terminal, close_fds=True
        )
        os.close(slave)
        self.fd = master
        self.seen = b""

    def expect(self, marker: bytes, timeout: float = 90.0) -> bytes:
        """Read until `marker`; return what came before it (and consume both)."""
        deadline = time.monotonic() + timeout
        while marker not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {marker!r} within {timeout:.0f}s; the screen:\n{self.seen!r}")
            ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # the process closed the terminal
                    chunk = b""
                if not chunk and self.proc.poll() is not None:
                    raise AssertionError(f"exited before {marker!r}; the screen:\n{self.seen!r}")
                self.seen += chunk
        before, _, self.seen = self.seen.partition(marker)
        return before

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def close(self) -> int:
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            os.close(self.fd)


def llamay(*args: str) -> list[str]:
    return [sys.executable, "-m", "llamay", "run", *args]


def env(extra: dict[str, str], home: Path) -> dict[str, str]:
    return {**os.environ, "LLAMAY_HOME": str(home), "TERM": "xterm", **extra}


def answer_of(screen: bytes, typed: str) -> str:
    """The answer printed after the echo of the line typed."""
    text = screen.decode(errors="replace").replace("\r\n", "\n")
    return text.split(typed, 1)[1].strip("\n")


@pytest.fixture
def chat_home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_interactive_chat_in_this_process(tiny_model_path: Path, chat_home: Path) -> None:
    once = subprocess.run(
        llamay(str(tiny_model_path), "hello", "-temp", "0", "-n", "8"),
        capture_output=True, text=True, env=env(NOWHERE, chat_home), timeout=120, check=True,
    )  # fmt: skip
    t = Terminal(llamay(str(tiny_model_path), "-temp", "0", "-n", "8"), env(NOWHERE, chat_home))
    try:
        assert b"100%" in t.expect(b">>> ")  # the load's progress bar ran to the end
        t.send("hello\n")
        screen = t.expect(b">>> ")
        assert answer_of(screen, "hello") == once.stdout.strip("\n")
        t.send("/set verbose\n")
        t.expect(b">>> ")
        t.send("and again\n")
        stats = t.expect(b">>> ").decode()
        # The second turn's prompt holds the first turn, most of it reused from the cache.
        assert "cached" in stats and " 0 cached" not in stats
        t.send("/set parameter temperature 0.5\n")
        assert b"Set parameter" in t.expect(b">>> ")
        t.send("/show parameters\n")
        assert b"temperature  0.5" in t.expect(b">>> ")
        t.send("/set parameter temperature warm\n")
        assert b"not a valid float" in t.expect(b">>> ")
        t.send("/clear\n")
        assert b"Cleared" in t.expect(b">>> ")
        t.send('"""\nfirst line\nsecond line\n"""\n')
        assert b"... " in t.expect(b">>> ")  # continuation prompts, then an answer
        t.send("/nonsense\n")
        assert b"Unknown command" in t.expect(b">>> ")
        t.send("/bye\n")
        assert t.close() == 0
    finally:
        if t.proc.poll() is None:
            t.close()


def test_ctrl_c_stops_an_answer_and_the_chat_goes_on(tiny_model_path: Path, chat_home: Path) -> None:
    t = Terminal(llamay(str(tiny_model_path), "-temp", "0", "-n", "1900"), env(NOWHERE, chat_home))
    try:
        t.expect(b">>> ")
        t.send("write a long story\n")
        t.expect(b"write a long story")
        t.expect(b" ")  # the answer has begun
        t.send("\x03")
        assert b"(stopped)" in t.expect(b">>> ", timeout=60)
        t.send("/show info\n")
        assert b"turns: 0" in t.expect(b">>> ")  # the stopped turn is not remembered
        t.send("\x04")  # Ctrl-D leaves too
        assert t.close() == 0
    finally:
        if t.proc.poll() is None:
            t.close()


def test_thinking_is_shown_apart_and_dimmed(tiny_think_model_path: Path, chat_home: Path) -> None:
    t = Terminal(llamay(str(tiny_think_model_path), "-temp", "0", "-n", "12"), env(NOWHERE, chat_home))
    try:
        t.expect(b">>> ")
        t.send("why\n")
        screen = t.expect(b">>> ")
        assert b"Thinking..." in screen and b"\x1b[2m" in screen
        assert b"<think>" not in screen and b"</think>" not in screen
        t.send("/bye\n")
        assert t.close() == 0
    finally:
        if t.proc.poll() is None:
            t.close()


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    with start_server(tiny_model_path, home=tmp_path_factory.mktemp("run-server")) as s:
        yield s


def test_chat_uses_a_running_server(server: ServerProc, chat_home: Path) -> None:
    host = {"LLAMAY_HOST": server.base.removeprefix("http://")}
    t = Terminal(llamay("-temp", "0", "-n", "8"), env(host, chat_home))
    try:
        assert b"loading" not in t.expect(b">>> ")  # nothing loaded here
        t.send("/show info\n")
        assert f"answered by: {server.base}".encode() in t.expect(b">>> ")
        t.send("hello\n")
        screen = t.expect(b">>> ")
        t.send("/bye\n")
        assert t.close() == 0
    finally:
        if t.proc.poll() is None:
            t.close()
    direct = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0).chat.completions.create(
        model="", messages=[{"role": "user", "content": "hello"}], temperature=0, max_tokens=8
    )
    assert answer_of(screen, "hello") == (direct.choices[0].message.content or "").strip("\n")


def test_one_answer_to_a_piped_prompt(server: ServerProc, chat_home: Path) -> None:
    host = {"LLAMAY_HOST": server.base.removeprefix("http://")}
    piped = subprocess.run(
        llamay("-temp", "0", "-n", "8"), input="hello\n", capture_output=True, text=True,
        env=env(host, chat_home), timeout=120, check=True,
    )  # fmt: skip
    given = subprocess.run(
        llamay("", "hello", "-temp", "0", "-n", "8"), capture_output=True, text=True,
        env=env(host, chat_home), timeout=120, check=True,
    )  # fmt: skip
    assert piped.stdout == given.stdout and piped.stdout.strip()
    assert ">>>" not in piped.stdout and "\x1b" not in piped.stdout  # not a terminal: plain text
    empty = subprocess.run(
        llamay("-n", "8"), input="  \n", capture_output=True, text=True, env=env(host, chat_home), timeout=60
    )
    assert empty.returncode == 1 and "empty" in empty.stderr


def test_a_reader_that_leaves_early_gets_no_traceback(tiny_model_path: Path, chat_home: Path) -> None:
    proc = subprocess.Popen(
        llamay(str(tiny_model_path), "tell me everything", "-temp", "0", "-n", "1500"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(NOWHERE, chat_home),
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(5)  # as `| head -c 5` does: read a little, then leave
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(120) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_a_model_the_server_has_not_loaded_loads_there_with_a_bar(
    server: ServerProc, chat_home: Path, tiny_think_model_path: Path
) -> None:
    import httpx

    r = httpx.post(
        server.base + "/api/pull",
        json={"model": str(tiny_think_model_path), "name": "second", "stream": False},
    )
    assert r.status_code == 200, r.text
    host = {"LLAMAY_HOST": server.base.removeprefix("http://")}
    t = Terminal(llamay("second", "-temp", "0", "-n", "4"), env(host, chat_home))
    try:
        screen = t.expect(b">>> ")
        assert b"loading second on " + server.base.encode() in screen and b"100%" in screen
        t.send("/bye\n")
        assert t.close() == 0
    finally:
        if t.proc.poll() is None:
            t.close()
    assert "second" in {
        m["name"].removesuffix(":latest") for m in httpx.get(server.base + "/health").json()["models"]
    }
