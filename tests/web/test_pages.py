"""The console's files and the guide over HTTP (no browser): headers, access, and the
Markdown renderer's escaping."""

from __future__ import annotations

import httpx

from llamay.api.markdown import render
from tests.serverproc import ServerProc

from .conftest import ADMIN_KEY, USER_KEY


def test_console_files_carry_a_strict_policy_and_no_cookie(server: ServerProc) -> None:
    for path, kind in [("/", "text/html"), ("/web/app.js", "text/javascript"), ("/web/style.css", "text/css"),
                       ("/docs", "text/html"), ("/api/docs", "text/markdown")]:
        r = httpx.get(server.base + path)
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind), path
        csp = r.headers["content-security-policy"]
        for rule in ("default-src 'self'", "script-src 'self'", "style-src 'self'", "object-src 'none'",
                     "frame-ancestors 'none'"):
            assert rule in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        assert "set-cookie" not in r.headers


def test_only_the_console_files_are_served(server: ServerProc) -> None:
    for name in ["nothing.js", "__init__.py", "guide.md", "..%2Fweb.py", "%2e%2e%2fapp.py", ".hidden.js"]:
        assert httpx.get(f"{server.base}/web/{name}").status_code == 404, name


def test_page_has_no_inline_script_or_style(server: ServerProc) -> None:
    html = httpx.get(server.base + "/").text
    assert "<script>" not in html and "<style" not in html and " style=" not in html and " on" + "click" not in html


def test_whoami_needs_a_key_and_names_the_role(keyed_server: ServerProc) -> None:
    base = keyed_server.base
    assert httpx.get(base + "/").status_code == 200  # the page itself asks for the key
    assert httpx.get(base + "/v1/whoami").status_code == 401
    assert httpx.get(base + "/v1/whoami", headers={"Authorization": "Bearer wrong"}).status_code == 401
    user = httpx.get(base + "/v1/whoami", headers={"Authorization": f"Bearer {USER_KEY}"}).json()
    assert user == {"object": "principal", "principal": "ana", "role": "user", "groups": ["sales"],
                    "keys_required": True}
    admin = httpx.get(base + "/v1/whoami", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()
    assert admin["role"] == "admin"


def test_whoami_without_keys_is_the_local_admin(server: ServerProc) -> None:
    me = httpx.get(server.base + "/v1/whoami").json()
    assert me["principal"] == "local" and me["role"] == "admin" and me["keys_required"] is False


def test_markdown_escapes_everything_it_does_not_write() -> None:
    out = render(
        "# T <b>\n\nHi <script>alert(1)</script> `<i>` **<u>**\n\n"
        "[x](javascript:alert(1)) [ok](https://example.com/a?b=1&c=2) [rel](/docs#keys)\n\n"
        "```html\n<img src=x onerror=alert(1)>\n```\n\n"
        "| a | <b> |\n|---|---|\n| `c` | d |\n\n- one <x>\n- two\n\n1. first\n2. second\n"
    )
    assert "<script>" not in out and "<img" not in out and "<b>" not in out and "<u>" not in out
    assert "&lt;script&gt;" in out and "&lt;img src=x onerror=alert(1)&gt;" in out
    assert 'href="javascript' not in out and "[x](javascript:alert(1))" in out
    assert '<a href="https://example.com/a?b=1&amp;c=2">ok</a>' in out
    assert '<a href="/docs#keys">rel</a>' in out
    assert '<h1 id="t-b">T &lt;b&gt;</h1>' in out
    assert "<table><thead><tr><th>a</th><th>&lt;b&gt;</th></tr></thead>" in out
    assert "<td><code>c</code></td>" in out
    assert "<ul><li>one &lt;x&gt;</li><li>two</li></ul>" in out
    assert "<ol><li>first</li><li>second</li></ol>" in out
    assert '<pre><code class="lang-html">' in out
