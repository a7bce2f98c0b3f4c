"""A GGUF with a named `tool_use` template beside its default (Command R's files carry
both): requests with tools render through the tool-use template and speak its tool
format; requests without tools get the default, so no tool instructions reach a model
asked for a plain answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamay.chat.flow import ChatOptions, prepare_chat
from llamay.chat.tools import ToolChoice
from llamay.chat.tools.spec import ToolSpec
from llamay.runtime import RuntimeConfig, load_model
from llamay.testing import write_tiny_llama
from llamay.testing.families import llama_cpp_models
from llamay.testing.tiny_gguf import CHATML

TOOLS = [ToolSpec("get_time", parameters={"type": "object", "properties": {"zone": {"type": "string"}}})]
ASK = [{"role": "user", "content": "What time is it?"}]


@pytest.fixture(scope="module")
def dual(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = llama_cpp_models() / "templates" / "CohereForAI-c4ai-command-r-plus-tool_use.jinja"
    path = tmp_path_factory.mktemp("dual") / "dual.gguf"
    return write_tiny_llama(path, chat_template=CHATML, tool_use_template=source.read_text())


def test_tools_choose_the_tool_use_template_and_its_format(dual: Path, tmp_path: Path) -> None:
    lm = load_model("dual", dual, RuntimeConfig(home=tmp_path, ctx=4096))
    try:
        plain = prepare_chat(lm, ChatOptions(messages=ASK))
        assert "<|im_start|>user\nWhat time is it?" in plain.text and "Action:" not in plain.text
        assert plain.traits.tool_format.name == lm.traits.tool_format.name != "command_r_plus"

        tooled = prepare_chat(lm, ChatOptions(messages=ASK, tools=TOOLS, tool_choice=ToolChoice("auto")))
        assert "def get_time(" in tooled.text and "Action:" in tooled.text
        assert tooled.traits.tool_format.name == "command_r_plus"

        # Tools offered but not allowed: nothing is parsed as a call, so the plain template.
        none = prepare_chat(lm, ChatOptions(messages=ASK, tools=TOOLS, tool_choice=ToolChoice("none")))
        assert none.text == plain.text
    finally:
        lm.close()
