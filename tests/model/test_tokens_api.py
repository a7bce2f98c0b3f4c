"""The tokenizer routes (/tokenize, /detokenize, /tokenizer_info, /apply-template) in
llama-server's shapes and vLLM's names, and a base model without a chat template: Ollama
routes send it the raw prompt, OpenAI chat refuses messages, /api/show reports no
template. Real servers on tiny GGUFs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llamay.testing import write_tiny_llama
from tests.serverproc import ServerProc, start_server

ANN = {"Authorization": "Bearer ann-key"}


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    home = tmp_path_factory.mktemp("tokens")
    keys = home / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": "ann-key", "principal": "ann", "role": "user"}]}))
    with start_server(tiny_model_path, "-ctx", "1024", "-keys", str(keys), home=home / "h") as s:
        yield s


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    home = tmp_path_factory.mktemp("base")
    path = write_tiny_llama(home / "base.gguf", chat_template=None, name="tiny-base")
    with start_server(path, "-ctx", "1024", home=home / "h") as s:
        yield s


def post(s: ServerProc, path: str, body: object, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(s.base + path, json=body, headers=ANN if headers is None else headers, timeout=120)


def test_tokenize_detokenize_round_trip(server: ServerProc) -> None:
    r = post(server, "/tokenize", {"content": "hello world"})
    assert r.status_code == 200, r.text
    tokens = r.json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert r.json()["count"] == len(tokens) and r.json()["max_model_len"] == 1024
    back = post(server, "/detokenize", {"tokens": tokens})
    assert back.status_code == 200, back.text
    assert back.json()["content"] == back.json()["prompt"] == "hello world"


def test_tokenize_takes_vllm_names_and_pieces(server: ServerProc) -> None:
    llama = post(server, "/tokenize", {"content": "hi there"}).json()["tokens"]
    vllm = post(server, "/tokenize", {"prompt": "hi there", "add_special_tokens": False}).json()["tokens"]
    assert llama == vllm
    pieces = post(server, "/tokenize", {"content": "hi there", "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == llama
    assert "".join(p["piece"] for p in pieces) == "hi there"


def test_special_tokens_parse_only_when_asked(server: ServerProc) -> None:
    parsed = post(server, "/tokenize", {"content": "<|im_end|>"}).json()["tokens"]
    literal = post(server, "/tokenize", {"content": "<|im_end|>", "parse_special": False}).json()["tokens"]
    assert len(parsed) == 1 and len(literal) > 1


def test_tokenizer_info_names_the_special_tokens_and_template(server: ServerProc) -> None:
    r = httpx.get(server.base + "/tokenizer_info", headers=ANN, timeout=60)
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["eos_token"] == "<|im_end|>"
    assert "im_start" in info["chat_template"]
    assert info["model_max_length"] == 1024 and info["vocab_size"] > 0
    eos = post(server, "/tokenize", {"content": info["eos_token"]}).json()["tokens"]
    assert len(eos) == 1


def test_apply_template_is_the_chat_prompt(server: ServerProc) -> None:
    r = post(server, "/apply-template", {"messages": [{"role": "user", "content": "ping"}]})
    assert r.status_code == 200, r.text
    prompt = r.json()["prompt"]
    assert "<|im_start|>user\nping<|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/tokenize", {}, "content"),
        ("/tokenize", {"content": 5}, "content"),
        ("/detokenize", {"tokens": [1, "x"]}, "tokens[1]"),
        ("/detokenize", {"tokens": [10**9]}, None),
        ("/detokenize", {}, "tokens"),
        ("/apply-template", {"messages": []}, "messages"),
    ],
)
def test_bad_input_is_a_400_naming_it(server: ServerProc, path: str, body: object, param: str | None) -> None:
    r = post(server, path, body)
    assert r.status_code == 400, r.text
    if param is not None:
        assert r.json()["error"]["param"] == param


def test_unknown_model_is_a_404(server: ServerProc) -> None:
    assert post(server, "/tokenize", {"content": "x", "model": "nope"}).status_code == 404
    assert httpx.get(server.base + "/tokenizer_info?model=nope", headers=ANN, timeout=60).status_code == 404


def test_tokenizer_routes_need_a_key(server: ServerProc) -> None:
    for path, body in (("/tokenize", {"content": "x"}), ("/detokenize", {"tokens": [1]}),
                       ("/apply-template", {"messages": [{"role": "user", "content": "x"}]})):  # fmt: skip
        assert post(server, path, body, headers={}).status_code == 401
        assert post(server, path, body, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(server.base + "/tokenizer_info", timeout=60).status_code == 401


# -- a base model without a chat template ---------------------------------------------------


def test_openai_chat_refuses_a_model_without_a_template(base: ServerProc) -> None:
    r = post(base, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert r.status_code == 400, r.text
    assert "no chat template" in r.json()["error"]["message"]
    # plain completions still work on it
    r = post(base, "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_ollama_sends_a_base_model_the_raw_prompt(base: ServerProc) -> None:
    greedy = {"temperature": 0, "seed": 0, "num_predict": 4}
    raw = post(base, "/api/generate", {"model": "base", "prompt": "once upon", "raw": True,
                                       "stream": False, "options": greedy})  # fmt: skip
    plain = post(base, "/api/generate", {"model": "base", "prompt": "once upon", "stream": False,
                                         "options": greedy})  # fmt: skip
    chat = post(base, "/api/chat", {"model": "base", "messages": [{"role": "user", "content": "once upon"}],
                                    "stream": False, "options": greedy})  # fmt: skip
    for r in (raw, plain, chat):
        assert r.status_code == 200, r.text
    # the same prompt tokens, so the same count and (greedy) the same text, and no ChatML
    assert (
        raw.json()["prompt_eval_count"]
        == plain.json()["prompt_eval_count"]
        == chat.json()["prompt_eval_count"]
    )
    assert raw.json()["response"] == plain.json()["response"] == chat.json()["message"]["content"]
    n = len(post(base, "/tokenize", {"content": "once upon"}).json()["tokens"])
    assert raw.json()["prompt_eval_count"] == n


def test_show_reports_no_template(base: ServerProc) -> None:
    r = post(base, "/api/show", {"model": "base"})
    assert r.status_code == 200, r.text
    assert r.json()["template"] == ""
    info = httpx.get(base.base + "/tokenizer_info", timeout=60).json()
    assert info["chat_template"] == ""


def test_a_request_may_name_its_own_template(base: ServerProc, server: ServerProc) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    r = post(base, "/v1/chat/completions", {"messages": msgs, "max_tokens": 2, "chat_template": "chatml"})
    assert r.status_code == 200, r.text
    own = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant] "
    r = post(server, "/apply-template", {"messages": msgs, "chat_template": own})
    assert r.status_code == 200, r.text
    assert r.json()["prompt"] == "[user] hi\n[assistant] "
    r = post(base, "/v1/chat/completions", {"messages": msgs, "max_tokens": 2, "chat_template": own})
    assert r.status_code == 200, r.text
    bad = post(server, "/apply-template", {"messages": msgs, "chat_template": "{% for %}"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "chat_template"
