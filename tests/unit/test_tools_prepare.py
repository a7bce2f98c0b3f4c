"""prepare(): messages and template variables render through representative templates,
including the follow-up turn (assistant tool calls + tool results); detect_format."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llamay.chat import ChatTemplate
from llamay.chat.tools import FORMATS, GenericFormat, detect_format, parse_tools
from llamay.chat.tools.mistral import mistral_id

# A Qwen 2.5 / Hermes-style template.
HERMES = """
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\nCall a function with <tool_call>\\n{"name": <name>, "arguments": <args>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
  {%- if message.role == 'system' and loop.first %}
  {%- elif message.role == 'assistant' and message.tool_calls %}
    {{- '<|im_start|>assistant' }}
    {%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
    {%- for tc in message.tool_calls %}
      {{- '\\n<tool_call>\\n{"name": "' + tc.function.name + '", "arguments": ' + (tc.function.arguments | tojson) + '}\\n</tool_call>' }}
    {%- endfor %}
    {{- '<|im_end|>\\n' }}
  {%- elif message.role == 'tool' %}
    {{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
  {%- else %}
    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

# A Llama 3.1-style template: one call per assistant message, results in the ipython role.
LLAMA3 = """
{{- bos_token + '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
{%- if tools is not none %}{{- 'Environment: ipython\\nRespond with {"name": function name, "parameters": arguments}.\\n' }}
{%- for t in tools %}{{- (t | tojson(indent=4)) + '\\n\\n' }}{%- endfor %}{%- endif %}
{{- '<|eot_id|>' }}
{%- for message in messages %}
  {%- if message.role == 'assistant' and message.tool_calls %}
    {%- if message.tool_calls | length != 1 %}{{- raise_exception('This model only supports single tool-calls at once!') }}{%- endif %}
    {%- set tc = message.tool_calls[0].function %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n{"name": "' + tc.name + '", "parameters": ' + (tc.arguments | tojson) + '}<|eom_id|>' }}
  {%- elif message.role == 'tool' or message.role == 'ipython' %}
    {{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}
  {%- else %}
    {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}
"""

# A Mistral v0.3-style template: 9-character call ids, checked.
MISTRAL = """
{{- bos_token }}
{%- for message in messages %}
  {%- if message.role == 'user' %}
    {%- if tools is not none and loop.last %}{{- '[AVAILABLE_TOOLS] ' + (tools | tojson) + '[/AVAILABLE_TOOLS]' }}{%- endif %}
    {{- '[INST] ' + message.content + '[/INST]' }}
  {%- elif message.role == 'assistant' and message.tool_calls %}
    {{- '[TOOL_CALLS] [' }}
    {%- for tc in message.tool_calls %}
      {%- if tc.id is not defined or tc.id | length != 9 %}{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{%- endif %}
      {{- '{"name": "' + tc.function.name + '", "arguments": ' + (tc.function.arguments | tojson) + ', "id": "' + tc.id + '"}' }}
      {%- if not loop.last %}{{- ', ' }}{%- endif %}
    {%- endfor %}
    {{- ']' + eos_token }}
  {%- elif message.role == 'tool' %}
    {%- if message.tool_call_id | length != 9 %}{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{%- endif %}
    {{- '[TOOL_RESULTS] {"content": ' + (message.content | tojson) + ', "call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
  {%- elif message.role == 'assistant' %}
    {{- ' ' + message.content + eos_token }}
  {%- endif %}
{%- endfor %}
"""

# A Gemma-style template with no tool support: no system role, strictly alternating turns.
NO_TOOLS = """
{{- bos_token }}
{%- for message in messages %}
  {%- if message.role == 'system' %}{{- raise_exception('System role not supported') }}{%- endif %}
  {%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif %}
  {{- '<start_of_turn>' + ('model' if message.role == 'assistant' else message.role) + '\\n' + message.content | trim + '<end_of_turn>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}
"""

TOOLS = parse_tools(
    [
        {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "get_time"}},
    ]
)  # fmt: skip

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather and time in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_0123456789abcdef01234567",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_fedcba9876543210fedcba98",
                "type": "function",
                "function": {"name": "get_time", "arguments": "{}"},
            },
        ],
    },  # fmt: skip
    # Results out of call order: formats that pair calls with results must use the ids.
    {"role": "tool", "tool_call_id": "call_fedcba9876543210fedcba98", "content": "14:05"},
    {"role": "tool", "tool_call_id": "call_0123456789abcdef01234567", "content": "Sunny, 21C"},
]


def render(
    fmt_name: str, source: str, messages: list[dict[str, Any]], tools: Any = TOOLS, fmt: Any = None
) -> str:
    fmt = fmt or FORMATS[fmt_name]
    original = json.dumps(messages)
    prepared, extra = fmt.prepare(messages, tools)
    assert json.dumps(messages) == original  # the caller's messages are not mutated
    return ChatTemplate(source, bos_token="<s>", eos_token="</s>").render(prepared, **extra)


