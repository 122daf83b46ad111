"""Debug mode where zloop runs protocols natively: each protocol callback is
timed as asyncio times the Handle that runs it there (its transport's
reader, the connection_lost handle, the accept task), and asyncio's
debug-level lines ("is serving", "got a new connection", "received EOF",
"connected to", ...) are written, with asyncio's words and levels.

A threshold of 0 makes every callback "slow", so no test depends on a
clock: each protocol callback writes a marker to the asyncio logger, and
the first "Executing ..." line after it names the Handle (or task) it ran
in. Names are compared by kind: asyncio's transports and zloop's are
different classes (``_SelectorSocketTransport``, ``_SocketTransport``).
"""

import asyncio
import logging
import os
import re
import socket
import subprocess
import sys

import pytest

from _support import no_leaks, tls_contexts  # noqa: F401

# Each loop's class name for a kind of transport.
_KINDS = {
    "_SelectorSocketTransport": "socket",
    "_SocketTransport": "socket",
    "_SelectorDatagramTransport": "datagram",
    "_DatagramTransport": "datagram",
    "_UnixReadPipeTransport": "read_pipe",
    "_ReadPipeTransport": "read_pipe",
}
_MARK = "protocol callback: "
_HANDLE = re.compile(r"Executing <Handle (?:cancelled )?(\w+)\.(\w+)\(.*?\)"
                     r"(?: created at \S+)?> took \d+\.\d{3} seconds")
_TASK = re.compile(r"Executing <Task .*coro=<\w+\.(\w+)\(\).*> took \d+\.\d{3} seconds")
log = logging.getLogger("asyncio")


def _mark(name):
    log.debug(_MARK + name)


def _timed_in(lines):
    """`callback -> kind.method` of the Handle (or `task method`) whose
    slow-callback line first follows each callback's marker."""
    found, waiting = {}, []
    for level, text in lines:
        if text.startswith(_MARK):
            waiting.append(text[len(_MARK):])
            continue
        handle, task = _HANDLE.fullmatch(text), _TASK.fullmatch(text)
        if not (handle or task) or not waiting:
            continue
        assert level == "WARNING"
        where = (f"{_KINDS.get(handle[1], handle[1])}.{handle[2]}" if handle
                 else f"task {task[1]}")
        for name in waiting:
            found.setdefault(name, where)
        waiting = []
    return found


