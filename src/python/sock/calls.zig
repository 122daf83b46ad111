//! `loop.sock_recv(sock, n)` and `loop.sock_sendall(sock, data)`: each
//! returns a `SockCall`, a native coroutine. As with asyncio's `async def`
//! versions nothing happens until it is awaited; its first step checks the
//! socket, tries the syscall and returns the result at once when the socket
//! is ready: no coroutine object, no frame, no future. Only when the socket
//! would block does it wait, on a future from `LoopCore._sock_wait` with
//! the ready callbacks of `ready.zig`, yielding that future the way
//! `await fut` does (through the future's own iterator). If the wait ends
//! with an exception (cancelled, thrown in) or the coroutine is closed or
//! collected while waiting, the fd stops being watched (`_sock_cancel`), as
//! the `except BaseException` of the Python versions did.
//!
//! It is a coroutine as far as asyncio can tell: `__await__`, `send`,
//! `throw` and `close` make it a `collections.abc.Coroutine`, so
//! `asyncio.iscoroutine`, `create_task` and `wait_for` take it.
const std = @import("std");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const sockio = @import("io.zig");
const loop_mod = @import("../loop/loop.zig");
const sockops = @import("ready.zig");
const accept = @import("../transport/accept.zig");
const borrowed = @import("../transport/borrowed.zig");

const Op = enum(u8) { recv, sendall };
const Step = enum(u8) { fresh, waiting, finished };

pub const SockCall = extern struct {
    ob_base: Obj,
    loop: ?*Obj,
    sock: ?*Obj,
    /// `n` for recv, the data for sendall.
    arg: ?*Obj,
    /// The socket's fd (`borrowed.fileno`) at the first step.
    fd_obj: ?*Obj,
    /// While waiting: the future and its iterator (`fut.__await__()`).
    fut: ?*Obj,
    waiter: ?*Obj,
    op: Op,
    step: Step,
};

pub var SockCallType: c.PyTypeObject = undefined;

const Names = struct {
    sock: *Obj,
    n: *Obj,
    data: *Obj,
    check_sock: *Obj,
    throw: *Obj,
};
var names: Names = undefined;

/// `ssl.SSLSocket` (null without the ssl module). A socket of exactly
/// `socket.socket` (transport/accept.zig looks it up) needs no isinstance walk.
var ssl_socket_type: ?*Obj = null;
/// `_zloop._sock_recv_ready` and `_zloop._sock_sendall_ready`.
var recv_ready: ?*Obj = null;
var sendall_ready: ?*Obj = null;

// ------------------------------------------------------------ creation

fn create(loop: *Obj, op: Op, sock: *Obj, arg: *Obj) ?*Obj {
    const raw: *Obj = c._PyObject_GC_New(&SockCallType) orelse return null;
    const s = py.cast(SockCall, raw);
    s.loop = py.newref(loop);
    s.sock = py.newref(sock);
    s.arg = py.newref(arg);
    s.fd_obj = null;
    s.fut = null;
    s.waiter = null;
    s.op = op;
    s.step = .fresh;
    c.PyObject_GC_Track(raw);
    return raw;
}

/// `LoopCore.sock_recv(sock, n)`.
pub fn sockRecv(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) callconv(.c) ?*Obj {
    var a: [2]?*Obj = undefined;
    if (!py.bindArgs("sock_recv", &.{ names.sock, names.n }, 2, args, nargs, kwnames, &a)) return null;
    return create(self.?, .recv, a[0].?, a[1].?);
}

/// `LoopCore.sock_sendall(sock, data)`.
pub fn sockSendall(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) callconv(.c) ?*Obj {
    var a: [2]?*Obj = undefined;
    if (!py.bindArgs("sock_sendall", &.{ names.sock, names.data }, 2, args, nargs, kwnames, &a)) return null;
    return create(self.?, .sendall, a[0].?, a[1].?);
}

// ------------------------------------------------------------ stepping

/// The first step: asyncio's checks, then the optimistic syscall.
fn start(s: *SockCall, out: *?*Obj) c.PySendResult {
    s.step = .finished; // an error below ends it
    const loop = py.cast(loop_mod.Loop, s.loop.?);
    const sock = s.sock.?;
    const plain = accept.socket_type != null and py.obj(c.Py_TYPE(sock)) == accept.socket_type.?;
    const is_ssl = if (plain or ssl_socket_type == null) 0 else c.PyObject_IsInstance(sock, ssl_socket_type.?);
    if (is_ssl < 0) return c.PYGEN_ERROR;
    if (is_ssl == 1 or loop.debug) {
        // The cold path: the loop's own check raises what asyncio raises.
        const r = py.callMethod(s.loop.?, names.check_sock, .{sock}) orelse return c.PYGEN_ERROR;
        py.decref(r);
    }
    const fd_obj = borrowed.fileno(sock) orelse return c.PYGEN_ERROR;
    s.fd_obj = fd_obj;
    // A closed socket's fileno() is -1: fail as its recv()/send() would.
    if (c.PyLong_Check(fd_obj) != 0 and c.PyLong_AsLong(fd_obj) == -1) {
        if (c.PyErr_Occurred() == null) _ = py.raiseErrno(sockio.ebadf);
        return c.PYGEN_ERROR;
    }
    const fd = loop_mod.parseFd(fd_obj) orelse return c.PYGEN_ERROR;
    return switch (s.op) {
        .recv => startRecv(s, fd, out),
        .sendall => startSendall(s, fd, out),
    };
}

