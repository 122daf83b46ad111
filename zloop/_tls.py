"""TLS for ``zloop.Loop``: asyncio's own TLS state machine
(``asyncio.sslproto.SSLProtocol``) layered over zloop's native stream
transports, with every timeout wired through.

The TLS protocol is the one place besides Future/Task stepping where zloop
reuses CPython on purpose: reimplementing a TLS state machine would be
reckless. The native transport sees ``SSLProtocol`` as an ordinary
``BufferedProtocol``; the application sees ``SSLProtocol._app_transport``.
"""

try:
    import ssl as _ssl
except ImportError:  # pragma: no cover - CPython built without OpenSSL
    _ssl = None

import asyncio
import functools
import os
import sys
from asyncio import log as _log
from asyncio import sslproto

from . import _flow, _zloop


def client_server_hostname(ssl, host, server_hostname, handshake_timeout, shutdown_timeout):
    """Validate create_connection()'s TLS arguments as asyncio does and
    return the server_hostname to verify against (None without TLS)."""
    if server_hostname is not None and not ssl:
        raise ValueError("server_hostname is only meaningful with ssl")
    if server_hostname is None and ssl:
        # Verify against the host we connect to, unless there is none.
        if not host:
            raise ValueError("You must set server_hostname when using ssl without a host")
        server_hostname = host
    if handshake_timeout is not None and not ssl:
        raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
    if shutdown_timeout is not None and not ssl:
        raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
    if ssl and _ssl is None:
        raise RuntimeError("Python ssl module is not available")
    return server_hostname


def check_server_args(ssl, handshake_timeout, shutdown_timeout):
    """Validate create_server()'s TLS arguments as asyncio does."""
    if isinstance(ssl, bool):
        raise TypeError("ssl argument must be an SSLContext or None")
    if handshake_timeout is not None and ssl is None:
        raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
    if shutdown_timeout is not None and ssl is None:
        raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
    if ssl is not None and _ssl is None:
        raise RuntimeError("Python ssl module is not available")


def check_accepted_args(ssl, handshake_timeout, shutdown_timeout):
    """Validate connect_accepted_socket()'s TLS arguments as asyncio does:
    any false ``ssl`` means plain (unlike a server's, ``ssl=True`` is let
    through and refused by SSLProtocol: a server side needs a context)."""
    if handshake_timeout is not None and not ssl:
        raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
    if shutdown_timeout is not None and not ssl:
        raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")


_WRAPPED = sslproto.SSLProtocolState.WRAPPED