class _Lines(logging.Handler):
    """(level name, message) of each record, the message formatted when
    it is logged (a transport's repr changes once it is closed)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append((record.levelname, record.getMessage()))


@pytest.fixture
def asyncio_log(caplog):
    caplog.set_level(logging.DEBUG, logger="asyncio")
    handler = _Lines()
    log.addHandler(handler)
    yield handler.lines
    log.removeHandler(handler)


@pytest.fixture
def debug_log(loop, asyncio_log):
    loop.set_debug(True)
    loop.slow_callback_duration = 0
    return asyncio_log


class _Stream(asyncio.Protocol):
    def __init__(self, done=None):
        self.done = done

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        _mark("data_received")

    def eof_received(self):
        _mark("eof_received")

    def connection_lost(self, exc):
        _mark("connection_lost")
        if self.done is not None and not self.done.done():
            self.done.set_result(None)


class _Buffered(asyncio.BufferedProtocol):
    def __init__(self, done):
        self.done = done
        self.buf = bytearray(64)

    def connection_made(self, transport):
        self.transport = transport

    def get_buffer(self, sizehint):
        _mark("get_buffer")
        return self.buf

    def buffer_updated(self, nbytes):
        _mark("buffer_updated")

    def eof_received(self):
        return False

    def connection_lost(self, exc):
        self.done.set_result(None)


async def _serve_one(loop, factory, *, ssl=None, client_ssl=None):
    """A server whose one connection gets b"x" then EOF from a client; the
    server's protocol's `done` future is awaited."""
    done = loop.create_future()

    def made():
        _mark("protocol_factory")
        return factory(done)

    server = await loop.create_server(made, "127.0.0.1", 0, ssl=ssl)
    port = server.sockets[0].getsockname()[1]
    hostname = "localhost" if client_ssl else None
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ssl,
                                                   server_hostname=hostname)
    writer.write(b"x")
    await writer.drain()
    if client_ssl is None:
        writer.write_eof()
    else:
        writer.close()
    await done
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


def test_stream_callbacks_are_timed_as_the_transports_handles(loop, debug_log):
    loop.run_until_complete(_serve_one(loop, _Stream))
    assert _timed_in(debug_log) == {
        "protocol_factory": "task _accept_connection2",
        "data_received": "socket._read_ready",
        "eof_received": "socket._read_ready",
        "connection_lost": "socket._call_connection_lost",
    }


def test_buffered_callbacks_are_timed_as_the_transports_reader(loop, debug_log):
    loop.run_until_complete(_serve_one(loop, _Buffered))
    timed = _timed_in(debug_log)
    assert timed["get_buffer"] == timed["buffer_updated"] == "socket._read_ready"


@pytest.fixture(scope="module")
def contexts():
    # Before the first case's descriptor count: zloop's TLS imports ctypes
    # on its first connection, and a libffi with static trampolines (Debian
    # sid's) keeps its own file open from then on.
    import ctypes  # noqa: F401

    return tls_contexts()


def test_tls_app_data_is_timed_as_the_raw_transports_reader(loop, debug_log, contexts):
    server_ctx, client_ctx = contexts
    loop.run_until_complete(_serve_one(loop, _Stream, ssl=server_ctx, client_ssl=client_ctx))
    assert _timed_in(debug_log)["data_received"] == "socket._read_ready"


class _Datagram(asyncio.DatagramProtocol):
    def __init__(self, done):
        self.done = done

    def datagram_received(self, data, addr):
        _mark("datagram_received")
        self.done.set_result(None)

    def error_received(self, exc):
        _mark("error_received")
        self.done.set_result(None)


def test_datagram_callbacks_are_timed_as_the_transports_reader(loop, debug_log):
    async def main():
        done = loop.create_future()
        receiver, _ = await loop.create_datagram_endpoint(
            lambda: _Datagram(done), local_addr=("127.0.0.1", 0))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"x", receiver.get_extra_info("sockname"))
            await done
        receiver.close()
        # A datagram to a port nobody listens on: the refusal comes back to
        # the connected socket as error_received.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()
        done = loop.create_future()
        sender, _ = await loop.create_datagram_endpoint(lambda: _Datagram(done), remote_addr=free)
        sender.sendto(b"x")
        await done
        sender.close()
        await asyncio.sleep(0)

    loop.run_until_complete(main())
    timed = _timed_in(debug_log)
    assert timed["datagram_received"] == timed["error_received"] == "datagram._read_ready"


class _Child(asyncio.SubprocessProtocol):
    def __init__(self, done):
        self.done = done

    def pipe_data_received(self, fd, data):
        _mark("pipe_data_received")

    def process_exited(self):
        _mark("process_exited")
        self.done.set_result(None)


def test_pipe_and_subprocess_callbacks_are_timed(loop, debug_log):
    async def main():
        rfd, wfd = os.pipe()
        done = loop.create_future()
        reader, _ = await loop.connect_read_pipe(lambda: _Stream(done), os.fdopen(rfd, "rb", 0))
        os.write(wfd, b"x")
        os.close(wfd)
        await done
        reader.close()
        done = loop.create_future()
        child, _ = await loop.subprocess_exec(
            lambda: _Child(done), sys.executable, "-c", "print(1)", stdin=None, stderr=None)
        await done
        child.close()

    loop.run_until_complete(main())
    # A pipe's EOF, a child's output and its exit each go to the protocol
    # in a Handle of their own.
    assert _timed_in(debug_log) == {
        "data_received": "read_pipe._read_ready",
        "eof_received": "_Stream.eof_received",
        "connection_lost": "read_pipe._call_connection_lost",
        "pipe_data_received": "_Child.pipe_data_received",
        "process_exited": "_Child.process_exited",
    }


def test_no_slow_callback_lines_outside_debug_mode(loop, asyncio_log):
    loop.slow_callback_duration = 0
    loop.run_until_complete(_serve_one(loop, _Stream))
    assert [line for line in asyncio_log if line[1].startswith("Executing")] == []


# --- asyncio's debug-level lines ------------------------------------------


def _lines(lines):
    return [line for line in lines if not line[1].startswith((_MARK, "Executing "))]


def _has(lines, level, pattern):
    matching = [line for line in lines if re.fullmatch(pattern, line[1])]
    assert matching, f"no {level} line matches {pattern!r} in {lines}"
    assert {line[0] for line in matching} == {level}, matching


def test_tcp_lines(loop, debug_log):
    loop.slow_callback_duration = 1e9
    loop.run_until_complete(_serve_one(loop, _Stream))
    lines = _lines(debug_log)
    _has(lines, "INFO", r"<Server sockets=\(.*\)> is serving")
    _has(lines, "DEBUG", r"<Server sockets=\(.*\)> got a new connection from "
                         r"\('127\.0\.0\.1', \d+\): <socket\.socket .*>")
    _has(lines, "DEBUG", r"<asyncio\.TransportSocket .*> connected to 127\.0\.0\.1:\d+: "
                         r"\(<\w+ fd=\d+ .*>, <.*StreamReaderProtocol object at 0x\w+>\)")
    _has(lines, "DEBUG", r"<\w+ fd=\d+ .*> received EOF")


def test_pause_and_resume_reading_lines(loop, debug_log):
    async def main():
        a, b = socket.socketpair()
        transport, _ = await loop.connect_accepted_socket(_Stream, a)
        transport.pause_reading()
        transport.resume_reading()
        transport.close()
        b.close()
        await asyncio.sleep(0)

    loop.run_until_complete(main())
    lines = _lines(debug_log)
    _has(lines, "DEBUG",
         r"<asyncio\.TransportSocket .*> handled: \(<\w+ fd=\d+ .*>, <.*_Stream .*>\)")
    _has(lines, "DEBUG", r"<\w+ fd=\d+ .*> pauses reading")
    _has(lines, "DEBUG", r"<\w+ fd=\d+ .*> resumes reading")


def test_datagram_endpoint_lines(loop, debug_log):
    async def main():
        a, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol,
                                                   local_addr=("127.0.0.1", 0))
        b, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol,
                                                   remote_addr=a.get_extra_info("sockname"))
        a.close()
        b.close()
        await asyncio.sleep(0)

    loop.run_until_complete(main())
    lines = _lines(debug_log)
    _has(lines, "INFO", r"Datagram endpoint local_addr=\('127\.0\.0\.1', 0\) remote_addr=None "
                        r"created: \(<\w+ .*>, <asyncio\.protocols\.DatagramProtocol .*>\)")
    _has(lines, "DEBUG", r"Datagram endpoint remote_addr=\('127\.0\.0\.1', \d+\) "
                         r"created: \(<\w+ .*>, <asyncio\.protocols\.DatagramProtocol .*>\)")


def test_subprocess_lines(loop, debug_log):
    async def main():
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "pass", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        await child.communicate()
        child = await asyncio.create_subprocess_shell("exit 0", stdin=subprocess.DEVNULL)
        await child.wait()

    loop.run_until_complete(main())
    lines = _lines(debug_log)
    program = re.escape(repr(sys.executable))
    _has(lines, "DEBUG", rf"execute program {program} stdout=stderr=<pipe>")
    _has(lines, "INFO", rf"execute program {program}: <\w+ pid=\d+ .*>")
    _has(lines, "DEBUG", rf"run shell command 'exit 0' stdin={subprocess.DEVNULL}")
    _has(lines, "INFO", r"run shell command 'exit 0': <\w+ pid=\d+ .*>")
    _has(lines, "INFO", r"<\w+ pid=\d+ .*> exited with return code 0")


def test_getaddrinfo_lines(loop, debug_log):
    loop.slow_callback_duration = 1e9
    infos = loop.run_until_complete(loop.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM))
    lines = _lines(debug_log)
    what = r"127\.0\.0\.1:80, type=<SocketKind\.SOCK_STREAM: 1>"
    _has(lines, "DEBUG", rf"Get address info {what}")
    _has(lines, "DEBUG", rf"Getting address info {what} took \d+\.\d{{3}}ms: "
                         + re.escape(repr(infos)))