fn startRecv(s: *SockCall, fd: i32, out: *?*Obj) c.PySendResult {
    switch (sockops.recvBytes(s.sock.?, fd, s.arg) orelse return c.PYGEN_ERROR) {
        .data => |data| {
            out.* = data;
            return c.PYGEN_RETURN;
        },
        .would_block => return wait(s, false, recv_ready.?, s.arg.?, out),
        .failed => |errno| {
            _ = py.raiseErrno(errno);
            return c.PYGEN_ERROR;
        },
    }
}

fn startSendall(s: *SockCall, fd: i32, out: *?*Obj) c.PySendResult {
    const data = s.arg.?;
    // Before the first send on the user's socket (the ready callback's
    // sends are on the same socket).
    sockio.noSigpipe(fd);
    var len: usize = undefined;
    const sent: usize = switch (sockops.sendFrom(s.sock.?, fd, data, 0, &len) orelse return c.PYGEN_ERROR) {
        .upto => |n| n,
        .would_block => 0,
        .failed => |errno| {
            _ = py.raiseErrno(errno);
            return c.PYGEN_ERROR;
        },
    };
    if (sent == len) {
        out.* = py.newref(py.none());
        return c.PYGEN_RETURN;
    }
    // The rest goes from the ready callback: `[view of the data, sent]`.
    const view_obj = c.PyMemoryView_FromObject(data) orelse return c.PYGEN_ERROR;
    defer py.decref(view_obj);
    const sent_n: py.Ssize = @intCast(sent);
    const progress = c.Py_BuildValue("[On]", view_obj, sent_n) orelse return c.PYGEN_ERROR;
    defer py.decref(progress);
    return wait(s, true, sendall_ready.?, progress, out);
}

/// Waits on a future finished by `ready(fut, fd, sock, extra)` and yields it.
fn wait(s: *SockCall, write: bool, ready: *Obj, extra: *Obj, out: *?*Obj) c.PySendResult {
    const flag = py.boolean(write);
    defer py.decref(flag);
    const argv = [_]?*Obj{ s.fd_obj, flag, ready, s.sock, extra };
    const fut = loop_mod.sockWait(s.loop, &argv, argv.len, null) orelse return c.PYGEN_ERROR;
    const waiter = awaitIter(fut) orelse {
        stopWatching(s.fd_obj.?, fut, s.loop.?);
        py.decref(fut);
        return c.PYGEN_ERROR;
    };
    s.fut = fut;
    s.waiter = waiter;
    s.step = .waiting;
    return resumeWait(s, py.none(), out);
}

/// `fut.__await__()`.
fn awaitIter(fut: *Obj) ?*Obj {
    const tp = c.Py_TYPE(fut);
    if (tp.*.tp_as_async) |am| if (am.*.am_await) |f| return f(fut);
    _ = c.PyErr_Format(c.PyExc_TypeError, "object %s can't be used in 'await' expression", tp.*.tp_name);
    return null;
}

fn resumeWait(s: *SockCall, arg: *Obj, out: *?*Obj) c.PySendResult {
    var result: [*c]Obj = null;
    const r = c.PyIter_Send(s.waiter, arg, &result);
    if (r == c.PYGEN_NEXT) {
        out.* = result;
        return r;
    }
    if (r == c.PYGEN_ERROR) abandonWait(s) else endWait(s);
    out.* = result;
    return r;
}

/// The wait ended with an exception (pending, kept) or was abandoned: the
/// fd stops being watched for it.
fn abandonWait(s: *SockCall) void {
    const pending = py.fetchException();
    stopWatching(s.fd_obj.?, s.fut.?, s.loop.?);
    endWait(s);
    if (pending) |e| py.restoreException(e);
}

fn stopWatching(fd_obj: *Obj, fut: *Obj, loop: *Obj) void {
    const argv = [_]?*Obj{ fd_obj, fut };
    const r = loop_mod.sockCancel(loop, &argv, 2, null) orelse return c.PyErr_WriteUnraisable(loop);
    py.decref(r);
}

fn endWait(s: *SockCall) void {
    py.clear(&s.fut);
    py.clear(&s.waiter);
    s.step = .finished;
}