class _SSLProtocol(_zloop.TLSProtocolState, sslproto.SSLProtocol):
    """asyncio's TLS state machine, with four fixes and three savings.

    The savings: each receive's decryption stops once nothing is left to
    decrypt (``_do_read__copied``), where asyncio reads until an
    ``SSLWantReadError``; a wrapped connection's receive and its write
    with nothing queued run asyncio's steps in one frame each
    (``buffer_updated``, and ``_SSLProtocolTransport.write`` below) where
    asyncio takes five or six; and ``SSLProtocol`` gives every connection a 256 KiB
    ``bytearray``, zero-filled, so resident at once, for the transport to
    read the ciphertext into; ``buffer_updated()`` copies it into the TLS
    object's input straight away. The transport asks for that buffer
    right before its read and hands it back right after, with no other
    read in between (``feedBuffered``/``readBuffered`` in transport/stream.zig),
    so one buffer per loop serves every connection of the loop: an idle
    TLS connection's end costs about 29 KiB of RSS instead of 289 KiB,
    and a new one no longer allocates and clears 256 KiB. Since
    ``get_buffer()`` always returns that buffer, the transport is given
    it once (``_net._reads``) and reads into it without the call.

    - Write flow control: ``SSLProtocol`` pauses the application when its
      buffered size is at least the high-water mark, where every other
      transport pauses when the size is above it (``_FlowControlMixin``;
      the documented contract). With ``set_write_buffer_limits(high=0)``,
      the usual way to make ``drain()`` wait for a flush, an idle TLS
      transport with nothing buffered was paused at once and resumed only
      by a later write or read, so a ``drain()`` in between hung for ever.
    - A ``BufferedProtocol`` whose ``get_buffer()`` returns a
      ``bytearray`` got every TLS record after the first of each read
      decrypted into a copy (``buf[offset:]`` of a bytearray is one) and
      zeros in its own buffer, with the byte count still reported in full
      (CPython gh-156275, open).
    - When the peer's end of stream arrives with more decrypted data than
      one ``get_buffer()`` holds, asyncio delivers one buffer and shuts
      the connection down, dropping the rest (a peer that writes and then
      closes at once is enough). Here the flush after the peer's EOF
      delivers everything first; if the application pauses reading
      meanwhile, the rest and ``eof_received()`` wait for its resume.
    - When the application pauses reading in the callback of the read that
      also met the peer's close_notify, asyncio went on to call
      ``eof_received()`` (while paused) and shut down. Here both wait for
      the resume, whose read meets the close_notify again, as they would
      had the pause come before the read.
    """

    def __init__(self, loop, *args, **kwargs):
        # SSLProtocol.__init__ allocates its read buffer at max_size: an
        # instance attribute of 0 makes that an empty one (the class's
        # max_size, which also bounds its reads for data_received, is left
        # as it is for everything after).
        self.max_size = 0
        super().__init__(loop, *args, **kwargs)
        del self.max_size
        self._ssl_buffer = None
        self._ssl_buffer_view = _read_buffer(loop)
        # The hot reads and writes call the TLS object that ssl.SSLObject
        # wraps, whose methods it forwards to: a Python frame less each.
        # A context's own sslobject_class keeps its methods.
        sslobj = self._sslobj
        self._tls_object = sslobj._sslobj if type(sslobj) is _ssl.SSLObject else sslobj
        # The record path's objects (transport/tls.zig), or None where it does not run.
        self._records = _records(loop, self._sslcontext, sslobj, self._incoming, self._outgoing)

    def get_buffer(self, n):
        # The loop's buffer (max_size), whatever n hints: the transport
        # reads into it what the socket has, buffer_updated() consumes it.
        return self._ssl_buffer_view

    # Set by a buffered read that filled the application's buffer: more
    # may be waiting in the TLS object.
    _more_to_read = False
    # Set when a read met the close_notify with the application paused:
    # the shutdown that read starts next is skipped (its resume reads again).
    _eof_waits_for_resume = False

    def buffer_updated(self, nbytes):
        if self._state is not _WRAPPED or self._app_reading_paused:
            return super().buffer_updated(nbytes)
        # A wrapped connection whose application reads: asyncio's
        # buffer_updated(), _do_read() and _process_outgoing() in one
        # frame, the same steps in the same order.
        self._incoming.write(self._ssl_buffer_view[:nbytes])
        try:
            if self._app_protocol_is_buffer:
                drained = self._do_read__buffered()
            else:
                drained = self._do_read__copied()
            if self._write_backlog:
                self._do_write()
            elif self._outgoing.pending:
                self._process_outgoing()
            elif self._app_writing_paused or self._write_buffer_size > self._outgoing_high_water:
                self._control_app_writing()  # else it would change nothing
            # A read that drained the incoming BIO left it empty: only the
            # pause can change then (the BIO's pending is an attribute
            # lookup the interpreter does not specialize).
            if self._ssl_reading_paused or (
                    not drained and self._incoming.pending >= self._incoming_high_water):
                self._control_ssl_reading()  # else it would change nothing
        except Exception as ex:
            self._fatal_error(ex, "Fatal error on SSL protocol")

    def _get_app_transport(self):
        # asyncio's, making this module's transport class.
        if self._app_transport is None:
            if self._app_transport_created:
                raise RuntimeError("Creating _SSLProtocolTransport twice")
            self._app_transport = _SSLProtocolTransport(self._loop, self)
            self._app_transport_created = True
        return self._app_transport

    def _control_ssl_reading(self):
        # asyncio's, with _get_read_buffer_size() inlined.
        size = self._incoming.pending
        if size >= self._incoming_high_water and not self._ssl_reading_paused:
            self._ssl_reading_paused = True
            self._transport.pause_reading()
        elif size <= self._incoming_low_water and self._ssl_reading_paused:
            self._ssl_reading_paused = False
            self._transport.resume_reading()

    def _control_app_writing(self):
        size = self._outgoing.pending + self._write_buffer_size  # _get_write_buffer_size()
        if not self._app_writing_paused and size > self._outgoing_high_water:
            self._app_writing_paused = True
            self._tell_app("pause_writing")
        elif self._app_writing_paused and size <= self._outgoing_low_water:
            self._app_writing_paused = False
            self._tell_app("resume_writing")

    def eof_received(self):
        keep_open = super().eof_received()
        if self._state == sslproto.SSLProtocolState.FLUSHING:
            # The flush stopped for a paused application: the transport
            # must stay open for the rest, which its resume delivers.
            return True
        return keep_open

    def _do_read__buffered(self):
        self._more_to_read = False
        drained = False
        buf = self._app_protocol_get_buffer(self._get_read_buffer_size())
        view = memoryview(buf).cast("B")
        wants = len(view)
        if not wants:
            view.release()
            raise RuntimeError("get_buffer() returned an empty buffer")
        filled = 0
        count = 1  # 0 from a read: the peer's close_notify
        try:
            while filled < wants:
                count = self._tls_object.read(wants - filled, view[filled:])
                if count <= 0:
                    break
                filled += count
                if not self._incoming.pending and not self._tls_object.pending():
                    drained = True
                    break  # drained (see _do_read__copied)
        except sslproto.SSLAgainErrors:
            pass
        finally:
            # Before buffer_updated(), which may resize a bytearray.
            view.release()
        if wants and filled == wants:
            self._more_to_read = True
            self._loop.call_soon(self._do_read)
        if filled:
            self._app_protocol_buffer_updated(filled)
        if not count:
            self._call_eof_received()
            self._start_shutdown()
        return drained

    def _do_read__copied(self):
        # asyncio's, but it stops once drained: when no ciphertext waits in
        # the incoming BIO and the TLS object holds no decrypted bytes, a
        # read could only raise SSLWantReadError (a partial record inside
        # the TLS object needs more ciphertext). asyncio reads until that
        # exception, whose making (a formatted message, its attributes, a
        # traceback) costs more than decrypting a small message.
        # Returns whether it left the incoming BIO empty.
        chunks = []
        chunk = b"-"  # b"" from a read: the peer's close_notify
        drained = False
        try:
            while True:
                chunk = self._tls_object.read(self.max_size)
                if not chunk:
                    break
                chunks.append(chunk)
                if not self._incoming.pending and not self._tls_object.pending():
                    drained = True
                    break
        except sslproto.SSLAgainErrors:
            pass
        if chunks:
            self._app_protocol.data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if not chunk:
            self._call_eof_received()
            self._start_shutdown()
        return drained

    def _call_eof_received(self):
        reading = (sslproto.SSLProtocolState.WRAPPED, sslproto.SSLProtocolState.FLUSHING)
        if self._app_reading_paused and self._state in reading:
            self._eof_waits_for_resume = True
            return
        super()._call_eof_received()

    def _start_shutdown(self):
        if self._eof_waits_for_resume:
            self._eof_waits_for_resume = False
            return
        super()._start_shutdown()

    def _do_flush(self):
        if not self._eof_received:
            # Our own close(): asyncio's one last read, then the shutdown.
            return super()._do_flush()
        flushing = sslproto.SSLProtocolState.FLUSHING
        while True:
            self._more_to_read = False
            self._do_read()
            if self._state != flushing or self._app_reading_paused:
                return  # failed or shut down already; or its resume flushes again
            if not self._more_to_read:
                break
        self._set_state(sslproto.SSLProtocolState.SHUTDOWN)
        self._do_shutdown()

    def _tell_app(self, name):
        _flow.tell_protocol(self._loop, self._app_protocol, name, self._app_transport, self)


