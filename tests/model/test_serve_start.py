"""`llamay serve` says it is serving only once it is: a busy port or a bad -embed ends it
with one clear line and no banner; a good start names the settings that matter."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.serverproc import start_server


def serve(model: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LLAMAY_HOME": str(home)}
    cmd = [sys.executable, "-m", "llamay", "serve", "-m", str(model), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def test_a_busy_port_is_one_clear_line_and_no_banner(tiny_model_path: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve(tiny_model_path, tmp_path, "-addr", f"127.0.0.1:{port}")
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: the address is in use" in done.stderr
    assert "llamay serving" not in done.stderr and "PURPOSE" not in done.stderr


def test_a_missing_embedder_ends_before_the_banner(tiny_model_path: Path, tmp_path: Path) -> None:
    done = serve(tiny_model_path, tmp_path, "-addr", "127.0.0.1:0", "-embed", str(tmp_path / "none.gguf"))
    assert done.returncode == 1 and "none.gguf" in done.stderr
    assert "llamay serving" not in done.stderr and "PURPOSE" not in done.stderr


def test_the_banner_names_the_model_lifetime_settings(tiny_model_path: Path, tmp_path: Path) -> None:
    with start_server(tiny_model_path, "-max-loaded", "3", "-keepalive", "90s", home=tmp_path) as s:
        log = s.log()
    line = next(ln for ln in log.splitlines() if "llamay serving" in ln)
    assert "max_loaded=3" in line and "keep_alive=90s" in line
    assert log.index("llamay serving") < log.index("PURPOSE")


def test_llamay_reset_unloads_every_model(tiny_model_path: Path, tmp_path: Path) -> None:
    import httpx

    with start_server(tiny_model_path, home=tmp_path) as s:
        env = {**os.environ, "LLAMAY_URL": s.base, "LLAMAY_HOME": str(tmp_path)}
        done = subprocess.run(
            [sys.executable, "-m", "llamay", "reset"], capture_output=True, text=True, env=env, timeout=60
        )
        assert done.returncode == 0 and done.stdout.strip() == "unloaded tiny-llama"
        assert httpx.get(s.base + "/api/ps").json() == {"models": []}
