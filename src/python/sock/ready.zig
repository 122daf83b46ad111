//! Native readiness callbacks for the `sock_*` coroutines. `zloop._net`
//! (or, for sock_recv and sock_sendall, `calls.zig`) tries the syscall
//! first and, when it would block, installs one of these
//! with `LoopCore._sock_wait` (args: the future, the fd, the socket, ...):
//! the syscall then runs here, when the fd is ready, and completes the
//! future with no Python frame in between. Each returns True once the wait
//! is over (the future finished here, or found done: cancelled) and False
//! to keep waiting. As asyncio's `_sock_recv` and friends: EAGAIN/EINTR
//! wait for the next readiness, any other errno becomes the future's
//! OSError. The socket is the user's: a syscall goes to the fd only while
//! the socket still stands for it (`borrowed.fdFor`); once it was closed,
//! the call fails with EBADF, as the socket's own `recv`/`send` would, and
//! never touches a file that took the number since.
const std = @import("std");
const py = @import("../capi/py.zig");
const borrowed = @import("../transport/borrowed.zig");
const c = py.c;
const Obj = py.Obj;
const sockio = @import("io.zig");

const Names = struct {
    done: *Obj,
    set_result: *Obj,
    set_exception: *Obj,
};
var names: Names = undefined;

/// True when `fut.done()` (or when asking raised: the error is pending).
pub fn futureDone(fut: *Obj) ?bool {
    const r = py.callMethod(fut, names.done, .{}) orelse return null;
    defer py.decref(r);
    return py.isTrue(r);
}

/// `fut.set_result(value)`, consuming `value`; True (the wait is over).
fn resolve(fut: *Obj, value: *Obj) ?*Obj {
    defer py.decref(value);
    const r = py.callMethod(fut, names.set_result, .{value}) orelse return null;
    py.decref(r);
    return py.newref(py.boolean(true));
}

/// `fut.set_exception(OSError(errno, strerror))`: the errno picks the
/// subclass (ConnectionResetError...), as the socket module raises; True.
pub fn reject(fut: *Obj, errno: u16) ?*Obj {
    const exc = sockio.errnoException(errno) orelse return null;
    defer py.decref(exc);
    const r = py.callMethod(fut, names.set_exception, .{exc}) orelse return null;
    py.decref(r);
    return py.newref(py.boolean(true));
}

/// Ends the wait with the exception a ready callback's own work raised (a
/// buffer that went away, a bad argument) set on `fut`, as asyncio's
/// `_sock_recv_into` and friends do: raised instead, it would go to the
/// exception handler with the wait still on, called again on every pass
/// for as long as the fd stays ready. SystemExit and KeyboardInterrupt
/// still propagate. `result` is the work's own answer.
fn orFail(fut: *Obj, result: ?*Obj) ?*Obj {
    if (result != null or py.pendingIsFatal()) return result;
    const exc = py.fetchException() orelse return null;
    defer py.decref(exc);
    const r = py.callMethod(fut, names.set_exception, .{exc}) orelse return null;
    py.decref(r);
    return over();
}

/// The wait goes on: False.
fn pending() ?*Obj {
    return py.newref(py.boolean(false));
}

/// The future is done already (cancelled): the wait is over.
fn over() ?*Obj {
    return py.newref(py.boolean(true));
}

const parseFd = @import("../loop/loop.zig").parseFd;

fn checkArgs(nargs: py.Ssize, want: py.Ssize, comptime name: [:0]const u8) bool {
    if (nargs == want) return true;
    c.PyErr_SetString(c.PyExc_TypeError, name ++ "() takes the wrong number of arguments");
    return false;
}

/// What one non-blocking recv(fd, n) gave.
pub const Received = union(enum) {
    data: *Obj,
    would_block,
    failed: u16,
};

/// A `bytes` kept from a receive that found nothing, for the next one:
/// a server faster than its clients tries recv() first and waits (one
/// attempt that finds nothing, one that finds data) for every message, and
/// would otherwise allocate and free `n` bytes for the attempt that missed.
/// Its size is its allocation's. Shared by the process's loops (the GIL
/// orders them); at most `spare_max` bytes.
var spare: ?*Obj = null;
const spare_max = 1 << 20;

