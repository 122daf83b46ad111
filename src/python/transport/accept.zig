//! `zloop._zloop.AcceptorCore`: the native accept loop of zloop's servers,
//! one per listening socket. On readiness it accepts up to `backlog`
//! connections (asyncio's batch), each non-blocking and close-on-exec from
//! the OS layer's `accept` (Linux's `accept4`, so the new socket needs no
//! fcntl; `accept` and fcntl elsewhere), wraps the fd in a
//! `socket.socket` of the listener's family, type and proto, converts the
//! peer address as `socket.accept()` does, and calls
//! `callback(*args, conn, addr)`: `zloop._net.NetMixin._accept_one`, which
//! builds the protocol and the transport in Python. The Python subclass
//! `zloop._net._Acceptor` adds the cold paths (construction, repr, reports).
//!
//! A server's acceptor serves natively (`_serve_natively`): outside debug
//! mode, each connection's protocol comes from the server's factory and
//! its transport from `transport.serve`, with no socket object and no
//! Python call but the factory (see transport/stream/serve.zig).
//!
//! Errors follow `selector_events.BaseSelectorEventLoop._accept_connection`:
//! EAGAIN ends the batch; EINTR and ECONNABORTED (a peer that reset before
//! it was accepted) are skipped quietly; EMFILE, ENFILE, ENOBUFS and ENOMEM
//! stop the watcher, schedule `_resume` after asyncio's
//! `constants.ACCEPT_RETRY_DELAY` and hand the `OSError` to the subclass's
//! `_out_of_resources` (the exception handler with asyncio's context), so a
//! process out of fds backs off instead of spinning; any other errno goes to
//! `_callback_error`, as asyncio's escapes its reader callback into the
//! loop's exception handler. KeyboardInterrupt and SystemExit abort the loop.
//!
//! Lifecycle as `stream.zig`'s: a started acceptor holds a reference to
//! itself on the reactor's behalf, dropped by `_close()` (server.close()) or
//! by the loop's close (`loopClosing`). Its watcher counts as a transport's
//! (loop/watchers.zig), so `add_reader` on a served listener raises RuntimeError
//! where asyncio would replace the accept reader.
const std = @import("std");
const core = @import("core");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const loop_mod = @import("../loop/loop.zig");
const transport = @import("stream.zig");
const sockaddr = @import("../sock/addr.zig");
const borrowed = @import("borrowed.zig");
const sockio = @import("../sock/io.zig");
const sys = core.sys;
const sa_types = std.c.sockaddr;
const AF = std.c.AF;

/// Seconds before accepting again after EMFILE and friends: asyncio's
/// `constants.ACCEPT_RETRY_DELAY`.
const accept_retry_delay_s = 1.0;
/// Leading arguments of the per-connection callback (`protocol_factory,
/// server` in zloop's use); the stack array of a call holds them.
const max_cb_args = 6;

pub const Acceptor = struct {
    ob_base: Obj,
    /// The zloop loop (a `LoopCore`), owned.
    loop: ?*Obj,
    /// `callback(*cb_args, conn, addr)` per accepted connection; both owned
    /// while serving, dropped when the acceptor leaves the reactor.
    callback: ?*Obj,
    cb_args: ?*Obj,
    /// The context copied when serving started, as asyncio's `add_reader`
    /// copies it into the reader's Handle. Each connection's callback runs
    /// in a fresh copy of it, as asyncio runs `_accept_connection2` in a
    /// task of its own: what one protocol factory sets stays its own.
    context: ?*Obj,
    /// `socket.socket(family, type | SOCK_NONBLOCK, proto, fd)` arguments.
    family_obj: ?*Obj,
    type_obj: ?*Obj,
    proto_obj: ?*Obj,
    /// The `TimerHandle` of a pending resume after EMFILE, owned.
    retry: ?*Obj,
    /// Serving natively (`_serve_natively`): the server's protocol factory
    /// and its `ServerConnections`, owned while serving, and what its
    /// connections take from the listener.
    factory: ?*Obj,
    conns: ?*Obj,
    listener: transport.Listener,
    /// The user's listening socket (`create_server(sock=)`; owned), or
    /// null for one the loop made. As a stream transport's user socket
    /// (stream.zig's `Inner.sock_owner`), asked for its fd before each
    /// accept and registration: once user code closed it, the acceptor
    /// never accepts on the number (another listener's, perhaps), and on
    /// io_uring nothing in the ring keeps the listener open.
    sock_owner: ?*Obj,
    w: core.IoWatcher,
    backlog: u32,
    attached: bool,
    /// Out of resources: not watching until `_resume`.
    paused: bool,
};