class _SSLProtocolTransport(sslproto._SSLProtocolTransport):
    """The application's TLS transport: asyncio's, whose ``write()`` of
    bytes on a wrapped connection with nothing queued and the raw
    transport taking data runs asyncio's ``write()``, ``_write_appdata()``,
    ``_do_write()`` and ``_process_outgoing()`` as one step: natively on
    the record path (transport/tls.zig), else in one frame (``_write_py``), the same
    steps in the same order. When the TLS object takes only a part, the
    rest goes through asyncio's ``_do_write()``, which keeps writing; when
    it takes nothing (``SSLWantReadError``), the rest stays queued, as
    there. Anything else takes asyncio's path."""

    write = _zloop._tls_write

    def _write_py(self, data):
        proto = self._ssl_protocol
        if (proto._state is not _WRAPPED or proto._write_backlog or proto._ssl_writing_paused
                or not isinstance(data, (bytes, bytearray, memoryview)) or not data):
            return super().write(data)
        try:
            try:
                count = proto._tls_object.write(data)
            except sslproto.SSLAgainErrors:
                count = None  # it takes nothing now: the rest waits, as there
            if count is None or count < len(data):
                rest = data[count or 0:]
                proto._write_backlog.append(rest)
                proto._write_buffer_size += len(rest)
                if count is not None:
                    # It took a part: asyncio's _do_write() goes on with
                    # the rest (and ends with _process_outgoing()).
                    return proto._do_write()
            out = proto._outgoing.read()
            if out:
                proto._transport.write(out)
            # read() took all the outgoing BIO held: its pending is 0 (an
            # attribute lookup the interpreter does not specialize).
            if proto._app_writing_paused or proto._write_buffer_size > proto._outgoing_high_water:
                proto._control_app_writing()  # else it would change nothing
        except Exception as ex:
            proto._fatal_error(ex, "Fatal error on SSL protocol")


