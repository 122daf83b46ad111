"""The TLS record path (issue 36): a wrapped connection's records in native
code, handed back to asyncio's state machine for anything else.

The server is the loop's (``create_server(ssl=)``); the client is a plain
socket driven by an ``ssl.SSLObject`` over memory BIOs, so that each test
chooses the ciphertext a read brings: a record split across many reads,
the handshake's end and data in one read, data and a close_notify in one
read, a corrupted record after good ones. Each case runs on stock asyncio
and on zloop, the latter both on the record path and on the Python path
(what runs where ``_ssl``'s layout cannot be confirmed), with the same
expected results.
"""

import asyncio
import ctypes
import random
import socket
import ssl

import pytest

from _net import RecordingBufferedProtocol
from _support import tls_contexts

pytestmark = pytest.mark.network

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def contexts():
    return tls_contexts(HOST)


@pytest.fixture(scope="module")
def server_ctx(contexts):
    return contexts[0]


@pytest.fixture(scope="module")
def client_ctx(contexts):
    return contexts[1]


@pytest.fixture(params=["records", "python"])
def path(request, loop_name, monkeypatch):
    """zloop's record path, or its Python path (as where the layout check
    fails); stock asyncio runs once."""
    if loop_name == "asyncio":
        if request.param == "python":
            pytest.skip("one run of stock asyncio")
        return "asyncio"
    from zloop import _tls

    if request.param == "python":
        monkeypatch.setattr(_tls, "_records", lambda *args: None)
    return request.param


class Server(asyncio.Protocol):
    """Records what the application sees; echoes when asked to."""

    def __init__(self, echo=False, pause_each=False):
        self.echo = echo
        self.pause_each = pause_each
        self.data = bytearray()
        self.events = []
        self.lost = asyncio.get_running_loop().create_future()
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("made")

    def data_received(self, data):
        self.data += data
        if not self.events or self.events[-1] != "data":
            self.events.append("data")
        if self.echo:
            self.transport.write(bytes(data))
        if self.pause_each:
            self.transport.pause_reading()
            asyncio.get_running_loop().call_soon(self.transport.resume_reading)

    def eof_received(self):
        self.events.append("eof")

    def connection_lost(self, exc):
        self.events.append("lost")
        if not self.lost.done():
            self.lost.set_result(exc)


class Client:
    """A TLS client whose ciphertext the test sends as it likes."""

    def __init__(self, loop, sock, ctx):
        self.loop = loop
        self.sock = sock
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")

    @classmethod
    async def connect(cls, loop, port, ctx, flush_finished=True):
        sock = socket.socket()
        sock.setblocking(False)
        await loop.sock_connect(sock, (HOST, port))
        self = cls(loop, sock, ctx)
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self.flush()
                self.incoming.write(await self._recv())
        if flush_finished:
            await self.flush()
        return self

    async def _recv(self):
        data = await asyncio.wait_for(self.loop.sock_recv(self.sock, 65536), 10)
        if not data:
            raise ConnectionError("server closed")
        return data

    def ciphertext(self, plaintext=b""):
        """Encrypts plaintext; returns what is to be sent (with any
        handshake bytes still queued first)."""
        view = memoryview(plaintext)
        while view:
            n = self.tls.write(view[:16384])
            view = view[n:]
        return self.outgoing.read()

    async def send(self, data, chunk=None):
        if chunk is None:
            await self.loop.sock_sendall(self.sock, data)
            return
        for i in range(0, len(data), chunk):
            await self.loop.sock_sendall(self.sock, data[i:i + chunk])
            await asyncio.sleep(0)

    async def flush(self):
        await self.send(self.outgoing.read())

    async def recv_plain(self, n):
        out = bytearray()
        while len(out) < n:
            try:
                out += self.tls.read(n - len(out))
                continue
            except ssl.SSLWantReadError:
                pass
            self.incoming.write(await self._recv())
        return bytes(out)

    def close(self):
        self.sock.close()


async def _serve(loop, server_ctx, **kwargs):
    protocols = []

    def factory():
        protocols.append(Server(**kwargs))
        return protocols[-1]

    server = await loop.create_server(factory, HOST, 0, ssl=server_ctx)
    return server, server.sockets[0].getsockname()[1], protocols


async def _finish(client, server, protocol):
    """The client goes, the server's connection sees it, the server closes."""
    client.close()
    await asyncio.wait_for(protocol.lost, 10)
    server.close()
    await server.wait_closed()


async def _until(predicate, timeout=10):
    for _ in range(int(timeout / 0.005)):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("timed out waiting")


def _message(size, seed=0):
    return random.Random(seed).randbytes(size)


