"""Widely used asyncio libraries, end to end, on each loop under test.

A FastAPI application served by uvicorn in the test's loop (h11 and
httptools, plain and TLS), driven by HTTPX and by the `websockets` client
in the same loop; the `websockets` library's own server and client; and an
aiohttp server (TCP, TLS, Unix socket) with aiohttp's client. Each case
checks what every response carried, so asyncio and zloop must give the same
answers. The libraries are pinned in tests/requirements.txt; uvicorn's,
AnyIO's and uvloop's own suites run through the compat harness
(docs/compat.md), these cases with the rest of zloop's tests (3.11-3.13,
and 3.12 on io_uring).
"""

import asyncio
import contextlib
import hashlib
import os
import socket

import pytest

from _support import no_leaks, tls_certificate, tls_contexts  # noqa: F401 (no_leaks: autouse)

pytestmark = pytest.mark.network

HOST = "127.0.0.1"
REASON = "pip install -r tests/requirements.txt"

BLOB = os.urandom(3 * 1024 * 1024 + 17)  # a POST body that no single read holds
BLOB_SHA = hashlib.sha256(BLOB).hexdigest()
CHUNK = 64 * 1024
CHUNKS = 48


def chunk(i):
    return bytes([i % 251]) * CHUNK


STREAMED_SHA = hashlib.sha256(b"".join(chunk(i) for i in range(CHUNKS))).hexdigest()


@pytest.fixture
def certs(tmp_path):
    """(PEM file with the server's key and chain, a client context trusting it)."""
    cert, client_ctx = tls_certificate(HOST)
    pem = tmp_path / "server.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
    return str(pem), client_ctx


# -- FastAPI under uvicorn, HTTPX and websockets as clients ----------------------


def fastapi_app(events):
    fastapi = pytest.importorskip("fastapi", reason=REASON)
    pydantic = pytest.importorskip("pydantic", reason=REASON)
    from fastapi import Request, WebSocket
    from fastapi.responses import Response, StreamingResponse

    class Item(pydantic.BaseModel):
        name: str
        price: float

    @contextlib.asynccontextmanager
    async def lifespan(app):
        events.append("startup")
        yield
        events.append("shutdown")

    app = fastapi.FastAPI(lifespan=lifespan)

    @app.get("/items/{item_id}")
    async def read_item(item_id: int, q: str | None = None):
        await asyncio.sleep(0)
        return {"item_id": item_id, "q": q}

    @app.post("/items")
    async def create_item(item: Item):
        return {"name": item.name, "double": item.price * 2}

    @app.post("/echo")
    async def echo(request: Request):
        body = await request.body()
        return Response(body, media_type="application/octet-stream",
                        headers={"x-sha256": hashlib.sha256(body).hexdigest()})

    @app.get("/stream")
    async def stream():
        async def parts():
            for i in range(CHUNKS):
                yield chunk(i)
                await asyncio.sleep(0)

        return StreamingResponse(parts(), media_type="application/octet-stream")

    @app.get("/later")
    async def later():
        await asyncio.sleep(0.01)
        return {"slept": True}

    @app.websocket("/ws")
    async def shout(ws: WebSocket):
        await ws.accept()
        async for text in ws.iter_text():
            await ws.send_text(text.upper())

    return app


@contextlib.asynccontextmanager
async def uvicorn_serving(app, http, pem):
    """uvicorn.Server on a socket bound here, inside the running loop; the
    base URL while it serves, then a graceful shutdown."""
    uvicorn = pytest.importorskip("uvicorn", reason=REASON)
    kw = {"ssl_certfile": pem, "ssl_keyfile": pem} if pem else {}
    config = uvicorn.Config(app, loop="none", http=http, ws="websockets-sansio",
                            lifespan="on", log_level="warning", **kw)
    server = uvicorn.Server(config)
    sock = socket.socket()
    sock.bind((HOST, 0))
    port = sock.getsockname()[1]
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not serving.done(), serving.exception()
            await asyncio.sleep(0.005)
        yield ("https" if pem else "http", port)
    finally:
        server.should_exit = True
        await serving
        sock.close()


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("http", ["h11", "httptools"])
def test_fastapi_under_uvicorn_answers_httpx_and_websockets(run, http, tls, certs):
    httpx = pytest.importorskip("httpx", reason=REASON)
    pytest.importorskip(http, reason=REASON)
    ws_client = pytest.importorskip("websockets.asyncio.client", reason=REASON)
    pem, client_ctx = certs if tls else (None, None)
    events = []
    app = fastapi_app(events)

    async def main():
        async with uvicorn_serving(app, http, pem) as (scheme, port):
            base = f"{scheme}://localhost:{port}" if tls else f"http://{HOST}:{port}"
            limits = httpx.Limits(max_connections=8)
            async with httpx.AsyncClient(base_url=base, verify=client_ctx or True,
                                         limits=limits, timeout=20) as client:
                r = await client.get("/items/5", params={"q": "x"})
                assert (r.status_code, r.json()) == (200, {"item_id": 5, "q": "x"})

                r = await client.post("/items", json={"name": "n", "price": 1.25})
                assert r.json() == {"name": "n", "double": 2.5}
                r = await client.post("/items", json={"name": "n"})
                assert r.status_code == 422

                # More requests than connections: the pool reuses each one.
                rs = await asyncio.gather(*(client.get(f"/items/{i}") for i in range(40)))
                assert [r.json()["item_id"] for r in rs] == list(range(40))

                r = await client.post("/echo", content=BLOB)
                assert r.content == BLOB
                assert r.headers["x-sha256"] == BLOB_SHA

                digest = hashlib.sha256()
                async with client.stream("GET", "/stream") as r:
                    async for part in r.aiter_bytes():
                        digest.update(part)
                assert digest.hexdigest() == STREAMED_SHA

                rs = await asyncio.gather(*(client.get("/later") for _ in range(10)))
                assert {r.json()["slept"] for r in rs} == {True}

            ws_url = f"{'wss' if tls else 'ws'}://{'localhost' if tls else HOST}:{port}/ws"
            async with ws_client.connect(ws_url, ssl=client_ctx) as ws:
                for i in range(20):
                    await ws.send(f"hello {i}")
                    assert await ws.recv() == f"HELLO {i}"
        return events

    assert run(main()) == ["startup", "shutdown"]


