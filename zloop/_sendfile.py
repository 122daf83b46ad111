"""``loop.sock_sendfile()`` and ``loop.sendfile()`` for ``zloop.Loop``, with
stock asyncio's semantics (``base_events``/``unix_events``/``selector_events``).

The native path is ``os.sendfile`` driven by writability: a `_SendfileJob`
sends from the file straight into the socket each time the socket can take
more, with no copy through Python. On a plain socket the job waits as the
``sock_*`` calls do (``LoopCore._sock_wait``); on one of zloop's socket transports the
transport's own reactor watcher hands it the writable events once its write
buffer is flushed (``SocketTransportCore._sendfile_begin``, which also makes
``write()`` raise until ``_sendfile_end``).

Where ``os.sendfile`` cannot serve (no file descriptor, not a regular file,
TLS, the first call failing), the fallback reads chunks in the executor and
sends them (``sock_sendall``, or ``transport.write`` under write flow control),
exactly where asyncio falls back.
"""

import errno
import io
import os
import socket
import sys

from asyncio import constants, exceptions, protocols

# os.sendfile's twin, made natively: a loop's own sendfile(2) on a
# non-blocking socket, which tools that patch os to find blocking calls in
# user code (blockbuster) would otherwise flag (sock/files.zig).
from ._zloop import _sendfile as _sendfile_call
from ._zloop import _sock_fd

# Linux sends at most this many bytes per sendfile(2) call (MAX_RW_COUNT).
_MAX_SENDFILE_BYTES = 0x7FFFF000
# A call that sent all it was asked for is repeated at once, up to this many
# times per wakeup; a short send means the socket buffer is full, and the
# next attempt waits for writability (as asyncio's one call per callback).
_CALLS_PER_WAKEUP = 8
# loop.sendfile()'s fallback chunk (asyncio's _sendfile_fallback uses 16 KiB).
_TRANSPORT_FALLBACK_CHUNK = 16384
# asyncio 3.14 moved the file position however a transfer ends (the native
# path leaves it past what was sent even when nothing was, e.g. an offset
# past the end), and its fallbacks seek to the offset whenever the file can
# seek; 3.11-3.13 touch the position only once a byte went out, and seek
# only for a non-zero offset.
_ALWAYS_SETS_POSITION = sys.version_info >= (3, 14)


def _check_sendfile_params(sock, file, offset, count):
    """asyncio's argument checks, in its order, with its messages."""
    if "b" not in getattr(file, "mode", "b"):
        raise ValueError("file should be opened in binary mode")
    if sock.type != socket.SOCK_STREAM:
        raise ValueError("only SOCK_STREAM type sockets are supported")
    _check_offset_count(offset, count)


def _check_offset_count(offset, count):
    if count is not None:
        if not isinstance(count, int):
            raise TypeError(f"count must be a positive integer (got {count!r})")
        if count <= 0:
            raise ValueError(f"count must be a positive integer (got {count!r})")
    if not isinstance(offset, int):
        raise TypeError(f"offset must be a non-negative integer (got {offset!r})")
    if offset < 0:
        raise ValueError(f"offset must be a non-negative integer (got {offset!r})")


def _seek_to_offset(file, offset):
    """Where the fallbacks start reading, as the running Python's asyncio."""
    if _ALWAYS_SETS_POSITION:
        if hasattr(file, "seek"):
            file.seek(offset)
    elif offset:
        file.seek(offset)


def _native_source(file):
    """(fd, size) of a file os.sendfile can read from, or
    SendfileNotAvailableError with asyncio's message."""
    if not hasattr(os, "sendfile"):
        raise exceptions.SendfileNotAvailableError("os.sendfile() is not available")
    try:
        fileno = file.fileno()
    except (AttributeError, io.UnsupportedOperation):
        raise exceptions.SendfileNotAvailableError("not a regular file") from None
    try:
        size = os.fstat(fileno).st_size
    except OSError:
        raise exceptions.SendfileNotAvailableError("not a regular file") from None
    return fileno, size