/// A `bytes` of at least `n` (n > 0) to receive into: the spare when it
/// is big enough, else a new one of `n`.
fn receiveBuffer(n: usize) ?*Obj {
    if (spare) |o| if (@as(usize, @intCast(c.Py_SIZE(o))) >= n) {
        spare = null;
        return o;
    };
    return c.PyBytes_FromStringAndSize(null, @intCast(n));
}

/// A buffer whose receive found nothing: kept as the spare when it is the
/// bigger one and not too big, else freed.
fn keepSpare(o: *Obj) void {
    const len: usize = @intCast(c.Py_SIZE(o));
    if (len > spare_max or (spare != null and c.Py_SIZE(spare.?) >= len)) {
        py.decref(o);
        return;
    }
    py.clear(&spare);
    spare = o;
}

/// recv() from `sock`'s `fd` straight into a `bytes` of at least `n`,
/// shrunk in place to what arrived (the object is exactly what arrived, as
/// socket.recv's). `n` 0 gives b"" with no syscall, as socket.recv(0) does
/// (the kernel would say EAGAIN on an empty socket and the wait would last
/// until data came). Null with the Python error set on a bad argument or
/// no memory.
pub fn recvBytes(sock: *Obj, fd: i32, n_obj: ?*Obj) ?Received {
    // As socket.recv's argument: __index__, whose own error propagates.
    const n_int = c.PyNumber_Index(n_obj) orelse return null;
    defer py.decref(n_int);
    const n = c.PyLong_AsSsize_t(n_int);
    if (n < 0) {
        if (c.PyErr_Occurred() == null) c.PyErr_SetString(c.PyExc_ValueError, "negative buffersize in recv");
        return null;
    }
    if (n == 0) return .{ .data = c.PyBytes_FromStringAndSize(null, 0) orelse return null };
    var data: ?*Obj = receiveBuffer(@intCast(n)) orelse return null;
    const buf: [*]u8 = @ptrCast(c.PyBytes_AsString(data.?));
    const rc = switch (sockio.recv(borrowed.fdFor(sock, fd), buf[0..@intCast(n)])) {
        .done => |got| got,
        .would_block => {
            keepSpare(data.?);
            return .would_block;
        },
        .failed => |errno| {
            keepSpare(data.?);
            return .{ .failed = errno };
        },
    };
    if (rc != @as(usize, @intCast(c.Py_SIZE(data.?))) and c._PyBytes_Resize(&data, @intCast(rc)) < 0) return null;
    return .{ .data = data.? };
}

/// `_sock_recv_ready(fut, fd, sock, n)`.
fn recvReady(_: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    if (!checkArgs(nargs, 4, "_sock_recv_ready")) return null;
    const fut = args[0].?;
    if (futureDone(fut) orelse return null) return over();
    return orFail(fut, recvOnce(fut, args[1], args[2].?, args[3]));
}

fn recvOnce(fut: *Obj, fd_obj: ?*Obj, sock: *Obj, n_obj: ?*Obj) ?*Obj {
    const fd = parseFd(fd_obj) orelse return null;
    return switch (recvBytes(sock, fd, n_obj) orelse return null) {
        .data => |data| resolve(fut, data),
        .would_block => pending(),
        .failed => |errno| reject(fut, errno),
    };
}

/// `_sock_recv_into_ready(fut, fd, sock, buf)`.
fn recvIntoReady(_: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    if (!checkArgs(nargs, 4, "_sock_recv_into_ready")) return null;
    const fut = args[0].?;
    if (futureDone(fut) orelse return null) return over();
    return orFail(fut, recvIntoOnce(fut, args[1], args[2].?, args[3].?));
}