comptime {
    // CPython sees an `Acceptor*` as a `PyObject*`.
    std.debug.assert(@offsetOf(Acceptor, "ob_base") == 0);
}

pub var AcceptorType: ?*c.PyTypeObject = null;
/// `socket.socket`, looked up once at import (as `socket.accept` builds
/// its result from the module's class).
pub var socket_type: ?*Obj = null;

const Names = struct {
    out_of_resources: *Obj,
    callback_error: *Obj,
    resume_name: *Obj,
    call_later: *Obj,
    cancel: *Obj,
    setblocking: *Obj,
};
var names: Names = undefined;

fn loopOf(a: *Acceptor) *loop_mod.Loop {
    return py.cast(loop_mod.Loop, a.loop.?);
}

/// True when `w` is an acceptor's watcher.
pub fn isWatcher(w: *core.IoWatcher) bool {
    return w.on_ready == onReady;
}

/// The acceptor owning `w`; `w` must satisfy `isWatcher`.
pub fn ownerOfWatcher(w: *core.IoWatcher) *Obj {
    std.debug.assert(isWatcher(w));
    const a: *Acceptor = @fieldParentPtr("w", w);
    return py.obj(a);
}

/// loop/loop.zig's `evictStale`: another watcher wants the fd, and the user's
/// listening socket no longer stands for it: the acceptor leaves the
/// reactor, quietly (asyncio's accept reader would never run again for a
/// closed listener either). Never fails.
pub fn evictIfStale(w: *core.IoWatcher) bool {
    std.debug.assert(isWatcher(w));
    const a: *Acceptor = @fieldParentPtr("w", w);
    if (!borrowed.owns(a.sock_owner, w.fd)) leaveReactor(a);
    return true;
}

/// The loop is closing: the acceptor leaves the reactor (its listening
/// socket stays open; the server's close() closes it).
pub fn loopClosing(w: *core.IoWatcher) void {
    std.debug.assert(isWatcher(w));
    const a: *Acceptor = @fieldParentPtr("w", w);
    leaveReactor(a);
}

// ------------------------------------------------------------- plumbing

/// A Python error under the reactor's dispatch: KeyboardInterrupt and
/// SystemExit abort the loop; anything else goes to `_callback_error` (the
/// loop's exception handler), as an exception escaping asyncio's
/// `_accept_connection` reaches `Handle._run`.
fn reportPending(a: *Acceptor) core.RunError!void {
    if (py.pendingIsFatal()) return error.Aborted;
    const exc = py.fetchException() orelse return;
    defer py.decref(exc);
    const r = py.callMethod(py.obj(a), names.callback_error, .{exc});
    if (r) |o| {
        py.decref(o);
        return;
    }
    if (py.pendingIsFatal()) return error.Aborted;
    c.PyErr_WriteUnraisable(py.obj(a));
}

fn updateInterest(a: *Acceptor) void {
    if (!a.attached) return;
    const l = loopOf(a);
    if (!l.has_reactor) return;
    // A listener the user closed is registered no more: the number may be
    // another file's now.
    if (!borrowed.owns(a.sock_owner, a.w.fd)) return;
    // Fails only on a listener closed under the acceptor: there is nothing
    // left to watch then, and server.close() detaches it.
    l.reactor.setInterest(&a.w, .{ .read = !a.paused }) catch {};
}

/// `retry.cancel()` and forget it; false with the error pending.
fn cancelRetry(a: *Acceptor) bool {
    const retry = a.retry orelse return true;
    a.retry = null;
    defer py.decref(retry);
    const r = py.callMethod(retry, names.cancel, .{}) orelse
        return false;
    py.decref(r);
    return true;
}