# The record path (transport/tls.zig): None until the first TLS connection sets it
# up, then whether it runs and, where it does not, why.
_records_on = None
_records_off_why = None


def records_path():
    """``("native", None)`` where TLS records run natively (transport/tls.zig), else
    ``("python", why)``; None before the first TLS connection."""
    if _records_on is None:
        return None
    return ("native", None) if _records_on else ("python", _records_off_why)


def _setup_records():
    """Finds OpenSSL's functions in the library CPython's ``_ssl`` loaded
    (in the whole process where ``_ssl`` is built into the interpreter,
    which another library may have loaded a second OpenSSL into) and has
    the native side confirm that they are ``_ssl``'s own OpenSSL's, and
    ``_ssl``'s layout, on a live object."""
    if os.environ.get("ZLOOP_TLS_RECORDS", "native") == "python":
        return "ZLOOP_TLS_RECORDS=python"
    try:
        import ctypes
    except ImportError:
        return "no ctypes"
    ssl_ext = sys.modules.get("_ssl")
    if ssl_ext is None:
        return "no _ssl module"
    try:
        library = ctypes.CDLL(getattr(ssl_ext, "__file__", None))
    except OSError as exc:
        return f"_ssl's library cannot be opened: {exc}"
    functions = {}
    for name in _zloop._TLS_FUNCTIONS:
        try:
            functions[name] = ctypes.cast(getattr(library, name), ctypes.c_void_p).value
        except AttributeError:
            pass
    context = _ssl.SSLContext(_ssl.PROTOCOL_TLS_CLIENT)
    incoming, outgoing = _ssl.MemoryBIO(), _ssl.MemoryBIO()
    probe = context.wrap_bio(incoming, outgoing, server_hostname="zloop.invalid")
    if type(probe) is not _ssl.SSLObject:
        return "ssl.SSLContext.sslobject_class is not ssl.SSLObject"
    return _zloop._tls_setup(functions, probe._sslobj, incoming, outgoing, _WRAPPED,
                             _ssl.OPENSSL_VERSION_NUMBER)


def _records(loop, context, sslobj, incoming, outgoing):
    """The ``_records`` of a new TLS protocol: its objects for the record
    path, or None where that path does not run (not available here, a
    context's own ``sslobject_class``, a message callback or key log that
    OpenSSL calls back into Python for)."""
    global _records_on, _records_off_why
    if _records_on is None:
        why = _setup_records()
        _records_on, _records_off_why = why is None, why
        if loop.get_debug():
            if why is None:
                _log.logger.debug("zloop: TLS records run natively (%s)", _ssl.OPENSSL_VERSION)
            else:
                _log.logger.debug("zloop: TLS records run in asyncio's Python: %s", why)
    if not _records_on or type(sslobj) is not _ssl.SSLObject or context is None:
        return None
    if context._msg_callback is not None or getattr(context, "keylog_filename", None) is not None:
        return None
    return _zloop._tls_records(sslobj._sslobj, incoming, outgoing)


def _read_buffer(loop):
    """The loop's one buffer for TLS transports to read ciphertext into
    (see ``_SSLProtocol``), made the first time it is asked for."""
    view = loop._tls_read_buffer
    if view is None:
        view = loop._tls_read_buffer = memoryview(bytearray(sslproto.SSLProtocol.max_size))
    return view


