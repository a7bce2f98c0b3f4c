"""`suffix` on /v1/completions: fill-in-the-middle for models whose GGUF has FIM tokens,
a clear 400 for the others, through a real server and the official client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from llamay.backend.model import Model
from llamay.testing import write_tiny_llama
from tests.serverproc import ServerProc, start_server

FIM = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>")
PREFIX = "def area(r):\n    return "
SUFFIX = " * r * r\n"


@pytest.fixture(scope="module")
def fim_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("fim") / "tiny-fim.gguf", extra_tokens=FIM, name="fim")


@pytest.fixture(scope="module")
def fim_server(fim_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    with start_server(fim_path, home=tmp_path_factory.mktemp("fim-home")) as s:
        yield s


def client(server: ServerProc) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, _strict_response_validation=True)


def test_suffix_fills_the_middle_in_prefix_suffix_middle_order(fim_server: ServerProc, fim_path: Path) -> None:
    with Model(fim_path) as m:
        fim = m.fim_tokens()
        assert fim is not None
        pre, suf, mid = fim
        assert [m.piece(t).decode() for t in fim] == list(FIM[:3])
        layout = [pre, *m.tokenize(PREFIX, add_special=False), suf, *m.tokenize(SUFFIX, add_special=False), mid]
    c = client(fim_server)
    got = c.completions.create(model="", prompt=PREFIX, suffix=SUFFIX, max_tokens=12, temperature=0)
    # The same tokens sent by id: the server laid the prompt out exactly so.
    same = c.completions.create(model="", prompt=layout, max_tokens=12, temperature=0)
    assert got.choices[0].text == same.choices[0].text
    assert got.usage is not None and got.usage.prompt_tokens == len(layout)
    plain = c.completions.create(model="", prompt=PREFIX, max_tokens=12, temperature=0)
    assert plain.usage is not None and plain.usage.prompt_tokens < len(layout)
    # Not strict: the SDK types a legacy chunk's finish_reason as never null, which every
    # chunk but the last is (OpenAI's own stream included).
    loose = openai.OpenAI(base_url=fim_server.url, api_key="x", max_retries=0)
    streamed = loose.completions.create(
        model="", prompt=PREFIX, suffix=SUFFIX, max_tokens=12, temperature=0, stream=True
    )
    assert "".join(ch.choices[0].text for ch in streamed if ch.choices) == got.choices[0].text


def test_special_tokens_written_in_the_text_stay_text(fim_server: ServerProc) -> None:
    c = client(fim_server)
    sneaky = c.completions.create(model="", prompt="x", suffix="<|fim_middle|>", max_tokens=1, temperature=0)
    literal = c.completions.create(model="", prompt="x", suffix="", max_tokens=1, temperature=0)
    assert sneaky.usage is not None and literal.usage is not None
    # "<|fim_middle|>" as text is several plain tokens, not the one control token.
    assert sneaky.usage.prompt_tokens > literal.usage.prompt_tokens + 1


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"suffix": 3}, "suffix", "must be a string"),
        ({"suffix": "x", "echo": True}, "suffix", "echo"),
        ({"suffix": "x", "llamay_session": "ctx-nope"}, "suffix", "llamay_session"),
    ],
)
def test_bad_suffix_requests_are_400(fim_server: ServerProc, extra: dict[str, object], param: str, words: str) -> None:
    r = httpx.post(fim_server.url + "/completions", json={"prompt": "a", "max_tokens": 1, **extra})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"]
    assert httpx.get(fim_server.base + "/health").status_code == 200


def test_a_model_without_fim_tokens_says_so(tiny_model_path: Path, tmp_path: Path) -> None:
    with start_server(tiny_model_path, home=tmp_path / "h") as s:
        with pytest.raises(openai.BadRequestError) as err:
            client(s).completions.create(model="", prompt=PREFIX, suffix=SUFFIX, max_tokens=4)
        assert err.value.status_code == 400
        body = err.value.body
        assert isinstance(body, dict) and body["param"] == "suffix"
        assert "cannot fill in the middle" in body["message"]
        ok = client(s).completions.create(model="", prompt=PREFIX, max_tokens=2)
        assert ok.usage is not None and ok.usage.completion_tokens == 2


def test_ollama_generate_takes_a_suffix_too(fim_server: ServerProc) -> None:
    import ollama

    got = ollama.Client(host=fim_server.base).generate(
        model="tiny-fim", prompt=PREFIX, suffix=SUFFIX, options={"temperature": 0, "num_predict": 12}
    )
    same = client(fim_server).completions.create(
        model="", prompt=PREFIX, suffix=SUFFIX, max_tokens=12, temperature=0
    )
    assert got.response == same.choices[0].text and got.prompt_eval_count == same.usage.prompt_tokens  # type: ignore[union-attr]
    assert not got.context  # a fill-in-the-middle answer is not a conversation to continue