/// Leaves the reactor and drops the reactor's reference and what serving
/// held (callback, context, a pending retry). Idempotent.
fn leaveReactor(a: *Acceptor) void {
    if (!a.attached) return;
    a.attached = false;
    const l = loopOf(a);
    if (l.has_reactor and l.reactor.watcherFor(a.w.fd) == &a.w) l.reactor.detach(&a.w);
    // `_close()` cancelled a pending retry; the loop's close() dropped its
    // timers before its watchers. Either way the handle only needs letting
    // go (its callback, our `_resume`, would keep this acceptor alive).
    py.clear(&a.retry);
    py.clear(&a.callback);
    py.clear(&a.cb_args);
    py.clear(&a.context);
    clearNative(a);
    py.decref(py.obj(a));
}

fn clearNative(a: *Acceptor) void {
    py.clear(&a.factory);
    py.clear(&a.conns);
    py.clear(&a.listener.sockname);
}

// ------------------------------------------------------------ readiness

fn onReady(w: *core.IoWatcher, ev: core.reactor.Event) core.RunError!void {
    const a: *Acceptor = @fieldParentPtr("w", w);
    if (!ev.readable or a.paused or !a.attached) return;
    // The callback may close the server, which drops the reactor's
    // reference; keep the acceptor alive until this batch ends.
    py.incref(py.obj(a));
    defer py.decref(py.obj(a));
    return acceptBatch(a);
}

/// A peer address as `accept` wrote it.
const Peer = sockio.Address;

/// Up to `backlog` accepts, as asyncio's `for _ in range(backlog)`: the
/// bound keeps one busy listener from starving the rest of the loop, and a
/// listener with more queued stays readable for the next pass.
fn acceptBatch(a: *Acceptor) core.RunError!void {
    var n: u32 = 0;
    while (n < a.backlog and a.attached and !a.paused) : (n += 1) {
        var peer: Peer = .{ .len = @sizeOf(sa_types.storage) };
        // Asked before each accept: a callback may have closed the user's
        // listener, and the number may be another listener's now. The
        // acceptor then stops for good, quietly, as asyncio's accept
        // reader, which the closed file never wakes again.
        if (!borrowed.owns(a.sock_owner, a.w.fd)) return leaveReactor(a);
        switch (sys.accept(a.w.fd, @ptrCast(&peer.storage), &peer.len)) {
            .ok => |fd| try deliver(a, fd, &peer),
            .err => |e| switch (e) {
                // Nothing queued (EWOULDBLOCK is the same number on Linux,
                // macOS and FreeBSD).
                .AGAIN => return,
                // A signal arrived (CPython retries accept then, PEP 475),
                // or the peer reset before we got to it: nothing to
                // deliver; any connection behind it is still queued.
                .INTR, .CONNABORTED => {},
                .MFILE, .NFILE, .NOBUFS, .NOMEM => return outOfResources(a, @backingInt(e)),
                else => return otherError(a, @backingInt(e)),
            },
        }
    }
}

/// Wraps the accepted `fd` and hands it to the callback, or serves it
/// natively (`deliverNative`). The fd is closed here if it never reached a
/// socket object or a transport.
fn deliver(a: *Acceptor, fd: i32, peer: *const Peer) core.RunError!void {
    std.debug.assert(fd >= 0);
    if (a.factory != null and !loopOf(a).debug) return deliverNative(a, fd, peer);
    const addr = sockaddr.fromStorage(&peer.storage, peer.len) orelse {
        sys.close(fd);
        return reportPending(a);
    };
    defer py.decref(addr);
    const conn = wrapSocket(a, fd) orelse {
        // The socket object takes the fd only once its __init__ is past
        // every check that can fail (a MemoryError after that would have
        // freed it, closing fd, before this line: the risk is accepted).
        sys.close(fd);
        return reportPending(a);
    };
    defer py.decref(conn);
    const ctx = c.PyContext_Copy(a.context.?) orelse return reportPending(a);
    defer py.decref(ctx);
    if (c.PyContext_Enter(ctx) < 0) return reportPending(a);
    const result = callBack(a, conn, addr);
    const exited = c.PyContext_Exit(ctx) >= 0;
    try result;
    if (!exited) return reportPending(a);
}

