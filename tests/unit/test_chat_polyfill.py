"""Template polyfills (llamay.chat.polyfill): each is detected by probing a template and
changes nothing for a template that does not need it."""

from __future__ import annotations

from typing import Any

from llamay.chat.polyfill import TemplateNeeds
from llamay.chat.template import ChatTemplate

CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x": "y"}'}}
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "r"},
    {"role": "user", "content": "thanks"},
]
LOOP = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"


def test_plain_template_needs_nothing() -> None:
    t = ChatTemplate(LOOP.replace("{{ m.content }}", "{{ m.content or '' }}"))
    assert t.needs == TemplateNeeds()
    assert t.render(HISTORY, add_generation_prompt=False) == "[user]q[assistant][tool]r[user]thanks"


def test_null_content_becomes_empty_for_a_template_that_tests_membership() -> None:
    # Qwen3 / gpt-oss: `'</think>' in content` fails on None.
    source = "{% for m in messages %}{% if '<x>' in m.content %}!{% endif %}[{{ m.role }}]{{ m.content }}{% endfor %}"
    t = ChatTemplate(source)
    assert t.needs.null_content == "empty"
    assert t.render(HISTORY, add_generation_prompt=False) == "[user]q[assistant][tool]r[user]thanks"


def test_null_content_that_prints_none_becomes_empty() -> None:
    t = ChatTemplate(LOOP)  # renders None as "None"
    assert t.needs.null_content == "empty"
    assert "None" not in t.render(HISTORY)


def test_null_content_kept_when_the_template_branches_on_it() -> None:
    # DeepSeek R1: the calls are written only when content is none.
    source = (
        "{% for m in messages %}{% if m.content is none %}"
        "{% for c in m.tool_calls %}<call>{{ c.function.arguments }}{% endfor %}"
        "{% else %}[{{ m.role }}]{{ m.content }}{% endif %}{% endfor %}"
    )
    t = ChatTemplate(source)
    assert t.needs.null_content == "keep" and t.needs.object_arguments is False
    assert '<call>{"x": "y"}' in t.render(HISTORY)


def test_arguments_as_text_for_a_template_that_concatenates_them() -> None:
    source = (
        "{% for m in messages %}{% for c in m.tool_calls or [] %}{{ '<call>' + c.function.arguments }}"
        "{% endfor %}[{{ m.role }}]{{ m.content or '' }}{% endfor %}"
    )
    t = ChatTemplate(source)
    assert not t.needs.object_arguments
    assert '<call>{"x": "y"}' in t.render(HISTORY)


def test_arguments_stay_an_object_for_a_template_that_tojsons_them() -> None:
    source = (
        "{% for m in messages %}{% for c in m.tool_calls or [] %}<call>{{ c.function.arguments | tojson }}"
        "{% endfor %}[{{ m.role }}]{{ m.content or '' }}{% endfor %}"
    )
    t = ChatTemplate(source)
    assert t.needs.object_arguments
    assert '<call>{"x": "y"}' in t.render(HISTORY)


def test_tools_absent_become_an_empty_list_when_none_fails() -> None:
    # Hermes 3's and Command R+'s tool-use templates loop over `tools` unconditionally.
    source = "{% for t in tools %}{{ t.function.name }};{% endfor %}" + LOOP
    t = ChatTemplate(source)
    assert t.needs.tools_absent == "empty"
    assert t.render([{"role": "user", "content": "hi"}]) == "[user]hi"
    guarded = ChatTemplate("{% if tools is not none %}T{% endif %}" + LOOP)
    assert guarded.needs.tools_absent == "none" and guarded.render([{"role": "user", "content": "hi"}]) == "[user]hi"


ALTERNATING = (
    "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('roles must alternate') }}{% endif %}[{{ m.role }}]{{ m.content }}{% endfor %}"
)


def test_system_folded_and_turns_merged_for_gemma_2_style_templates() -> None:
    t = ChatTemplate(ALTERNATING)
    assert not t.needs.system_role and t.needs.merge_turns
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
    ]
    assert t.render(messages, add_generation_prompt=False) == "[user]Be brief.\n\na\n\nb"


