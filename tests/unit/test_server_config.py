"""`llamay serve`'s flags and environment parse into one typed, frozen ServerConfig; a bad
value is one clear line naming the flag, before anything is bound or loaded."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from llamay.cli.main import build_parser, main
from llamay.cli.serve import config_from_args
from llamay.config import ConfigError, RuntimeConfig, ServerConfig, ServerLimits

ENV = ("LLAMAY_API_KEY", "LLAMAY_SNAPSHOT_KEY", "LLAMAY_FINISH_TOOL", "LLAMAY_ADMISSION", "LLAMAY_HOME")


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def parse(*argv: str) -> ServerConfig:
    return config_from_args(build_parser().parse_args(["serve", *argv]))


def test_no_flags_is_the_default_config(home: Path) -> None:
    # The flags' defaults are the config's own: nothing is said twice.
    assert parse() == ServerConfig(runtime=RuntimeConfig(home=home))


@pytest.mark.parametrize("dash", ["-", "--"])
def test_every_serve_flag_sets_its_field(dash: str, home: Path, tmp_path: Path) -> None:
    flags = {
        "model": "tiny.gguf", "addr": "0.0.0.0:8080", "concurrency": "3", "queue": "5", "ctx": "1024",
        "batch": "64", "max-tokens": "99", "reasoning-budget": "300", "finish-tool": "auto", "admission": "fcfs", "threads": "2", "temp": "0.5",
        "top-p": "0.9", "top-k": "7", "min-p": "0.1", "repeat-penalty": "1.2", "kv": "q8_0",
        "flash-attn": "off", "cache-ram": "16", "chat-template": "t.jinja", "embed": "all-minilm",
        "rerank": "ranker", "index": "docs.idx", "max-loaded": "4", "keepalive": "1m", "keys": "keys.json",
        "max-connections": "9", "max-connections-per-address": "4", "header-timeout": "3s", "body-timeout": "90s", "log-level": "DEBUG",
        "max-body": "8M", "max-field": "512", "responses-per-key": "1G", "responses-total": "2048K",
        "response-ttl": "1h", "speculate": "off", "draft-max": "3", "draft": "smollm2:135m",
    }  # fmt: skip
    argv = [part for name, value in flags.items() for part in (f"{dash}{name}", value)]
    got = parse(*argv)
    here = Path.cwd()
    want = ServerConfig(
        model="tiny.gguf", host="0.0.0.0", port=8080,
        runtime=RuntimeConfig(
            ctx=1024, batch=64, threads=2, concurrency=3, max_queue=5, kv_type="q8_0", flash_attn=False,
            cache_ram=16 * 2**20, chat_template_file=here / "t.jinja", home=home, max_tokens=99, reasoning_budget=300,
            temperature=0.5, top_p=0.9, top_k=7, min_p=0.1, repeat_penalty=1.2, finish_tool="auto",
            admission="fcfs", speculate=False, draft_max=3, draft="smollm2:135m",
        ),
        limits=ServerLimits(max_connections=9, max_connections_per_address=4, header_timeout=3.0, body_timeout=90.0, max_body=8 * 2**20,
                            max_field=512, responses_per_key=2**30, responses_total=2 * 2**20, response_ttl=3600.0),
        max_loaded=4, keep_alive=60.0, embed="all-minilm", rerank="ranker", index=here / "docs.idx",
        keys=here / "keys.json", log_level="DEBUG",
    )  # fmt: skip
    assert got == want
    # Every field of every group differs from its default: no flag is left unread.
    default = ServerConfig()
    for group, base in ((got, default), (got.runtime, default.runtime), (got.limits, default.limits)):
        same = [f.name for f in dataclasses.fields(base) if getattr(group, f.name) == getattr(base, f.name)]
        assert set(same) <= {"runtime", "limits", "api_key", "snapshot_key", "keep_alive_timeout"}, same


def test_the_environment_is_read_once_into_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMAY_API_KEY", "admin-secret")
    monkeypatch.setenv("LLAMAY_SNAPSHOT_KEY", "a-snapshot-key-of-some-length")
    monkeypatch.setenv("LLAMAY_FINISH_TOOL", "auto")
    monkeypatch.setenv("LLAMAY_ADMISSION", "fcfs")
    got = parse()
    assert got.runtime.admission == "fcfs" and parse("-admission", "fair").runtime.admission == "fair"
    assert got.api_key == "admin-secret" and got.snapshot_key == "a-snapshot-key-of-some-length"
    assert got.runtime.finish_tool == "auto" and parse("-finish-tool", "off").runtime.finish_tool == "off"
    assert "admin-secret" not in repr(got) and "a-snapshot-key" not in repr(got)
    assert got.key_ring().enabled
    monkeypatch.delenv("LLAMAY_API_KEY")
    assert not parse().key_ring().enabled


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-max-tokens", "0"], "-max-tokens must be at least 1, not 0"),
        (["-concurrency", "0"], "-concurrency must be at least 1, not 0"),
        (["-queue", "-1"], "-queue must be at least 0, not -1"),
        (["-ctx", "-5"], "-ctx must be at least 0, not -5"),
        (["-batch", "0"], "-batch must be at least 1, not 0"),
        (["-finish-tool", "sometimes"], "-finish-tool must be off or auto, not 'sometimes'"),
        (["-admission", "lifo"], "-admission must be fair or fcfs, not 'lifo'"),
        (["-temp", "3"], "-temp must be between 0 and 2"),
        (["-top-p", "1.5"], "top_p"),
        (["-header-timeout", "0"], "-header-timeout must be positive, not 0.0"),
        (["-max-connections", "0"], "-max-connections must be positive, not 0"),
        (["-max-field", "0"], "-max-field must be positive, not 0"),
        (["-response-ttl", "0s"], "-response-ttl must be positive, not 0.0"),
        (["-max-loaded", "0"], "-max-loaded must be at least 1, not 0"),
        (["-cache-ram", "-1"], "-cache-ram must be 0 MiB or more, not -1"),
        (["-addr", "localhost"], "-addr must be HOST:PORT, not 'localhost'"),
        (["-addr", "localhost:70000"], "-addr: the port must be from 0 to 65535, not 70000"),
        (
            ["-log-level", "LOUD"],
            "-log-level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, not 'LOUD'",
        ),
        (["-keepalive", "nan"], "-keepalive must be a duration, not NaN"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_flag(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # -m names a file that is not there: were the value let through, the error would be another.
    model = str(tmp_path / "absent.gguf")
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse("-m", model, *argv)
    for verb in (["serve"], ["fleet", "up"]):
        assert main([*verb, "-m", model, "-addr", "127.0.0.1:0", *argv]) == 1
        err = capsys.readouterr().err
        assert err.startswith("llamay: ") and message in err and err.count("\n") == 1, err


def test_a_bad_environment_value_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMAY_FINISH_TOOL", "maybe")
    with pytest.raises(ConfigError, match="-finish-tool must be off or auto, not 'maybe'"):
        parse()
    monkeypatch.setenv("LLAMAY_FINISH_TOOL", "off")
    monkeypatch.setenv("LLAMAY_SNAPSHOT_KEY", "short")
    with pytest.raises(ConfigError, match="LLAMAY_SNAPSHOT_KEY must be at least 16 characters"):
        parse()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-flash-attn", "maybe"], "argument -flash-attn/--flash-attn: invalid choice: 'maybe'"),
        (["-kv", "q4"], "argument -kv/--kv: invalid choice: 'q4'"),
        (["-keepalive", "soon"], "not a duration: 'soon' (use e.g. 30s, 5m, 1h)"),
        (["-ctx", "big"], "argument -ctx/--ctx: invalid int value: 'big'"),
    ],
)
def test_a_value_of_the_wrong_kind_is_a_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_config_made_in_code_is_checked_as_well() -> None:
    with pytest.raises(ConfigError, match="-kv must be one of f16, f32, q8_0, not 'q4'"):
        ServerConfig(runtime=RuntimeConfig(kv_type="q4"))
    with pytest.raises(ConfigError, match="-body-timeout must be positive"):
        ServerConfig(limits=ServerLimits(body_timeout=float("nan")))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ServerConfig().port = 1  # type: ignore[misc]