/// A connection served natively, as asyncio's `_accept_connection2` in a
/// task of its own: the protocol factory runs in a fresh copy of the
/// serving context, which the connection's callbacks then start from
/// (`transport.serve`).
fn deliverNative(a: *Acceptor, fd: i32, peer: *const Peer) core.RunError!void {
    const ctx = c.PyContext_Copy(a.context.?) orelse {
        sys.close(fd);
        return reportPending(a);
    };
    defer py.decref(ctx);
    if (c.PyContext_Enter(ctx) < 0) {
        sys.close(fd);
        return reportPending(a);
    }
    const result = serveOne(a, fd, peer, ctx);
    const exited = c.PyContext_Exit(ctx) >= 0;
    try result;
    if (!exited) return reportPending(a);
}

fn serveOne(a: *Acceptor, fd: i32, peer: *const Peer, ctx: *Obj) core.RunError!void {
    // The factory may close the server, which drops these; hold them.
    const factory = py.newref(a.factory.?);
    defer py.decref(factory);
    const conns: ?*Obj = if (a.conns) |s| py.newref(s) else null;
    defer py.xdecref(conns);
    var name = sockaddr.Lazy.of(&peer.storage, peer.len) orelse {
        sys.close(fd);
        return dropped();
    };
    const protocol = c.PyObject_CallNoArgs(factory) orelse {
        name.release();
        sys.close(fd);
        return dropped();
    };
    defer py.decref(protocol);
    const t = transport.serve(loopOf(a), fd, protocol, conns, &a.listener, name, ctx) orelse
        return dropped();
    py.decref(t);
}

/// As asyncio's `_accept_connection2` outside debug mode: a connection
/// whose protocol or transport could not be made is dropped without a
/// word (its fd closed); KeyboardInterrupt and SystemExit abort the loop.
fn dropped() core.RunError!void {
    if (py.pendingIsFatal()) return error.Aborted;
    c.PyErr_Clear();
}

/// `callback(*cb_args, conn, addr)`, in the caller's context.
fn callBack(a: *Acceptor, conn: *Obj, addr: *Obj) core.RunError!void {
    // The callback may close the server, which drops these; hold them.
    const cb = py.newref(a.callback.?);
    defer py.decref(cb);
    const args = py.newref(a.cb_args.?);
    defer py.decref(args);
    const nargs: usize = @intCast(c.PyTuple_Size(args));
    std.debug.assert(nargs <= max_cb_args);
    var argv: [max_cb_args + 3]?*Obj = undefined;
    argv[0] = null; // PY_VECTORCALL_ARGUMENTS_OFFSET's scratch slot
    for (0..nargs) |i| argv[1 + i] = c.PyTuple_GetItem(args, @intCast(i));
    argv[1 + nargs] = conn;
    argv[2 + nargs] = addr;
    const flags = (nargs + 2) | c.PY_VECTORCALL_ARGUMENTS_OFFSET;
    const r = c.PyObject_Vectorcall(cb, @ptrCast(&argv[1]), flags, null) orelse
        return reportPending(a);
    py.decref(r);
}

/// `socket.socket(family, type | SOCK_NONBLOCK, proto, fd)`. The flag in
/// `type` makes CPython set the timeout to 0 without a syscall (accept4
/// already made the fd non-blocking) and is masked out of `conn.type`.
/// Where there is no such flag (`sys.sock_nonblock` is 0: macOS, the
/// portable path) `conn.setblocking(False)` does it, as asyncio's
/// `_accept_connection` does. CPython still validates the fd with one
/// getsockname(), as the socket `socket.accept()` returns does.
fn wrapSocket(a: *Acceptor, fd: i32) ?*Obj {
    const fd_obj = c.PyLong_FromLong(fd) orelse return null;
    defer py.decref(fd_obj);
    const argv = [_]?*Obj{ null, a.family_obj, a.type_obj, a.proto_obj, fd_obj };
    const flags = 4 | c.PY_VECTORCALL_ARGUMENTS_OFFSET;
    const conn = c.PyObject_Vectorcall(socket_type.?, @ptrCast(&argv[1]), flags, null) orelse
        return null;
    if (sys.sock_nonblock == 0) {
        const r = py.callMethod(conn, names.setblocking, .{py.boolean(false)}) orelse {
            // The socket object owns the fd now: it closes it.
            py.decref(conn);
            return null;
        };
        py.decref(r);
    }
    return conn;
}

