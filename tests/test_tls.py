"""TLS over the loop's transports, with throwaway trustme certificates (issue 3)."""

import asyncio
import socket
import ssl

import pytest

from _net import EchoProtocol, RecordingProtocol, payload, wait_for
from _support import open_fds

trustme = pytest.importorskip("trustme", reason="pip install -r tests/requirements.txt")

pytestmark = pytest.mark.network

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture(scope="module")
def server_ctx(ca):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", HOST).configure_cert(ctx)
    return ctx


@pytest.fixture(scope="module")
def client_ctx(ca):
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


@pytest.fixture
def quiet_handler(loop):
    """Collect exception-handler calls (TLS failures report there)."""
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    return contexts


async def _tls_server(loop, server_ctx, protocol_cls=EchoProtocol):
    protocols = []

    def factory():
        proto = protocol_cls(loop)
        protocols.append(proto)
        return proto

    server = await loop.create_server(factory, HOST, 0, ssl=server_ctx)
    return server, server.sockets[0].getsockname()[:2], protocols


async def _close_server(server):
    server.close()
    await wait_for(server.wait_closed())


def test_tls_echo_and_extra_info(loop, server_ctx, client_ctx):
    data = payload(1024 * 1024)

    async def main():
        server, addr, served = await _tls_server(loop, server_ctx)
        tr, client = await loop.create_connection(
            lambda: RecordingProtocol(loop), *addr, ssl=client_ctx, server_hostname="localhost"
        )
        tr.write(data)
        got = await wait_for(client.received(len(data)))
        sslobj = tr.get_extra_info("ssl_object")
        info = {
            "ssl_object": isinstance(sslobj, ssl.SSLObject),
            "sslcontext": tr.get_extra_info("sslcontext") is client_ctx,
            "peercert has SAN": "subjectAltName" in tr.get_extra_info("peercert"),
            "cipher": len(tr.get_extra_info("cipher")) == 3,
            "peername": tr.get_extra_info("peername"),
            "socket family": tr.get_extra_info("socket").family,
            "is transport": isinstance(tr, asyncio.Transport),
            "can_write_eof": tr.can_write_eof(),
        }
        tr.close()
        await wait_for(client.lost)
        for proto in served:
            await wait_for(proto.lost)
        await _close_server(server)
        return got, info, addr

    got, info, addr = loop.run_until_complete(main())
    assert got == data
    assert info == {
        "ssl_object": True,
        "sslcontext": True,
        "peercert has SAN": True,
        "cipher": True,
        "peername": addr,
        "socket family": socket.AF_INET,
        "is transport": True,
        # asyncio's TLS transport has no half-close.
        "can_write_eof": False,
    }


def test_tls_streams(loop, server_ctx, client_ctx):
    async def handle(reader, writer):
        writer.write((await reader.readline()).upper())
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        server = await asyncio.start_server(handle, HOST, 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(
            "localhost", port, ssl=client_ctx
        )
        writer.write(b"secret\n")
        line = await wait_for(reader.readline())
        writer.close()
        await writer.wait_closed()
        await _close_server(server)
        return line

    assert loop.run_until_complete(main()) == b"SECRET\n"


def test_untrusted_certificate_fails_the_handshake(loop, server_ctx, quiet_handler):
    async def main():
        server, addr, _ = await _tls_server(loop, server_ctx)
        try:
            with pytest.raises(ssl.SSLCertVerificationError) as info:
                await wait_for(
                    loop.create_connection(
                        asyncio.Protocol, *addr, ssl=ssl.create_default_context(),
                        server_hostname="localhost",
                    )
                )
            return info.value.verify_message
        finally:
            await _close_server(server)

    # The exception type is the contract; OpenSSL's wording varies by version.
    assert isinstance(loop.run_until_complete(main()), str)


def test_wrong_hostname_fails_the_handshake(loop, server_ctx, client_ctx, quiet_handler):
    async def main():
        server, addr, _ = await _tls_server(loop, server_ctx)
        try:
            with pytest.raises(ssl.SSLCertVerificationError) as info:
                await wait_for(
                    loop.create_connection(
                        asyncio.Protocol, *addr, ssl=client_ctx, server_hostname="example.org"
                    )
                )
            return info.value.verify_message
        finally:
            await _close_server(server)

    assert "mismatch" in loop.run_until_complete(main()).lower()


def test_start_tls_upgrades_a_plain_connection(loop, server_ctx, client_ctx):
    async def handle(reader, writer):
        assert await reader.readline() == b"STARTTLS\n"
        writer.write(b"OK\n")
        await writer.start_tls(server_ctx)
        line = await reader.readline()
        writer.write(b"secure:" + line)
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        server = await asyncio.start_server(handle, HOST, 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        writer.write(b"STARTTLS\n")
        assert await wait_for(reader.readline()) == b"OK\n"
        assert writer.get_extra_info("ssl_object") is None
        await wait_for(writer.start_tls(client_ctx, server_hostname="localhost"))
        upgraded = writer.get_extra_info("ssl_object") is not None
        writer.write(b"hello\n")
        line = await wait_for(reader.readline())
        writer.close()
        await writer.wait_closed()
        await _close_server(server)
        return upgraded, line

    assert loop.run_until_complete(main()) == (True, b"secure:hello\n")


def test_loop_start_tls_with_protocols(loop, server_ctx, client_ctx):
    async def main():
        upgraded = loop.create_future()

        class Upgrader(RecordingProtocol):
            def data_received(self, data):
                super().data_received(data)
                if bytes(self.data) == b"go":
                    self.transport.write(b"ok")
                    loop.create_task(self.upgrade())

            async def upgrade(self):
                echo = EchoProtocol(loop)
                tls = await loop.start_tls(self.transport, echo, server_ctx, server_side=True)
                echo.connection_made(tls)
                upgraded.set_result(echo)

        server = await loop.create_server(lambda: Upgrader(loop), HOST, 0)
        tr, client = await loop.create_connection(
            lambda: RecordingProtocol(loop), *server.sockets[0].getsockname()[:2]
        )
        tr.write(b"go")
        await wait_for(client.received(2))
        tls_proto = RecordingProtocol(loop)
        tls_tr = await wait_for(
            loop.start_tls(tr, tls_proto, client_ctx, server_hostname="localhost")
        )
        tls_proto.connection_made(tls_tr)
        await wait_for(upgraded)
        tls_tr.write(b"over tls")
        got = await wait_for(tls_proto.received(8))
        tls_tr.close()
        await wait_for(tls_proto.lost)
        await _close_server(server)
        return got, tls_tr.get_extra_info("ssl_object") is not None

    assert loop.run_until_complete(main()) == (b"over tls", True)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"ssl_handshake_timeout": 1}, "ssl_handshake_timeout is only meaningful with ssl"),
        ({"server_hostname": "localhost"}, "server_hostname is only meaningful with ssl"),
    ],
)
def test_tls_only_arguments_without_ssl(loop, kwargs, message):
    async def main():
        with pytest.raises(ValueError) as info:
            await loop.create_connection(asyncio.Protocol, HOST, 1, **kwargs)
        return str(info.value)

    assert loop.run_until_complete(main()) == message


