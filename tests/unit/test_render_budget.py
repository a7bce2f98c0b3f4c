"""Chat template rendering has an output and a time budget: a template whose loops run over
what the caller sent cannot build gigabytes or spin for minutes; either is a 400."""

from __future__ import annotations

import pytest

from llamay.chat import template as template_module
from llamay.chat.template import ChatTemplate
from llamay.errors import InvalidRequest

SPIN = (
    "{% for i in range(100000) %}{% for j in range(100000) %}"
    "{% if i < 0 %}{{ messages[0].content }}{% endif %}{% endfor %}{% endfor %}"
)
ECHO = "{% for i in range(100000) %}{{ messages[0]['content'] }}{% endfor %}"


def test_output_past_the_cap_is_a_400() -> None:
    t = ChatTemplate(ECHO)
    with pytest.raises(InvalidRequest, match="more than 4000000 characters"):
        t.render([{"role": "user", "content": "x" * 1000}])
    assert len(t.render([{"role": "user", "content": "x"}])) == 100_000


def test_a_template_that_spins_is_stopped_at_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(template_module, "RENDER_SECONDS", 0.2)
    with pytest.raises(InvalidRequest, match="took longer than 0.2s"):
        ChatTemplate(SPIN).render([{"role": "user", "content": "hi"}])
    # The budget is per render: the next one starts afresh.
    assert ChatTemplate.chatml().render([{"role": "user", "content": "hi"}]).startswith("<|im_start|>user")