/// EMFILE and friends: stop watching, retry after a delay, then report
/// (as asyncio, in the other order: a failing report must not leave the
/// listener off for good).
fn outOfResources(a: *Acceptor, errno: u16) core.RunError!void {
    std.debug.assert(a.attached);
    a.paused = true;
    updateInterest(a);
    if (!scheduleRetry(a)) return reportPending(a);
    const exc = sockio.errnoException(errno) orelse return reportPending(a);
    defer py.decref(exc);
    const r = py.callMethod(py.obj(a), names.out_of_resources, .{exc}) orelse return reportPending(a);
    py.decref(r);
}

/// `self.retry = loop.call_later(ACCEPT_RETRY_DELAY, self._resume)`.
fn scheduleRetry(a: *Acceptor) bool {
    if (!cancelRetry(a)) return false;
    const resume_cb = c.PyObject_GetAttr(py.obj(a), names.resume_name) orelse return false;
    defer py.decref(resume_cb);
    const delay = c.PyFloat_FromDouble(accept_retry_delay_s) orelse return false;
    defer py.decref(delay);
    const later = names.call_later;
    a.retry = py.callMethod(a.loop.?, later, .{ delay, resume_cb });
    return a.retry != null;
}

fn otherError(a: *Acceptor, errno: u16) core.RunError!void {
    const exc = sockio.errnoException(errno) orelse return reportPending(a);
    py.restoreException(exc);
    return reportPending(a);
}

// --------------------------------------------------------------- methods

fn longArg(o: ?*Obj) ?c_long {
    const v = c.PyLong_AsLong(o);
    if (v == -1 and c.PyErr_Occurred() != null) return null;
    return v;
}

/// `_start(loop, fd, family, type, proto, backlog, callback, args, sock)`:
/// watches listening socket `fd` for readability. The Python side passes
/// the socket's own family/type/proto (already validated by `socket`), and
/// the socket itself when it is the user's (`Acceptor.sock_owner`), else
/// None.
fn start(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const a = py.cast(Acceptor, self.?);
    const usage = "_start(loop, fd, family, type, proto, backlog, callback, args, sock)";
    if (nargs != 9) return py.raise(c.PyExc_TypeError, usage);
    if (a.attached or a.loop != null) {
        return py.raise(c.PyExc_RuntimeError, "acceptor already started");
    }
    const loop_obj = args[0].?;
    if (c.PyObject_TypeCheck(loop_obj, &loop_mod.LoopType) == 0) {
        return py.raise(c.PyExc_TypeError, "_start() expects a zloop loop");
    }
    const l = py.cast(loop_mod.Loop, loop_obj);
    if (l.closed or !l.has_reactor) return py.raise(c.PyExc_RuntimeError, "Event loop is closed");
    const fd_long = longArg(args[1]) orelse return null;
    if (fd_long < 0 or fd_long > std.math.maxInt(i32)) {
        return py.raise(c.PyExc_ValueError, "Invalid file descriptor");
    }
    const fd: i32 = @intCast(fd_long);
    const registered = loop_mod.claimFd(l, fd) orelse return null;
    const sock_type = longArg(args[3]) orelse return null;
    const backlog = longArg(args[5]) orelse return null;
    if (c.PyCallable_Check(args[6]) == 0) {
        return py.raise(c.PyExc_TypeError, "callback must be callable");
    }
    if (c.PyTuple_Check(args[7]) == 0 or c.PyTuple_Size(args[7]) > max_cb_args) {
        return py.raise(c.PyExc_TypeError, "args must be a tuple of at most 6 items");
    }
    const type_obj = c.PyLong_FromLong(sock_type | sys.sock_nonblock) orelse return null;
    const ctx = c.PyContext_CopyCurrent() orelse {
        py.decref(type_obj);
        return null;
    };
    const sock_owner: ?*Obj = if (py.isNone(args[8])) null else args[8].?;
    a.w = .{
        .fd = fd,
        .on_ready = onReady,
        .registered = registered,
        .borrowed = sock_owner != null,
    };
    a.sock_owner = if (sock_owner) |o| py.newref(o) else null;
    a.backlog = @intCast(std.math.clamp(backlog, 1, std.math.maxInt(i32)));
    a.loop = py.newref(loop_obj);
    a.family_obj = py.newref(args[2].?);
    a.type_obj = type_obj;
    a.proto_obj = py.newref(args[4].?);
    a.callback = py.newref(args[6].?);
    a.cb_args = py.newref(args[7].?);
    a.context = ctx;
    return attach(a, l);
}