def test_server_tls_only_arguments_without_ssl(loop):
    async def main():
        with pytest.raises(ValueError) as info:
            await loop.create_server(asyncio.Protocol, HOST, 0, ssl_handshake_timeout=1)
        return str(info.value)

    assert loop.run_until_complete(main()) == "ssl_handshake_timeout is only meaningful with ssl"


def test_ssl_without_server_hostname_or_host(loop, client_ctx):
    async def main():
        with socket.socket() as s:
            with pytest.raises(ValueError) as info:
                await loop.create_connection(asyncio.Protocol, sock=s, ssl=client_ctx)
            return str(info.value)

    assert loop.run_until_complete(main()) == (
        "You must set server_hostname when using ssl without a host"
    )


def test_sock_recv_refuses_ssl_sockets(loop, client_ctx):
    async def main():
        raw = socket.socket()
        with client_ctx.wrap_socket(raw, server_hostname="x", do_handshake_on_connect=False) as s:
            s.setblocking(False)
            with pytest.raises(TypeError) as info:
                await loop.sock_recv(s, 1)
            return str(info.value)

    assert loop.run_until_complete(main()) == "Socket cannot be of type SSLSocket"


def test_tls_connections_leave_no_descriptors(loop, server_ctx, client_ctx):
    async def main():
        server, addr, served = await _tls_server(loop, server_ctx)
        for _ in range(5):
            tr, client = await loop.create_connection(
                lambda: RecordingProtocol(loop), *addr, ssl=client_ctx, server_hostname="localhost"
            )
            tr.write(b"x")
            await wait_for(client.received(1))
            tr.close()
            await wait_for(client.lost)
        for proto in served:
            await wait_for(proto.lost)
        await _close_server(server)

    loop.run_until_complete(main())
    before = open_fds()
    loop.run_until_complete(main())
    assert open_fds() - before == set()


def test_loop_sendfile_over_tls(loop, server_ctx, client_ctx, tmp_path):
    # asyncio's TLS transport declares _sendfile_compatible = FALLBACK:
    # loop.sendfile() takes the chunked path over it (it used to refuse it
    # on zloop as "not supported").
    data = payload(100_000)
    path = tmp_path / "blob"
    path.write_bytes(data)

    async def main():
        server, addr, served = await _tls_server(loop, server_ctx, RecordingProtocol)
        tr, _ = await loop.create_connection(
            lambda: RecordingProtocol(loop), *addr, ssl=client_ctx, server_hostname="localhost"
        )
        with open(path, "rb") as f:
            sent = await wait_for(loop.sendfile(tr, f))
        while not served:
            await asyncio.sleep(0)
        got = await wait_for(served[0].received(len(data)))
        tr.close()
        await wait_for(served[0].lost)
        await _close_server(server)
        return sent, got

    sent, got = loop.run_until_complete(main())
    assert sent == len(data)
    assert got == data
