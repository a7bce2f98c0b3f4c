"""The web console and the integration guide, served from package files.

Routes: ``GET /`` (the console page), ``GET /web/{file}`` (its modules and styles),
``GET /docs`` (the guide as HTML), ``GET /api/docs`` (the guide as Markdown) and
``GET /v1/whoami`` (the caller's principal, so the console shows only what a key may do).

The page, its files and the guide are open (they hold no data; the console asks for a key
before it calls anything else), listed in `authn.OPEN_PATHS` / `OPEN_PREFIXES`. Every answer
here carries a strict Content-Security-Policy: scripts and styles only from this origin, no
inline code, no frames, no plugins; and no cookie is ever set, so a cross-site page cannot act
for the user (the key travels only as a Bearer header the console adds itself).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import NotFound
from .authn import principal_of
from .http import json_response
from .markdown import render_page
from .state import state_of

__all__ = ["web_routes", "guide_text", "SECURITY_HEADERS"]

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    # The files change with the package; a stale module next to a new page breaks the console.
    "Cache-Control": "no-cache",
}
# Only these files are served: a fixed list, so no path a request names can leave the folder.
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
GUIDE = "guide.md"


@lru_cache(maxsize=64)
def _package_file(name: str) -> bytes | None:
    """The bytes of `llamay/web/<name>`, or None for anything not a plain file name there."""
    if "/" in name or "\\" in name or name.startswith("."):
        return None
    ref = resources.files("llamay.web").joinpath(name)
    return ref.read_bytes() if ref.is_file() else None


def guide_text() -> str:
    """The integration guide (Markdown) shipped in the package."""
    data = _package_file(GUIDE)
    assert data is not None, "the package lost its guide"
    return data.decode("utf-8")


def _answer(body: bytes | str, media_type: str) -> Response:
    return Response(body, media_type=media_type, headers=SECURITY_HEADERS)


async def index(_request: Request) -> Response:
    data = _package_file("index.html")
    assert data is not None, "the package lost its console page"
    return _answer(data, "text/html; charset=utf-8")


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    kind = _TYPES.get(name[name.rfind(".") :]) if "." in name else None
    data = _package_file(name) if kind else None
    if data is None or kind is None:
        raise NotFound(f"no console file '{name}'")
    return _answer(data, kind)


async def docs_html(_request: Request) -> Response:
    return _answer(render_page(guide_text(), "llamay integration guide"), "text/html; charset=utf-8")


async def docs_markdown(_request: Request) -> Response:
    return _answer(guide_text(), "text/markdown; charset=utf-8")


async def whoami(request: Request) -> Response:
    """The caller as the server sees it. Without keys: the local user, an admin."""
    p = principal_of(request)
    keys = state_of(request).keys
    return json_response(
        {
            "object": "principal",
            "principal": p.name,
            "role": p.role,
            "groups": list(p.groups),
            "keys_required": bool(keys.enabled),
        }
    )


def web_routes() -> list[Route]:
    return [
        Route("/", index, methods=["GET"]),
        Route("/web/{name}", static, methods=["GET"]),
        Route("/docs", docs_html, methods=["GET"]),
        Route("/api/docs", docs_markdown, methods=["GET"]),
        Route("/v1/whoami", whoami, methods=["GET"]),
    ]