/// Registers the started acceptor and turns reading on.
fn attach(a: *Acceptor, l: *loop_mod.Loop) ?*Obj {
    l.reactor.attach(&a.w) catch |err| return loop_mod.attachFailed(err);
    a.attached = true;
    py.incref(py.obj(a)); // the reactor's reference, dropped by leaveReactor
    l.reactor.setInterest(&a.w, .{ .read = true }) catch {
        const errno = core.sys.last_errno;
        leaveReactor(a);
        return py.raiseErrno(errno);
    };
    return py.newref(py.none());
}

/// `_serve_natively(protocol_factory, conns)`: from now on, outside debug
/// mode, each connection is served natively (`deliverNative`), its
/// protocol from `protocol_factory`, counted in `conns` (the server's
/// `ServerConnections`, or None).
fn serveNatively(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const a = py.cast(Acceptor, self.?);
    if (nargs != 2) return py.raise(c.PyExc_TypeError, "_serve_natively(protocol_factory, conns)");
    if (!a.attached) return py.raise(c.PyExc_RuntimeError, "acceptor not serving");
    // Not checked for being callable: asyncio's create_server() takes
    // anything, and a connection whose factory call fails is dropped.
    const family = longArg(a.family_obj) orelse return null;
    const sock_type = longArg(a.type_obj) orelse return null;
    const proto = longArg(a.proto_obj) orelse return null;
    const shared_name = listenerName(a.w.fd) orelse return null;
    clearNative(a);
    a.listener = .{
        .family = @intCast(family),
        .sock_type = @intCast(sock_type),
        .proto = @intCast(proto),
        .sockname = shared_name,
        // As asyncio's `_set_nodelay` on the accepted socket (`type_obj`
        // carries the SOCK_NONBLOCK that `_start` added where it exists).
        .nodelay = (family == AF.INET or family == AF.INET6) and
            (sock_type & ~@as(c_long, sys.sock_nonblock)) == std.c.SOCK.STREAM and
            proto == std.c.IPPROTO.TCP,
    };
    a.factory = py.newref(args[0].?);
    a.conns = if (py.isNone(args[1])) null else py.newref(args[1].?);
    return py.newref(py.none());
}

/// The listener's address object when its connections share it (see
/// `sockaddr.sharedByAccepted`), else null (each connection asks).
fn listenerName(fd: i32) ??*Obj {
    const addr = sockio.sockName(fd) orelse return @as(?*Obj, null);
    if (!sockaddr.sharedByAccepted(&addr.storage, addr.len)) return @as(?*Obj, null);
    const name = sockaddr.fromStorage(&addr.storage, addr.len) orelse return null;
    return name;
}

/// `_resume()`: the retry timer after EMFILE; watching again. A no-op
/// once closed.
fn resumeAccepting(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const a = py.cast(Acceptor, self.?);
    py.clear(&a.retry);
    if (!a.attached or !a.paused) return py.newref(py.none());
    a.paused = false;
    updateInterest(a);
    return py.newref(py.none());
}

/// `_close()`: stop accepting for good (server.close()). The listening
/// socket is the caller's to close, after this.
fn closeAcceptor(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const a = py.cast(Acceptor, self.?);
    if (!cancelRetry(a)) return null;
    leaveReactor(a);
    return py.newref(py.none());
}

fn getFd(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const a = py.cast(Acceptor, self.?);
    return c.PyLong_FromLong(if (a.loop != null) a.w.fd else -1);
}

fn getLoop(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.newref(py.cast(Acceptor, self.?).loop orelse py.none());
}

