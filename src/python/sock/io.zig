//! The socket calls of the stream and datagram transports and of the
//! `sock_*` callbacks: one non-blocking call each, through the core's OS
//! layer (`core.sys`: Linux's fast paths, or the portable ones on macOS,
//! the BSDs and a `-Dportable=true` build), and its outcome as every
//! caller tells it apart, as asyncio's `selector_events` does: bytes moved,
//! nothing yet (EAGAIN, or EINTR: wait for the next readiness; asyncio
//! catches both as `(BlockingIOError, InterruptedError)`), or an errno,
//! which becomes the `OSError` stock asyncio raises (`errnoException`).
//! The errno numbers are the target's (`sys.E`), as Python's `errno`
//! module's are.
const std = @import("std");
const core = @import("core");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;

pub const sys = core.sys;
pub const E = sys.E;
pub const iovec_const = std.posix.iovec_const;
/// The most iovecs one `sendv` takes.
pub const iov_max = sys.iov_max;

/// What one non-blocking socket call gave.
pub const Outcome = union(enum) {
    /// Bytes sent or received; 0 from a receive is end of file.
    done: usize,
    /// EAGAIN or EINTR: try again on the next readiness.
    would_block,
    /// Any other errno (the target's number).
    failed: u16,
};

/// The `Outcome` of a call's `Result`.
pub inline fn outcome(r: sys.Result(usize)) Outcome {
    return switch (r) {
        .ok => |n| .{ .done = n },
        .err => |e| switch (e) {
            .AGAIN, .INTR => .would_block,
            else => .{ .failed = @backingInt(e) },
        },
    };
}

/// One recv(2) into `buf`.
pub inline fn recv(fd: i32, buf: []u8) Outcome {
    return outcome(sys.recv(fd, buf));
}

/// One send(2) of `data`; never SIGPIPE (a peer that went away is EPIPE).
pub inline fn send(fd: i32, data: []const u8) Outcome {
    return outcome(sys.send(fd, data));
}

/// One gathering send of `iov` (at most `iov_max` entries); never SIGPIPE.
pub inline fn sendv(fd: i32, iov: []const iovec_const) Outcome {
    return outcome(sys.sendv(fd, iov));
}

/// One recvfrom(2) into `buf`; the sender's address into `from`.
pub inline fn recvfrom(fd: i32, buf: []u8, from: *Address) Outcome {
    from.len = @sizeOf(sys.sockaddr.storage);
    return outcome(sys.recvfrom(fd, buf, @ptrCast(&from.storage), &from.len));
}

/// One sendto(2) of a datagram to `to` (null: the connected peer).
pub inline fn sendto(fd: i32, data: []const u8, to: ?*const Address) Outcome {
    const addr: ?*const sys.sockaddr = if (to) |a| @ptrCast(&a.storage) else null;
    return outcome(sys.sendto(fd, data, addr, if (to) |a| a.len else 0));
}

/// Shuts the write direction of socket `fd` down; a failure (the peer is
/// gone already) is asyncio's too: ignored, as `sock.shutdown` raising in
/// `write_eof` never reaches the protocol.
pub inline fn shutdownWrite(fd: i32) void {
    _ = sys.shutdownWrite(fd);
}

/// How many bytes a read of `fd` would get now; null if the kernel would
/// not say.
pub inline fn bytesReadable(fd: i32) ?usize {
    return switch (sys.bytesReadable(fd)) {
        .ok => |n| n,
        .err => null,
    };
}

/// The address socket `fd` is bound to (getsockname); null if the kernel
/// would not say.
pub fn sockName(fd: i32) ?Address {
    var a: Address = .{ .len = @sizeOf(sys.sockaddr.storage) };
    return switch (sys.sockName(fd, @ptrCast(&a.storage), &a.len)) {
        .ok => a,
        .err => null,
    };
}

/// TCP_NODELAY on TCP socket `fd`, as asyncio's `_set_nodelay` (a failure
/// ignored, as there).
pub inline fn setTcpNodelay(fd: i32) void {
    sys.setTcpNodelay(fd);
}

/// Makes sends on socket `fd` never raise SIGPIPE where the platform needs
/// a socket option for it (macOS's SO_NOSIGPIPE; nothing elsewhere). Called
/// once per socket before the loop first sends on it.
pub inline fn noSigpipe(fd: i32) void {
    sys.noSigpipe(fd);
}

/// A socket address as the kernel reads and writes it.
pub const Address = struct {
    storage: sys.sockaddr.storage = undefined,
    len: sys.socklen_t = 0,
};

/// `OSError(errno, strerror)`, a new reference: CPython picks the subclass
/// from errno (ConnectionResetError, BrokenPipeError...), as the socket
/// module raises. Null with the Python error set.
pub fn errnoException(errno: u16) ?*Obj {
    const e: c_int = errno;
    const args = c.Py_BuildValue("(is)", e, c.strerror(e)) orelse return null;
    defer py.decref(args);
    return c.PyObject_Call(c.PyExc_OSError, args, null);
}

/// The errno of a call on a socket that is closed (`borrowed.fdFor`'s -1).
pub const ebadf: u16 = @backingInt(E.BADF);
pub const epipe: u16 = @backingInt(E.PIPE);
