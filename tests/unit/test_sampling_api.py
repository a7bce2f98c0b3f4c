"""The further samplers and the sampling defaults chain at each API's edge, and the serve flags."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from llamay.api.anthropic.schemas import parse_messages_request
from llamay.api.ollama.schemas import parse_chat as ollama_chat
from llamay.api.ollama.schemas import parse_options
from llamay.api.openai.schemas import parse_chat, parse_completion
from llamay.chat.prepare import effective_params, server_defaults
from llamay.cli.main import build_parser
from llamay.cli.serve import sampling_flags
from llamay.errors import InvalidRequest
from llamay.types import SamplingParams

EXTRAS: dict[str, Any] = {
    "mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2, "tfs_z": 0.9, "xtc_probability": 0.5,
    "xtc_threshold": 0.2, "dry_multiplier": 0.8, "dry_base": 2.0, "dry_allowed_length": 3,
    "dry_penalty_last_n": 128,
}  # fmt: skip
BAD: list[tuple[str, Any]] = [
    ("mirostat", 3), ("mirostat", 1.5), ("mirostat_tau", -1), ("mirostat_eta", 2), ("tfs_z", 1.5),
    ("xtc_probability", -0.1), ("xtc_threshold", 1.1), ("dry_multiplier", -1), ("dry_base", 0.5),
    ("dry_allowed_length", -1), ("dry_penalty_last_n", -2), ("dry_sequence_breakers", [""]),
    ("dry_sequence_breakers", [1]), ("tfs_z", "low"),
]  # fmt: skip
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def _fields(s: SamplingParams) -> dict[str, Any]:
    return {k: getattr(s, k) for k in EXTRAS}


def test_openai_extras_reach_sampling_params() -> None:
    req = parse_chat({**CHAT, **EXTRAS, "dry_sequence_breakers": []})
    assert _fields(req.common.sampling) == EXTRAS
    assert req.common.sampling_given >= set(EXTRAS)
    comp = parse_completion({"prompt": "x", **EXTRAS})
    assert _fields(comp.common.sampling) == EXTRAS


def test_openai_defaults_leave_the_extras_off() -> None:
    s = parse_chat(CHAT).common.sampling
    assert (s.mirostat, s.tfs_z, s.xtc_probability, s.dry_multiplier) == (0, 1.0, 0.0, 0.0)


def test_dry_breakers_default_to_llama_servers() -> None:
    assert parse_chat(CHAT).common.sampling.dry_sequence_breakers == ("\n", ":", '"', "*")
    given = parse_chat({**CHAT, "dry_sequence_breakers": ["END", "\n\n"]}).common.sampling
    assert given.dry_sequence_breakers == ("END", "\n\n")
    assert parse_options({"dry_sequence_breakers": []}).sampling.dry_sequence_breakers == ()


@pytest.mark.parametrize(("name", "value"), BAD)
def test_openai_bad_extras_name_the_field(name: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_chat({**CHAT, name: value})
    assert err.value.param == name


@pytest.mark.parametrize(("name", "value"), BAD)
def test_ollama_bad_extras_name_the_field(name: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_options({name: value})
    assert err.value.param == f"options.{name}"


@pytest.mark.parametrize(
    ("name", "value"),
    [("dynatemp_range", 0.5), ("top_n_sigma", 1.0), ("min_keep", 2), ("penalize_nl", True), ("samplers", ["top_k"]),
     ("dynatemp_range", False)],
)  # fmt: skip
def test_unimplemented_llama_samplers_are_400_unless_off(name: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_chat({**CHAT, name: value})
    assert err.value.param == name
    off = {
        "dynatemp_range": 0,
        "dynatemp_exponent": 1.0,
        "top_n_sigma": -1,
        "min_keep": 0,
        "penalize_nl": False,
    }
    assert parse_chat({**CHAT, **off}).common.sampling == parse_chat(CHAT).common.sampling


def test_ollama_mirostat_and_tfs_are_no_longer_ignored() -> None:
    s = parse_options({**EXTRAS, "num_gpu": 99, "use_mmap": True}).sampling
    assert _fields(s) == EXTRAS


def test_ollama_penalize_newline_false_is_refused() -> None:
    assert parse_options({"penalize_newline": True}).sampling == parse_options({}).sampling
    with pytest.raises(InvalidRequest) as err:
        parse_options({"penalize_newline": False})
    assert err.value.param == "options.penalize_newline"


def test_defaults_chain_under_the_request() -> None:
    defaults = {
        "temperature": 0.3,
        "top_k": 20,
        "mirostat": 2,
        "repeat_last_n": -1,
        "stop": ["x"],
        "num_ctx": 9,
    }
    common = parse_chat({**CHAT, "temperature": 0.9}).common.knobs().under(defaults)
    s = common.sampling
    assert (s.temperature, s.top_k, s.mirostat, s.repeat_last_n) == (0.9, 20, 2, 64)
    unset = parse_chat(CHAT).common.knobs().under({})
    assert unset.sampling == parse_chat(CHAT).common.sampling  # nothing set: today's defaults
    with pytest.raises(InvalidRequest) as err:
        parse_chat(CHAT).common.knobs().under({"top_p": 3.0})
    assert err.value.param == "top_p"


def test_anthropic_gets_the_defaults_under_its_own_fields() -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "top_k": 3}
    req = parse_messages_request(body).knobs.under({"temperature": 0.3, "top_k": 40, "min_p": 0.05})
    assert (req.sampling.temperature, req.sampling.top_k, req.sampling.min_p) == (0.3, 3, 0.05)


def test_ollama_options_over_model_defaults() -> None:
    c = ollama_chat({"model": "m", "messages": [], "options": {"top_k": 7}}).common
    s = c.knobs.under({"temperature": 0.3, "top_k": 20, "mirostat": 1}).sampling
    assert (s.temperature, s.top_k, s.mirostat) == (0.3, 7, 1)


class _Store:
    def __init__(self, params: dict[str, Any]) -> None:
        self._params = params

    def params(self, name: str) -> dict[str, Any]:
        return dict(self._params)


def test_effective_params_order(tmp_path: Any) -> None:
    # No GGUF defaults here (not a GGUF file): the server's flags, then what create set.
    config = SimpleNamespace(temperature=0.3, top_p=None, top_k=5, min_p=None, repeat_penalty=None)
    runtime = SimpleNamespace(config=config, store=_Store({"top_k": 9, "stop": ["END"]}))
    assert server_defaults(runtime) == {"temperature": 0.3, "top_k": 5}
    got = effective_params(runtime, "m", tmp_path / "missing.gguf")
    assert got == {"temperature": 0.3, "top_k": 9, "stop": ["END"]}


@pytest.mark.parametrize("dash", ["-", "--"])
def test_serve_sampling_flags(dash: str) -> None:
    args = build_parser().parse_args(
        ["serve", f"{dash}temp", "0.3", f"{dash}top-p", "0.9", f"{dash}top-k", "5", f"{dash}min-p", "0.05",
         f"{dash}repeat-penalty", "1.1"]
    )  # fmt: skip
    assert sampling_flags(args) == {
        "temperature": 0.3, "top_p": 0.9, "top_k": 5, "min_p": 0.05, "repeat_penalty": 1.1
    }  # fmt: skip
    assert sampling_flags(build_parser().parse_args(["serve"])) == {}
    with pytest.raises(ValueError, match="top_p"):
        sampling_flags(build_parser().parse_args(["serve", "-top-p", "1.5"]))


def test_catalog_defaults_go_under_everything_else(tmp_path: Any) -> None:
    from llamay.store.catalog import DEFAULT_CATALOG

    config = SimpleNamespace(temperature=None, top_p=0.5, top_k=None, min_p=None, repeat_penalty=None)
    store = _Store({"top_k": 9})
    store.catalog = DEFAULT_CATALOG  # type: ignore[attr-defined]
    runtime = SimpleNamespace(config=config, store=store)
    # the default model's own: the model card's, under the server's -top-p and create's top_k
    got = effective_params(runtime, "smollm2:135m", tmp_path / "missing.gguf")
    assert got == {"temperature": 0.2, "top_p": 0.5, "top_k": 9}
    assert effective_params(runtime, "smollm2", tmp_path / "missing.gguf")["temperature"] == 0.2  # an alias
    assert "temperature" not in effective_params(runtime, "gemma3:270m", tmp_path / "missing.gguf")


def test_a_catalog_entry_with_a_bad_sampling_default_fails_at_import() -> None:
    from llamay.store.catalog import DEFAULT_CATALOG, CatalogEntry

    entry = DEFAULT_CATALOG.get("smollm2:135m")
    assert entry is not None and entry.sampling_defaults["temperature"] == 0.2
    with pytest.raises(ValueError, match="unknown sampling option"):
        CatalogEntry(name="x:y", sha256="0" * 64, size=1, chunks=entry.chunks, sampling=(("temp", 0.1),))
    with pytest.raises(Exception, match="top_p"):
        CatalogEntry(name="x:y", sha256="0" * 64, size=1, chunks=entry.chunks, sampling=(("top_p", 3.0),))