def test_a_record_split_across_many_reads(loop, path, server_ctx, client_ctx):
    async def main():
        server, port, protocols = await _serve(loop, server_ctx, echo=True)
        client = await Client.connect(loop, port, client_ctx)
        message = _message(3000)
        await client.send(client.ciphertext(message), chunk=97)
        assert await client.recv_plain(len(message)) == message
        assert bytes(protocols[0].data) == message
        await _finish(client, server, protocols[0])

    loop.run_until_complete(main())


def test_the_handshake_end_and_data_in_one_read(loop, path, server_ctx, client_ctx):
    # The client's Finished and its first records arrive together: the
    # state machine ends the handshake, the records follow in that read.
    async def main():
        server, port, protocols = await _serve(loop, server_ctx, echo=True)
        client = await Client.connect(loop, port, client_ctx, flush_finished=False)
        message = _message(5000, 1)
        await client.send(client.ciphertext(message))
        assert await client.recv_plain(len(message)) == message
        await _finish(client, server, protocols[0])

    loop.run_until_complete(main())


def test_data_and_close_notify_in_one_read(loop, path, server_ctx, client_ctx):
    # The data comes first, then eof_received(), then the shutdown.
    async def main():
        server, port, protocols = await _serve(loop, server_ctx)
        client = await Client.connect(loop, port, client_ctx)
        message = _message(2000, 2)
        wire = client.ciphertext(message)
        try:
            client.tls.unwrap()
        except ssl.SSLWantReadError:
            pass
        await client.send(wire + client.outgoing.read())
        exc = await asyncio.wait_for(protocols[0].lost, 10)
        assert exc is None
        assert bytes(protocols[0].data) == message
        assert protocols[0].events == ["made", "data", "eof", "lost"]
        client.close()
        server.close()
        await server.wait_closed()

    loop.run_until_complete(main())