def test_hermes() -> None:
    out = render("hermes", HERMES, CONVERSATION)
    assert '{"type": "function", "function": {"name": "get_weather", "description": "Weather now"' in out
    assert "Be brief.\n\n# Tools" in out
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in out
    assert "<tool_response>\n14:05\n</tool_response>" in out
    assert out.endswith("<|im_start|>assistant\n")
    # The history's own call text parses back into the call.
    turn = out.split("<|im_start|>assistant")[1].split("<|im_end|>")[0]
    parser = FORMATS["hermes"].parser(TOOLS)
    parser.push(turn)
    parser.finish()
    assert [(c.name, c.arguments) for c in parser.calls] == [
        ("get_weather", '{"city": "Paris"}'),
        ("get_time", "{}"),
    ]


def test_llama3_splits_parallel_calls_and_pairs_results() -> None:
    out = render("llama3", LLAMA3, CONVERSATION)
    assert "Environment: ipython" in out and '"name": "get_weather"' in out
    weather = out.index('{"name": "get_weather", "parameters": {"city": "Paris"}}<|eom_id|>')
    sunny = out.index("Sunny, 21C")
    time = out.index('{"name": "get_time", "parameters": {}}<|eom_id|>')
    clock = out.index("14:05")
    assert weather < sunny < time < clock  # each call followed by its own result
    turn = out[weather:sunny].split("<|eom_id|>")[0]
    parser = FORMATS["llama3"].parser(TOOLS)
    parser.push(turn)
    parser.finish()
    assert [(c.name, c.arguments) for c in parser.calls] == [("get_weather", '{"city": "Paris"}')]


def test_llama3_results_without_ids_pair_in_order() -> None:
    messages = [
        *CONVERSATION[:3],
        {"role": "tool", "content": "Sunny"},
        {"role": "tool", "content": "14:05"},
    ]
    out = render("llama3", LLAMA3, messages)
    assert (
        out.index("get_weather")
        < out.index("Sunny")
        < out.index('"name": "get_time", "parameters"')
        < out.index("14:05")
    )


def test_mistral_maps_ids_to_nine_characters() -> None:
    out = render("mistral", MISTRAL, [*CONVERSATION[1:], {"role": "user", "content": "Thanks"}])
    weather_id = mistral_id("call_0123456789abcdef01234567")
    assert len(weather_id) == 9 and weather_id.isalnum()
    assert f'"id": "{weather_id}"' in out and f'"call_id": "{weather_id}"' in out
    assert "[AVAILABLE_TOOLS]" in out and out.index("[AVAILABLE_TOOLS]") > out.index("[TOOL_RESULTS]")
    assert mistral_id("abcDEF123") == "abcDEF123"
    turn = "[TOOL_CALLS]" + out.split("[TOOL_CALLS]")[1].split("</s>")[0]
    parser = FORMATS["mistral"].parser(TOOLS)
    parser.push(turn)
    parser.finish()
    assert [c.name for c in parser.calls] == ["get_weather", "get_time"]


def test_generic_describes_tools_and_flattens_history() -> None:
    fmt = detect_format(NO_TOOLS, lambda t: None)
    assert isinstance(fmt, GenericFormat) and not fmt.system_role
    out = render("generic", NO_TOOLS, [*CONVERSATION, {"role": "user", "content": "And tomorrow?"}], fmt=fmt)
    # Instructions and the system text land in the first user turn.
    first_user = out.split("<start_of_turn>user\n")[1]
    assert "get_weather" in first_user and '{"response": ' in first_user and "Be brief." in first_user
    assert (
        '<start_of_turn>model\n{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}' in out
    )
    assert '"tool_results": [{"name": "get_time", "content": "14:05"}, {"name": "get_weather"' in out
    assert "And tomorrow?" in out and out.endswith("<start_of_turn>model\n")


def test_generic_with_a_system_role() -> None:
    fmt = detect_format("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}", lambda t: None)
    assert isinstance(fmt, GenericFormat) and fmt.system_role
    prepared, extra = fmt.prepare([{"role": "user", "content": "hi"}], TOOLS)
    assert extra == {} and prepared[0]["role"] == "system" and "get_time" in prepared[0]["content"]
    prepared, _ = fmt.prepare([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}], TOOLS)
    assert len(prepared) == 2 and prepared[0]["content"].startswith("S\n\n")


@pytest.mark.parametrize("name", ["hermes", "llama3", "mistral", "generic"])
def test_no_tools_only_rewrites_history(name: str) -> None:
    prepared, extra = FORMATS[name].prepare([{"role": "user", "content": "hi"}], [])
    assert extra == {} and prepared == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (HERMES, "hermes"),
        (LLAMA3, "llama3"),
        (MISTRAL, "mistral"),
        (NO_TOOLS, "generic"),
        (None, "generic"),
        (
            "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}",
            "generic",
        ),
    ],
)
def test_detect_format(source: str | None, expected: str) -> None:
    assert detect_format(source, lambda t: None).name == expected


def test_detect_format_uses_the_vocabulary_for_unmarked_tool_templates() -> None:
    source = "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"
    assert detect_format(source, {"<tool_call>": 7}.get).name == "hermes"
    # Mentioning "tools" only in template text is not reading the variable.
    assert (
        detect_format(
            "You have no tools.{% for m in messages %}{{ m.content }}{% endfor %}", {"<tool_call>": 7}.get
        ).name
        == "generic"
    )
