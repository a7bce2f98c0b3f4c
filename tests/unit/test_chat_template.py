"""Chat template rendering: HF/llama.cpp-compatible environment, errors as 400s, message normalization."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from llamay.chat import CHATML_TEMPLATE, ChatTemplate, normalize_messages
from llamay.errors import InvalidRequest

# tokenizer.chat_template of SmolLM2-135M-Instruct, as stored in its GGUF (read with gguf.GGUFReader).
# Its vocabulary uses "<|im_start|>" as BOS and "<|im_end|>" as EOS, with add_bos_token false.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)

# Meta-Llama-3-8B-Instruct's template (bos_token rendered by the template itself).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# Mistral-style role check.
ALTERNATING_TEMPLATE = """\
{%- for message in messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {{- '[' + message['role'] + ']' + message['content'] }}
{%- endfor %}
"""

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi!"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "How are you?"},
]


def render(source: str, messages: list[dict[str, Any]] | None = None, **kwargs: Any) -> str:
    return ChatTemplate(source).render(messages if messages is not None else [], **kwargs)


# --- rendering ---------------------------------------------------------------------------------


def test_chatml_exact_with_and_without_generation_prompt() -> None:
    body = (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi!<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\nHow are you?<|im_end|>\n"
    )
    template = ChatTemplate.chatml()
    assert template.source == CHATML_TEMPLATE
    assert template.render(CONVERSATION) == body + "<|im_start|>assistant\n"
    assert template.render(CONVERSATION, add_generation_prompt=False) == body


def test_chatml_tolerates_tool_call_turn_and_unknown_role() -> None:
    messages: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "f"}}],
        },
        {"role": "tool", "content": "42"},
        {"role": "critic", "content": "ok"},
    ]
    out = ChatTemplate.chatml().render(messages, add_generation_prompt=False)
    assert out == (
        "<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>critic\nok<|im_end|>\n"
    )


def test_smollm2_template_adds_default_system_prompt() -> None:
    template = ChatTemplate(SMOLLM2_TEMPLATE, bos_token="<|im_start|>", eos_token="<|im_end|>")
    assert template.render([{"role": "user", "content": "Hi"}]) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert template.render(CONVERSATION) == ChatTemplate.chatml().render(CONVERSATION)


def test_llama3_template_with_bos_token() -> None:
    template = ChatTemplate(LLAMA3_TEMPLATE, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    out = template.render(CONVERSATION[:2])
    assert out == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    # The tokenizer adds BOS itself (add_bos true): drop the template's copy, as llama.cpp does.
    assert template.strip_bos_eos(out, add_bos=True) == out.removeprefix("<|begin_of_text|>")
    assert template.strip_bos_eos(out, add_bos=False) == out


def test_strip_bos_eos_leaves_smollm2_turn_marker_alone() -> None:
    template = ChatTemplate(SMOLLM2_TEMPLATE, bos_token="<|im_start|>", eos_token="<|im_end|>")
    out = template.render(CONVERSATION, add_generation_prompt=False)
    assert template.strip_bos_eos(out, add_bos=False, add_eos=False) == out
    assert template.strip_bos_eos("x<|im_end|>", add_bos=False, add_eos=True) == "x"
    assert ChatTemplate("").strip_bos_eos("abc", add_bos=True, add_eos=True) == "abc"


def test_bos_and_eos_variables_and_extra_override() -> None:
    template = ChatTemplate(
        "{{ bos_token }}|{{ eos_token }}|{{ documents is none }}", bos_token="<s>", eos_token="</s>"
    )
    assert template.render([]) == "<s>|</s>|True"
    assert template.render([], bos_token="[B]") == "[B]|</s>|True"
    assert render("[{{ bos_token }}]") == "[]"


def test_extra_variables_reach_the_template() -> None:
    source = "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}ok"
    assert render(source, enable_thinking=False) == "<think></think>ok"
    assert render(source, enable_thinking=True) == "ok"
    assert render(source) == "ok"


def test_raise_exception_becomes_invalid_request() -> None:
    good = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert render(ALTERNATING_TEMPLATE, good) == "[user]a[assistant]b"
    with pytest.raises(InvalidRequest) as info:
        # (two user turns in a row are merged for such a template: see test_chat_polyfill.py)
        render(ALTERNATING_TEMPLATE, [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}])
    assert info.value.message == (
        "chat template: Conversation roles must alternate user/assistant/user/assistant/..."
    )
    assert info.value.status == 400


@pytest.mark.parametrize(
    "source",
    [
        "{{ messages[0]['content'] + 1 }}",  # TypeError in Python
        "{{ missing.attr }}",  # UndefinedError
        "{{ 1 / 0 }}",
        "{{ missing | tojson }}",  # not JSON-serializable
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",  # RecursionError
    ],
)
def test_runtime_errors_become_invalid_request(source: str) -> None:
    with pytest.raises(InvalidRequest, match="chat template"):
        render(source, [{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__ }}",
        "{{ raise_exception.__globals__ }}",
        "{{ messages.append(1) }}",  # the environment is immutable
        "{{ cycler.__init__.__globals__.os }}",
    ],
)
def test_sandbox_escapes_are_blocked(source: str) -> None:
    with pytest.raises(InvalidRequest, match="unsafe|undefined"):
        render(source, [{"role": "user", "content": "x"}])


def test_compile_error_is_value_error() -> None:
    with pytest.raises(ValueError, match="does not compile"):
        ChatTemplate("{% for m in messages %}no end")
    with pytest.raises(ValueError, match="does not compile"):
        ChatTemplate("{% do something %}")


def test_tojson_non_ascii_indent_and_no_html_escaping() -> None:
    value = {"name": "café ✓", "html": "<a href='x'>&</a>", "n": [1, 2]}
    assert render("{{ v | tojson }}", v=value) == json.dumps(value, ensure_ascii=False)
    assert render("{{ v | tojson(indent=2) }}", v=value) == json.dumps(value, ensure_ascii=False, indent=2)
    assert render("{{ v | tojson(ensure_ascii=True) }}", v=value) == json.dumps(value)
    assert (
        render("{{ v | tojson(separators=(',', ':'), sort_keys=True) }}", v={"b": 1, "a": 2})
        == '{"a":2,"b":1}'
    )


def test_strftime_now() -> None:
    before = datetime.now().strftime("%d %b %Y")
    out = render("Today Date: {{ strftime_now('%d %b %Y') }}")
    after = datetime.now().strftime("%d %b %Y")
    assert out in (f"Today Date: {before}", f"Today Date: {after}")


def test_loop_controls() -> None:
    source = (
        "{% for m in messages %}{% if m.role == 'skip' %}{% continue %}{% endif %}"
        "{% if m.role == 'stop' %}{% break %}{% endif %}{{ m.content }}{% endfor %}"
    )
    messages = [
        {"role": r, "content": c}
        for r, c in [("a", "1"), ("skip", "2"), ("b", "3"), ("stop", "4"), ("c", "5")]
    ]
    assert render(source, messages) == "13"


def test_trim_and_lstrip_blocks_like_hf() -> None:
    source = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n"
    source += "{% endfor %}\n"
    assert (
        render(source, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "[a]\n[b]\n"
    )


def test_generation_block_renders_its_body() -> None:
    source = "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}!{% endfor %}"
    assert render(source, [{"role": "assistant", "content": "hi"}]) == "hi!"


def test_tools_passed_through_and_empty_tools_are_none() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Wetter für eine Stadt",
            "parameters": {"type": "object"},
        },
    }
    source = (
        "{% if tools is not none %}{% for t in tools %}{{ t | tojson(indent=4) }}\n{% endfor %}"
        "{% else %}no tools{% endif %}"
    )
    assert render(source, tools=[tool]) == json.dumps(tool, ensure_ascii=False, indent=4) + "\n"
    assert render(source, tools=[]) == "no tools"
    assert render(source) == "no tools"


def test_tool_call_arguments_reach_template_as_objects() -> None:
    source = (
        "{% for m in messages %}{% for c in m.tool_calls %}"
        "{{ c.function.name }}{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}"
    )
    messages = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"city": "Köln"}'}}
            ],
        }
    ]
    assert render(source, messages) == 'f{"city": "Köln"}'


def test_content_parts_are_accepted_by_render() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert (
        ChatTemplate.chatml().render(messages, add_generation_prompt=False)
        == "<|im_start|>user\na\nb<|im_end|>\n"
    )


def test_template_that_reads_typed_content_gets_parts() -> None:
    # Such templates ignore string content; like llama.cpp, detect them and hand them parts.
    source = (
        "{% for m in messages %}{% for p in m.content %}{% if p.type == 'text' %}<{{ p.text }}>"
        "{% endif %}{% endfor %}{% endfor %}"
    )
    assert render(source, [{"role": "user", "content": "hi"}]) == "<hi>"


def test_from_file(tmp_path: Path) -> None:
    path = tmp_path / "chat.jinja"
    path.write_text(SMOLLM2_TEMPLATE, encoding="utf-8")
    template = ChatTemplate.from_file(path, bos_token="<|im_start|>")
    assert template.source == SMOLLM2_TEMPLATE
    assert template.bos_token == "<|im_start|>"
    with pytest.raises(ValueError, match="cannot read"):
        ChatTemplate.from_file(tmp_path / "missing.jinja")


# --- normalize_messages --------------------------------------------------------------------------


def test_normalize_keeps_strings_and_does_not_mutate() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hi", "name": "bob"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
            ],
        },
    ]
    snapshot = json.dumps(messages)
    out = normalize_messages(messages)
    assert json.dumps(messages) == snapshot
    assert out[0] == {"role": "user", "content": "hi", "name": "bob"}
    assert out[1]["content"] is None
    assert out[1]["tool_calls"][0] == {
        "id": "c1",
        "type": "function",
        "function": {"name": "f", "arguments": {"x": 1}},
    }
    assert normalize_messages(out) == out  # idempotent


def test_normalize_joins_text_parts_like_llama_cpp() -> None:
    def joined(*texts: str) -> str:
        return normalize_messages(
            [{"role": "user", "content": [{"type": "text", "text": t} for t in texts]}]
        )[0]["content"]

    assert joined("a", "b", "c") == "a\nb\nc"
    assert joined("", "a") == "a"  # no separator until some text exists
    assert joined("a", "") == "a\n"


@pytest.mark.parametrize(
    ("message", "content"),
    [
        ({"role": "user", "content": None}, ""),
        ({"role": "user"}, ""),
        ({"role": "user", "content": []}, ""),
        ({"role": "assistant", "content": None}, ""),
        ({"role": "assistant", "content": None, "tool_calls": []}, ""),
        ({"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}, None),
        ({"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}, None),
        ({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f"}}]}, ""),
    ],
)
def test_normalize_missing_content(message: dict[str, Any], content: str | None) -> None:
    assert normalize_messages([message])[0]["content"] == content


def test_normalize_drops_empty_tool_calls() -> None:
    out = normalize_messages([{"role": "assistant", "content": "x", "tool_calls": None}])
    assert "tool_calls" not in out[0]


@pytest.mark.parametrize("arguments", ["not json", "[1, 2]", '"a string"', ""])
def test_normalize_keeps_non_object_arguments_as_strings(arguments: str) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"function": {"name": "f", "arguments": arguments}}],
    }
    assert normalize_messages([message])[0]["tool_calls"][0]["function"]["arguments"] == arguments


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        (
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
            "images are not supported by this model",
        ),
        (
            {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}},
            "audio inputs are not supported",
        ),
        ({"type": "video"}, "unsupported content part type 'video'"),
        ({"text": "no type"}, "unsupported content part type None"),
        ({"type": "text", "text": 5}, "text must be a string"),
        ("bare string", "must be a content part object"),
    ],
)
def test_normalize_rejects_unusable_parts(part: Any, expected: str) -> None:
    with pytest.raises(InvalidRequest, match=expected) as info:
        normalize_messages([{"role": "user", "content": [{"type": "text", "text": "look"}, part]}])
    assert info.value.param is not None and info.value.param.startswith("messages[0].content")


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ("hello", "messages must be a list"),
        (["hello"], r"messages\[0\] must be an object"),
        ([{"content": "x"}], r"messages\[0\]\.role must be a string"),
        ([{"role": "user", "content": 5}], "content must be a string or a list"),
        ([{"role": "user", "content": {"type": "text"}}], "content must be a string or a list"),
        ([{"role": "assistant", "tool_calls": "f()"}], "tool_calls must be a list"),
        ([{"role": "assistant", "tool_calls": ["f()"]}], r"tool_calls\[0\] must be an object"),
    ],
)
def test_normalize_rejects_malformed_messages(messages: Any, expected: str) -> None:
    with pytest.raises(InvalidRequest, match=expected):
        normalize_messages(messages)


def test_render_rejects_images() -> None:
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]
    with pytest.raises(InvalidRequest, match="images are not supported by this model"):
        ChatTemplate.chatml().render(messages)