fn recvIntoOnce(fut: *Obj, fd_obj: ?*Obj, sock: *Obj, buf: *Obj) ?*Obj {
    const fd = parseFd(fd_obj) orelse return null;
    var view: c.Py_buffer = undefined;
    if (c.PyObject_GetBuffer(buf, &view, c.PyBUF_WRITABLE) < 0) {
        // What socket.recv_into raises for any buffer it cannot write.
        if (py.pendingIsFatal()) return null;
        c.PyErr_Clear();
        return c.PyErr_Format(c.PyExc_TypeError, "recv_into() argument 1 must be read-write bytes-like object, not %s", c.Py_TYPE(buf).*.tp_name);
    }
    // Asked after the export, which may run Python code (`__buffer__`).
    const to = borrowed.fdFor(sock, fd);
    const into: [*]u8 = @ptrCast(view.buf);
    const got = sockio.recv(to, into[0..@intCast(view.len)]);
    c.PyBuffer_Release(&view);
    const rc = switch (got) {
        .done => |n| n,
        .would_block => return pending(),
        .failed => |errno| return reject(fut, errno),
    };
    const n = c.PyLong_FromSize_t(rc) orelse return null;
    return resolve(fut, n);
}

/// What one non-blocking send gave.
pub const Sent = union(enum) {
    /// The offset in the data sent up to, this send included.
    upto: usize,
    would_block,
    failed: u16,
};

/// One send() on `sock`'s `fd` of bytes-like `data` from offset `start`
/// (clamped to its end); `len` gets the data's size. Null with the Python
/// error set when `data` has no buffer.
pub fn sendFrom(sock: *Obj, fd: i32, data: *Obj, start: usize, len: *usize) ?Sent {
    var view: c.Py_buffer = undefined;
    if (c.PyObject_GetBuffer(data, &view, c.PyBUF_SIMPLE) < 0) return null;
    defer c.PyBuffer_Release(&view);
    const all: [*]const u8 = @ptrCast(view.buf);
    len.* = @intCast(view.len);
    const from: usize = @min(start, len.*);
    // Asked after the export, which may run Python code (`__buffer__`).
    const to = borrowed.fdFor(sock, fd);
    return switch (sockio.send(to, all[from..len.*])) {
        .done => |n| .{ .upto = from + n },
        .would_block => .would_block,
        .failed => |errno| .{ .failed = errno },
    };
}

/// `_sock_sendall_ready(fut, fd, sock, progress)`: `progress` is the list
/// `[data, sent]`, what to send and how much of it is sent already.
fn sendallReady(_: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    if (!checkArgs(nargs, 4, "_sock_sendall_ready")) return null;
    const fut = args[0].?;
    if (futureDone(fut) orelse return null) return over();
    return orFail(fut, sendallOnce(fut, args[1], args[2].?, args[3].?));
}

fn sendallOnce(fut: *Obj, fd_obj: ?*Obj, sock: *Obj, progress: *Obj) ?*Obj {
    const fd = parseFd(fd_obj) orelse return null;
    if (c.PyList_Check(progress) == 0 or c.PyList_Size(progress) != 2) {
        const msg = "_sock_sendall_ready(): progress must be a list [data, sent]";
        return py.raise(c.PyExc_TypeError, msg);
    }
    const data = c.PyList_GetItem(progress, 0) orelse return null;
    py.incref(data); // the list may drop it while its buffer is exported
    defer py.decref(data);
    const start = c.PyLong_AsSsize_t(c.PyList_GetItem(progress, 1));
    if (start < 0) return if (c.PyErr_Occurred() != null) null else py.raise(c.PyExc_ValueError, "bad position");
    var len: usize = undefined;
    const now = switch (sendFrom(sock, fd, data, @intCast(start), &len) orelse return null) {
        .upto => |n| n,
        .would_block => return pending(),
        .failed => |errno| return reject(fut, errno),
    };
    if (now == len) return resolve(fut, py.newref(py.none()));
    const pos = c.PyLong_FromSize_t(now) orelse return null;
    if (c.PyList_SetItem(progress, 1, pos) < 0) return null; // steals `pos`
    return pending();
}

var functions = [_]c.PyMethodDef{
    py.methodFast("_sock_recv_ready", recvReady, null),
    py.methodFast("_sock_recv_into_ready", recvIntoReady, null),
    py.methodFast("_sock_sendall_ready", sendallReady, null),
    py.sentinel_method,
};

/// Adds the callbacks to the extension module.
pub fn initFunctions(module: *Obj) bool {
    names = .{
        .done = py.intern("done"),
        .set_result = py.intern("set_result"),
        .set_exception = py.intern("set_exception"),
    };
    return c.PyModule_AddFunctions(module, &functions) >= 0;
}