fn getServing(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.boolean(py.cast(Acceptor, self.?).attached);
}

fn getPaused(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.boolean(py.cast(Acceptor, self.?).paused);
}

// -------------------------------------------------------------- the type

fn new(tp: ?*c.PyTypeObject, _: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    // Zero-filled: every reference null, not attached.
    const raw = py.allocInstance(tp) orelse return null;
    const a = py.cast(Acceptor, raw);
    std.debug.assert(a.loop == null and !a.attached);
    return raw;
}

fn traverse(self: ?*Obj, visit: c.visitproc, arg: ?*anyopaque) callconv(.c) c_int {
    const a = py.cast(Acceptor, self.?);
    // A heap type's instances own a reference to it.
    const tp_rc = visit.?(py.obj(c.Py_TYPE(self)), arg);
    if (tp_rc != 0) return tp_rc;
    inline for (.{ a.loop, a.callback, a.cb_args, a.context, a.retry, a.sock_owner, a.factory, a.conns }) |m| if (m) |o| {
        const rc = visit.?(o, arg);
        if (rc != 0) return rc;
    };
    return 0;
}

fn clearGc(self: ?*Obj) callconv(.c) c_int {
    const a = py.cast(Acceptor, self.?);
    // Unreachable garbage is never attached (the reactor's reference is
    // invisible to the collector and keeps it alive).
    std.debug.assert(!a.attached);
    py.clear(&a.callback);
    py.clear(&a.cb_args);
    py.clear(&a.context);
    py.clear(&a.retry);
    clearNative(a);
    return 0;
}

fn dealloc(self: ?*Obj) callconv(.c) void {
    const a = py.cast(Acceptor, self.?);
    c.PyObject_GC_UnTrack(self);
    std.debug.assert(!a.attached);
    const owned = .{
        "loop",       "callback", "cb_args",   "context",
        "family_obj", "type_obj", "proto_obj", "retry",
        "sock_owner",
    };
    inline for (owned) |f| py.clear(&@field(a, f));
    clearNative(a);
    py.freeHeapInstance(self.?);
}

var methods = [_]c.PyMethodDef{
    py.methodFast("_start", start, "Start accepting on a listening socket's fd."),
    py.methodNoArgs("_resume", resumeAccepting, "Watch the listener again after an EMFILE pause."),
    py.methodFast("_serve_natively", serveNatively, "Serve each connection natively."),
    py.methodNoArgs("_close", closeAcceptor, "Stop accepting and leave the loop."),
    py.sentinel_method,
};

var getsets = [_]c.PyGetSetDef{
    py.getset("_fd", getFd, null),
    py.getset("_loop", getLoop, null),
    py.getset("_serving", getServing, null),
    py.getset("_paused", getPaused, null),
    py.sentinel_getset,
};

const doc = "The native accept loop of one listening socket.";
var spec: c.PyType_Spec = undefined;
var slots = py.gcTypeSlots(doc, &new, &dealloc, &traverse, &clearGc, &methods, &getsets);

/// Creates `AcceptorCore` and looks up `socket.socket`.
pub fn initTypes(module: *Obj) bool {
    names = .{
        .out_of_resources = py.intern("_out_of_resources"),
        .callback_error = py.intern("_callback_error"),
        .resume_name = py.intern("_resume"),
        .call_later = py.intern("call_later"),
        .cancel = py.intern("cancel"),
        .setblocking = py.intern("setblocking"),
    };
    const socket_mod = c.PyImport_ImportModule("socket") orelse return false;
    defer py.decref(socket_mod);
    socket_type = c.PyObject_GetAttrString(socket_mod, "socket") orelse return false;
    spec = .{
        .name = "zloop._zloop.AcceptorCore",
        .basicsize = @sizeOf(Acceptor),
        .itemsize = 0,
        .flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_BASETYPE | c.Py_TPFLAGS_HAVE_GC,
        .slots = &slots,
    };
    const tp = c.PyType_FromSpec(&spec) orelse return false;
    AcceptorType = @ptrCast(@alignCast(tp));
    return c.PyModule_AddObjectRef(module, "AcceptorCore", tp) >= 0;
}