# -- websockets: its own server and client -------------------------------------


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_websockets_server_and_client(run, tls):
    server_mod = pytest.importorskip("websockets.asyncio.server", reason=REASON)
    client_mod = pytest.importorskip("websockets.asyncio.client", reason=REASON)
    from websockets.exceptions import ConnectionClosed

    server_ctx, client_ctx = tls_contexts(HOST) if tls else (None, None)

    async def handler(ws):
        async for message in ws:
            if message == "bye":
                await ws.close(code=4000, reason="asked to")
                return
            await ws.send(message[::-1])

    async def main():
        async with server_mod.serve(handler, HOST, 0, ssl=server_ctx, max_size=None) as server:
            port = server.sockets[0].getsockname()[1]
            url = f"{'wss' if tls else 'ws'}://{HOST}:{port}"
            async with client_mod.connect(url, ssl=client_ctx, max_size=None) as ws:
                for i in range(50):
                    await ws.send(f"message {i}")
                    assert await ws.recv() == f"message {i}"[::-1]
                await ws.send(BLOB)
                assert await ws.recv() == BLOB[::-1]
                await (await ws.ping())
                await ws.send("bye")
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.recv()
                return closed.value.rcvd.code, closed.value.rcvd.reason

    assert run(main()) == (4000, "asked to")


# -- aiohttp: server and client --------------------------------------------------


def aiohttp_app():
    from aiohttp import WSMsgType, web

    async def echo(request):
        body = await request.read()
        return web.Response(body=body, headers={"x-sha256": hashlib.sha256(body).hexdigest()})

    async def stream(request):
        resp = web.StreamResponse()
        await resp.prepare(request)
        for i in range(CHUNKS):
            await resp.write(chunk(i))
        await resp.write_eof()
        return resp

    async def upload(request):
        digest = hashlib.sha256()
        async for part in request.content.iter_chunked(CHUNK):
            digest.update(part)
        return web.json_response({"sha256": digest.hexdigest()})

    async def shout(request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                await ws.send_str(msg.data.upper())
        return ws

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/echo", echo)
    app.router.add_get("/stream", stream)
    app.router.add_post("/upload", upload)
    app.router.add_get("/ws", shout)
    return app


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_aiohttp_server_and_client(run, tls, tmp_path):
    aiohttp = pytest.importorskip("aiohttp", reason=REASON)
    from aiohttp import web

    server_ctx, client_ctx = tls_contexts(HOST) if tls else (None, None)
    unix_path = str(tmp_path / "aiohttp.sock")

    async def client_rounds(session, base, ssl):
        async with session.post(base + "/echo", data=BLOB, ssl=ssl) as r:
            assert await r.read() == BLOB
            assert r.headers["x-sha256"] == BLOB_SHA
        async with session.get(base + "/stream", ssl=ssl) as r:
            digest = hashlib.sha256()
            async for part in r.content.iter_chunked(CHUNK):
                digest.update(part)
            assert digest.hexdigest() == STREAMED_SHA

        async def chunks():
            for i in range(CHUNKS):
                yield chunk(i)

        async with session.post(base + "/upload", data=chunks(), ssl=ssl) as r:
            assert (await r.json())["sha256"] == STREAMED_SHA

        async def one(i):
            async with session.post(base + "/echo", data=b"%d" % i, ssl=ssl) as r:
                return await r.read()

        assert await asyncio.gather(*(one(i) for i in range(60))) == [b"%d" % i for i in range(60)]
        async with session.ws_connect(base + "/ws", ssl=ssl) as ws:
            for i in range(20):
                await ws.send_str(f"hello {i}")
                assert (await ws.receive()).data == f"HELLO {i}"

    async def main():
        runner = web.AppRunner(aiohttp_app())
        await runner.setup()
        try:
            site = web.TCPSite(runner, HOST, 0, ssl_context=server_ctx)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]
            scheme = "https" if tls else "http"
            connector = aiohttp.TCPConnector(limit=8)
            async with aiohttp.ClientSession(connector=connector) as session:
                await client_rounds(session, f"{scheme}://{HOST}:{port}", client_ctx or True)
            if not tls:
                # (aiohttp's UnixConnector speaks plain HTTP only: over TLS
                # it fails on stock asyncio too.)
                unix = web.UnixSite(runner, unix_path)
                await unix.start()
                unix_connector = aiohttp.UnixConnector(path=unix_path)
                async with aiohttp.ClientSession(connector=unix_connector) as session:
                    await client_rounds(session, f"http://{HOST}", True)
        finally:
            await runner.cleanup()

    run(main())
