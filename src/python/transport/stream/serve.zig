//! Served connections: a server's transports made natively (`serve`, for
//! transport/accept.zig), with no socket object and no Python call; the
//! transport's own step in the ready queue (connection_made then reading,
//! or `_call_connection_lost`); and the teardown after connection_lost
//! (`letGo`: the reactor, the socket, the protocol, the server's count).
//! `installNet` takes the Python classes a served connection is made of.
//!
//! The object, its plumbing and its public surface are transport/stream.zig's.
const std = @import("std");
const core = @import("core");
const py = @import("../../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const loop_mod = @import("../../loop/loop.zig");
const state = @import("../../capi/state.zig");
const handle = @import("../../loop/handle.zig");
const sockaddr = @import("../../sock/addr.zig");
const server = @import("../connections.zig");
const sockio = @import("../../sock/io.zig");
const transport_object = @import("../object.zig");
const transport = @import("../stream.zig");
const Transport = transport.Transport;
const Inner = transport.Inner;
const ReadMode = transport.ReadMode;
const object = transport.object;
const shared = object.methods;
const common = &transport_object.names;
const names = &transport.names;
const pendingToRun = transport.pendingToRun;
const succeeded = transport.succeeded;
const updateInterest = transport.updateInterest;
const leave = transport.leave;

const gpa = std.heap.c_allocator;

/// The Python classes a served connection is made of, handed over once by
/// `zloop._net` (`_zloop._install_net`).
pub const Classes = struct {
    /// `zloop._net._SocketTransport`, the class of every stream transport.
    transport: *Obj,
    /// `zloop._tls._SSLProtocol`: its transport reads into the one buffer
    /// it gives out (see `ReadMode`).
    ssl_protocol: *Obj,
    buffered_protocol: *Obj,
    /// `asyncio.trsock.TransportSocket` and `socket.socket`.
    transport_socket: *Obj,
    socket: *Obj,
};
pub var classes: ?Classes = null;

/// `_install_net(transport, ssl_protocol, buffered_protocol,
/// transport_socket, socket)`: see `Classes`.
pub fn installNet(_: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const usage = "_install_net(transport, ssl_protocol, buffered_protocol, transport_socket, socket)";
    if (nargs != 5) return py.raise(c.PyExc_TypeError, usage);
    if (c.PyType_Check(args[0]) == 0 or c.PyType_IsSubtype(@ptrCast(args[0]), object.type_obj.?) == 0) {
        return py.raise(c.PyExc_TypeError, "_install_net(): not a SocketTransportCore class");
    }
    if (classes) |old| inline for (.{ old.transport, old.ssl_protocol, old.buffered_protocol, old.transport_socket, old.socket }) |o| py.decref(o);
    classes = .{
        .transport = py.newref(args[0].?),
        .ssl_protocol = py.newref(args[1].?),
        .buffered_protocol = py.newref(args[2].?),
        .transport_socket = py.newref(args[3].?),
        .socket = py.newref(args[4].?),
    };
    return py.newref(py.none());
}

pub fn isTransport(o: *Obj) bool {
    return c.PyObject_TypeCheck(o, object.type_obj.?) != 0;
}

/// What a served connection takes from its listener (transport/accept.zig).
pub const Listener = struct {
    /// `socket.socket(family, type, proto, fileno)` arguments of an
    /// accepted socket: the listener's own (`type` with SOCK_NONBLOCK, so
    /// that CPython sets the timeout to 0 without a syscall).
    family: u16,
    sock_type: i32,
    proto: i32,
    /// The listener's `sockname`, when its connections share it (see
    /// `sockaddr.sharedByAccepted`); else each asks `getsockname` once.
    sockname: ?*Obj,
    /// TCP: TCP_NODELAY on each connection, as asyncio's `_set_nodelay`.
    nodelay: bool,
};

/// Python 3.15 (gh-140947): a transport's callbacks run in its own
/// context (`Inner.context_fixed`).
const transport_owns_context = c.PY_VERSION_HEX >= 0x030F0000;

/// A served connection's transport, made natively: what
/// `_SocketTransport(loop, sock, protocol, extra={"peername": addr},
/// server=server)` does for asyncio's `_accept_connection2`, without a
/// socket object and without Python: `protocol.connection_made` looked up
/// (a factory that returned no protocol fails here, as in asyncio), the fd
/// registered with the reactor, the server's count, TCP_NODELAY, and
/// connection_made then reading queued as one step. `ctx` is the
/// connection's context, where its protocol factory ran: connection_made
/// runs in it, reading in a copy taken now (3.15: both in it, the
/// transport's own). Takes `fd` whatever happens: closed on failure.
/// Returns a new reference, or null with the Python error set.
pub fn serve(l: *loop_mod.Loop, fd: i32, protocol: *Obj, conns: ?*Obj, from: *const Listener, peer: sockaddr.Lazy, ctx: *Obj) ?*Obj {
    var peer_name = peer;
    const t = make(l, fd, protocol, from, ctx) orelse {
        peer_name.release();
        sockio.sys.close(fd);
        return null;
    };
    // The transport owns the fd from here.
    const in = t.inner.?;
    in.lazy.peer = peer_name;
    if (conns) |s| server.attach(s, t);
    if (from.nodelay) sockio.setTcpNodelay(fd);
    if (queueStep(t)) return py.obj(t);
    // Out of memory for the ready queue: the connection ends here.
    py.clear(&in.start_cb);
    py.clear(&in.start_ctx);
    const ok = letGo(t);
    std.debug.assert(ok or c.PyErr_Occurred() != null);
    py.decref(py.obj(t));
    return null;
}

/// `serve`'s transport, set up and holding `fd` (no server yet, nothing
/// queued), or null (the fd still the caller's).
fn make(l: *loop_mod.Loop, fd: i32, protocol: *Obj, from: *const Listener, ctx: *Obj) ?*Transport {
    const cls = classes orelse {
        _ = py.raise(c.PyExc_RuntimeError, "zloop._net is not installed");
        return null;
    };
    const made = c.PyObject_GetAttr(protocol, names.connection_made) orelse return null;
    var reads = readsFor(protocol) orelse {
        py.decref(made);
        return null;
    };
    defer reads.release();
    const read_ctx: ?*Obj = if (transport_owns_context) null else c.PyContext_Copy(ctx) orelse {
        py.decref(made);
        return null;
    };
    var local = localName(fd, from) orelse {
        py.decref(made);
        py.xdecref(read_ctx);
        return null;
    };
    const raw = py.allocInstance(@ptrCast(cls.transport)) orelse {
        py.decref(made);
        py.xdecref(read_ctx);
        local.release();
        return null;
    };
    const t = py.cast(Transport, raw);
    const registered = loop_mod.claimFd(l, fd) orelse return unmade(t, made, read_ctx, &local);
    const in = gpa.create(Inner) catch {
        _ = c.PyErr_NoMemory();
        return unmade(t, made, read_ctx, &local);
    };
    in.* = .{
        .owner = t,
        .w = .{ .fd = fd, .on_ready = shared.onReady, .registered = registered },
        .lazy = .{
            .local = local,
            .family = from.family,
            .sock_type = from.sock_type,
            .proto = from.proto,
            .sock = true,
            .peername = true,
            .sockname = true,
            .socket = true,
        },
        .start_cb = made,
        .start_ctx = py.newref(ctx),
        .context = read_ctx orelse py.newref(ctx),
        .context_fixed = transport_owns_context,
    };
    l.reactor.attach(&in.w) catch |err| {
        in.lazy.local = .none;
        in.start_cb = null;
        py.decref(in.start_ctx.?);
        py.decref(in.context.?);
        gpa.destroy(in);
        _ = loop_mod.attachFailed(err);
        return unmade(t, made, read_ctx, &local);
    };
    reads.mode.apply(in);
    in.attached = true;
    t.inner = in;
    t.loop = py.newref(py.obj(l));
    t.protocol = py.newref(protocol);
    t.protocol_connected = true;
    object.takeHold(t, in); // the reactor's reference, dropped by leave()
    return t;
}

fn unmade(t: *Transport, made: *Obj, read_ctx: ?*Obj, local: *sockaddr.Lazy) ?*Transport {
    py.decref(made);
    py.xdecref(read_ctx);
    local.release();
    py.decref(py.obj(t));
    return null;
}

/// The connection's `sockname`: its listener's, or what getsockname says.
fn localName(fd: i32, from: *const Listener) ?sockaddr.Lazy {
    if (from.sockname) |shared_name| return .{ .made = py.newref(shared_name) };
    // A failure: as asyncio's `sock.getsockname()` failing in the
    // constructor.
    const addr = sockio.sockName(fd) orelse return .none;
    return sockaddr.Lazy.of(&addr.storage, addr.len);
}

/// The read mode `_net._reads(protocol)` gives, with the reference to a
/// fixed buffer `release` lets go of.
const Reads = struct {
    mode: ReadMode,

    fn release(r: *Reads) void {
        if (r.mode.fixed_buffer) |b| py.decref(b);
    }
};

fn readsFor(protocol: *Obj) ?Reads {
    const cls = classes.?;
    if (py.obj(c.Py_TYPE(protocol)) == cls.ssl_protocol) {
        const hint = c.PyLong_FromLong(-1) orelse return null;
        defer py.decref(hint);
        const buf = py.callMethod(protocol, common.get_buffer, .{hint}) orelse return null;
        const mode = ReadMode.parse(buf) orelse {
            py.decref(buf);
            return null;
        };
        return .{ .mode = mode };
    }
    const buffered = c.PyObject_IsInstance(protocol, cls.buffered_protocol);
    if (buffered < 0) return null;
    return .{ .mode = .{ .buffered = buffered == 1, .fixed_buffer = null } };
}

/// Queues the transport's next step (`runStep`); false with MemoryError.
pub fn queueStep(t: *Transport) bool {
    const in = t.inner.?;
    object.loopOf(t).reactor.callSoon(&in.step) catch {
        _ = c.PyErr_NoMemory();
        return false;
    };
    py.incref(py.obj(t)); // the queue's reference
    return true;
}

/// The transport's step in the ready queue: its start (connection_made,
/// then reading), or its end (`_call_connection_lost`). The start is
/// queued first and only once, so while `start_cb` is set this entry is it.
pub fn runStep(cb: *core.Callback) core.RunError!void {
    const in: *Inner = @fieldParentPtr("step", cb);
    const t = in.owner;
    defer py.decref(py.obj(t)); // the queue's reference
    if (in.start_cb != null) return begin(t);
    return end(t);
}

pub fn dropStep(cb: *core.Callback) void {
    const in: *Inner = @fieldParentPtr("step", cb);
    if (in.start_cb != null) {
        py.clear(&in.start_cb);
        py.clear(&in.start_ctx);
    } else {
        py.clear(&in.lost_exc);
        py.clear(&in.lost_ctx);
    }
    py.decref(py.obj(in.owner));
}

/// asyncio's two handles `protocol.connection_made(transport)` and
/// `transport._add_reader(...)`, run back to back (nothing can come
/// between them in asyncio's queue either).
fn begin(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    const cb = in.start_cb.?;
    const ctx = in.start_ctx.?;
    in.start_cb = null;
    in.start_ctx = null;
    defer py.decref(cb);
    defer py.decref(ctx);
    const made = callIn(t, ctx, cb, py.obj(t));
    // Only once connection_made ran may data arrive; `in.context` is the
    // reading context already. Reading starts even when connection_made
    // raised KeyboardInterrupt or SystemExit out of the loop: asyncio's
    // reader is a second handle, which the next run still runs.
    in.started = true;
    updateInterest(t);
    return made;
}

/// asyncio's `_call_connection_lost(exc)` handle.
fn end(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    const exc = in.lost_exc.?;
    const ctx = in.lost_ctx.?;
    in.lost_exc = null;
    in.lost_ctx = null;
    defer py.decref(exc);
    defer py.decref(ctx);
    if (c.PyContext_Enter(ctx) < 0) return pendingToRun(t);
    const ok = callConnectionLost(t, exc);
    const failed = if (ok) null else py.fetchException();
    if (c.PyContext_Exit(ctx) < 0) {
        py.xdecref(failed);
        return pendingToRun(t);
    }
    const pending = failed orelse return;
    const m = c.PyObject_GetAttr(py.obj(t), common.call_connection_lost) orelse {
        py.decref(pending);
        return pendingToRun(t);
    };
    defer py.decref(m);
    return reportStep(t, ctx, m, exc, pending);
}

/// `cb(arg)` in `ctx`, as a Handle runs it (see `reportStep`).
fn callIn(t: *Transport, ctx: *Obj, cb: *Obj, arg: *Obj) core.RunError!void {
    if (c.PyContext_Enter(ctx) < 0) return pendingToRun(t);
    const r = c.PyObject_CallOneArg(cb, arg);
    const failed = if (r) |o| blk: {
        py.decref(o);
        break :blk null;
    } else py.fetchException();
    if (c.PyContext_Exit(ctx) < 0) {
        py.xdecref(failed);
        return pendingToRun(t);
    }
    return reportStep(t, ctx, cb, arg, failed orelse return);
}

/// The exception `failed` (consumed) of `cb(arg)` run in `ctx`, reported
/// as a Handle's run reports it, once out of the context: to the loop's
/// exception handler in a Handle's words (the Handle is made only now);
/// KeyboardInterrupt and SystemExit abort the loop.
fn reportStep(t: *Transport, ctx: *Obj, cb: *Obj, arg: *Obj, failed: *Obj) core.RunError!void {
    py.restoreException(failed);
    if (py.pendingIsFatal()) return error.Aborted;
    const exc = py.fetchException() orelse return;
    defer py.decref(exc);
    const h = handle.create(&handle.HandleType, .once, t.loop.?, cb, &.{arg}, ctx) orelse
        return pendingToRun(t);
    defer py.decref(py.obj(h));
    const r = py.callMethod(t.loop.?, state.get().str_report, .{ py.obj(h), exc });
    if (r) |o| py.decref(o) else try pendingToRun(t);
}

/// `_call_connection_lost(exc)`: connection_lost (while the protocol is
/// connected) and, whatever it does, the transport lets go of the reactor,
/// its socket, its protocol, its loop and the server's count, as asyncio's.
pub fn callConnectionLostMethod(self: ?*Obj, exc: ?*Obj) callconv(.c) ?*Obj {
    if (!callConnectionLost(py.cast(Transport, self.?), exc.?)) return null;
    return py.newref(py.none());
}

fn callConnectionLost(t: *Transport, exc: *Obj) bool {
    py.incref(py.obj(t));
    defer py.decref(py.obj(t));
    var ok = failSendfile(t, exc);
    if (ok and t.protocol_connected) {
        if (t.protocol) |p| ok = succeeded(py.callMethod(p, names.connection_lost, .{exc}));
    }
    const failed = if (ok) null else py.fetchException();
    const let_go = letGo(t);
    const pending = failed orelse return let_go;
    // connection_lost's error wins; one from the teardown is printed.
    if (!let_go) c.PyErr_WriteUnraisable(py.obj(t));
    py.restoreException(pending);
    return false;
}

/// The sendfile in progress fails with the connection (as asyncio's
/// empty waiter).
fn failSendfile(t: *Transport, exc: *Obj) bool {
    const fut = t.sendfile_fut orelse return true;
    return succeeded(py.callMethod(py.obj(t), names.sendfile_lost, .{ fut, exc }));
}

/// The teardown after connection_lost: the reactor, the socket (so the fd
/// number can be reused only after the reactor forgot it), the protocol,
/// the loop, the server's count. False with the first error set.
fn letGo(t: *Transport) bool {
    leave(t);
    var ok = closeSocket(t);
    const failed = if (ok) null else py.fetchException();
    if (t.inner) |in| (ReadMode{ .buffered = false, .fixed_buffer = null }).apply(in);
    py.clear(&t.protocol);
    t.protocol = py.newref(py.none());
    t.lost = true;
    ok = server.detach(t);
    const pending = failed orelse return ok;
    if (!ok) c.PyErr_WriteUnraisable(py.obj(t));
    py.restoreException(pending);
    return false;
}

/// Closes the socket: `sock.close()`, or the fd itself while no socket
/// object was made for it.
fn closeSocket(t: *Transport) bool {
    if (t.sock) |s| {
        t.sock = null;
        defer py.decref(s);
        return succeeded(py.callMethod(s, names.close, .{}));
    }
    const in = t.inner orelse return true;
    if (!in.lazy.sock) return true;
    in.lazy.sock = false;
    sockio.sys.close(in.w.fd);
    return true;
}

/// `_close_socket()`: the finalizer's close of an unclosed transport's
/// socket (see `finalize`).
pub fn closeSocketMethod(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    if (!closeSocket(py.cast(Transport, self.?))) return null;
    return py.newref(py.none());
}
