"""The fleet's ingress deployment: every HTTP request goes through here to one replica.

The ingress is the fleet's HTTP server itself (uvicorn in its own process, on the fleet's
address); Ray Serve's HTTP proxy is not started, since it would put one more process hop
(and a call back for the body) in front of every request. It reads only what routing needs
(`hints.read_hint`), forwards method, path, headers and body unchanged (except a moved
context's id, rewritten to the id its new replica knows), and streams the replica's
response back chunk by chunk. Auth is the replicas' own, on every request; the ingress
checks the key as well before it reads a body (so a client without one never makes it
buffer anything), and alone for /v1/fleet, which no replica serves.

It applies `serve`'s limits (`spec.server.limits`): connections, the header deadline, the
body size (413; a restore's body may be RESTORE_BODIES times larger, its replica checking
it against the model) and the whole-body deadline (408), each error in the shape of the
API called. Bodies over `INLINE_JSON` are parsed for their hint in a worker thread
(`HintReader`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..api.authn import OPEN_PATHS, OPEN_PREFIXES
from ..api.errors import api_of, error_body
from ..api.http import INLINE_JSON, read_body
from ..auth import bearer_token
from ..errors import LlamayError
from .asgi import Forwarded, Head
from .hints import RouteHint, read_hint, rewrite_context
from .recovery import Recovery
from .routing import knowledge
from .spec import REPLICA_HEADER, FleetSpec

__all__ = ["LlamayIngress", "error_response"]

log = logging.getLogger("llamay.fleet")
HOP = {b"host", b"content-length", b"transfer-encoding", b"connection", b"keep-alive"}
CREATES = ("/v1/contexts", "/v1/contexts/restore")
RETRY_AFTER = "1"
# A snapshot restore's body may be this many times `max_body` (snapshots hold KV state,
# which is large; the replica holds it to its model's own limit).
RESTORE_BODIES = 16
LIST_PAGE = 100  # contexts a listing returns without `limit`, as each replica's


def error_response(path: str, status: int, message: str, retry_after: str | None = RETRY_AFTER) -> Response:
    """An error in the shape of the API the path belongs to."""
    body: dict[str, Any]
    if path.startswith("/v1/messages"):
        body = {"type": "error", "error": {"type": "overloaded_error", "message": message}}
    elif path.startswith("/api/"):
        body = {"error": message}
    else:
        body = {"error": {"message": message, "type": "server_error", "code": "unavailable"}}
    headers = {"Retry-After": retry_after} if retry_after else {}
    return JSONResponse(body, status_code=status, headers=headers)


def refusal(path: str, exc: LlamayError) -> Response:
    """A refusal (401, 408, 413, ...) in the shape of the API the path belongs to."""
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
    return JSONResponse(error_body(exc, api_of(path)), status_code=exc.status, headers=headers)


def whole_response(head: Head, data: bytes) -> Response:
    """A reply read whole, with the replica's headers and its (possibly new) length."""
    resp = Response(data, status_code=head.status)
    resp.raw_headers = [(k, v) for k, v in head.headers if k.lower() not in HOP]
    resp.raw_headers.append((b"content-length", str(len(data)).encode()))
    return resp


async def body_of(head: Head, gen: Any) -> bytes:
    """The whole body of a reply whose `head` was read from `gen`."""
    if head.done:
        return head.body
    return head.body + b"".join([c async for c in gen])


def stream_error(content_type: str, message: str) -> bytes:
    """The error event a stream ends with when its replica fails mid-way."""
    if content_type.startswith("text/event-stream"):
        err = {"error": {"message": message, "type": "server_error", "code": "replica_failed"}}
        return f"event: error\ndata: {json.dumps(err)}\n\n".encode()
    if "ndjson" in content_type:
        return (json.dumps({"error": message}) + "\n").encode()
    return b""


class HintReader:
    """Routing hints of request bodies, and their rewrites for moved contexts: a body over
    INLINE_JSON is parsed in a worker thread, as `llamay serve` parses its bodies. (The
    parse still holds the interpreter lock while `json.loads` runs, about a second for a
    30 MB body here, so the event loop pauses that long: `max_body` bounds it.)"""

    async def hint(self, method: str, path: str, query: dict[str, str], body: bytes) -> RouteHint:
        if len(body) <= INLINE_JSON:
            return read_hint(method, path, query, body)
        return await asyncio.to_thread(read_hint, method, path, query, body)

    async def rewrite(self, path: str, body: bytes, hint: RouteHint, local: str) -> tuple[str, bytes]:
        if len(body) <= INLINE_JSON:
            return rewrite_context(path, body, hint, local)
        return await asyncio.to_thread(rewrite_context, path, body, hint, local)


