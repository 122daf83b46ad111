"""A transport nobody holds is released, as asyncio's is.

asyncio's selector holds a transport only through the reader and writer
handles it has registered. Once the peer's EOF is kept open by
``eof_received()`` (the stream protocol does that), its reader is removed;
with nothing left to write, a transport the program no longer holds is
garbage: the collector finalizes it, which warns "unclosed transport",
closes its socket and (3.13+) counts it out of its server, and a 3.12+
``StreamWriter`` collected with it closes it; ``Server.wait_closed()``
then returns. zloop's loop holds a transport natively the same way: only
while it reads or has something to write.

Each case runs on stock asyncio and on every backend of the zloop build
(io_uring's shared ring too): a handler that keeps nothing, a protocol that
drops its transport, over TCP, Unix sockets and TLS, served and client
connections.
"""

import asyncio
import gc
import os
import socket
import ssl
import warnings

import pytest

from _platform import open_fds
from _support import loop_modes, mode_factory

pytestmark = pytest.mark.network


@pytest.fixture(params=loop_modes())
def loop(request, monkeypatch):
    lp = mode_factory(request.param, monkeypatch)()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def tls():
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


async def _settle():
    """A few passes of the loop, a collection, a few more passes."""
    for _ in range(5):
        await asyncio.sleep(0.01)
    gc.collect()
    for _ in range(5):
        await asyncio.sleep(0.01)


def _run_warned(loop, coro):
    """``loop.run_until_complete(coro)``, and what it and a last collection
    said unclosed ("transport", "<StreamWriter", ...): a transport nobody
    holds warns when it goes, in a collection or (not in a cycle) at once."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = loop.run_until_complete(coro)
        gc.collect()
    said = {str(w.message).split(" ")[1] for w in caught if issubclass(w.category, ResourceWarning)}
    return result, sorted(said)


async def _listen(loop, family, tmp_path, handler, ssl_ctx):
    if family == "unix":
        path = str(tmp_path / "s")
        server = await asyncio.start_unix_server(handler, path, ssl=ssl_ctx)
        return server, lambda **kw: asyncio.open_unix_connection(path, **kw)
    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=ssl_ctx)
    port = server.sockets[0].getsockname()[1]
    return server, lambda **kw: asyncio.open_connection("127.0.0.1", port, **kw)


@pytest.mark.parametrize("family", ["tcp", "unix", "tls"])
def test_a_served_connection_its_handler_dropped_is_released_after_eof(loop, family, tmp_path, tls):
    server_ssl, client_ssl = tls if family == "tls" else (None, None)
    served = []

    async def main():
        before = open_fds()
        server, connect = await _listen(loop, "unix" if family == "unix" else "tcp", tmp_path,
                                        lambda r, w: served.append(1), server_ssl)
        kw = {"ssl": client_ssl} if client_ssl else {}
        if client_ssl and family == "tls":
            kw["server_hostname"] = "127.0.0.1"
        reader, writer = await connect(**kw)
        while not served:
            await asyncio.sleep(0.01)
        writer.close()
        await writer.wait_closed()
        await _settle()
        server.close()
        try:
            await asyncio.wait_for(server.wait_closed(), 2)
            closed = True
        except asyncio.TimeoutError:
            closed = False
        return {"server fds left": len(open_fds() - before), "wait_closed returned": closed}

    got, warned = _run_warned(loop, main())
    assert got == {"server fds left": 0, "wait_closed returned": True}
    # What went said it was unclosed: the transport, or (3.14: the
    # StreamWriter closes its transport as it goes) the StreamWriter. Over
    # TLS, asyncio's TLS layer closes the transport itself at EOF, and
    # whether the writer then warns depends on the Python, on either loop.
    if family != "tls":
        assert {"transport", "<StreamWriter"} & set(warned), warned


class _KeepsNothing(asyncio.Protocol):
    """A client protocol that keeps its half-closed connection open and
    nothing else: once the transport is dropped, only the loop could
    hold it."""

    made = None

    def connection_made(self, transport):
        type(self).made = True

    def eof_received(self):
        return True


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_a_client_connection_nobody_holds_is_released_after_eof(loop, family, tmp_path):
    async def main():
        before = open_fds()
        if family == "unix":
            path = str(tmp_path / "c")
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(path)
        else:
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        if family == "unix":
            await loop.create_unix_connection(_KeepsNothing, path)
        else:
            await loop.create_connection(_KeepsNothing, *listener.getsockname())
        peer, _ = listener.accept()
        peer.close()  # EOF to the client, which keeps its side open
        listener.close()
        await _settle()
        return len(open_fds() - before)

    fds_left, warned = _run_warned(loop, main())
    assert (fds_left, "transport" in warned) == (0, True)


def test_a_half_closed_transport_with_data_to_write_stays_until_it_is_written(loop):
    # The writer registered keeps the transport: what it was given reaches
    # the peer, then it is released.
    async def main():
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        class Answers(_KeepsNothing):
            def eof_received(self):
                self.transport.write(b"z" * 4_000_000)
                del self.transport
                return True

            def connection_made(self, transport):
                self.transport = transport

        await loop.create_connection(Answers, *listener.getsockname())
        peer, _ = listener.accept()
        listener.close()
        peer.shutdown(socket.SHUT_WR)
        peer.setblocking(False)
        got = 0
        while True:
            await _settle()
            try:
                chunk = await loop.sock_recv(peer, 1 << 20)
            except ConnectionError:
                break
            if not chunk:
                break
            got += len(chunk)
        peer.close()
        return got

    assert loop.run_until_complete(asyncio.wait_for(main(), 30)) == 4_000_000
