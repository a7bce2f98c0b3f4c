"""How the HTTP server treats slow and numerous clients: connection limit, header deadline,
total body deadline (the app state's `limits`). `serve(app, host, port)` runs uvicorn with them.

uvicorn closes an idle keep-alive connection, but a connection that sends its request line
and headers a byte at a time has no deadline there, and neither does a body sent slowly
(each chunk may come just before the previous one would time out). So: every connection
must finish its headers within `header_timeout` of opening (or of its previous response),
and `http.read_body` must have the whole body within `body_timeout` of the first byte
asked for (a 408 otherwise). Past `max_connections` open connections, uvicorn answers 503.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

from starlette.applications import Starlette

from ..config import ServerLimits
from .state import ServerState

__all__ = ["ServerLimits", "limits_of", "guarded_protocol", "serve"]


DEFAULT_LIMITS = ServerLimits()


def limits_of(app: Any) -> ServerLimits:
    """The app's limits (its state's `limits`), or the defaults for an app built without
    one (a bare Starlette app in a test)."""
    state = getattr(app, "state", None)
    return state.limits if isinstance(state, ServerState) else DEFAULT_LIMITS


def guarded_protocol(base: type[asyncio.Protocol], header_timeout: float) -> type[asyncio.Protocol]:
    """`base` (uvicorn's h11 or httptools protocol) with a header deadline: the connection
    is closed if no request is in progress `header_timeout` seconds after it opened or
    after its last response. A request is in progress once its headers are parsed (the
    protocol then holds a cycle whose response is not complete)."""

    class HeaderDeadline(base):  # type: ignore[valid-type,misc]
        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._header_timer = self.loop.call_later(header_timeout, self._headers_overdue)

        def _headers_overdue(self) -> None:
            cycle = getattr(self, "cycle", None)
            if cycle is not None and not cycle.response_complete:
                return  # a request is running: its headers came in time
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            self._arm()  # before the base class, which may start a pipelined request
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            super().connection_lost(exc)

    HeaderDeadline.__name__ = f"HeaderDeadline{base.__name__}"
    return HeaderDeadline


def _base_protocol() -> type[asyncio.Protocol]:
    """The protocol uvicorn's "auto" would choose: httptools when installed, else h11."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (the first address `host` resolves to), not yet
    listening: binding first lets `serve` say it is serving only once the port is its own.
    OSError with a plain message when the address is taken or cannot be used."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        why = "the address is in use (another server?)" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise OSError(f"cannot listen on {host}:{port}: {why}") from None
    return sock


def serve(app: Starlette, host: str, port: int, sock: socket.socket | None = None) -> None:
    """Run `app` on host:port (or on `sock`, from `bind`) until interrupted, with its
    limits (`limits_of`: connections and the header deadline here, the body deadline in
    `http.read_body`)."""
    import uvicorn

    limits = limits_of(app)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded_protocol(_base_protocol(), limits.header_timeout),
        limit_concurrency=limits.max_connections,
        timeout_keep_alive=max(1, round(limits.keep_alive_timeout)),
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    uvicorn.Server(config).run(sockets=[sock] if sock is not None else None)
