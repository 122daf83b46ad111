//! The portable path: every call through libc, the POSIX way, with no
//! Linux-only flag or syscall. macOS and the BSDs run the whole OS layer
//! from here; a Linux build with `-Dportable=true` does too, so that this
//! code runs (and is tested) on the machines zloop is developed on.
//!
//! Each Linux fast path has its twin here: eventfd -> a non-blocking pipe,
//! accept4 -> accept + fcntl, pipe2 -> pipe + fcntl, MSG_NOSIGNAL ->
//! SO_NOSIGPIPE where the target lacks the flag (macOS), Linux's sendfile
//! -> macOS's or FreeBSD's (their own signatures) or a copy through a
//! buffer, statx -> fstatat. What differs between macOS, FreeBSD and
//! Linux's libc sits in one small file per target (`target` below).
const std = @import("std");
const builtin = @import("builtin");
const c = std.c;
const common = @import("common.zig");

const E = common.E;
const Error = common.Error;
const Result = common.Result;
pub const fd_t = common.fd_t;

/// The target's own calls: their signatures or flags differ.
const target = switch (builtin.os.tag) {
    .macos, .ios, .tvos, .watchos, .visionos => @import("darwin.zig"),
    .freebsd => @import("freebsd.zig"),
    .linux => @import("linux_libc.zig"),
    else => @compileError("zloop's portable OS layer knows Linux, macOS and FreeBSD"),
};

/// libc's convention: -1 and errno.
fn check(rc: anytype) Error!usize {
    const e = c.errno(rc);
    if (e == .SUCCESS) return @intCast(rc);
    return common.fail(e);
}

/// libc's convention, as a `Result`.
pub fn result(comptime T: type, rc: anytype) Result(T) {
    const e = c.errno(rc);
    if (e != .SUCCESS) return .{ .err = e };
    return .{ .ok = if (T == void) {} else @intCast(rc) };
}

/// The errno libc left for the calling thread.
pub fn errno() E {
    return @fromBackingInt(@intCast(c._errno().*));
}

// ------------------------------------------------ the common interface

/// Monotonic clock in seconds, the clock `time.monotonic()` reads.
pub fn monotonic_s() f64 {
    var ts: c.timespec = undefined;
    _ = c.clock_gettime(.MONOTONIC, &ts);
    return @as(f64, @floatFromInt(ts.sec)) + @as(f64, @floatFromInt(ts.nsec)) * 1e-9;
}

/// CPU time the whole process has used, in seconds (every thread's).
pub fn processCpu_s() f64 {
    var ts: c.timespec = undefined;
    _ = c.clock_gettime(.PROCESS_CPUTIME_ID, &ts);
    return @as(f64, @floatFromInt(ts.sec)) + @as(f64, @floatFromInt(ts.nsec)) * 1e-9;
}

pub fn close(fd: fd_t) void {
    _ = c.close(fd);
}

/// This process's id.
pub fn getpid() i32 {
    return c.getpid();
}

pub fn read(fd: fd_t, buf: []u8) Error!usize {
    return check(c.read(fd, buf.ptr, buf.len));
}

pub fn write(fd: fd_t, buf: []const u8) Error!usize {
    return check(c.write(fd, buf.ptr, buf.len));
}

/// Fails with `error.BadFd` unless `fd` is an open descriptor: F_GETFD
/// asks the fd table only, whatever the file is.
pub fn checkOpen(fd: fd_t) Error!void {
    _ = try check(c.fcntl(fd, c.F.GETFD));
}
/// Blocks the calling thread while `word` holds `expect`, for at most
/// `timeout_ns`. It may return early: callers check their condition and
/// their own deadline. Here a sleep of at most 100 µs, which
/// `futexWakeAll` does not cut short (the waiters poll): no futex of the
/// same shape on every platform (macOS's is private API).
pub fn futexWait(word: *const std.atomic.Value(u32), expect: u32, timeout_ns: u64) void {
    if (word.load(.acquire) != expect) return;
    const nap_ns = @min(timeout_ns, 100 * std.time.ns_per_us);
    const ts: c.timespec = .{ .sec = 0, .nsec = @intCast(nap_ns) };
    _ = c.nanosleep(&ts, null);
}

/// Nothing to do: `futexWait`'s waiters poll.
pub fn futexWakeAll(word: *const std.atomic.Value(u32)) void {
    _ = word;
}

/// Makes `fd` non-blocking (O_NONBLOCK, the other status flags kept).
pub fn setNonblocking(fd: fd_t) Error!void {
    const fl = try check(c.fcntl(fd, c.F.GETFL));
    const nonblock: usize = @as(u32, @bitCast(c.O{ .NONBLOCK = true }));
    if (fl & nonblock != 0) return;
    _ = try check(c.fcntl(fd, c.F.SETFL, @as(c_int, @intCast(fl | nonblock))));
}

