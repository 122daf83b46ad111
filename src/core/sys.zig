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

/// Socket addresses where the targets differ in more than numbers: the
/// AF_UNIX name rule and getnameinfo's numeric flag.
pub const addrs = @import("os/addr.zig");

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
pub const processCpu_s = impl.processCpu_s;
pub const close = impl.close;
pub const getpid = impl.getpid;
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
pub const sockName = impl.sockName;
pub const setTcpNodelay = impl.setTcpNodelay;
pub const sendfile = impl.sendfile;
pub const PathStat = impl.PathStat;
pub const statPath = impl.statPath;
pub const unlink = impl.unlink;
pub const noSigpipe = impl.noSigpipe;
pub const sock_nonblock = impl.sock_nonblock;
pub const futexWait = impl.futexWait;
pub const futexWakeAll = impl.futexWakeAll;

// Linux only (see `linux`); kept under their old names for the backends.
pub const eventfd = linux.eventfd;
pub const epoll_create = linux.epoll_create;
pub const epoll_ctl = linux.epoll_ctl;
pub const epoll_wait = linux.epoll_wait;

/// The names each platform file must define.
const interface = [_][]const u8{
    "monotonic_s",  "close",         "read",          "write",         "checkOpen",
    "pipe",         "Waker",         "sockaddr",      "socklen_t",     "iovec_const",
    "accept",       "recv",          "recvfrom",      "send",          "sendto",
    "sendv",        "iov_max",       "shutdownWrite", "bytesReadable", "sendfile",
    "PathStat",     "statPath",      "unlink",        "noSigpipe",     "futexWait",
    "futexWakeAll", "sock_nonblock", "sockName",      "setTcpNodelay", "processCpu_s",
    "getpid",
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

const testing = @import("os/testing.zig");

test {
    _ = common;
    _ = impl;
    _ = addrs;
    // Every OS constant and layout checked against the target's headers
    // (the core's tests are built with them: see build.zig).
    _ = @import("os/abi.zig");
    if (is_linux) _ = linux;
}

fn expectOk(comptime T: type, r: Result(T)) !T {
    return switch (r) {
        .ok => |v| v,
        .err => |e| {
            std.debug.print("unexpected errno {s}\n", .{@tagName(e)});
            return error.TestUnexpectedResult;
        },
    };
}

fn expectErr(comptime T: type, want: E, r: Result(T)) !void {
    switch (r) {
        .ok => return error.TestUnexpectedResult,
        .err => |e| try std.testing.expectEqual(want, e),
    }
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
    try std.testing.expectEqual(@as(u16, @backingInt(E.BADF)), last_errno);
}

test "accept hands a connection over non-blocking and close-on-exec, with its peer's address" {
    const l = try testing.tcpListener();
    defer close(l.fd);
    try expectErr(fd_t, .AGAIN, accept(l.fd, null, null));
    const client = try testing.tcpConnect(l.port);
    defer close(client);
    var peer: sockaddr.storage = undefined;
    var len: socklen_t = @sizeOf(sockaddr.storage);
    const fd = try expectOk(fd_t, accept(l.fd, @ptrCast(&peer), &len));
    defer close(fd);
    const flags = try testing.flagsOf(fd);
    try std.testing.expect(flags.cloexec and flags.nonblocking);
    try std.testing.expectEqual(@as(socklen_t, @sizeOf(std.c.sockaddr.in)), len);
    try std.testing.expectEqual(@as(@TypeOf(peer.family), std.c.AF.INET), peer.family);
}

test "sockName gives a socket's own address; setTcpNodelay turns Nagle off" {
    const l = try testing.tcpListener();
    defer close(l.fd);
    var addr: sockaddr.storage = undefined;
    var len: socklen_t = @sizeOf(sockaddr.storage);
    _ = try expectOk(void, sockName(l.fd, @ptrCast(&addr), &len));
    try std.testing.expectEqual(@as(socklen_t, @sizeOf(std.c.sockaddr.in)), len);
    const in: *const std.c.sockaddr.in = @ptrCast(&addr);
    try std.testing.expectEqual(l.port, std.mem.bigToNative(u16, in.port));
    const client = try testing.tcpConnect(l.port);
    defer close(client);
    try std.testing.expect(!try testing.tcpNodelay(client));
    setTcpNodelay(client);
    try std.testing.expect(try testing.tcpNodelay(client));
    try expectErr(void, .BADF, sockName(-1, @ptrCast(&addr), &len));
}

test "send, sendv and recv round trip; FIONREAD counts what waits" {
    const pair = try testing.socketPair();
    defer close(pair[0]);
    defer close(pair[1]);
    noSigpipe(pair[0]);
    try std.testing.expectEqual(@as(usize, 2), try expectOk(usize, send(pair[0], "ab")));
    const parts = [_]iovec_const{
        .{ .base = "cd", .len = 2 },
        .{ .base = "ef", .len = 2 },
    };
    try std.testing.expectEqual(@as(usize, 4), try expectOk(usize, sendv(pair[0], &parts)));
    try std.testing.expectEqual(@as(usize, 6), try expectOk(usize, bytesReadable(pair[1])));
    var buf: [16]u8 = undefined;
    const n = try expectOk(usize, recv(pair[1], &buf));
    try std.testing.expectEqualStrings("abcdef", buf[0..n]);
    try expectErr(usize, .AGAIN, recv(pair[1], &buf));
    try std.testing.expect(iov_max >= 16);
}

test "a send to a peer that went away is EPIPE, never SIGPIPE" {
    const pair = try testing.socketPair();
    defer close(pair[0]);
    noSigpipe(pair[0]);
    close(pair[1]);
    // The test process would die here of SIGPIPE's default action.
    try expectErr(usize, .PIPE, send(pair[0], "x"));
    const part = [_]iovec_const{.{ .base = "y", .len = 1 }};
    try expectErr(usize, .PIPE, sendv(pair[0], &part));
}

test "shutdownWrite: the peer reads end of file, and can still send back" {
    const pair = try testing.socketPair();
    defer close(pair[0]);
    defer close(pair[1]);
    try expectOk(void, shutdownWrite(pair[0]));
    var buf: [4]u8 = undefined;
    try std.testing.expectEqual(@as(usize, 0), try expectOk(usize, recv(pair[1], &buf)));
    _ = try expectOk(usize, send(pair[1], "ok"));
    try std.testing.expectEqual(@as(usize, 2), try expectOk(usize, recv(pair[0], &buf)));
}

test "sendto and recvfrom carry a datagram and its sender's address" {
    const a = try testing.udpSocket();
    defer close(a.fd);
    const b = try testing.udpSocket();
    defer close(b.fd);
    const to = testing.loopbackAddress(b.port);
    const sent = sendto(a.fd, "ping", @ptrCast(&to), @sizeOf(@TypeOf(to)));
    try std.testing.expectEqual(@as(usize, 4), try expectOk(usize, sent));
    var from: sockaddr.storage = undefined;
    var len: socklen_t = @sizeOf(sockaddr.storage);
    var buf: [8]u8 = undefined;
    const n = try expectOk(usize, recvfrom(b.fd, &buf, @ptrCast(&from), &len));
    try std.testing.expectEqualStrings("ping", buf[0..n]);
    const sender: *const std.c.sockaddr.in = @ptrCast(@alignCast(&from));
    try std.testing.expectEqual(a.port, std.mem.bigToNative(u16, sender.port));
}

test "sendfile sends a file's range from an offset and advances the offset" {
    const file = try testing.tempFile("hello, world");
    defer close(file);
    const pair = try testing.socketPair();
    defer close(pair[0]);
    defer close(pair[1]);
    noSigpipe(pair[0]);
    var offset: i64 = 7;
    try std.testing.expectEqual(@as(usize, 5), try expectOk(usize, sendfile(pair[0], file, &offset, 100)));
    try std.testing.expectEqual(@as(i64, 12), offset);
    try std.testing.expectEqual(@as(usize, 0), try expectOk(usize, sendfile(pair[0], file, &offset, 100)));
    try std.testing.expectEqual(@as(usize, 0), try expectOk(usize, sendfile(pair[0], file, &offset, 0)));
    var buf: [16]u8 = undefined;
    const n = try expectOk(usize, recv(pair[1], &buf));
    try std.testing.expectEqualStrings("world", buf[0..n]);
}

test "statPath sees what a path names; unlink removes it; both fail with the target's errno" {
    var buf: [64]u8 = undefined;
    const path = try testing.tempPath(&buf);
    try expectErr(PathStat, .NOENT, statPath(path));
    try expectErr(void, .NOENT, unlink(path));
    const l = try testing.unixListener(path);
    defer close(l);
    const st = try expectOk(PathStat, statPath(path));
    try std.testing.expect(st.mode & 0o170000 == 0o140000); // S_IFSOCK
    try std.testing.expect(st.ino != 0);
    try expectOk(void, unlink(path));
    try expectErr(PathStat, .NOENT, statPath(path));
}

test "a call on a closed fd fails with EBADF" {
    const fds = try pipe();
    close(fds[0]);
    close(fds[1]);
    var buf: [1]u8 = undefined;
    try expectErr(usize, .BADF, recv(fds[0], &buf));
    try expectErr(usize, .BADF, bytesReadable(fds[0]));
    try std.testing.expectError(error.BadFd, recv(fds[0], &buf).unwrap());
}