fn amSend(self: ?*Obj, arg: ?*Obj, out: [*c][*c]Obj) callconv(.c) c.PySendResult {
    const s = py.cast(SockCall, self.?);
    var result: ?*Obj = null;
    const r = switch (s.step) {
        .fresh => if (py.isNone(arg)) start(s, &result) else blk: {
            c.PyErr_SetString(c.PyExc_TypeError, "can't send non-None value to a just-started coroutine");
            break :blk c.PYGEN_ERROR;
        },
        .waiting => resumeWait(s, arg orelse py.none(), &result),
        .finished => blk: {
            c.PyErr_SetString(c.PyExc_RuntimeError, "cannot reuse already awaited coroutine");
            break :blk c.PYGEN_ERROR;
        },
    };
    out.* = result;
    return r;
}

/// A finished step's value as the iteration protocols carry it: raised in
/// a StopIteration, or, for None, nothing set at all (the same to
/// `tp_iternext`'s callers).
fn stopWith(value: *Obj) void {
    defer py.decref(value);
    if (value == py.none()) return;
    const exc = c.PyObject_CallOneArg(c.PyExc_StopIteration, value) orelse return;
    c.PyErr_SetObject(c.PyExc_StopIteration, exc);
    py.decref(exc);
}

fn iterNext(self: ?*Obj) callconv(.c) ?*Obj {
    var result: [*c]Obj = null;
    switch (amSend(self, py.none(), &result)) {
        c.PYGEN_NEXT => return result,
        c.PYGEN_RETURN => stopWith(result.?),
        else => {},
    }
    return null;
}

fn send(self: ?*Obj, value: ?*Obj) callconv(.c) ?*Obj {
    var result: [*c]Obj = null;
    switch (amSend(self, value, &result)) {
        c.PYGEN_NEXT => return result,
        c.PYGEN_RETURN => {
            stopWith(result.?);
            // send() raises StopIteration even for None.
            if (c.PyErr_Occurred() == null) c.PyErr_SetNone(c.PyExc_StopIteration);
        },
        else => {},
    }
    return null;
}

/// `throw(exc)` (or the deprecated `throw(type, value, traceback)`).
fn throw(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize) callconv(.c) ?*Obj {
    const s = py.cast(SockCall, self.?);
    if (nargs < 1 or nargs > 3) {
        _ = c.PyErr_Format(c.PyExc_TypeError, "throw expected at least 1 argument, got %zd", nargs);
        return null;
    }
    if (s.step == .waiting) {
        // Into the `await fut`: the future's iterator raises it there.
        var argv: [4]?*Obj = undefined;
        argv[0] = s.waiter;
        for (0..@intCast(nargs)) |i| argv[1 + i] = args[i];
        const nargsf: usize = @as(usize, @intCast(nargs + 1)) | c.PY_VECTORCALL_ARGUMENTS_OFFSET;
        if (c.PyObject_VectorcallMethod(names.throw, &argv, nargsf, null)) |yielded| return yielded;
        abandonWait(s);
        return null;
    }
    // Not started, or over: the exception comes straight back out.
    s.step = .finished;
    raiseThrown(args[0].?, if (nargs > 1) args[1] else null, if (nargs > 2) args[2] else null);
    return null;
}

/// Raises what `throw(typ, val, tb)` names, as a generator does.
fn raiseThrown(typ: *Obj, val: ?*Obj, tb: ?*Obj) void {
    if (tb != null and !py.isNone(tb) and c.PyTraceBack_Check(tb) == 0) {
        c.PyErr_SetString(c.PyExc_TypeError, "throw() third argument must be a traceback object");
        return;
    }
    if (c.PyObject_IsInstance(typ, c.PyExc_BaseException) == 1) {
        if (!py.isNone(val)) {
            c.PyErr_SetString(c.PyExc_TypeError, "instance exception may not have a separate value");
            return;
        }
        c.PyErr_SetObject(py.obj(c.Py_TYPE(typ)), typ);
    } else if (c.PyType_Check(typ) != 0 and c.PyObject_IsSubclass(typ, c.PyExc_BaseException) == 1) {
        c.PyErr_SetObject(typ, val orelse py.none());
    } else {
        _ = c.PyErr_Format(
            c.PyExc_TypeError,
            "exceptions must be classes or instances deriving from BaseException, not %s",
            c.Py_TYPE(typ).*.tp_name,
        );
        return;
    }
    if (tb != null and !py.isNone(tb)) {
        const exc = py.fetchException() orelse return;
        _ = c.PyException_SetTraceback(exc, tb);
        py.restoreException(exc);
    }
}

fn close(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const s = py.cast(SockCall, self.?);
    if (s.step == .waiting) abandonWait(s);
    s.step = .finished;
    return py.newref(py.none());
}

