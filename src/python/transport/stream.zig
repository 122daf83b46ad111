//! `zloop._zloop.SocketTransportCore`: the native half of zloop's stream
//! transports over sockets (TCP and Unix). The I/O itself is native: one
//! `core.IoWatcher` per transport, reads handed to `protocol.data_received`
//! as `bytes` (or received into a `BufferedProtocol`'s
//! buffer), writes that try the socket first and buffer only the rest, and
//! write flow control; `get_extra_info`, `_call_connection_lost` and the
//! attributes asyncio's transports keep (`_sock`, `_loop`, `_extra`...). The
//! Python subclass `zloop._net._SocketTransport` adds the cold paths:
//! construction over a socket object, repr, `_fatal_error`, protocol
//! switching. A server's connections are made here (`serve`), with no
//! socket object and no Python call, their extra info made on first use.
//!
//! This file holds the transport's state (`Transport`, `Inner`), the
//! plumbing every part calls (fatal errors, interest, write flow control),
//! `_setup`/`_detach`, the object's GC slots and tables, and the surface
//! the rest of the adapter imports. The rest lives in `transport/`:
//!   read.zig    readiness, native receives, reads: where received bytes go
//!   write.zig   the write queue, write/writelines, corking, close/abort:
//!               where a write ends up
//!   serve.zig   served connections, the transport's own ready-queue step,
//!               the teardown after connection_lost
//!   attrs.zig   get_extra_info and the attributes asyncio's transports keep
//! The object, its type (derived from `asyncio.Transport`) and what both
//! native transports share of it live in `object.zig`.
//!
//! Lifecycle (as `selector_events._SelectorSocketTransport`):
//!   _setup -> (call_soon) connection_made -> (call_soon) _start_reading
//!   serve -> (one queued step, `runStep`) connection_made, then reading
//!   close(): stop reading; once the buffer is flushed, connection_lost
//!   abort()/fatal error: drop the buffer, connection_lost(exc) next pass
//!   (queued as the transport's own step; a Handle in debug mode).
//! While set up, the transport holds a reference to itself on behalf of the
//! reactor (as asyncio's selector holds its bound `_read_ready`), released
//! when `_call_connection_lost` leaves the reactor.
//!
//! On io_uring, small reads are native receives (`onRecv`): the kernel
//! receives into the loop's buffers (recvpool.zig) and the transport hands
//! them to data_received as it would a read of its own, with no recv
//! syscall; large reads and a BufferedProtocol's read the usual way.
//!
//! Readiness is handled inline from the reactor's I/O dispatch (as libuv
//! calls its read callbacks from the poll phase), not through the ready
//! queue: the ready queue carries only `Handle`s.
const std = @import("std");
const core = @import("core");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const loop_mod = @import("../loop/loop.zig");
const server = @import("connections.zig");
const borrowed = @import("borrowed.zig");
const sockio = @import("../sock/io.zig");
const transport_object = @import("object.zig");
const read = @import("stream/read.zig");
const write = @import("stream/write.zig");
const served = @import("stream/serve.zig");
const attrs = @import("stream/attrs.zig");
pub const object = transport_object.Object(@This());
const shared = object.methods;
const common = &transport_object.names;

/// `transport_object.Layout(Inner)` (checked there), then the fields only
/// a stream transport has.
pub const Transport = extern struct {
    ob_base: Obj,
    /// `asyncio.BaseTransport._extra`: owned by that slot descriptor (or
    /// null until a served connection's extra info is asked for: see
    /// `Inner.lazy`).
    extra: ?*Obj,
    loop: ?*Obj,
    protocol: ?*Obj,
    inner: ?*Inner,
    /// The `socket.socket` the transport works on (`_sock`): the one it was
    /// made with, or a served connection's, made on first use (see
    /// `Inner.lazy`). Null once the connection is lost.
    sock: ?*Obj,
    /// The server's `ServerConnections` while it counts this connection,
    /// and this transport's place in its list (connections.zig).
    conns: ?*Obj,
    conn_prev: ?*Transport,
    conn_next: ?*Transport,
    /// `_sendfile_fut`: loop.sendfile()'s future while it runs, failed if
    /// the connection goes first (as asyncio's empty waiter).
    sendfile_fut: ?*Obj,
    /// connection_lost was called and the transport let go of its socket,
    /// protocol and loop (`_sock` and `_loop` read None).
    lost: bool,
    /// `_protocol_connected`: connection_lost goes to the protocol.
    protocol_connected: bool,
};

