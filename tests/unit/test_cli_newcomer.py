"""The CLI's first-hour behaviour that needs no model: one server address for every verb,
`ps`'s expiry column, a mistyped flag answered by that verb, `run TEXT` telling a model
from a prompt, the running fleet's address record."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from llamay.cli import fleet
from llamay.cli.common import server_url
from llamay.cli.interactive import names_a_model
from llamay.cli.main import build_parser, main
from llamay.cli.models import until


@pytest.fixture(autouse=True)
def _clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LLAMAY_HOST", "LLAMAY_URL", "LLAMAY_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path / "home"))


@pytest.mark.parametrize(
    "argv",
    [
        ["run"], ["pull", "x"], ["cp", "a", "b"], ["rm", "a"], ["ps"], ["stop", "a"], ["reset"],
        ["ctx", "ls"], ["ctx", "rm", "i"], ["fleet", "status"], ["fleet", "scale", "2"], ["fleet", "down"],
    ],
)  # fmt: skip
@pytest.mark.parametrize("spelling", ["-host", "--host", "-url", "--url"])
def test_every_server_verb_takes_host_and_its_older_spelling(argv: list[str], spelling: str) -> None:
    args = build_parser().parse_args([*argv, spelling, "h:1", "-key", "k"])
    assert (args.host, args.key) == ("h:1", "k")


def test_the_address_comes_from_the_flag_then_llamay_host_then_llamay_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert server_url(None) == "http://localhost:11435"
    monkeypatch.setenv("LLAMAY_URL", "http://old:1/")
    assert server_url(None) == "http://old:1"
    monkeypatch.setenv("LLAMAY_HOST", "new:2")
    assert server_url(None) == "http://new:2"
    assert server_url("https://given:3") == "https://given:3"


def test_ps_shows_forever_and_time_left() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert until("2318-04-12T23:47:16.854775807Z", now) == "Forever"
    assert until((now + timedelta(minutes=4, seconds=30)).isoformat(), now) == "4 minutes from now"
    assert until((now + timedelta(hours=1)).isoformat().replace("+00:00", "Z"), now) == "1 hour from now"
    assert until(now.isoformat(), now) == "now"
    assert until("soon", now) == "soon"


@pytest.mark.parametrize(
    ("argv", "usage", "suggestion"),
    [
        (["run", "-tmep", "0"], "usage: llamay run", "did you mean -temp?"),
        (["ps", "-hots", "x"], "usage: llamay ps", "did you mean -host?"),
        (["show", "m", "--jsno"], "usage: llamay show", "did you mean -json?"),
        (["fleet", "status", "-kye", "k"], "usage: llamay fleet status", "did you mean -key?"),
        (["ctx", "ls", "-urll", "x"], "usage: llamay ctx ls", "did you mean -url?"),
    ],
)
def test_a_mistyped_flag_gets_that_verbs_usage_and_a_suggestion(
    argv: list[str], usage: str, suggestion: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.startswith(usage) and suggestion in err
    assert "usage: llamay [-h]" not in err  # not the top level's


def test_an_unknown_word_without_a_near_flag_is_still_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["ps", "-zzzzzzzz"])
    err = capsys.readouterr().err
    assert err.startswith("usage: llamay ps") and "unrecognized arguments: -zzzzzzzz" in err
    assert "did you mean" not in err


def test_run_text_is_a_model_or_a_prompt(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert not names_a_model("Say hello.", None)
    assert not names_a_model("hello", None)
    assert not names_a_model("What is 2+2?", {"What is 2+2?"})  # whitespace: never a name
    assert names_a_model("smollm2:135m", None)  # in the catalog, downloaded on first use
    assert names_a_model("nosuch:model", None)  # shaped like a name: reported as missing
    assert names_a_model("owner/repo", None)
    assert names_a_model(str(gguf), None)
    assert names_a_model("second", {"second", "second:latest"})  # installed on the server
    assert not names_a_model("second", set())


def test_the_fleet_record_names_a_live_fleet_only(tmp_path: Path) -> None:
    assert fleet.recorded_fleet() is None
    fleet._record("0.0.0.0", 4321)
    assert fleet.recorded_fleet() == "http://127.0.0.1:4321"
    fleet._unrecord()
    assert fleet.recorded_fleet() is None and not (tmp_path / "home" / "fleet.json").exists()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    record = tmp_path / "home" / "fleet.json"
    record.write_text(f'{{"url": "http://127.0.0.1:9", "pid": {gone.pid}}}')
    assert fleet.recorded_fleet() is None  # its process is gone: a stale record
    record.write_text(f'{{"url": "http://127.0.0.1:9", "pid": {os.getpid()}}}')
    assert fleet.recorded_fleet() == "http://127.0.0.1:9"
    record.write_text("not json")
    assert fleet.recorded_fleet() is None
