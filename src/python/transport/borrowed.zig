//! Sockets the loop uses but does not own. A socket object user code hands
//! in (`sock_*`, `create_connection(sock=)`, `create_server(sock=)`...)
//! stays the user's: they may close or detach it at any moment without a
//! word to the loop, and the kernel may then give its fd number to the next
//! file opened anywhere in the process. The loop keeps working by number,
//! so before each system call on such a number, and before each change of
//! its kernel registration, it asks the object whether it still stands for
//! that number (`owns`). When it does not, the call is not made on the
//! number: it fails with EBADF, as the object's own `send`/`recv` would,
//! and no byte ever goes to, or comes from, whatever file holds the number
//! now.
//!
//! Asking is cheap: `socket.socket` (a subclass of `_socket.socket`) keeps
//! its fd in `PySocketSockObject.sock_fd`, the first field after the object
//! header, which `close()` and `detach()` set to -1. For any socket (an
//! instance of `_socket.socket`, user subclasses included), the loop reads
//! the field directly once `init` has checked, on a real socket, that it
//! is where this file expects it (and what `fileno()` says). A subclass's
//! `fileno()` is not asked: the socket's own `send`/`recv`, which asyncio
//! calls, work on that field too, so a `fileno()` that lies (another
//! connection's number), fails or gives no fd sends nothing anywhere else.
//! Any other object is asked through `fileno()`.
const std = @import("std");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const sys = @import("core").sys;

/// `PySocketSockObject`'s head (CPython's `Modules/socketmodule.h`, the
/// same from 3.11 to 3.15): `SOCKET_T` is an `int` on POSIX.
const SocketHead = extern struct {
    ob_base: Obj,
    sock_fd: c_int,
};

/// `socket.socket` and `_socket.socket`, once `init` found the fd where
/// `SocketHead` says; null: every object is asked through `fileno()`.
var socket_class: ?*c.PyTypeObject = null;
var socket_base: ?*c.PyTypeObject = null;
var name_fileno: *Obj = undefined;
var name_detach: *Obj = undefined;

/// Looks up the socket classes and checks the layout on a socket opened
/// for the purpose. False (a Python error set) only when the `socket`
/// module itself cannot be imported.
pub fn init() bool {
    name_fileno = py.intern("fileno");
    name_detach = py.intern("detach");
    const socket_mod = c.PyImport_ImportModule("socket") orelse return false;
    defer py.decref(socket_mod);
    const cls = c.PyObject_GetAttrString(socket_mod, "socket") orelse return false;
    const base = c.PyObject_GetAttrString(socket_mod, "SocketType") orelse {
        py.decref(cls);
        return false;
    };
    if (c.PyType_Check(cls) == 0 or c.PyType_Check(base) == 0 or layoutMatches(cls) != true) {
        // Unverified (or no socket could be opened to verify it):
        // ownership is asked through fileno(), correct and a little slower.
        c.PyErr_Clear();
        py.decref(cls);
        py.decref(base);
        return true;
    }
    socket_class = @ptrCast(@alignCast(cls));
    socket_base = @ptrCast(@alignCast(base));
    return true;
}

/// Whether a freshly opened `socket.socket` keeps its fd in
/// `SocketHead.sock_fd`, as `fileno()` reports it, and -1 there once
/// detached. Null (a Python error set) when no socket could be opened.
fn layoutMatches(cls: *Obj) ?bool {
    const af: c_long = std.c.AF.UNIX;
    const kind: c_long = std.c.SOCK.DGRAM;
    const sock = c.PyObject_CallFunction(cls, "ll", af, kind) orelse return null;
    defer py.decref(sock);
    const head: *SocketHead = @ptrCast(@alignCast(sock));
    const reported = fdByCall(sock);
    const before = head.sock_fd;
    const detached = c.PyObject_CallMethodNoArgs(sock, name_detach) orelse return null;
    defer py.decref(detached);
    const fd = c.PyLong_AsLong(detached);
    if (fd >= 0) sys.close(@intCast(fd));
    return reported >= 0 and before == reported and fd == reported and head.sock_fd == -1;
}

/// The fd `o` stands for now: its socket's `sock_fd`, else `fileno()`;
/// -1 once closed or detached, or when `fileno()` fails or gives no int.
/// Never leaves a Python error set.
pub fn fdOf(o: *Obj) i32 {
    return socketFd(o) orelse fdByCall(o);
}

/// A socket's own fd (-1 once closed or detached), null for an object that
/// is no socket (or when the layout could not be checked).
pub fn socketFd(o: *Obj) ?i32 {
    const base = socket_base orelse return null;
    const tp = c.Py_TYPE(o);
    if (tp != socket_class and tp != base and c.PyType_IsSubtype(tp, base) == 0) return null;
    const head: *SocketHead = @ptrCast(@alignCast(o));
    return head.sock_fd;
}

/// `o.fileno()` as the loop reads it: a socket's own fd (see the file's
/// header), else what `fileno()` returns (null with its error set).
pub fn fileno(o: *Obj) ?*Obj {
    if (socketFd(o)) |fd| return c.PyLong_FromLong(fd);
    return c.PyObject_CallMethodNoArgs(o, name_fileno);
}

fn fdByCall(o: *Obj) i32 {
    const r = c.PyObject_CallMethodNoArgs(o, name_fileno) orelse {
        c.PyErr_Clear();
        return -1;
    };
    defer py.decref(r);
    const v = c.PyLong_AsLong(r);
    if (v == -1 and c.PyErr_Occurred() != null) c.PyErr_Clear();
    if (v < 0 or v > std.math.maxInt(i32)) return -1;
    return @intCast(v);
}

/// Whether `owner` (the object a borrowed fd came from; null: the loop's
/// own, nothing to ask) still stands for `fd`.
pub inline fn owns(owner: ?*Obj, fd: i32) bool {
    const o = owner orelse return true;
    return fdOf(o) == fd;
}

/// `fd` while `owner` still stands for it, else -1: a system call made on
/// the result fails with EBADF, as the closed object's own call would.
pub inline fn fdFor(owner: ?*Obj, fd: i32) i32 {
    return if (owns(owner, fd)) fd else -1;
}