MISTRAL_LIKE = (
    "{% set ns = namespace(i=0) %}{% for m in messages %}"
    "{% if not (m.role == 'tool' or m.tool_calls is defined) %}"
    "{% if (m.role == 'user') != (ns.i % 2 == 0) %}{{ raise_exception('roles must alternate') }}{% endif %}"
    "{% set ns.i = ns.i + 1 %}{% endif %}"
    "{% if m.role == 'assistant' and m.tool_calls is not defined and not m.content %}"
    "{{ raise_exception('empty assistant turn') }}{% endif %}"
    "[{{ m.role }}]{{ m.content or '' }}{% endfor %}"
)


def test_tool_result_then_user_is_bridged() -> None:
    t = ChatTemplate(MISTRAL_LIKE)
    assert t.needs.bridge_tool_user == " "  # this one refuses an empty assistant turn
    assert t.render(HISTORY, add_generation_prompt=False) == "[user]q[assistant][tool]r[assistant] [user]thanks"
    lenient = ChatTemplate(MISTRAL_LIKE.replace("and not m.content", "and false"))
    assert lenient.needs.bridge_tool_user == ""


def test_firefunction_variables_are_provided() -> None:
    t = ChatTemplate("{{ functions }}|{{ datetime }}|" + LOOP)
    assert t.needs.variables == {"functions", "datetime"}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    out = t.render([{"role": "user", "content": "hi"}], tools=tools)
    assert out.startswith('[\n  {\n    "type": "function"') and out.endswith("|[user]hi")
    assert t.render([{"role": "user", "content": "hi"}]).startswith("|")


def test_missing_descriptions_become_empty_for_a_template_that_concatenates_them() -> None:
    # Command R+: `'): ' + param_fields.description` for every parameter.
    source = (
        "{% for t in tools or [] %}{{ t.function.name + ':' + t.function.description }}"
        "{% for k, p in t.function.parameters.properties | items %}{{ '(' + k + ') ' + p.description }}"
        "{% endfor %};{% endfor %}" + LOOP
    )
    t = ChatTemplate(source)
    assert t.needs.describe_tools
    bare = {"type": "object", "properties": {"x": {"type": "string"}}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": bare}}]
    assert t.render([{"role": "user", "content": "hi"}], tools=tools) == "f:(x) ;[user]hi"
    described = [{"type": "function", "function": {"name": "f", "description": "F", "parameters": {
        "type": "object", "properties": {"x": {"type": "string", "description": "X"}}}}}]  # fmt: skip
    assert t.render([{"role": "user", "content": "hi"}], tools=described) == "f:F(x) X;[user]hi"
    assert not ChatTemplate(LOOP).needs.describe_tools


NINE_ONLY = (
    "{% for m in messages %}{% for c in m.tool_calls or [] %}"
    "{% if c.id is not string or c.id | length != 9 %}{{ raise_exception('ids of 9') }}{% endif %}"
    "<{{ c.id }}>{% endfor %}{% if m.role == 'tool' %}"
    "{% if m.tool_call_id | length != 9 %}{{ raise_exception('ids of 9') }}{% endif %}"
    "({{ m.tool_call_id }}){% endif %}[{{ m.role }}]{{ m.content or '' }}{% endfor %}"
)


def test_call_ids_become_nine_alphanumerics_for_mistral_style_templates() -> None:
    t = ChatTemplate(NINE_ONLY)
    assert t.needs.call_ids
    out = t.render(HISTORY, add_generation_prompt=False)
    call_id = out[out.index("<") + 1 : out.index(">")]
    assert len(call_id) == 9 and call_id.isalnum() and f"({call_id})[tool]" in out
    # Ollama's clients send calls without ids and results without a tool_call_id:
    # each result gets the id of the next call not yet answered.
    ollama = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "f", "arguments": {}}}, {"function": {"name": "g", "arguments": {}}}]},
        {"role": "tool", "content": "r1"},
        {"role": "tool", "content": "r2"},
    ]  # fmt: skip
    out = t.render(ollama, add_generation_prompt=False)
    assert "<call00001><call00002>" in out and "(call00001)[tool]r1(call00002)[tool]r2" in out
    assert not ChatTemplate(LOOP).needs.call_ids