@pytest.mark.parametrize("together", [False, True], ids=["apart", "together"])
def test_a_corrupted_record_after_good_ones(loop, path, server_ctx, client_ctx, together):
    # A record whose authentication fails is a fatal SSLError; the records
    # before it in a read of their own are delivered. In one read with the
    # bad one, asyncio drops them with the error: so does zloop.
    async def main():
        server, port, protocols = await _serve(loop, server_ctx)
        client = await Client.connect(loop, port, client_ctx)
        good = _message(1500, 3)
        good_wire = client.ciphertext(good)
        bad_wire = bytearray(client.ciphertext(_message(1500, 4)))
        bad_wire[len(bad_wire) // 2] ^= 0x40
        if together:
            await client.send(good_wire + bytes(bad_wire))
        else:
            await client.send(good_wire)
            await _until(lambda: len(protocols[0].data) == len(good))
            await client.send(bytes(bad_wire))
        exc = await asyncio.wait_for(protocols[0].lost, 10)
        assert isinstance(exc, ssl.SSLError)
        # (OpenSSL 3.5 and later name it RECORD_LAYER_FAILURE)
        assert exc.reason in ("DECRYPTION_FAILED_OR_BAD_RECORD_MAC", "BAD_RECORD_MAC",
                              "RECORD_LAYER_FAILURE")
        assert bytes(protocols[0].data) == (b"" if together else good)
        assert "eof" not in protocols[0].events
        client.close()
        server.close()
        await server.wait_closed()

    loop.set_exception_handler(lambda lp, ctx: None)
    loop.run_until_complete(main())


def test_pause_and_resume_at_every_read(loop, path, server_ctx, client_ctx):
    async def main():
        server, port, protocols = await _serve(loop, server_ctx, echo=True, pause_each=True)
        client = await Client.connect(loop, port, client_ctx)
        message = _message(200_000, 5)
        await client.send(client.ciphertext(message), chunk=8192)
        assert await client.recv_plain(len(message)) == message
        assert bytes(protocols[0].data) == message
        await _finish(client, server, protocols[0])

    loop.run_until_complete(main())


@pytest.mark.parametrize("size", [65536, 70001, 1 << 20])
def test_large_application_writes_and_write_flow_control(loop, path, server_ctx, client_ctx, size):
    # The application writes more than a record, and more than the
    # transport's high-water mark while the client reads nothing: it is
    # paused, then resumed once the client drains; every byte arrives.
    async def main():
        server, port, protocols = await _serve(loop, server_ctx)
        client = await Client.connect(loop, port, client_ctx)
        await _until(lambda: protocols and protocols[0].transport is not None)
        proto = protocols[0]
        flow = []
        proto.pause_writing = lambda: flow.append("pause")
        proto.resume_writing = lambda: flow.append("resume")
        proto.transport.set_write_buffer_limits(high=32768)
        message = _message(size, 6)
        proto.transport.write(message)
        proto.transport.write(bytearray(b"end"))
        assert await client.recv_plain(size + 3) == message + b"end"
        await _until(lambda: proto.transport.get_write_buffer_size() == 0)
        if flow:
            assert flow == ["pause", "resume"]
        await _finish(client, server, proto)

    loop.run_until_complete(main())


def test_a_buffered_protocol_application(loop, path, server_ctx, client_ctx):
    async def main():
        protocols = []

        def factory():
            protocols.append(RecordingBufferedProtocol(loop))
            return protocols[-1]

        server = await loop.create_server(factory, HOST, 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        client = await Client.connect(loop, port, client_ctx)
        message = _message(40_000, 7)
        await client.send(client.ciphertext(message), chunk=5000)
        await _until(lambda: protocols and bytes(protocols[0].data) == message)
        await _finish(client, server, protocols[0])

    loop.run_until_complete(main())


def test_write_arguments_as_asyncio_takes_them(loop, path, server_ctx, client_ctx):
    # Keywords, memoryviews, empty data and wrong types go where asyncio's
    # write() sends them.
    async def main():
        server, port, protocols = await _serve(loop, server_ctx)
        client = await Client.connect(loop, port, client_ctx)
        await _until(lambda: protocols and protocols[0].transport is not None)
        transport = protocols[0].transport
        transport.write(data=b"ab")
        transport.write(memoryview(b"cd"))
        transport.write(b"")
        with pytest.raises(TypeError):
            transport.write("text")
        with pytest.raises(TypeError):
            transport.write()
        assert await client.recv_plain(4) == b"abcd"
        await _finish(client, server, protocols[0])

    loop.run_until_complete(main())


SEEDS = range(12)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_truncated_and_corrupted_ciphertext(loop, path, server_ctx, client_ctx, seed):
    # Good records, then one of: a flipped byte, random bytes, a record cut
    # short and the connection closed, or nothing; sent in random pieces.
    # Whatever the loop: a prefix of the good data, then an SSLError for
    # damage or a clean end, and never a hang or a crash.
    rng = random.Random(seed)

    async def main():
        server, port, protocols = await _serve(loop, server_ctx)
        client = await Client.connect(loop, port, client_ctx)
        good = b"".join(_message(rng.randint(1, 20000), rng.random()) for _ in range(rng.randint(1, 4)))
        wire = bytearray(client.ciphertext(good))
        damage = rng.choice(["flip", "garbage", "truncate", "none"])
        if damage == "flip":
            wire[rng.randrange(len(wire))] ^= 1 << rng.randrange(8)
        elif damage == "garbage":
            wire += rng.randbytes(rng.randint(1, 300))
        elif damage == "truncate":
            del wire[rng.randrange(1, len(wire)):]
        try:
            await client.send(bytes(wire), chunk=rng.choice([None, 7, 500, 4096]))
        except (BrokenPipeError, ConnectionResetError):
            assert damage in ("flip", "garbage")  # the server gave up first
        if damage in ("truncate", "none"):
            client.sock.shutdown(socket.SHUT_WR)
        exc = await asyncio.wait_for(protocols[0].lost, 10)
        data = bytes(protocols[0].data)
        assert good.startswith(data)
        if damage == "none":
            assert data == good and exc is None
        elif damage in ("flip", "garbage"):
            # (good records read with the damage are dropped with it)
            assert isinstance(exc, ssl.SSLError)
        else:
            assert exc is None or isinstance(exc, (ssl.SSLError, ConnectionError))
        client.close()
        server.close()
        await server.wait_closed()

    loop.set_exception_handler(lambda lp, ctx: None)
    loop.run_until_complete(main())


@pytest.mark.zloop_only
def test_the_layout_check_refuses_what_it_cannot_confirm(zloop_module):
    # The record path reads _ssl's pointers only after confirming them on a
    # live object: BIOs swapped, or a function missing, turn it down with a
    # reason (and the loop runs the Python path), never a crash.
    from zloop import _tls, _zloop

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    probe = ctx.wrap_bio(incoming, outgoing, server_hostname="zloop.invalid")
    why = _zloop._tls_setup({}, probe._sslobj, incoming, outgoing, _tls._WRAPPED,
                            ssl.OPENSSL_VERSION_NUMBER)
    assert why.startswith("OpenSSL function ") and why.endswith(" not found")
    import sys

    library = ctypes.CDLL(getattr(sys.modules["_ssl"], "__file__", None))
    why = _zloop._tls_setup(_ssl_functions(library), probe._sslobj, outgoing, incoming, _tls._WRAPPED,
                            ssl.OPENSSL_VERSION_NUMBER)
    assert why == "_ssl's layout is not the one known"
    assert _zloop._tls_records(object(), incoming, outgoing) is None


def _ssl_functions(library):
    from zloop import _zloop

    return {name: ctypes.cast(getattr(library, name), ctypes.c_void_p).value
            for name in _zloop._TLS_FUNCTIONS}


@pytest.mark.zloop_only
def test_functions_of_another_openssl_version_are_refused_before_use(zloop_module):
    # The version is asked before any function is handed one of _ssl's
    # objects: another OpenSSL's may read them at other offsets.
    import sys

    from zloop import _tls, _zloop

    library = ctypes.CDLL(getattr(sys.modules["_ssl"], "__file__", None))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    probe = ctx.wrap_bio(incoming, outgoing, server_hostname="zloop.invalid")
    args = (_ssl_functions(library), probe._sslobj, incoming, outgoing, _tls._WRAPPED)
    why = _zloop._tls_setup(*args, ssl.OPENSSL_VERSION_NUMBER + 1)
    assert why == "the OpenSSL found is not the one _ssl uses (another version)"
    assert _zloop._tls_setup(*args, ssl.OPENSSL_VERSION_NUMBER) is None


# A TLS echo on zloop in a fresh interpreter whose _ssl looks built in (no
# __file__: zloop._tls then looks OpenSSL up in the whole process, as on
# python-build-standalone), with _ssl's libssl made global, or a second
# copy of it (another file, the same version) loaded global first, as a
# wheel's bundled OpenSSL would be.
_BUILT_IN_SSL = """
import asyncio, ctypes, os, shutil, ssl, sys, trustme, zloop
from zloop import _tls

class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]

ssl_ext = sys.modules["_ssl"]
found = ctypes.cast(ctypes.CDLL(ssl_ext.__file__).SSL_read, ctypes.c_void_p)
info = DlInfo()
assert ctypes.CDLL(None).dladdr(found, ctypes.byref(info)), "dladdr"
libssl = info.fname.decode()
if sys.argv[1] == "copy":
    copy = os.path.join(sys.argv[2], "libssl-copy.so")
    shutil.copyfile(libssl, copy)
    ctypes.CDLL(copy, mode=ctypes.RTLD_GLOBAL)
else:
    ctypes.CDLL(libssl, mode=ctypes.RTLD_GLOBAL)
del ssl_ext.__file__

ca = trustme.CA()
server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
client_ctx = ssl.create_default_context()
ca.configure_trust(client_ctx)

async def echo(reader, writer):
    writer.write(await reader.readexactly(5))
    await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
    writer.write(b"hello")
    assert await reader.readexactly(5) == b"hello"
    writer.close()
    server.close()
    await server.wait_closed()

zloop.run(main())
print("PATH", _tls.records_path())
"""


@pytest.mark.zloop_only
@pytest.mark.parametrize("other", ["own", "copy"])
def test_a_built_in_ssl_never_takes_another_openssl(zloop_module, other, tmp_path):
    import os
    import subprocess
    import sys

    if not sys.platform.startswith("linux") or not getattr(sys.modules["_ssl"], "__file__", None):
        pytest.skip("simulates a built-in _ssl with glibc's loader, from an _ssl extension")
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(zloop_module.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-c", _BUILT_IN_SSL, other, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    if other == "own":  # _ssl's own OpenSSL, found through the process
        assert "PATH ('native', None)" in out.stdout
    else:  # the echo ran, on asyncio's Python path
        assert ("PATH ('python', 'the OpenSSL found is not the one _ssl uses (another copy)')"
                in out.stdout)


@pytest.mark.zloop_only
@pytest.mark.parametrize("setting", ["native", "python"])
def test_which_path_runs_is_said_in_debug_mode(zloop_module, setting, tmp_path):
    # In a fresh interpreter: the first TLS connection sets the path up;
    # a loop in debug mode logs which one runs, and records_path() says so.
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import asyncio, logging, ssl, sys, trustme, zloop
        from zloop import _tls
        logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(message)s")
        ca = trustme.CA()
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
        client_ctx = ssl.create_default_context()
        ca.configure_trust(client_ctx)

        async def main():
            server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=server_ctx)
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
            writer.close()
            server.close()

        loop = zloop.new_event_loop()
        loop.set_debug(True)
        loop.run_until_complete(main())
        loop.close()
        print("PATH", _tls.records_path())
    """)
    env = dict(os.environ, ZLOOP_TLS_RECORDS=setting)
    # The zloop under test, from a directory without the checkout's zloop/.
    here = os.path.dirname(os.path.dirname(os.path.abspath(zloop_module.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    if setting == "python":
        assert "zloop: TLS records run in asyncio's Python: ZLOOP_TLS_RECORDS=python" in out.stdout
        assert "PATH ('python', 'ZLOOP_TLS_RECORDS=python')" in out.stdout
    else:
        assert "zloop: TLS records run natively" in out.stdout
        assert "PATH ('native', None)" in out.stdout