def ssl_protocol(loop, app_protocol, ssl, waiter, *, server_side, server_hostname=None,
                 handshake_timeout=None, shutdown_timeout=None, call_connection_made=True):
    """The TLS protocol to give the raw transport. ``ssl=True`` means a
    default client context, made by SSLProtocol itself."""
    context = None if isinstance(ssl, bool) else ssl
    return _SSLProtocol(
        loop,
        app_protocol,
        context,
        waiter,
        server_side,
        server_hostname,
        call_connection_made=call_connection_made,
        ssl_handshake_timeout=handshake_timeout,
        ssl_shutdown_timeout=shutdown_timeout,
    )


def server_protocol_factory(loop, protocol_factory, sslcontext, handshake_timeout, shutdown_timeout):
    """Wraps a server's protocol factory so that every accepted connection
    speaks TLS first; the application's protocol sees the TLS transport."""

    def make():
        app_protocol = protocol_factory()
        waiter = loop.create_future()
        proto = ssl_protocol(
            loop,
            app_protocol,
            sslcontext,
            waiter,
            server_side=True,
            handshake_timeout=handshake_timeout,
            shutdown_timeout=shutdown_timeout,
        )
        waiter.add_done_callback(
            functools.partial(_server_handshake_done, loop, app_protocol, proto._app_transport)
        )
        return proto

    return make


def _server_handshake_done(loop, app_protocol, app_transport, waiter):
    """An accepted connection's handshake ended: on failure, close the TLS
    transport and, in debug mode, report it, as asyncio's
    ``_accept_connection2`` does after ``await waiter`` (a done callback
    here rather than a task per connection)."""
    if waiter.cancelled():
        exc = asyncio.CancelledError()
    else:
        exc = waiter.exception()
        if exc is None:
            return
    app_transport.close()
    if loop.get_debug():
        loop.call_exception_handler(
            {
                "message": "Error on transport creation for incoming connection",
                "exception": exc,
                "protocol": app_protocol,
                "transport": app_transport,
            }
        )


class TLSMixin:
    """``loop.start_tls()``."""

    async def start_tls(self, transport, protocol, sslcontext, *, server_side=False,
                        server_hostname=None, ssl_handshake_timeout=None,
                        ssl_shutdown_timeout=None):
        """Upgrade an existing transport to TLS; returns the TLS transport."""
        if _ssl is None:
            raise RuntimeError("Python ssl module is not available")
        if not isinstance(sslcontext, _ssl.SSLContext):
            raise TypeError(
                f"sslcontext is expected to be an instance of ssl.SSLContext, got {sslcontext!r}"
            )
        if not getattr(transport, "_start_tls_compatible", False):
            raise TypeError(f"transport {transport!r} is not supported by start_tls()")
        waiter = self.create_future()
        proto = ssl_protocol(
            self,
            protocol,
            sslcontext,
            waiter,
            server_side=server_side,
            server_hostname=server_hostname,
            handshake_timeout=ssl_handshake_timeout,
            shutdown_timeout=ssl_shutdown_timeout,
            call_connection_made=False,
        )
        # Nothing may be read between the protocol swap and the handshake's
        # start, or plaintext bytes would reach the TLS state machine late.
        transport.pause_reading()
        if server_side and _MOVES_STREAM_BUFFER:
            _move_stream_buffer(protocol, proto)
        transport.set_protocol(proto)
        made = self.call_soon(proto.connection_made, transport)
        resumed = self.call_soon(transport.resume_reading)
        try:
            await waiter
        except BaseException:
            transport.close()
            made.cancel()
            resumed.cancel()
            # The exception's traceback holds this frame, whose waiter
            # holds the exception: without this, the cycle keeps the
            # transport alive until the garbage collector runs (as asyncio
            # 3.14 drops it, gh-159049).
            waiter = None
            raise
        return proto._app_transport


# asyncio 3.14 (gh-142352): a server's start_tls() on a stream takes the
# bytes its StreamReader buffered before the upgrade (the client's hello,
# read with the plaintext) as the TLS protocol's first input.
_MOVES_STREAM_BUFFER = sys.version_info >= (3, 14)


def _move_stream_buffer(protocol, tls_protocol):
    """Moves what ``protocol``'s StreamReader holds into the TLS input."""
    if not isinstance(protocol, asyncio.StreamReaderProtocol):
        return
    reader = getattr(protocol, "_stream_reader", None)
    if reader is not None and reader._buffer:
        tls_protocol._incoming.write(reader._buffer)
        reader._buffer.clear()