pub const Inner = struct {
    owner: *Transport,
    /// Queued behind the ready callbacks when the fd is ready (`shared.onReady`).
    io: transport_object.IoQueued = shared.ioQueued(),
    w: core.IoWatcher,
    /// What write()/writelines() could not send yet (see `WriteQueue`).
    wq: write.WriteQueue = .{},
    /// Small writes held until the running callback returns (see `Cork`).
    cork: write.Cork = .{},
    /// Queued with the reactor while `cork` holds something; holds a
    /// reference to the transport.
    flush: core.Flush = .{ .cb = .{ .run = write.flushCork, .drop = write.dropCork } },
    high: usize = 64 * 1024,
    low: usize = 16 * 1024,
    /// `(low, high)` as `set_write_buffer_limits` was given them (see
    /// `shared.getWriteBufferLimits`); null until it is called.
    limits: ?*Obj = null,
    conn_lost: u32 = 0,
    /// In the reactor's watcher table.
    attached: bool = false,
    /// The reactor's reference to the transport, held while the loop has
    /// a use for it (see `updateInterest`), as asyncio's selector holds a
    /// transport through its reader and writer handles: none once reading
    /// has stopped (EOF kept open, a pause) with nothing left to write, so
    /// that a transport nobody else holds is collected, warns and closes.
    held: bool = false,
    /// `_start_reading` ran (connection_made was called first).
    started: bool = false,
    paused: bool = false,
    closing: bool = false,
    /// write_eof() was called.
    eof: bool = false,
    /// The peer's EOF was seen; reading stopped for good.
    read_eof: bool = false,
    buffered: bool = false,
    /// What the protocol's get_buffer() returns every time, when the
    /// transport knows it (zloop's TLS protocol gives out its loop's one
    /// buffer, `_tls._SSLProtocol`): reads go into it without the call.
    fixed_buffer: ?*Obj = null,
    /// The last read brought more than `read_exact_bytes` (or filled the
    /// lent buffer): the next one reads into the spare, and asks the kernel
    /// how much is there first if the protocol keeps data (`readExact`).
    big_reads: bool = false,
    /// The last read filled the lent buffer: the next, into the spare,
    /// takes the rest of that message (and `big_reads` stays whatever it
    /// brings: see `readReady`).
    split: bool = false,
    /// The protocol kept a `bytes` it was handed (see `readReady`).
    keeps_data: bool = false,
    protocol_paused: bool = false,
    /// The `contextvars.Context` the protocol's read-side callbacks run in:
    /// a copy of the current context taken when reading starts or resumes,
    /// as asyncio's `_add_reader` copies it into the reader `Handle`.
    context: ?*Obj = null,
    /// `context` was set by `_set_context` (3.15, gh-140947): it is the
    /// transport's own for its whole life, and resume_reading() keeps it.
    context_fixed: bool = false,
    /// loop.sendfile() owns the socket (`_sendfile_begin`): write() raises,
    /// and once the buffer is flushed each writable event calls this
    /// callable (which runs os.sendfile) instead.
    sendfile_writer: ?*Obj = null,
    /// Native receives not yet delivered, oldest first from `rx_head` (see
    /// `onRecv`).
    rx: read.RxQueue = .{},
    rx_head: usize = 0,
    /// A served connection's extra info and socket object, made on first
    /// use (see `Lazy`).
    lazy: attrs.Lazy = .{},
    /// The connection's own callbacks in the ready queue (`runStep`):
    /// its start, then its end, each queued once at most and in that
    /// order, each entry holding a reference to the transport.
    step: core.Callback = .{ .run = served.runStep, .drop = served.dropStep },
    /// `protocol.connection_made`, bound, while the start is queued; and
    /// the context it runs in.
    start_cb: ?*Obj = null,
    start_ctx: ?*Obj = null,
    /// connection_lost's exception (or None) and context, while the end is
    /// queued.
    lost_exc: ?*Obj = null,
    lost_ctx: ?*Obj = null,
    /// The user's socket this transport works on (`create_connection(sock=)`
    /// and the like; owned), or null for one the loop made or accepted,
    /// which user code only sees through `TransportSocket` and cannot
    /// close. Its fd is asked for before each system call (`sysFd`) and
    /// registration (`updateInterest`), so a close() by user code makes
    /// the next one fail with EBADF, as on asyncio, and never reach the
    /// file that took the number since (borrowed.zig). Its watcher is
    /// borrowed and reads are never native receives: on io_uring nothing
    /// in the ring holds the file, so the close really closes.
    sock_owner: ?*Obj = null,

    /// The fd to make a system call on: `w.fd`, or -1 (the call fails
    /// with EBADF) once the user's socket no longer stands for it.
    pub inline fn sysFd(in: *const Inner) i32 {
        return borrowed.fdFor(in.sock_owner, in.w.fd);
    }

    pub fn pending(in: *const Inner) usize {
        return in.wq.size;
    }

    /// data_received may be called (as asyncio's reader is registered).
    pub fn reading(in: *const Inner) bool {
        return in.started and !in.paused and !in.closing and !in.read_eof;
    }

    pub fn rxPending(in: *const Inner) bool {
        return in.rx_head < in.rx.len();
    }
};

