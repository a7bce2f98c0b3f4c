"""The finish tool is opt-in: "required" means a call of the caller's own tools unless the
request or the server's `-finish-tool auto` asks for the extra exit."""

from __future__ import annotations

import pytest

from llamay.chat.flow import ChatOptions, _with_finish_tool, with_finish_default
from llamay.chat.tools import FINISH_TOOL, ToolChoice, parse_tools
from llamay.cli.main import build_parser, main
from llamay.errors import InvalidRequest

TOOLS = parse_tools([{"type": "function", "function": {"name": "get_weather"}}])
ASK = [{"role": "user", "content": "hi"}]


def opts(mode: str, finish: bool | str | None = None, tools: list = TOOLS) -> ChatOptions:
    return ChatOptions(messages=ASK, tools=tools, tool_choice=ToolChoice(mode), finish_tool=finish)  # type: ignore[arg-type]


def names(o: ChatOptions) -> tuple[list[str], str | None]:
    tools, finish = _with_finish_tool(o)
    return [t.name for t in tools], finish


def test_required_alone_offers_only_the_callers_tools() -> None:
    assert names(opts("required")) == (["get_weather"], None)
    assert names(with_finish_default(opts("required"), "off")) == (["get_weather"], None)


def test_server_auto_adds_finish_to_required_only() -> None:
    assert names(with_finish_default(opts("required"), "auto")) == (["get_weather", "finish"], "finish")
    assert names(with_finish_default(opts("auto"), "auto")) == (["get_weather"], None)


def test_the_request_overrides_the_server() -> None:
    assert with_finish_default(opts("required", False), "auto").finish_tool is False
    assert names(with_finish_default(opts("required", True), "off")) == (["get_weather", "finish"], "finish")
    assert names(with_finish_default(opts("required", "get_weather"), "off")) == (
        ["get_weather"],
        "get_weather",
    )


def test_a_callers_tool_named_finish_is_ordinary_unless_the_finish_tool_is_asked_for() -> None:
    own = parse_tools([{"type": "function", "function": {"name": FINISH_TOOL.name}}])
    assert names(opts("required", tools=own)) == (["finish"], None)
    with pytest.raises(InvalidRequest) as e:
        names(opts("required", True, tools=own))
    assert e.value.param == "finish_tool"


@pytest.mark.parametrize(("env", "argv", "want"), [
    (None, [], "off"), ("auto", [], "auto"), (None, ["-finish-tool", "auto"], "auto"),
    ("auto", ["--finish-tool", "off"], "off"),
])  # fmt: skip
def test_serve_flag_and_env(
    monkeypatch: pytest.MonkeyPatch, env: str | None, argv: list[str], want: str
) -> None:
    if env is None:
        monkeypatch.delenv("LLAMAY_FINISH_TOOL", raising=False)
    else:
        monkeypatch.setenv("LLAMAY_FINISH_TOOL", env)
    assert build_parser().parse_args(["serve", *argv]).finish_tool == want


def test_serve_refuses_an_unknown_mode(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "-finish-tool", "always", "-addr", "127.0.0.1:9"]) != 0
    assert "-finish-tool must be off or auto" in capsys.readouterr().err