/// Makes `fd` close-on-exec.
pub fn setCloexec(fd: fd_t) Error!void {
    _ = try check(c.fcntl(fd, c.F.SETFD, @as(c_int, c.FD_CLOEXEC)));
}

/// A non-blocking, close-on-exec pipe: `[read end, write end]` (pipe and
/// two fcntl calls each, for macOS has no pipe2).
pub fn pipe() Error![2]fd_t {
    var fds: [2]fd_t = undefined;
    _ = try check(c.pipe(&fds));
    errdefer for (fds) |fd| close(fd);
    for (fds) |fd| {
        try setNonblocking(fd);
        try setCloexec(fd);
    }
    return fds;
}

/// Wakes a reactor blocked in its backend from any thread, for a backend
/// that has no wake-up of its own: a non-blocking pipe the backend
/// watches. (kqueue needs none: it wakes through EVFILT_USER.)
pub const Waker = struct {
    read_fd: fd_t,
    write_fd: fd_t,

    pub fn init() Error!Waker {
        const fds = try pipe();
        return .{ .read_fd = fds[0], .write_fd = fds[1] };
    }

    pub fn deinit(w: *Waker) void {
        close(w.read_fd);
        close(w.write_fd);
        w.* = .{ .read_fd = -1, .write_fd = -1 };
    }

    /// A full pipe already means "wake up".
    pub fn wake(w: *const Waker) void {
        _ = write(w.write_fd, &.{1}) catch {};
    }

    pub fn drain(w: *const Waker) void {
        var buf: [64]u8 = undefined;
        while (true) {
            const n = read(w.read_fd, &buf) catch return;
            if (n == 0) return;
        }
    }
};

pub const sockaddr = c.sockaddr;
pub const socklen_t = c.socklen_t;
pub const iovec_const = std.posix.iovec_const;

/// Accepts one connection on listening socket `fd`, made non-blocking and
/// close-on-exec by fcntl (accept4's portable twin; the BSDs' accept
/// inherits O_NONBLOCK, Linux's does not, so it is set either way).
pub fn accept(fd: fd_t, addr: ?*sockaddr, len: ?*socklen_t) Result(fd_t) {
    const rc = c.accept(fd, addr, len);
    if (rc < 0) return .{ .err = errno() };
    setNonblocking(rc) catch return closeFailed(rc);
    setCloexec(rc) catch return closeFailed(rc);
    return .{ .ok = rc };
}

fn closeFailed(fd: fd_t) Result(fd_t) {
    const e: E = @fromBackingInt(@intCast(@import("../sys.zig").last_errno));
    close(fd);
    return .{ .err = e };
}

/// One recv(2) into `buf`.
pub fn recv(fd: fd_t, buf: []u8) Result(usize) {
    return result(usize, c.recvfrom(fd, buf.ptr, buf.len, 0, null, null));
}

/// One recvfrom(2) into `buf`; the sender's address lands in `addr`, its
/// length in `len` (in: the room in `addr`).
pub fn recvfrom(fd: fd_t, buf: []u8, addr: *sockaddr, len: *socklen_t) Result(usize) {
    return result(usize, c.recvfrom(fd, buf.ptr, buf.len, 0, addr, len));
}

/// One send(2) that never raises SIGPIPE: MSG_NOSIGNAL where the target
/// has it, else the socket's SO_NOSIGPIPE (see `noSigpipe`).
pub fn send(fd: fd_t, buf: []const u8) Result(usize) {
    return result(usize, c.sendto(fd, buf.ptr, buf.len, target.send_flags, null, 0));
}

/// One sendto(2) of a datagram to `addr` (null: the connected peer).
pub fn sendto(fd: fd_t, buf: []const u8, addr: ?*const sockaddr, len: socklen_t) Result(usize) {
    return result(usize, c.sendto(fd, buf.ptr, buf.len, target.send_flags, addr, len));
}

/// One gathering sendmsg(2) of `iov` (at most `iov_max` entries).
pub fn sendv(fd: fd_t, iov: []const iovec_const) Result(usize) {
    std.debug.assert(iov.len <= iov_max);
    var msg = std.mem.zeroes(c.msghdr_const);
    msg.iov = iov.ptr;
    msg.iovlen = @intCast(iov.len);
    return result(usize, c.sendmsg(fd, &msg, target.send_flags));
}

/// The most entries one `sendv` takes: `<limits.h>`'s IOV_MAX, 1024 on
/// Linux, macOS and FreeBSD (checked in `abi.zig`). Not Zig's `c.IOV_MAX`,
/// which says 16 for macOS and, for FreeBSD, gives the sysctl number of
/// kern.iov_max (35) instead of its value.
pub const iov_max: usize = 1024;

/// Shuts the write direction of socket `fd` (the peer reads end of file).
pub fn shutdownWrite(fd: fd_t) Result(void) {
    return result(void, c.shutdown(fd, c.SHUT.WR));
}