/// The texts of its fatal errors (as asyncio words them), and the names
/// only the stream transport calls (`transport_object.names` has the
/// ones both call).
const Names = struct {
    msg_read: *Obj,
    msg_write: *Obj,
    msg_data: *Obj,
    msg_eof: *Obj,
    msg_get_buffer: *Obj,
    msg_buffer_updated: *Obj,
    connection_made: *Obj,
    connection_lost: *Obj,
    close: *Obj,
    get: *Obj,
    name: *Obj,
    default: *Obj,
    peername: *Obj,
    sockname: *Obj,
    socket: *Obj,
    sendfile_lost: *Obj,
    warn_unclosed: *Obj,
    setblocking: *Obj,
    detach: *Obj,
    msg_gone: *Obj,
};
pub var names: Names = undefined;

// ------------------------------------------------------------- plumbing

/// A Python error from a callback out of the I/O path: KeyboardInterrupt and
/// SystemExit abort the loop; anything else should never get here (the
/// Python helpers report their own errors), so it is printed, not lost.
pub fn pendingToRun(t: *Transport) core.RunError!void {
    if (py.pendingIsFatal()) return error.Aborted;
    c.PyErr_WriteUnraisable(py.obj(t));
}

/// `self._fatal_error(exc, message)` with `exc` consumed.
pub fn fatal(t: *Transport, exc: *Obj, msg: *Obj) core.RunError!void {
    defer py.decref(exc);
    const r = py.callMethod(py.obj(t), common.fatal_error, .{ exc, msg });
    if (r) |o| py.decref(o) else try pendingToRun(t);
}

/// A protocol callback raised: as `_fatal_error` in asyncio's read path.
pub fn fatalFromPending(t: *Transport, msg: *Obj) core.RunError!void {
    if (py.pendingIsFatal()) return error.Aborted;
    const exc = py.fetchException() orelse return;
    try fatal(t, exc, msg);
}

pub fn fatalErrno(t: *Transport, errno: u16, msg: *Obj) core.RunError!void {
    const exc = sockio.errnoException(errno) orelse return pendingToRun(t);
    try fatal(t, exc, msg);
}

pub fn callSelf(t: *Transport, name: *Obj) bool {
    return succeeded(py.callMethod(py.obj(t), name, .{}));
}

pub const succeeded = py.consumed;
pub const scheduleConnectionLost = object.scheduleConnectionLost;

/// `scheduleConnectionLost` outside debug mode: asyncio's
/// `loop.call_soon(self._call_connection_lost, exc)` as the transport's
/// own step (`runStep`), next in the ready queue, in `own` (the
/// transport's own context, see `Inner.context_fixed`) or else a copy of
/// the current one, as a Handle's.
pub fn queueConnectionLost(t: *Transport, exc: *Obj, own: ?*Obj) bool {
    const in = t.inner.?;
    const ctx = if (own) |o| py.newref(o) else c.PyContext_CopyCurrent() orelse return false;
    std.debug.assert(in.lost_exc == null and in.lost_ctx == null);
    in.lost_exc = py.newref(exc);
    in.lost_ctx = ctx;
    if (served.queueStep(t)) return true;
    py.clear(&in.lost_exc);
    py.clear(&in.lost_ctx);
    return false;
}