fn amAwait(self: ?*Obj) callconv(.c) ?*Obj {
    return py.newref(self.?);
}

// ------------------------------------------------------------ the type

/// Collected (or its loop torn down) while waiting: stop watching the fd.
fn finalize(self: ?*Obj) callconv(.c) void {
    const s = py.cast(SockCall, self.?);
    if (s.step == .waiting) abandonWait(s); // keeps any pending exception
}

fn traverse(self: ?*Obj, visit: c.visitproc, arg: ?*anyopaque) callconv(.c) c_int {
    const s = py.cast(SockCall, self.?);
    inline for (.{ s.loop, s.sock, s.arg, s.fd_obj, s.fut, s.waiter }) |m| if (m) |o| {
        const rc = visit.?(o, arg);
        if (rc != 0) return rc;
    };
    return 0;
}

fn clearGc(self: ?*Obj) callconv(.c) c_int {
    const s = py.cast(SockCall, self.?);
    inline for (.{ "loop", "sock", "arg", "fd_obj", "fut", "waiter" }) |f| py.clear(&@field(s, f));
    s.step = .finished;
    return 0;
}

fn dealloc(self: ?*Obj) callconv(.c) void {
    if (c.PyObject_CallFinalizerFromDealloc(self) < 0) return; // resurrected
    c.PyObject_GC_UnTrack(self);
    _ = clearGc(self);
    c.PyObject_GC_Del(self);
}

fn getName(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const s = py.cast(SockCall, self.?);
    return c.PyUnicode_FromString(if (s.op == .recv) "sock_recv" else "sock_sendall");
}

fn getQualname(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const s = py.cast(SockCall, self.?);
    return c.PyUnicode_FromString(if (s.op == .recv) "Loop.sock_recv" else "Loop.sock_sendall");
}

/// What it waits on (as a coroutine's `cr_await`), or None.
fn getAwait(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const s = py.cast(SockCall, self.?);
    return py.newref(s.fut orelse py.none());
}

fn getRunning(_: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.boolean(false);
}

var methods = [_]c.PyMethodDef{
    py.methodO("send", send, "send(value) -> the next yielded value, or raise StopIteration."),
    .{ .ml_name = "throw", .ml_meth = @ptrCast(&throw), .ml_flags = c.METH_FASTCALL, .ml_doc = "throw(exc): raise exc where the coroutine waits." },
    py.methodNoArgs("close", close, "close(): stop waiting, if it does."),
    py.sentinel_method,
};

var getsets = [_]c.PyGetSetDef{
    py.getset("__name__", getName, null),
    py.getset("__qualname__", getQualname, null),
    py.getset("cr_await", getAwait, null),
    py.getset("cr_running", getRunning, null),
    py.sentinel_getset,
};

var async_methods: c.PyAsyncMethods = .{ .am_await = amAwait, .am_aiter = null, .am_anext = null, .am_send = amSend };

pub fn initType(module: *Obj) bool {
    names = .{
        .sock = py.intern("sock"),
        .n = py.intern("n"),
        .data = py.intern("data"),
        .check_sock = py.intern("_check_sock"),
        .throw = py.intern("throw"),
    };
    if (c.PyImport_ImportModule("ssl")) |ssl_mod| {
        defer py.decref(ssl_mod);
        ssl_socket_type = c.PyObject_GetAttrString(ssl_mod, "SSLSocket") orelse return false;
    } else if (c.PyErr_ExceptionMatches(c.PyExc_ImportError) != 0) {
        c.PyErr_Clear(); // CPython built without OpenSSL: no SSLSocket to refuse
    } else return false;
    recv_ready = c.PyObject_GetAttrString(module, "_sock_recv_ready") orelse return false;
    sendall_ready = c.PyObject_GetAttrString(module, "_sock_sendall_ready") orelse return false;

    SockCallType = std.mem.zeroes(c.PyTypeObject);
    SockCallType.tp_name = "zloop._zloop.SockCall";
    SockCallType.tp_basicsize = @sizeOf(SockCall);
    SockCallType.tp_flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_HAVE_GC;
    SockCallType.tp_doc = "The coroutine of loop.sock_recv() or loop.sock_sendall().";
    SockCallType.tp_dealloc = dealloc;
    SockCallType.tp_traverse = traverse;
    SockCallType.tp_clear = clearGc;
    SockCallType.tp_finalize = finalize;
    SockCallType.tp_iternext = iterNext;
    SockCallType.tp_as_async = &async_methods;
    SockCallType.tp_methods = &methods;
    SockCallType.tp_getset = &getsets;
    if (c.PyType_Ready(&SockCallType) < 0) return false;
    return c.PyModule_AddObjectRef(module, "SockCall", py.obj(&SockCallType)) >= 0;
}
