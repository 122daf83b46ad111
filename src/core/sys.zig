//! The OS layer's one front door: every system call of the core goes
//! through here, and the adapter's are to follow. The calls themselves
//! live in one file per platform under `os/`, chosen here once, at compile
//! time, the way libuv's `unix/linux.c` and `unix/darwin.c` sit under one
//! set of names:
//!
//!   os/linux.zig   the Linux fast paths: raw syscalls, eventfd, accept4,
//!                  MSG_NOSIGNAL, Linux's sendfile, statx; and the calls
//!                  only Linux has (epoll, pidfd), re-exported below.
//!   os/posix.zig   the portable path through libc, with its per-target
//!                  pieces in os/darwin.zig, os/freebsd.zig and
//!                  os/linux_libc.zig: a pipe for eventfd, accept + fcntl,
//!                  SO_NOSIGPIPE, the BSD sendfiles or a copy, fstatat.
//!   os/kq.zig      the kqueue interface the kqueue backend is written
//!                  against (libc's; on Linux, the test-only emulation).
//!
//! macOS and the BSDs always take the portable path. Linux takes the fast
//! paths, unless built with `-Dportable=true`, which runs the portable
//! path on Linux (and the emulated kqueue) so that it is tested here.
//! Zig's std churn (0.15-0.17 moved `posix`) is absorbed here too.
const std = @import("std");
const builtin = @import("builtin");
const options = @import("build_options");
const common = @import("os/common.zig");

pub const is_linux = builtin.os.tag == .linux;

/// This build runs the portable path: always off Linux, on Linux when
/// built with `-Dportable=true`.
pub const portable = !is_linux or options.portable;

const impl = if (portable) @import("os/posix.zig") else @import("os/linux.zig");

/// The calls only Linux has (epoll, eventfd, pidfd), in every Linux build:
/// the epoll and io_uring backends and Linux's child watches use them.
pub const linux = if (is_linux) @import("os/linux.zig") else struct {};

pub const fd_t = common.fd_t;
pub const E = common.E;
pub const Error = common.Error;
pub const Result = common.Result;
/// Records errno `e` in `last_errno` and returns its `Error`.
pub const fail = common.fail;

/// The errno of the last failed call on this thread, for error messages
/// (`Error` values carry it here).
pub threadlocal var last_errno: u16 = 0;

// Every platform file offers the whole interface (checked below).
pub const monotonic_s = impl.monotonic_s;
pub const close = impl.close;
pub const read = impl.read;
pub const write = impl.write;
pub const checkOpen = impl.checkOpen;
pub const pipe = impl.pipe;
pub const Waker = impl.Waker;
pub const sockaddr = impl.sockaddr;
pub const socklen_t = impl.socklen_t;
pub const iovec_const = impl.iovec_const;
pub const accept = impl.accept;
pub const recv = impl.recv;
pub const recvfrom = impl.recvfrom;
pub const send = impl.send;
pub const sendto = impl.sendto;
pub const sendv = impl.sendv;
pub const iov_max = impl.iov_max;
pub const shutdownWrite = impl.shutdownWrite;
pub const bytesReadable = impl.bytesReadable;
pub const sendfile = impl.sendfile;
pub const PathStat = impl.PathStat;
pub const statPath = impl.statPath;
pub const unlink = impl.unlink;
pub const noSigpipe = impl.noSigpipe;

// Linux only (see `linux`); kept under their old names for the backends.
pub const eventfd = linux.eventfd;
pub const epoll_create = linux.epoll_create;
pub const epoll_ctl = linux.epoll_ctl;
pub const epoll_wait = linux.epoll_wait;

/// The names each platform file must define.
const interface = [_][]const u8{
    "monotonic_s", "close",     "read",          "write",         "checkOpen",
    "pipe",        "Waker",     "sockaddr",      "socklen_t",     "iovec_const",
    "accept",      "recv",      "recvfrom",      "send",          "sendto",
    "sendv",       "iov_max",   "shutdownWrite", "bytesReadable", "sendfile",
    "PathStat",    "statPath",  "unlink",        "noSigpipe",
};

comptime {
    // A portable Linux build checks both (a default one must not even
    // import posix.zig: its tests need libc).
    const files = if (is_linux and portable) .{ @import("os/linux.zig"), impl } else .{impl};
    for (files) |file| {
        for (interface) |name| {
            if (!@hasDecl(file, name)) @compileError("OS layer file lacks " ++ name);
        }
    }
}

// ---------------------------------------------------------------- tests

test {
    _ = common;
    _ = impl;
    if (is_linux) _ = linux;
}

test "monotonic clock advances" {
    const a = monotonic_s();
    const b = monotonic_s();
    try std.testing.expect(b >= a);
    try std.testing.expect(a > 0);
}

test "the waker's read end turns readable on a wake and drains" {
    var w = try Waker.init();
    defer w.deinit();
    var buf: [8]u8 = undefined;
    try std.testing.expectError(error.WouldBlock, read(w.read_fd, &buf));
    w.wake();
    w.wake();
    w.drain();
    try std.testing.expectError(error.WouldBlock, read(w.read_fd, &buf));
}

test "checkOpen tells an open fd from a closed one" {
    const fds = try pipe();
    try checkOpen(fds[0]);
    close(fds[0]);
    close(fds[1]);
    try std.testing.expectError(error.BadFd, checkOpen(fds[0]));
    try std.testing.expectEqual(@as(u16, @intFromEnum(E.BADF)), last_errno);
}