/// Applies the interest the transport's state calls for.
pub fn updateInterest(t: *Transport) void {
    const l = object.attachedLoop(t) orelse return;
    const in = t.inner.?;
    const want: core.Interest = .{
        .read = in.reading(),
        .write = in.pending() > 0 or (in.sendfile_writer != null and !in.closing),
    };
    // Last: letting go may free the transport (its caller holds one).
    defer object.holdWhile(t, in, !in.started or in.closing or !want.none());
    // Small reads into the loop's buffers come as native receives where
    // the backend has them (see `onRecv`); large ones, and a buffered
    // protocol's, are read the usual way, as are a user's socket's (see
    // `Inner.sock_owner`).
    in.w.recv = !in.buffered and !in.big_reads and in.sock_owner == null and
        l.recv_pool.ready(&l.reactor);
    if (in.closing) read.releaseRx(in, l);
    // Receives held over a pause go out once reading resumes (as asyncio
    // re-registers its reader); an allocation failure here leaves them for
    // the next receive's dispatch.
    if (want.read and in.rxPending()) shared.queueIo(in) catch {};
    // A user's socket closed under the transport is registered no more:
    // its number may stand for another file now. The next send or
    // receive fails with EBADF, as asyncio's would.
    if (in.sysFd() < 0) return;
    // epoll_ctl fails only on an fd closed under the transport; the next
    // send/recv reports that as the error asyncio would.
    l.reactor.setInterest(&in.w, want) catch {};
}

pub fn maybePause(t: *Transport) bool {
    if (!write.uncork(t)) return false;
    const in = t.inner.?;
    if (in.pending() <= in.high or in.protocol_paused) return true;
    in.protocol_paused = true;
    return callSelf(t, common.pause_cb);
}

pub fn maybeResume(t: *Transport) bool {
    const in = t.inner.?;
    if (!in.protocol_paused or in.pending() > in.low) return true;
    in.protocol_paused = false;
    return callSelf(t, common.resume_cb);
}

// ---------------------------------------------------------- the surface

/// What the rest of the adapter and `transport_object` call, from the
/// files that hold it.
pub const dispatch = read.dispatch;
pub const dispatchFailed = read.dispatchFailed;
pub const captureContext = read.captureContext;
pub const onRecv = read.onRecv;
pub const Listener = served.Listener;
pub const serve = served.serve;
pub const installNet = served.installNet;
pub const isTransport = served.isTransport;
pub const finalize = attrs.finalize;

// --------------------------------------------------------------- methods

/// How the transport reads for its protocol: `_setup`'s and
/// `_set_protocol`'s last argument, False (data_received), True
/// (get_buffer and buffer_updated) or the buffer object the protocol's
/// get_buffer() returns every time (buffer_updated only).
pub const ReadMode = struct {
    buffered: bool,
    fixed_buffer: ?*Obj,

    pub fn parse(arg: *Obj) ?ReadMode {
        if (c.Py_TYPE(arg) == &c.PyBool_Type) return .{ .buffered = py.isTrue(arg), .fixed_buffer = null };
        if (c.PyObject_CheckBuffer(arg) == 0) {
            _ = py.raise(c.PyExc_TypeError, "reads must be True, False or a buffer");
            return null;
        }
        return .{ .buffered = true, .fixed_buffer = arg };
    }

    pub fn apply(mode: ReadMode, in: *Inner) void {
        in.buffered = mode.buffered;
        const old = in.fixed_buffer;
        in.fixed_buffer = if (mode.fixed_buffer) |b| py.newref(b) else null;
        py.xdecref(old);
    }
};

/// `_setup(loop, fd, protocol, reads, sock)`: registers the fd with the
/// loop's reactor (no interest yet) and takes the reactor's reference.
/// `sock` is the user's socket the fd came from (see `Inner.sock_owner`),
/// or None for the loop's own.
fn setup(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    if (nargs != 5) return py.raise(c.PyExc_TypeError, "_setup(loop, fd, protocol, reads, sock)");
    const to = object.target(t, args[0], args[1]) orelse return null;
    const reads = ReadMode.parse(args[3].?) orelse return null;
    const registered = loop_mod.claimFd(to.loop, to.fd) orelse return null;
    const sock: ?*Obj = if (py.isNone(args[4])) null else args[4].?;
    const in = object.newInner(t, to, registered, sock) orelse return null;
    const joined = object.join(t, in, to, args[2].?, sock) orelse return null;
    reads.apply(in); // after anything that fails: it takes references
    return joined;
}