/// getsockname(2): the address socket `fd` is bound to, into `addr`, its
/// length into `len` (in: the room in `addr`).
pub fn sockName(fd: fd_t, addr: *sockaddr, len: *socklen_t) Result(void) {
    return result(void, c.getsockname(fd, addr, len));
}

/// TCP_NODELAY on TCP socket `fd` (asyncio's `_set_nodelay`); a failure
/// is ignored, as there.
pub fn setTcpNodelay(fd: fd_t) void {
    const on: c_int = 1;
    _ = c.setsockopt(fd, c.IPPROTO.TCP, c.TCP.NODELAY, &on, @sizeOf(c_int));
}

/// How many bytes a read of `fd` would get now (FIONREAD).
pub fn bytesReadable(fd: fd_t) Result(usize) {
    var n: c_int = 0;
    const rc = c.ioctl(fd, @bitCast(@as(u32, target.fionread)), &n);
    if (rc < 0) return .{ .err = errno() };
    return .{ .ok = @intCast(@max(n, 0)) };
}

/// Up to `count` bytes of file `in_fd` from `offset.*` to socket `out_fd`
/// (the file position stays); advances `offset` by what was sent and
/// returns it (0: end of file). macOS's and FreeBSD's sendfile(2) where
/// the target has one, else `sendfileCopy`.
pub fn sendfile(out_fd: fd_t, in_fd: fd_t, offset: *i64, count: usize) Result(usize) {
    return target.sendfile(out_fd, in_fd, offset, count);
}

/// sendfile's fallback: pread(2) into a buffer and one send. Returns what
/// the send took (the rest is read again next time), 0 at end of file.
pub fn sendfileCopy(out_fd: fd_t, in_fd: fd_t, offset: *i64, count: usize) Result(usize) {
    var buf: [16 * 1024]u8 = undefined;
    const want = @min(count, buf.len);
    if (want == 0) return .{ .ok = 0 };
    const got = switch (result(usize, c.pread(in_fd, &buf, want, offset.*))) {
        .ok => |n| n,
        .err => |e| return .{ .err = e },
    };
    if (got == 0) return .{ .ok = 0 };
    const sent = send(out_fd, buf[0..got]);
    if (sent == .ok) offset.* += @intCast(sent.ok);
    return sent;
}

/// What `statPath` reports of a path.
pub const PathStat = struct { mode: u32, ino: u64 };

/// stat(2) of `path`, symbolic links followed (fstatat; statx through
/// libc on Linux, whose Zig std declares no fstatat for glibc).
pub fn statPath(path: [*:0]const u8) Result(PathStat) {
    return target.statPath(path);
}

/// fstatat(2) of `path` relative to the working directory.
pub fn fstatatPath(path: [*:0]const u8) Result(PathStat) {
    var st: c.Stat = undefined;
    const rc = c.fstatat(c.AT.FDCWD, path, &st, 0);
    if (rc < 0) return .{ .err = errno() };
    return .{ .ok = .{ .mode = @intCast(st.mode), .ino = @intCast(st.ino) } };
}

/// unlink(2) of `path` (a symbolic link itself, not its target).
pub fn unlink(path: [*:0]const u8) Result(void) {
    return result(void, c.unlink(path));
}

/// Makes sends on socket `fd` never raise SIGPIPE where the target has no
/// MSG_NOSIGNAL (macOS: SO_NOSIGPIPE); nothing elsewhere. Call it once per
/// socket before sending on it.
pub fn noSigpipe(fd: fd_t) void {
    target.noSigpipe(fd);
}

/// No socket-type flag makes a socket non-blocking here (macOS has no
/// SOCK_NONBLOCK; a portable Linux build leaves it out to run the same
/// path): the caller sets the socket object's mode itself, and `accept`
/// made the fd non-blocking with fcntl.
pub const sock_nonblock: c_int = 0;

// ---------------------------------------------------------------- tests

test "a portable pipe is non-blocking both ways and close-on-exec" {
    const fds = try pipe();
    defer for (fds) |fd| close(fd);
    var buf: [4]u8 = undefined;
    try std.testing.expectError(error.WouldBlock, read(fds[0], &buf));
    for (fds) |fd| {
        const fl = try check(c.fcntl(fd, c.F.GETFD));
        try std.testing.expect(fl & c.FD_CLOEXEC != 0);
    }
    try std.testing.expectEqual(@as(usize, 2), try write(fds[1], "ok"));
    try std.testing.expectEqual(@as(usize, 2), try read(fds[0], &buf));
}

test "the pipe waker wakes once however often it is woken, and drains" {
    var w = try Waker.init();
    defer w.deinit();
    w.wake();
    w.wake();
    var buf: [8]u8 = undefined;
    w.drain();
    try std.testing.expectError(error.WouldBlock, read(w.read_fd, &buf));
}