class LlamayIngress:
    def __init__(self, replicas: Any, spec: FleetSpec) -> None:
        self.replicas = replicas
        self.spec = spec
        self.know = knowledge(spec.app_name)
        self.keys = spec.server.key_ring()
        self.limits = spec.server.limits
        self.hints = HintReader()
        self.control: dict[str, Any] = {}
        self.recovery = Recovery(spec, self.know, replicas) if spec.state_dir else None
        self._bg: asyncio.Task[None] | None = None
        self._http: asyncio.Task[None] | None = None

    # -- the HTTP endpoint ---------------------------------------------------------------
    async def serve_http(self) -> None:
        """Listen on the fleet's address in this process, unless already listening. The
        process that deploys the fleet calls this once the ingress is up; `check_health`
        calls it too, so an ingress Ray restarts listens again by itself."""
        if self._http is not None and not self._http.done():
            return
        from ..api.serving import _base_protocol, bind, guarded_protocol

        # A busy port fails here, plainly; only ingresses of nodes that share this host
        # (several Ray nodes on one machine) share the address, and the kernel spreads
        # connections over them.
        sock = bind(self.spec.host, self.spec.port, share=await asyncio.to_thread(nodes_share_host))
        config = uvicorn.Config(
            self.asgi,
            http=guarded_protocol(_base_protocol(), header_timeout=self.limits.header_timeout),
            limit_concurrency=self.limits.max_connections,
            timeout_keep_alive=max(1, round(self.limits.keep_alive_timeout)),
            interface="asgi3",
            lifespan="off",
            log_config=None,
            access_log=False,
        )
        self._http = asyncio.create_task(QuietServer(config).serve(sockets=[sock]))

    async def asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        response = await self.__call__(Request(scope, receive))
        await response(scope, receive, send)

    async def live(self) -> list[Any]:
        """The live replicas. Ray builds our router (which learns them) on the first call
        through the handle, so until then one plain call is made to bring it up."""
        views = self.know.live()
        for _ in range(20):
            if views:
                break
            try:
                await asyncio.wait_for(self.replicas.status.remote(RouteHint()), 30)
            except Exception:
                await asyncio.sleep(0.25)
            views = self.know.live()
        return views

    async def check_health(self) -> None:
        # Ray calls this every few seconds from the start, so recovery runs even before the
        # first request (a fleet restarted on a state directory restores contexts at once).
        self._ensure_background()
        await self.serve_http()

    def _ensure_background(self) -> None:
        if self.recovery is not None and self._bg is None:
            self._bg = asyncio.create_task(self.recovery.run())

    # -- forwarding ----------------------------------------------------------------------
    async def __call__(self, request: Request) -> Response:
        self._ensure_background()
        path = request.url.path
        if path == "/v1/fleet" or path.startswith("/v1/fleet/"):
            return await self.fleet_route(request)
        try:
            if self.keys.enabled and path not in OPEN_PATHS and not path.startswith(OPEN_PREFIXES):
                self.authenticate(request)
            cap = self.limits.max_body * (RESTORE_BODIES if path == "/v1/contexts/restore" else 1)
            body = await read_body(request, cap, limits=self.limits)
        except LlamayError as exc:
            return refusal(path, exc)
        except ClientDisconnect:
            return Response(status_code=400)
        hint = await self.hints.hint(request.method, path, dict(request.query_params), body)
        if request.method == "GET" and path == "/v1/contexts":
            return await self.list_contexts(request)
        renamed: str | None = None
        if hint.context is not None:
            found = await self.locate(hint.context, request)
            if (
                found is None
                and self.recovery is not None
                and await asyncio.to_thread(self.recovery.waiting, hint.context)
            ):
                return error_response(
                    path, 503, f"context '{hint.context}' is being restored; retry shortly", "2"
                )
            if found is not None:
                local = found[1]
                if local != hint.context:
                    path, body = await self.hints.rewrite(path, body, hint, local)
                    renamed = hint.context
        fwd = Forwarded(
            request.method,
            path,
            request.url.query.encode(),
            [(k, v) for k, v in request.headers.raw if k.lower() not in HOP],
            body,
            (request.client.host, request.client.port) if request.client else None,
        )
        return await self.forward(hint, fwd, original=request.url.path, renamed=renamed)

    async def forward(
        self, hint: RouteHint, fwd: Forwarded, original: str, renamed: str | None = None
    ) -> Response:
        gen = self.replicas.options(stream=True).handle.remote(hint, fwd)
        try:
            head = await gen.__anext__()
        except Exception as exc:  # the replica died or went away before answering
            log.warning("forwarding failed before a response", extra={"error": repr(exc)})
            return error_response(original, 503, "the replica serving this request went away; retry")
        assert isinstance(head, Head)
        replica = dict(head.headers).get(REPLICA_HEADER.encode(), b"").decode()
        ctype = dict(head.headers).get(b"content-type", b"").decode()
        if fwd.method in ("POST", "DELETE") and fwd.path.startswith("/v1/contexts"):
            return await self._context_reply(hint, fwd, head, gen, replica)
        if renamed is not None and fwd.method == "GET" and fwd.path.count("/") == 3:
            return await self._renamed_reply(renamed, head, gen)

        if head.done:  # the whole reply came with its head: nothing more to read
            return whole_response(head, head.body)

        async def rest() -> AsyncIterator[bytes]:
            try:
                if head.body:
                    yield head.body
                async for chunk in gen:
                    yield chunk
            except Exception as exc:
                log.warning("replica failed mid-response", extra={"error": repr(exc), "replica": replica})
                yield stream_error(ctype, "the replica serving this stream failed; retry the request")
            finally:
                gen.cancel()

        resp = StreamingResponse(rest(), status_code=head.status)
        resp.raw_headers = [(k, v) for k, v in head.headers if k.lower() not in HOP]
        return resp

    async def _context_reply(
        self, hint: RouteHint, fwd: Forwarded, head: Head, gen: Any, replica: str
    ) -> Response:
        """Context create / fork / restore / delete replies are small JSON: read whole, learn
        which replica now holds which id, pass on unchanged."""
        try:
            data = await body_of(head, gen)
        except Exception:
            return error_response(fwd.path, 503, "the replica went away while answering; retry")
        if head.status == 200:
            try:
                got = json.loads(data)
            except ValueError:
                got = {}
            if fwd.method == "DELETE" and hint.context:
                self.know.forget(hint.context)
            elif fwd.path in CREATES and isinstance(got.get("id"), str):
                self.know.learn(got["id"], replica)
            elif fwd.path.endswith("/fork"):
                for item in got.get("data") or []:
                    self.know.learn(item["id"], replica)
        return whole_response(head, data)

    async def _renamed_reply(self, fid: str, head: Head, gen: Any) -> Response:
        """GET /v1/contexts/{id} of a moved context: the record under the id the caller
        used (its fleet-wide id), not the one its new replica gave it."""
        try:
            data = await body_of(head, gen)
        except Exception:
            return error_response("/v1/contexts", 503, "the replica went away while answering; retry")
        if head.status == 200:
            try:
                got = json.loads(data)
            except ValueError:
                got = None
            if isinstance(got, dict) and "id" in got:
                data = json.dumps({**got, "id": fid}).encode()
        return whole_response(head, data)

    async def locate(self, fid: str, request: Request) -> tuple[str, str] | None:
        """The holder of context `fid`: known, reported by a replica, or found by asking
        each replica with the caller's own credentials (a 404 everywhere: None)."""
        found = self.know.holder(fid, self.know.live())
        if found is not None:
            return found
        for view in await self.live():
            fwd = Forwarded("GET", f"/v1/contexts/{fid}", b"",
                            [(k, v) for k, v in request.headers.raw if k.lower() not in HOP])  # fmt: skip
            status, _ = await self.pinned(view.uid, fwd)
            if status in (200, 403):
                self.know.learn(fid, view.uid)
                return view.uid, fid
        return None

    async def pinned(self, uid: str, fwd: Forwarded, timeout: float = 30.0) -> tuple[int, bytes]:
        """One request answered by replica `uid` (status 503 if it cannot be reached)."""

        async def go() -> tuple[int, bytes]:
            gen = self.replicas.options(stream=True).handle.remote(RouteHint(pin=uid), fwd)
            head = await gen.__anext__()
            return head.status, await body_of(head, gen)

        try:
            return await asyncio.wait_for(go(), timeout)
        except Exception:
            return 503, b""

    async def list_contexts(self, request: Request) -> Response:
        """GET /v1/contexts across the fleet, one page: each replica's page for the caller's
        `limit` and `after` (under the caller's own credentials), merged in the replicas' id
        order and cut to `limit`. Moved contexts are shown under their fleet-wide ids;
        `last_id` is the cursor in the replicas' order (for the next page's `after`)."""
        headers = [(k, v) for k, v in request.headers.raw if k.lower() not in HOP]
        query = request.url.query.encode()
        limit = request.query_params.get("limit", "")
        rows: list[tuple[str, dict[str, Any]]] = []
        more = False
        for view in await self.live():
            fwd = Forwarded("GET", "/v1/contexts", query, headers)
            status, data = await self.pinned(view.uid, fwd)
            if status != 200:
                return Response(data, status_code=status, media_type="application/json")
            page = json.loads(data)
            more = more or bool(page.get("has_more"))
            for row in page.get("data", []):
                local = row["id"]
                row["id"] = self.know.fleet_id(view.uid, local)
                row["replica"] = view.uid
                rows.append((local, row))
        rows.sort(key=lambda pair: pair[0])
        n = int(limit) if limit.isdigit() else LIST_PAGE  # the replicas checked it
        more, rows = more or len(rows) > n, rows[:n]
        last = rows[-1][0] if rows else None
        body = {"object": "list", "data": [r for _, r in rows], "has_more": more, "last_id": last}
        return JSONResponse(body)

    # -- /v1/fleet (admin) ---------------------------------------------------------------
    def authenticate(self, request: Request) -> Any:
        """The caller's principal; Unauthorized (401) without a valid key."""
        token = bearer_token(request.headers.get("authorization"), request.headers.get("x-api-key"))
        return self.keys.authenticate(token)

    async def fleet_route(self, request: Request) -> Response:
        try:
            principal = self.authenticate(request)
        except LlamayError as exc:
            return JSONResponse({"error": {"message": exc.message, "type": "authentication_error"}}, 401)
        if not principal.admin:
            return JSONResponse(
                {"error": {"message": "/v1/fleet is for admins", "type": "permission_error"}}, 403
            )
        if request.method == "GET" and request.url.path == "/v1/fleet":
            return JSONResponse(await self.status())
        if request.method == "POST" and request.url.path == "/v1/fleet/scale":
            try:
                given = json.loads(await read_body(request, INLINE_JSON, limits=self.limits) or b"{}")
            except (LlamayError, ValueError):
                given = None
            n = given.get("replicas") if isinstance(given, dict) else None
            if not isinstance(n, int) or n < 1:
                return JSONResponse({"error": {"message": "'replicas' must be an integer >= 1"}}, 400)
            self.control = {"replicas": n}
            return JSONResponse({"object": "fleet.scale", "replicas": n})
        if request.method == "POST" and request.url.path == "/v1/fleet/down":
            self.control = {"down": True}
            return JSONResponse({"object": "fleet.down"})
        return JSONResponse({"error": {"message": "not found"}}, 404)

    async def status(self) -> dict[str, Any]:
        rows = []
        for view in await self.live():
            try:
                rows.append(await asyncio.wait_for(
                    self.replicas.status.remote(RouteHint(pin=view.uid)), 30))  # fmt: skip
            except Exception as exc:
                rows.append({"replica": view.uid, "error": repr(exc)})
        return {
            "object": "fleet",
            "app": self.spec.app_name,
            "router": self.spec.router,
            "replicas": rows,
            "routed": self.know.sent,
            "state_dir": self.spec.state_dir,
        }

    async def prepare_down(self) -> None:
        """Before the fleet goes down: replicas keep their contexts instead of moving them."""
        for view in self.know.live():
            try:
                await asyncio.wait_for(self.replicas.no_drain.remote(RouteHint(pin=view.uid)), 10)
            except Exception:
                log.warning("a replica did not answer before going down", extra={"replica": view.uid})

    async def take_control(self) -> dict[str, Any]:
        """What `fleet scale` / `fleet down` asked for since the last call (read by the
        process that ran `fleet up`, which owns the deployment)."""
        out, self.control = self.control, {}
        return out

    async def take_contexts(self, source: str, items: list[tuple[str, bytes]]) -> int:
        """Restore a draining replica's contexts on the others; how many moved."""
        moved = 0
        for local, data in items:
            fid = self.know.fleet_id(source, local)
            try:
                uid, new = await self.replicas.import_context.remote(RouteHint(), data, fid)
            except Exception:
                log.exception("moving a context failed", extra={"context": fid})
                continue
            self.know.learn(fid, uid, new)
            moved += 1
        if self.recovery is not None:
            self.recovery.save_aliases()
        return moved


def nodes_share_host() -> bool:
    """Whether another live Ray node runs on this node's address (several nodes on one
    machine, as in a test cluster)."""
    import ray

    try:
        me = ray.util.get_node_ip_address()
        return sum(1 for n in ray.nodes() if n.get("Alive") and n.get("NodeManagerAddress") == me) > 1
    except Exception:
        return False


class QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers: Ray owns this process's signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