/// `_detach()`: leave the reactor and drop its reference. Called once
/// connection_lost ran, before the socket is closed (the fd may be reused).
fn detach(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    leave(py.cast(Transport, self.?));
    return py.newref(py.none());
}

/// Drops what is queued and leaves the reactor (see `detach`).
pub fn leave(t: *Transport) void {
    const in = t.inner orelse return;
    in.wq.releaseAll();
    in.cork.release();
    read.releaseRx(in, object.loopOf(t));
    object.leaveReactor(t, in);
}

/// An evicted transport's failure (`shared.evictIfStale`): the EBADF its
/// next send would meet, through `_fatal_error`: connection_lost with
/// OSError(EBADF) next pass. False with the Python error set when it must
/// abort the caller.
pub fn failGone(t: *Transport) bool {
    fatalErrno(t, sockio.ebadf, names.msg_gone) catch return false;
    return true;
}

// ------------------------------------------------------------ the object

/// The object's own references besides `transport_object`'s, for the
/// collector.
pub fn visitObject(t: *Transport, visit: c.visitproc, arg: ?*anyopaque) c_int {
    inline for (.{ t.sock, t.conns, t.sendfile_fut }) |m| if (m) |o| {
        const rc = visit.?(o, arg);
        if (rc != 0) return rc;
    };
    return 0;
}

/// Its own references besides `transport_object`'s, for the collector.
pub fn visitInner(in: *Inner, visit: c.visitproc, arg: ?*anyopaque) c_int {
    const held = .{ in.sendfile_writer, in.fixed_buffer, in.start_cb, in.start_ctx, in.lost_exc, in.lost_ctx };
    inline for (held) |m| if (m) |o| {
        const rc = visit.?(o, arg);
        if (rc != 0) return rc;
    };
    inline for (.{ in.lazy.peer, in.lazy.local }) |name| if (name == .made) {
        const rc = visit.?(name.made, arg);
        if (rc != 0) return rc;
    };
    // The queued `bytes` cannot be part of a cycle (bytes are not tracked),
    // but visiting every owned reference keeps gc.get_referents() honest.
    for (in.wq.live()) |s| if (s.owner) |o| {
        const rc = visit.?(o, arg);
        if (rc != 0) return rc;
    };
    for (in.cork.held[0..in.cork.n]) |o| {
        const rc = visit.?(o, arg);
        if (rc != 0) return rc;
    }
    return 0;
}

/// tp_clear's part of the object's own fields. `sock` stays: it owns the
/// fd, which the finalizer (run before a collection clears anything) has
/// closed if it was open.
pub fn clearObject(t: *Transport) void {
    py.clear(&t.sendfile_fut);
    server.unlink(t);
}

/// tp_clear's part of `Inner`.
pub fn clearInner(in: *Inner) void {
    py.clear(&in.sendfile_writer);
    py.clear(&in.fixed_buffer);
    dropWrites(in);
    in.lazy.release();
}

/// Lets go of what `in` holds but `transport_object`'s fields, before it
/// is freed (dealloc, or a `_setup` that failed to register). Each queued
/// step holds a reference to the transport, so none is queued.
pub fn freeInner(t: *Transport, in: *Inner) void {
    // A served connection's fd with no socket object: the finalizer
    // closed it if it ran (a subclass's dealloc runs it); else here.
    if (in.lazy.sock and !t.lost) sockio.sys.close(in.w.fd);
    in.lazy.release();
    const owned = .{ "sendfile_writer", "fixed_buffer", "start_cb", "start_ctx", "lost_exc", "lost_ctx" };
    inline for (owned) |f| py.clear(&@field(in, f));
    in.wq.releaseAll();
    std.debug.assert(!in.flush.queued);
    in.cork.release();
    if (t.loop) |lo| read.releaseRx(in, py.cast(loop_mod.Loop, lo));
    in.rx.clear();
}

/// dealloc's part of the object's own fields (before `Inner` is freed).
pub fn freeObject(t: *Transport) void {
    server.unlink(t);
    py.clear(&t.sock);
    py.clear(&t.sendfile_fut);
}