class _SendfileJob:
    """One os.sendfile() transfer from ``file_fd`` at ``offset`` into
    ``sock_fd``, the fd of socket ``sock``, finishing ``fut`` with the byte
    count. Each call first checks that ``sock`` still stands for
    ``sock_fd``: once user code closed it, the call fails with EBADF, as
    it would on the closed number, and never sends into a file that took
    the number since.

    ``step()`` runs on each writable event (and once up front). Outcomes as
    asyncio's ``_sock_sendfile_native_impl``: an OSError before any byte went
    out means the pair cannot use sendfile (SendfileNotAvailableError, so the
    caller may fall back); later it is the caller's error, ENOTCONN then read
    as ConnectionError. The file position moves past what was sent when the
    job finishes or fails (on 3.13 and older only once something was sent);
    cancelling leaves it alone, as asyncio does.
    """

    __slots__ = ("_fut", "_sock", "_sock_fd", "_file_fd", "_start", "_offset", "_count", "_waited")

    def __init__(self, fut, sock, sock_fd, file_fd, offset, count):
        self._fut = fut
        self._sock = sock
        self._sock_fd = sock_fd
        self._file_fd = file_fd
        self._start = offset
        self._offset = offset
        self._count = count
        # Set once a step ran from a writable event rather than up front.
        self._waited = False

    @property
    def sent(self):
        return self._offset - self._start

    def on_writable(self, *_):
        """The readiness callback (its arguments, if any, are ignored)."""
        self._waited = True
        self.step()

    @staticmethod
    def ready(wait, fd, sock, job):
        """``LoopCore._sock_wait``'s callback for ``sock_sendfile``: a step
        per writable event; True (the wait is over) once the job is done."""
        if wait.done():
            return True
        job.on_writable()
        if not job._fut.done():
            return False
        wait.set_result(None)
        return True

    def step(self):
        if self._fut.done():
            return
        for _ in range(_CALLS_PER_WAKEUP):
            if self._count is None:
                want = _MAX_SENDFILE_BYTES
            else:
                want = min(self._count - self.sent, _MAX_SENDFILE_BYTES)
                if want <= 0:
                    return self._finish(None)
            try:
                sock = self._sock
                if sock is None or _sock_fd(sock) != self._sock_fd:
                    raise OSError(errno.EBADF, os.strerror(errno.EBADF))
                n = _sendfile_call(self._sock_fd, self._file_fd, self._offset, want)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                return self._finish(self._classify(exc))
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                return self._finish(exc)
            if n == 0:  # end of file
                return self._finish(None)
            self._offset += n
            if n < want:
                return

    def _classify(self, exc):
        if self.sent == 0:
            # Typically a file sendfile(2) cannot read (EINVAL): the caller
            # falls back to plain sends, which report a real socket error.
            return exceptions.SendfileNotAvailableError("os.sendfile call failed")
        if self._waited and exc.errno == errno.ENOTCONN and type(exc) is not ConnectionError:
            # The peer went away mid-transfer: the same exception type
            # whatever errno this platform picks for it.
            err = ConnectionError("socket is not connected", errno.ENOTCONN)
            err.__cause__ = exc
            return err
        return exc

    def _finish(self, exc):
        if self.sent > 0 or _ALWAYS_SETS_POSITION:
            os.lseek(self._file_fd, self._offset, os.SEEK_SET)
        if exc is None:
            self._fut.set_result(self.sent)
        else:
            self._fut.set_exception(exc)


