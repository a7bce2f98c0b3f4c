import logging

import pytest

from llamay.cli.logs import LogfmtFormatter, kv
from llamay.cli.main import build_parser, main
from llamay.cli.run import stats_line
from llamay.cli.serve import banner_table, parse_addr


@pytest.mark.parametrize("dash", ["-", "--"])
def test_every_serve_flag_takes_one_or_two_dashes(dash: str) -> None:
    args = build_parser().parse_args(
        [
            "serve",
            f"{dash}addr",
            "127.0.0.1:9",
            f"{dash}concurrency",
            "3",
            f"{dash}ctx",
            "512",
            f"{dash}threads",
            "1",
        ]
    )
    assert (args.addr, args.concurrency, args.ctx, args.threads) == ("127.0.0.1:9", 3, 512, 1)


def test_run_flags() -> None:
    args = build_parser().parse_args(["run", "-chat", "-n", "90", "-p", "hi", "-temp", "0", "-seed", "4"])
    assert args.chat and args.n == 90 and args.prompt == "hi" and args.temp == 0.0 and args.seed == 4


def test_serve_defaults() -> None:
    args = build_parser().parse_args(["serve"])
    assert args.addr == "localhost:11435" and args.model is None


def test_parse_addr() -> None:
    assert parse_addr("localhost:11435") == ("localhost", 11435)
    assert parse_addr(":80") == ("localhost", 80)
    assert parse_addr("[::1]:8080") == ("::1", 8080)
    with pytest.raises(ValueError):
        parse_addr("localhost")


def test_help_lists_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for verb in ("serve", "run", "version"):
        assert verb in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith("llamay ")


def test_stats_line_format() -> None:
    line = stats_line(25, 175.0, 90, 7357.0, "length")
    assert (
        line == "prompt 25 tokens in 175ms (142.9 tok/s) · generated 90 in 7.357s (12.2 tok/s) · stop: length"
    )


def test_logfmt_line() -> None:
    record = logging.LogRecord("llamay.cli", logging.INFO, __file__, 1, "llamay serving", None, None)
    record.fields = kv(addr="localhost:11435", params="1.59 GB", context=8192)["fields"]
    line = LogfmtFormatter().format(record)
    assert line.startswith("time=") and ' level=INFO msg="llamay serving" addr=localhost:11435' in line
    assert line.endswith('params="1.59 GB" context=8192')


def test_banner_table_lists_routes() -> None:
    table = banner_table("http://localhost:11435")
    assert "POST    http://localhost:11435/v1/chat/completions" in table
    assert "/health" in table
