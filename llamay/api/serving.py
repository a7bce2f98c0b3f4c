"""How the HTTP server treats slow and numerous clients: connection limit, header deadline,
total body deadline (the app state's `limits`). `serve(app, host, port)` runs uvicorn with them.

uvicorn closes an idle keep-alive connection, but a connection that sends its request line
and headers a byte at a time has no deadline there, and neither does a body sent slowly
(each chunk may come just before the previous one would time out). So: every connection
must finish its headers within `header_timeout` of opening (or of its previous response),
and `http.read_body` must have the whole body within `body_timeout` of the first byte
asked for (a 408 otherwise). Past `max_connections` open connections, uvicorn answers 503.
Past `max_connections_per_address` open connections from one client address, that address's
next connection is answered 503 at once and closed, without counting against the total: so
sockets from one address, held open with a byte each, cannot take every connection from
other clients (keyed users among them) before any key is seen.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import socket
from typing import Any

from starlette.applications import Starlette

from ..config import ServerLimits
from .state import ServerState

__all__ = ["ServerLimits", "limits_of", "guarded_protocol", "client_address", "serve"]


DEFAULT_LIMITS = ServerLimits()


def limits_of(app: Any) -> ServerLimits:
    """The app's limits (its state's `limits`), or the defaults for an app built without
    one (a bare Starlette app in a test)."""
    state = getattr(app, "state", None)
    return state.limits if isinstance(state, ServerState) else DEFAULT_LIMITS


def client_address(transport: Any) -> str:
    """The address a connection counts against: the peer's IP, an IPv6 peer's /64 (one
    host is usually given a whole /64), "" when unknown (a Unix socket)."""
    peer = transport.get_extra_info("peername")
    host = peer[0] if isinstance(peer, tuple) and peer else ""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return ""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _refusal(limit: int) -> bytes:
    body = json.dumps({"error": {
        "message": f"this address has {limit} connections open, its limit; close some and retry",
        "type": "overloaded_error", "code": "too_many_connections",
    }}).encode()  # fmt: skip
    return (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        b"retry-after: 1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n" % len(body)
    ) + body


def guarded_protocol(
    base: type[asyncio.Protocol], header_timeout: float, per_address: int | None = None
) -> type[asyncio.Protocol]:
    """`base` (uvicorn's h11 or httptools protocol) with a header deadline: the connection
    is closed if no request is in progress `header_timeout` seconds after it opened or
    after its last response. A request is in progress once its headers are parsed (the
    protocol then holds a cycle whose response is not complete).

    With `per_address`, a connection from an address (`client_address`) that already has
    that many open is refused: answered 503 once its first bytes arrive (or at the header
    deadline), then closed; it never reaches uvicorn, so it counts against no limit. The
    count is per returned class (one server)."""
    open_by_address: dict[str, int] = {}

    class HeaderDeadline(base):  # type: ignore[valid-type,misc]
        _header_timer: asyncio.TimerHandle | None = None
        _address: str | None = None  # counted in open_by_address
        _refused: asyncio.Transport | None = None  # over its address's limit
        _served = False  # handed to uvicorn (its connection_made ran)

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
            if per_address is not None:
                address = client_address(transport)
                if open_by_address.get(address, 0) >= per_address:
                    self._refused = transport
                    self._header_timer = self.loop.call_later(header_timeout, self._refuse)
                    return
                open_by_address[address] = open_by_address.get(address, 0) + 1
                self._address = address
            super().connection_made(transport)
            self._served = True
            self._arm()

        def _refuse(self) -> None:
            transport, self._refused = self._refused, None
            if transport is not None and not transport.is_closing():
                transport.write(_refusal(per_address or 0))
                transport.close()

        def data_received(self, data: bytes) -> None:
            if not self._served:
                # Answer once the request has started to arrive: a 503 sent before the
                # client wrote anything could be lost to the reset its write then causes.
                self._refuse()
                return
            super().data_received(data)

        def eof_received(self) -> Any:
            if not self._served:
                self._refuse()
                return None
            return super().eof_received()

        def on_response_complete(self) -> None:
            self._arm()  # before the base class, which may start a pipelined request
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            if self._address is not None:
                left = open_by_address.pop(self._address) - 1
                if left:
                    open_by_address[self._address] = left
                self._address = None
            if not self._served:  # refused: uvicorn never saw it
                self._refused = None
                return
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


def bind(host: str, port: int, *, share: bool = False) -> socket.socket:
    """A socket bound to host:port (the first address `host` resolves to), not yet
    listening: binding first lets `serve` say it is serving only once the port is its own.
    OSError with a plain message when the address is taken or cannot be used. `share`
    (SO_REUSEPORT): other sockets of this user that set it too may bind the same address,
    and the kernel spreads connections over them (fleet ingresses of nodes on one host)."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if share:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        why = "the address is in use (another server?)" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise OSError(f"cannot listen on {host}:{port}: {why}") from None
    return sock


def serve(app: Starlette, host: str, port: int, sock: socket.socket | None = None) -> None:
    """Run `app` on host:port (or on `sock`, from `bind`) until interrupted, with its
    limits (`limits_of`: connections, per address and in all, and the header deadline here, the body deadline in
    `http.read_body`)."""
    import uvicorn

    limits = limits_of(app)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded_protocol(_base_protocol(), limits.header_timeout, limits.max_connections_per_address),
        limit_concurrency=limits.max_connections,
        timeout_keep_alive=max(1, round(limits.keep_alive_timeout)),
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    uvicorn.Server(config).run(sockets=[sock] if sock is not None else None)