/// Drops what waits to be sent (abort, `_force_close`, tp_clear).
pub fn dropWrites(in: *Inner) void {
    in.wq.releaseAll();
    in.cork.release();
}

pub var methods = object.methodTable("data_received", &.{
    py.methodFast("write", write.writeMethod, "write($self, data)\n--\n\nWrite bytes-like data; buffer what the socket does not take."),
    py.methodFast("writelines", write.writelinesMethod, "writelines($self, list_of_data)\n--\n\nWrite bytes-like objects, gathered, not joined."),
    py.methodNoArgs("get_write_buffer_size", write.getWriteBufferSize, "get_write_buffer_size($self, /)\n--\n\nBytes waiting to be sent."),
    py.methodNoArgs("is_closing", write.isClosing, "is_closing($self, /)\n--\n\nTrue once closing or closed."),
    py.methodNoArgs("can_write_eof", write.canWriteEof, "can_write_eof($self, /)\n--\n\nSockets can half-close: True."),
    py.methodNoArgs("write_eof", write.writeEof, "write_eof($self, /)\n--\n\nShut the write side down once flushed."),
    py.methodNoArgs("close", write.close, "close($self, /)\n--\n\nFlush, then close; connection_lost(None) follows."),
    py.methodNoArgs("abort", write.abort, "abort($self, /)\n--\n\nClose now, dropping buffered data."),
    py.methodFast("_setup", setup, null),
    py.methodFast("_set_protocol", attrs.setProtocolNative, null),
    py.methodO("_set_context", attrs.setContext, null),
    py.methodNoArgs("_detach", detach, null),
    py.methodFast("get_extra_info", attrs.getExtraInfo, "get_extra_info($self, name, default=None)\n--\n\nGet optional transport information."),
    py.methodO("_call_connection_lost", served.callConnectionLostMethod, null),
    py.methodNoArgs("_close_socket", served.closeSocketMethod, null),
    py.methodO("_sendfile_begin", write.sendfileBegin, null),
    py.methodNoArgs("_sendfile_end", write.sendfileEnd, null),
    py.methodNoArgs("_uncork", write.uncorkMethod, null),
});

/// Besides `_paused`, the attributes asyncio's transports keep in their
/// `__dict__`, native here (a served connection makes some on first use).
pub var getsets = object.getsetTable(&.{
    py.getset("_paused", attrs.getPaused, null),
    py.getset("_read_polling", attrs.getReadPolling, null),
    py.getset("_extra", attrs.getExtra, attrs.setExtra),
    py.getset("_sock", attrs.getSock, attrs.setSock),
    py.getset("_loop", attrs.getLoopAttr, null),
    py.getset("_sendfile_fut", attrs.getSendfileFut, attrs.setSendfileFut),
    py.getset("_protocol_connected", attrs.getProtocolConnected, attrs.setProtocolConnected),
    py.getset("_closed", attrs.getClosed, null),
});

pub fn initNames() void {
    names = .{
        .msg_read = py.intern("Fatal read error on socket transport"),
        .msg_write = py.intern("Fatal write error on socket transport"),
        .msg_data = py.intern("Fatal error: protocol.data_received() call failed."),
        .msg_eof = py.intern("Fatal error: protocol.eof_received() call failed."),
        .msg_get_buffer = py.intern("Fatal error: protocol.get_buffer() call failed."),
        .msg_buffer_updated = py.intern("Fatal error: protocol.buffer_updated() call failed."),
        .connection_made = py.intern("connection_made"),
        .connection_lost = py.intern("connection_lost"),
        .close = py.intern("close"),
        .get = py.intern("get"),
        .name = py.intern("name"),
        .default = py.intern("default"),
        .peername = py.intern("peername"),
        .sockname = py.intern("sockname"),
        .socket = py.intern("socket"),
        .sendfile_lost = py.intern("_sendfile_lost"),
        .warn_unclosed = py.intern("_warn_unclosed"),
        .setblocking = py.intern("setblocking"),
        .detach = py.intern("detach"),
        .msg_gone = py.intern("Fatal error on socket transport: its socket was closed"),
    };
}

/// Creates `SocketTransportCore`, derived from `asyncio.Transport`.
pub fn initTypes(module: *Obj) bool {
    return object.init(module, "Transport", "SocketTransportCore", "The native I/O engine of zloop's socket transports.");
}
