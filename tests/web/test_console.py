"""The web console in headless Chromium against real servers on a tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from llamay.testing import write_tiny_llama
from tests.serverproc import ServerProc

from .conftest import ADMIN_KEY, USER_KEY

XSS = "<img src=x onerror=alert(1)>"
# End-of-generation tokens banned: only the stop button can end such a reply early.
ENDLESS = {"logit_bias": {"0": -100, "1": -100, "2": -100}, "max_tokens": 6000, "temperature": 0}


def health(server: ServerProc) -> dict[str, Any]:
    return httpx.get(server.base + "/health").json()["models"][0]


def wait_for(check: Any, what: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def open_chat(page: Any, server: ServerProc, extra: dict[str, Any] | None = None) -> None:
    page.goto(server.base + "/#chat")
    page.wait_for_selector("#chat-model option", state="attached")
    if extra is not None:
        page.fill("#chat-extra", json.dumps(extra))


def send(page: Any, text: str) -> Any:
    page.fill("#chat-input", text)
    page.click("#chat-send")
    return page.locator(".msg.assistant").last


def test_key_is_asked_for_and_a_wrong_key_refused(page: Any, keyed_server: ServerProc) -> None:
    page.goto(keyed_server.base + "/")
    page.wait_for_selector("#login:not([hidden])")
    assert page.is_hidden("#nav")
    page.fill("#login-key", "not-a-key")
    page.click("#login-form button")
    page.wait_for_selector("#login-note.error")
    assert "refused" in page.text_content("#login-note")
    page.fill("#login-key", USER_KEY)
    page.click("#login-form button")
    page.wait_for_selector("#nav:not([hidden])")
    assert page.text_content("#who") == "ana · user"
    # A user key sees no admin-only parts: no pull form, no traffic charts.
    page.goto(keyed_server.base + "/#models")
    page.wait_for_selector("#models-table tbody tr")
    assert page.is_hidden("#pull-form")
    page.goto(keyed_server.base + "/#status")
    page.wait_for_selector("#page-status:not([hidden])")
    assert page.is_hidden("#chart-tps") and page.is_visible("#chart-kv")
    # Kept for the tab (sessionStorage), never as a cookie.
    assert page.evaluate("sessionStorage.getItem('llamay.key')") == USER_KEY
    assert page.context.cookies() == []
    page.click("#signout")
    page.wait_for_selector("#login:not([hidden])")
    page.fill("#login-key", ADMIN_KEY)
    page.click("#login-form button")
    page.wait_for_selector("#nav:not([hidden])")
    page.goto(keyed_server.base + "/#models")
    page.wait_for_selector("#pull-form:not([hidden])")


def test_chat_streams_and_stop_frees_the_kv(page: Any, server: ServerProc) -> None:
    idle = health(server)["kv_cells"]
    aborted = health(server)["aborted"]
    open_chat(page, server, ENDLESS)
    reply = send(page, "Tell me a long story.")
    wait_for(lambda: len(reply.locator(".content").text_content() or "") > 40, "streamed text")
    assert health(server)["running"] == 1
    page.click("#chat-stop")
    page.wait_for_selector(".msg.assistant .note >> text=Stopped.")
    m = wait_for(
        lambda: (h := health(server))["running"] == 0 and h["kv_cells"] == idle and h,
        "the server to free the KV",
    )
    assert m["aborted"] == aborted + 1
    # The stopped reply stays, and the chat goes on.
    assert page.is_enabled("#chat-send")


def test_schema_mode_gives_parsed_json_and_reply_stats(page: Any, server: ServerProc) -> None:
    open_chat(page, server, {"max_tokens": 200})
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    page.fill("#chat-schema", json.dumps(schema))
    reply = send(page, "Give me a number.")
    page.wait_for_selector(".msg.assistant .content.json")
    text = reply.locator(".content").text_content()
    assert isinstance(json.loads(text)["n"], int)
    assert "\n" in text  # pretty-printed
    stats = reply.locator(".stats").text_content()
    assert "TTFT" in stats and "tokens/s" in stats and "cached" in stats


def test_model_output_and_server_text_stay_text(page: Any, server: ServerProc) -> None:
    # The answer is constrained to be exactly the markup: it must show as text.
    open_chat(page, server, {"regex": r"<img src=x onerror=alert\(1\)>", "max_tokens": 40})
    reply = send(page, "Show me an image.")
    page.wait_for_selector(".msg.assistant:not(.streaming) .stats")
    assert reply.locator(".content").text_content() == XSS
    # A tool call whose argument is the markup: shown as text on a card.
    tool = {
        "type": "function",
        "function": {
            "name": "show",
            "parameters": {
                "type": "object",
                "properties": {"html": {"const": XSS}},
                "required": ["html"],
            },
        },
    }
    page.fill("#chat-tools", json.dumps([tool]))
    page.fill("#chat-extra", json.dumps({"tool_choice": "required", "max_tokens": 400}))
    reply = send(page, "Call the tool.")
    page.wait_for_selector(".msg.assistant:not(.streaming) .tool-card")
    assert XSS in reply.locator(".tool-card .args").text_content()
    # Redaction echoes the user's text with highlights: still text.
    page.goto(server.base + "/#retrieval")
    page.fill("#redact-input", f"{XSS} mail jane@example.com")
    page.click("#redact-form button")
    page.wait_for_selector("#redact-marked mark")
    assert page.text_content("#redact-marked mark") == "jane@example.com"
    assert XSS in page.text_content("#redact-marked")
    assert page.locator("img").count() == 0
    assert not page.problems  # no alert fired


def test_pull_progress_bar_reaches_100(page: Any, server: ServerProc, tmp_path: Path) -> None:
    # Other weights than the served model's (another seed): loaded beside it, it has a store of its own.
    source = write_tiny_llama(tmp_path / "pulled.gguf", seed=7)
    page.goto(server.base + "/#models")
    page.wait_for_selector("#models-table tbody tr")
    page.fill("#pull-source", str(source))
    page.fill("#pull-name", "pulled")
    page.click("#pull-go")
    page.wait_for_selector("#pull-text >> text=success")
    assert page.eval_on_selector("#pull-bar", "el => el.value") == 100
    page.wait_for_selector("#models-table td >> text=pulled")
    page.locator("tr", has_text="pulled").locator("button", has_text="Details").click()
    page.wait_for_selector("#model-details dl")
    assert "llama" in page.text_content("#model-details")
    # Load it, then unload it.
    page.locator("tr", has_text="pulled").locator("button", has_text="Load").click()
    page.wait_for_selector("#models-note.ok >> text=is loaded")
    row = page.locator("tr", has_text="pulled")
    row.locator("button", has_text="Unload").wait_for()
    assert row.locator("td").nth(4).text_content() == "yes"
    row.locator("button", has_text="Unload").click()
    page.wait_for_selector("#models-note.ok >> text=unloaded")
    row.locator("button", has_text="Load").wait_for()


def test_context_round_trip_through_download_and_upload(page: Any, server: ServerProc, tmp_path: Path) -> None:
    page.goto(server.base + "/#contexts")
    page.fill("#ctx-system", "You answer in one short sentence.")
    page.click("#ctx-form button[type=submit]")
    page.wait_for_selector("#ctx-note.ok")
    cid = page.text_content("#ctx-note").split()[1]
    row = page.locator(f"tr[data-id='{cid}']")
    tokens = row.locator("td").nth(2).text_content()
    with page.expect_download() as got:
        row.locator("button", has_text="Download").click()
    snapshot = tmp_path / "ctx.llamayctx"
    got.value.save_as(snapshot)
    assert snapshot.stat().st_size > 0
    row.locator("button", has_text="Delete").click()
    page.wait_for_selector(f"tr[data-id='{cid}']", state="detached")
    page.set_input_files("#ctx-file", str(snapshot))
    page.wait_for_selector("#ctx-note.ok >> text=Restored")
    restored = page.text_content("#ctx-note").split()[1].rstrip(".")
    assert page.locator(f"tr[data-id='{restored}'] td").nth(2).text_content() == tokens
    page.locator(f"tr[data-id='{restored}']").locator("button", has_text="Fork").click()
    page.wait_for_selector("#ctx-note.ok >> text=Forked")
    assert page.locator("#ctx-table tbody tr").count() >= 2


def busy(server: ServerProc) -> None:
    """A few concurrent chats, some sharing a prompt (prefix-cache hits)."""
    body = {**ENDLESS, "messages": [{"role": "user", "content": "Tell me about the sea."}], "max_tokens": 300}
    with httpx.Client(timeout=60) as c:
        for _ in range(2):
            threads = [threading.Thread(target=c.post, args=(server.url + "/chat/completions",),
                                        kwargs={"json": body}) for _ in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()


def test_screenshots_of_every_page(browser: Any, server: ServerProc, tmp_path: Path) -> None:
    """Each page at 1280x800 and on a 390-pixel phone, saved under tmp_path for a person to look at."""
    for width, height, tag in [(1280, 800, "desktop"), (390, 844, "phone")]:
        context = browser.new_context(viewport={"width": width, "height": height})
        pg = context.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        pg.goto(server.base + "/#chat")
        pg.wait_for_selector("#chat-model option", state="attached")
        if tag == "phone":  # settings start folded on a phone
            pg.click("#chat-settings summary")
        pg.fill("#chat-extra", json.dumps({"max_tokens": 24, "seed": 1}))
        if tag == "phone":
            pg.click("#chat-settings summary")
        pg.fill("#chat-input", "Hello!")
        pg.click("#chat-send")
        pg.wait_for_selector(".msg.assistant:not(.streaming) .stats")
        pg.screenshot(path=str(tmp_path / f"chat-{tag}.png"))
        for name, ready in [
            ("models", "#models-table tbody tr"),
            ("contexts", "#ctx-table tbody tr"),
            ("retrieval", "#rag-form"),
            ("status", "#page-status:not([hidden])"),
        ]:
            pg.goto(f"{server.base}/#{name}")
            pg.wait_for_selector(ready)
            if name == "retrieval":
                pg.fill("#redact-input", "Write to jane@example.com or call +44 20 7946 0958.")
                pg.click("#redact-form button")
                pg.wait_for_selector("#redact-marked mark")
            if name == "status":  # some traffic while it samples, so the plots have lines
                traffic = threading.Thread(target=busy, args=(server,))
                traffic.start()
                pg.wait_for_timeout(7000)
                traffic.join()
            pg.screenshot(path=str(tmp_path / f"{name}-{tag}.png"), full_page=True)
        pg.goto(server.base + "/docs")
        pg.screenshot(path=str(tmp_path / f"docs-{tag}.png"))
        context.close()
        assert not errors, errors
    shots = sorted(p.name for p in tmp_path.glob("*.png"))
    assert len(shots) == 12, shots
    print(f"screenshots in {tmp_path}")


def test_thinking_shows_apart_from_the_answer(page: Any, think_server: ServerProc) -> None:
    open_chat(page, think_server, {"max_tokens": 60, "temperature": 0})
    page.select_option("#chat-think", "high")
    reply = send(page, "Why is the sky blue?")
    page.wait_for_selector(".msg.assistant:not(.streaming) .stats")
    thinking = reply.locator("details.thinking")
    assert thinking.is_visible() and (thinking.locator(".think-text").text_content() or "").strip()
    assert "<think>" not in (reply.locator(".content").text_content() or "")
    if (reply.locator(".content").text_content() or "").strip():
        assert thinking.get_attribute("open") is None  # folded once the answer came


def test_retrieval_shows_passages_with_file_range_and_score(page: Any, indexed_server: ServerProc) -> None:
    from .test_guide import admin_key

    page.goto(indexed_server.base + "/#retrieval")
    page.fill("#login-key", admin_key())
    page.click("#login-form button")
    page.wait_for_selector("#rag-form")
    page.fill("#rag-query", "fork a context")
    page.click("#rag-form button")
    first = page.locator("#rag-results .passage").first
    first.wait_for()
    meta = first.locator(".meta").text_content() or ""
    assert "contexts.md" in meta and "bytes " in meta and "score " in meta
    assert "fork" in (first.locator(".wrap").text_content() or "")
    assert page.locator("#rag-results b").count() == 0  # the file's markup stays text


def test_copied_curl_and_python_run(page: Any, server: ServerProc, tmp_path: Path) -> None:
    """What "copy as curl / Python" gives is a working request with the page's settings."""
    open_chat(page, server, {"max_tokens": 8, "regex": "(yes|no)"})
    page.fill("#chat-system", "Answer yes or no. It's 'quoted'.")
    page.fill("#chat-input", 'Is "water" wet?')
    env = {**os.environ, "LLAMAY_API_KEY": "unused"}
    page.click("#chat-curl")
    curl = page.text_content("#chat-snippet") or ""
    assert curl.startswith(f"curl -s {server.base}/v1/chat/completions")
    done = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert json.loads(done.stdout)["choices"][0]["message"]["content"] in ("yes", "no")
    page.click("#chat-python")
    code = page.text_content("#chat-snippet") or ""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "content='yes'" in done.stdout or "content='no'" in done.stdout


def test_a_key_that_stops_working_is_asked_for_again(page: Any, keyed_server: ServerProc) -> None:
    page.goto(keyed_server.base + "/#contexts")
    page.fill("#login-key", USER_KEY)
    page.click("#login-form button")
    page.wait_for_selector("#page-contexts:not([hidden])")
    page.evaluate("sessionStorage.setItem('llamay.key', 'revoked-key')")
    page.click("#nav a[href='#models']")  # the page's next call with it is a 401
    page.wait_for_selector("#login:not([hidden])")
    assert "refused" in (page.text_content("#login-note") or "")
    assert page.evaluate("sessionStorage.getItem('llamay.key')") is None
    # Another key, another role: the console starts afresh with what that key may do.
    page.fill("#login-key", ADMIN_KEY)
    page.click("#login-form button")
    page.wait_for_selector("#pull-form:not([hidden])")
    assert page.text_content("#who") == "ops · admin"