class SendfileMixin:
    """``sock_sendfile`` and ``sendfile``; mixed into ``zloop.Loop`` (through
    ``_net.NetMixin``), which provides ``_check_sock``, ``_sock_wait_for`` and
    ``sock_sendall``."""

    _check_sendfile_params = staticmethod(_check_sendfile_params)

    async def sock_sendfile(self, sock, file, offset=0, count=None, *, fallback=True):
        """Send ``file`` over the connected, non-blocking ``sock``; return the
        number of bytes sent. os.sendfile where it works, else (with
        ``fallback``) reads and ``sock_sendall``."""
        self._check_sock(sock)
        self._check_sendfile_params(sock, file, offset, count)
        try:
            return await self._sock_sendfile_native(sock, file, offset, count)
        except exceptions.SendfileNotAvailableError:
            if not fallback:
                raise
        return await self._sock_sendfile_fallback(sock, file, offset, count)

    async def _sock_sendfile_native(self, sock, file, offset, count):
        fileno, size = _native_source(file)
        if not (count or size):
            return 0  # an empty file (asyncio sends nothing either)
        fut = self.create_future()
        fd = _sock_fd(sock)
        job = _SendfileJob(fut, sock, fd, fileno, offset, count)
        job.step()
        if not fut.done():
            # A sock_* wait (one-shot, stops watching when done or
            # cancelled); it ends with OSError(EBADF) if user code closed
            # sock and another file took its number meanwhile.
            try:
                await self._sock_wait_for(fd, True, _SendfileJob.ready, sock, job)
            except OSError as exc:
                if fut.done():
                    raise
                job._finish(job._classify(exc))
        return fut.result()

    async def _sock_sendfile_fallback(self, sock, file, offset, count):
        _seek_to_offset(file, offset)
        # Read at call time: CPython's tests change it around a test class.
        chunk = constants.SENDFILE_FALLBACK_READBUFFER_SIZE
        return await self._copy_chunks(file, offset, count, chunk, sock, None)

    async def _copy_chunks(self, file, offset, count, chunk, sock, proto):
        """The fallback loop: read up to ``chunk`` bytes in the executor,
        send them (``sock_sendall``, or ``write`` once ``proto`` drained),
        until ``count`` bytes or end of file; the file position then sits
        past what was sent, errors and cancellation included."""
        if count:
            chunk = min(count, chunk)
        buf = bytearray(chunk)
        sent = 0
        try:
            while count is None or sent < count:
                want = chunk if count is None else min(chunk, count - sent)
                view = memoryview(buf)[:want]
                n = await self.run_in_executor(None, file.readinto, view)
                if not n:
                    break
                if proto is None:
                    await self.sock_sendall(sock, view[:n])
                else:
                    await proto.drain()
                    proto._transport.write(view[:n])
                sent += n
            return sent
        finally:
            if sent > 0 and hasattr(file, "seek"):
                file.seek(offset + sent)

    # ----------------------------------------------------- transports

    async def sendfile(self, transport, file, offset=0, count=None, *, fallback=True):
        """Send ``file`` over ``transport``; return the number of bytes sent.

        As asyncio, the transport's ``_sendfile_compatible`` decides: zloop's
        socket transports say TRY_NATIVE (os.sendfile on their socket),
        asyncio's TLS transport FALLBACK (chunks through ``write``), and a
        transport without it cannot send files at all."""
        if transport.is_closing():
            raise RuntimeError("Transport is closing")
        mode = getattr(transport, "_sendfile_compatible", constants._SendfileMode.UNSUPPORTED)
        if mode is constants._SendfileMode.UNSUPPORTED:
            raise RuntimeError(f"sendfile is not supported for transport {transport!r}")
        if mode is constants._SendfileMode.TRY_NATIVE:
            try:
                return await self._sendfile_native(transport, file, offset, count)
            except exceptions.SendfileNotAvailableError:
                if not fallback:
                    raise
        if not fallback:
            raise RuntimeError(
                f"fallback is disabled and native sendfile is not supported for transport {transport!r}"
            )
        return await self._sendfile_fallback(transport, file, offset, count)

    async def _sendfile_native(self, transp, file, offset, count):
        """os.sendfile on a zloop socket transport's socket: reading paused,
        the write buffer flushed first, write() refused meanwhile."""
        self._check_sendfile_params(transp._sock, file, offset, count)
        fileno, size = _native_source(file)
        if not (count or size):
            return 0
        fut = self.create_future()
        job = _SendfileJob(fut, transp._sock, transp._sock_fd, fileno, offset, count)
        resume_reading = transp.is_reading()
        transp.pause_reading()
        transp._sendfile_begin(job.on_writable)
        transp._sendfile_fut = fut
        try:
            if not transp.get_write_buffer_size():
                job.step()
            return await fut
        finally:
            transp._sendfile_fut = None
            transp._sendfile_end()
            if resume_reading:
                transp.resume_reading()

    async def _sendfile_fallback(self, transp, file, offset, count):
        _check_offset_count(offset, count)
        _seek_to_offset(file, offset)
        proto = _SendfileProtocol(transp)
        try:
            return await self._copy_chunks(
                file, offset, count, _TRANSPORT_FALLBACK_CHUNK, None, proto
            )
        finally:
            proto.restore()


class _SendfileProtocol(protocols.Protocol):
    """Stands in for a transport's protocol while loop.sendfile()'s fallback
    writes: reading is paused, and pause/resume_writing gate the next chunk."""

    def __init__(self, transport):
        self._transport = transport
        self._proto = transport.get_protocol()
        self._loop = transport._loop
        self._resume_reading = transport.is_reading()
        self._resume_writing = transport._protocol_paused
        transport.pause_reading()
        transport.set_protocol(self)
        self._write_ready = self._loop.create_future() if self._resume_writing else None
        self._lost = False

    async def drain(self):
        if self._transport.is_closing():
            raise ConnectionError("Connection closed by peer")
        if self._write_ready is not None:
            await self._write_ready

    def connection_made(self, transport):
        raise RuntimeError("Invalid state: connection should have been established already.")

    def connection_lost(self, exc):
        self._lost = True
        fut = self._write_ready
        if fut is not None and not fut.done():
            if exc is None:
                fut.set_exception(ConnectionError("Connection is closed by peer"))
            else:
                fut.set_exception(exc)
        self._proto.connection_lost(exc)

    def pause_writing(self):
        if self._write_ready is None:
            self._write_ready = self._loop.create_future()

    def resume_writing(self):
        fut, self._write_ready = self._write_ready, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    def data_received(self, data):
        raise RuntimeError("Invalid state: reading should be paused")

    def eof_received(self):
        raise RuntimeError("Invalid state: reading should be paused")

    def restore(self):
        self._transport.set_protocol(self._proto)
        if self._resume_reading:
            self._transport.resume_reading()
        fut = self._write_ready
        if fut is not None:
            fut.cancel()
        if self._lost:
            return  # the protocol had its connection_lost(): nothing after it
        # Hand the protocol back in the transport's writing state now: asyncio
        # resumes it whenever it was paused at the start, even after its
        # connection_lost() or with the transport still over its limit, and
        # leaves it unpaused when the last chunks paused the transport (whose
        # later resume_writing() then comes without a pause_writing()).
        paused = self._transport._protocol_paused
        if self._resume_writing and not paused:
            self._proto.resume_writing()
        elif paused and not self._resume_writing:
            self._proto.pause_writing()
