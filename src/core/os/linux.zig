//! The Linux fast paths: raw syscalls with their errno decoded, no libc in
//! between, and the calls only Linux has (eventfd, epoll, pidfd, accept4,
//! statx, Linux's sendfile). Default Linux builds run the whole OS layer
//! from here; a portable build (`-Dportable=true`) takes the common calls
//! from `posix.zig` instead and keeps only the Linux-only ones below, which
//! its epoll backend and child watches still need.
const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;
const common = @import("common.zig");

const E = common.E;
const Error = common.Error;
const Result = common.Result;
pub const fd_t = common.fd_t;

comptime {
    std.debug.assert(builtin.os.tag == .linux);
}

fn check(rc: usize) Error!usize {
    const e = linux.errno(rc);
    if (e == .SUCCESS) return rc;
    return common.fail(e);
}

fn result(comptime T: type, rc: usize) Result(T) {
    const e = linux.errno(rc);
    if (e != .SUCCESS) return .{ .err = e };
    return .{ .ok = if (T == void) {} else @intCast(rc) };
}

// ------------------------------------------------ the common interface

/// Monotonic clock in seconds, the clock `time.monotonic()` reads.
///
/// Through libc whenever it is linked (the extension module always is):
/// glibc reads the clock from the vDSO, with no syscall. Zig's own
/// `linux.clock_gettime` finds the vDSO only through the auxiliary vector
/// its start-up code saves, which a library loaded by CPython never runs,
/// so there it falls back to a real syscall on every call.
pub fn monotonic_s() f64 {
    if (!builtin.link_libc) {
        var ts: linux.timespec = undefined;
        _ = linux.clock_gettime(.MONOTONIC, &ts);
        return @as(f64, @floatFromInt(ts.sec)) + @as(f64, @floatFromInt(ts.nsec)) * 1e-9;
    }
    var ts: std.c.timespec = undefined;
    _ = std.c.clock_gettime(.MONOTONIC, &ts);
    return @as(f64, @floatFromInt(ts.sec)) + @as(f64, @floatFromInt(ts.nsec)) * 1e-9;
}

/// CPU time the whole process has used, in seconds (every thread's).
pub fn processCpu_s() f64 {
    if (!builtin.link_libc) {
        var ts: linux.timespec = undefined;
        _ = linux.clock_gettime(.PROCESS_CPUTIME_ID, &ts);
        return @as(f64, @floatFromInt(ts.sec)) + @as(f64, @floatFromInt(ts.nsec)) * 1e-9;
    }
    var ts: std.c.timespec = undefined;
    _ = std.c.clock_gettime(.PROCESS_CPUTIME_ID, &ts);
    return @as(f64, @floatFromInt(ts.sec)) + @as(f64, @floatFromInt(ts.nsec)) * 1e-9;
}

pub fn close(fd: fd_t) void {
    _ = linux.close(fd);
}

/// This process's id (a syscall: glibc caches nothing since 2.25).
pub fn getpid() i32 {
    return linux.getpid();
}

pub fn read(fd: fd_t, buf: []u8) Error!usize {
    return check(linux.read(fd, buf.ptr, buf.len));
}

pub fn write(fd: fd_t, buf: []const u8) Error!usize {
    return check(linux.write(fd, buf.ptr, buf.len));
}
/// Blocks the calling thread while `word` holds `expect`, for at most
/// `timeout_ns`. It may return early (a wake, a signal, a spurious
/// wake-up): callers check their condition and their own deadline. A
/// private futex.
pub fn futexWait(word: *const std.atomic.Value(u32), expect: u32, timeout_ns: u64) void {
    const ts: linux.timespec = .{
        .sec = @intCast(timeout_ns / std.time.ns_per_s),
        .nsec = @intCast(timeout_ns % std.time.ns_per_s),
    };
    // EAGAIN (the word changed), EINTR and ETIMEDOUT all mean "look again".
    _ = linux.futex_4arg(&word.raw, .{ .cmd = .WAIT, .private = true }, expect, &ts);
}

/// Wakes every thread blocked in `futexWait` on `word`.
pub fn futexWakeAll(word: *const std.atomic.Value(u32)) void {
    const all: u32 = std.math.maxInt(i32);
    _ = linux.futex_3arg(&word.raw, .{ .cmd = .WAKE, .private = true }, all);
}

/// Fails with `error.BadFd` unless `fd` is an open descriptor: F_GETFD
/// asks the fd table only, whatever the file is.
pub fn checkOpen(fd: fd_t) Error!void {
    _ = try check(linux.fcntl(fd, linux.F.GETFD, 0));
}

/// A non-blocking, close-on-exec pipe: `[read end, write end]`.
pub fn pipe() Error![2]fd_t {
    var fds: [2]fd_t = undefined;
    _ = try check(linux.pipe2(&fds, .{ .NONBLOCK = true, .CLOEXEC = true }));
    return fds;
}

/// Wakes a reactor blocked in its backend from any thread: one eventfd
/// (an 8-byte counter) serves as both ends.
pub const Waker = struct {
    read_fd: fd_t,
    write_fd: fd_t,

    pub fn init() Error!Waker {
        const fd = try eventfd();
        return .{ .read_fd = fd, .write_fd = fd };
    }

    pub fn deinit(w: *Waker) void {
        close(w.read_fd);
        w.* = .{ .read_fd = -1, .write_fd = -1 };
    }

    /// A saturated counter already means "wake up".
    pub fn wake(w: *const Waker) void {
        const one: u64 = 1;
        _ = write(w.write_fd, std.mem.asBytes(&one)) catch {};
    }

    pub fn drain(w: *const Waker) void {
        var buf: [64]u8 = undefined;
        while (true) {
            const n = read(w.read_fd, &buf) catch return;
            if (n == 0) return;
        }
    }
};

pub const sockaddr = linux.sockaddr;
pub const socklen_t = linux.socklen_t;
pub const iovec_const = std.posix.iovec_const;

/// Accepts one connection on listening socket `fd`, non-blocking and
/// close-on-exec from the start (accept4: one syscall, no window in which
/// a fork could inherit it). `addr`/`len` as accept(2)'s.
pub fn accept(fd: fd_t, addr: ?*sockaddr, len: ?*socklen_t) Result(fd_t) {
    const flags: u32 = linux.SOCK.NONBLOCK | linux.SOCK.CLOEXEC;
    return result(fd_t, linux.accept4(fd, addr, len, flags));
}

/// One recv(2) into `buf`.
pub fn recv(fd: fd_t, buf: []u8) Result(usize) {
    return result(usize, linux.recvfrom(fd, buf.ptr, buf.len, 0, null, null));
}

/// One recvfrom(2) into `buf`; the sender's address lands in `addr`, its
/// length in `len` (in: the room in `addr`).
pub fn recvfrom(fd: fd_t, buf: []u8, addr: *sockaddr, len: *socklen_t) Result(usize) {
    return result(usize, linux.recvfrom(fd, buf.ptr, buf.len, 0, addr, len));
}

/// One send(2) that never raises SIGPIPE (MSG_NOSIGNAL): a peer that went
/// away is EPIPE, as Python expects.
pub fn send(fd: fd_t, buf: []const u8) Result(usize) {
    return result(usize, linux.sendto(fd, buf.ptr, buf.len, linux.MSG.NOSIGNAL, null, 0));
}

/// One sendto(2) of a datagram to `addr` (null: the connected peer); never
/// SIGPIPE.
pub fn sendto(fd: fd_t, buf: []const u8, addr: ?*const sockaddr, len: socklen_t) Result(usize) {
    return result(usize, linux.sendto(fd, buf.ptr, buf.len, linux.MSG.NOSIGNAL, addr, len));
}

/// One gathering sendmsg(2) of `iov` (at most `iov_max` entries); never
/// SIGPIPE.
pub fn sendv(fd: fd_t, iov: []const iovec_const) Result(usize) {
    std.debug.assert(iov.len <= iov_max);
    const msg: linux.msghdr_const = .{
        .name = null,
        .namelen = 0,
        .iov = iov.ptr,
        .iovlen = iov.len,
        .control = null,
        .controllen = 0,
        .flags = 0,
    };
    return result(usize, linux.sendmsg(fd, &msg, linux.MSG.NOSIGNAL));
}

/// The most entries one `sendv` takes.
pub const iov_max = linux.IOV_MAX;

/// Shuts the write direction of socket `fd` (the peer reads end of file).
pub fn shutdownWrite(fd: fd_t) Result(void) {
    return result(void, linux.shutdown(fd, linux.SHUT.WR));
}

/// getsockname(2): the address socket `fd` is bound to, into `addr`, its
/// length into `len` (in: the room in `addr`).
pub fn sockName(fd: fd_t, addr: *sockaddr, len: *socklen_t) Result(void) {
    return result(void, linux.getsockname(fd, addr, len));
}

/// TCP_NODELAY on TCP socket `fd` (asyncio's `_set_nodelay`); a failure
/// is ignored, as there.
pub fn setTcpNodelay(fd: fd_t) void {
    const on: c_int = 1;
    _ = linux.setsockopt(fd, linux.IPPROTO.TCP, linux.TCP.NODELAY, std.mem.asBytes(&on), @sizeOf(c_int));
}

/// How many bytes a read of `fd` would get now (FIONREAD).
pub fn bytesReadable(fd: fd_t) Result(usize) {
    var n: c_int = 0;
    const rc = linux.ioctl(fd, linux.T.FIONREAD, @intFromPtr(&n));
    if (linux.errno(rc) != .SUCCESS) return .{ .err = linux.errno(rc) };
    return .{ .ok = @intCast(@max(n, 0)) };
}

/// Up to `count` bytes of file `in_fd` from `offset.*` to socket `out_fd`,
/// in the kernel (the file position stays); advances `offset` by what was
/// sent and returns it (0: end of file).
pub fn sendfile(out_fd: fd_t, in_fd: fd_t, offset: *i64, count: usize) Result(usize) {
    return result(usize, linux.sendfile(out_fd, in_fd, offset, count));
}

/// What `statPath` reports of a path.
pub const PathStat = struct { mode: u32, ino: u64 };

/// stat(2) of `path`, symbolic links followed: statx, the one stat call
/// Zig's std offers for every Linux architecture.
pub fn statPath(path: [*:0]const u8) Result(PathStat) {
    var st: linux.Statx = undefined;
    const mask: linux.STATX = .{ .TYPE = true, .MODE = true, .INO = true };
    const rc = linux.statx(linux.AT.FDCWD, path, 0, mask, &st);
    if (linux.errno(rc) != .SUCCESS) return .{ .err = linux.errno(rc) };
    return .{ .ok = .{ .mode = st.mode, .ino = st.ino } };
}

/// unlink(2) of `path` (a symbolic link itself, not its target).
pub fn unlink(path: [*:0]const u8) Result(void) {
    return result(void, linux.unlink(path));
}

/// Makes sends on socket `fd` never raise SIGPIPE: nothing to do here,
/// every send passes MSG_NOSIGNAL.
pub fn noSigpipe(fd: fd_t) void {
    _ = fd;
}

/// The flag that, or'ed into a socket type, makes the socket non-blocking
/// from the start (SOCK_NONBLOCK): CPython's `socket.socket(family, type |
/// SOCK_NONBLOCK, proto, fd)` then sets its timeout to 0 with no syscall.
pub const sock_nonblock: c_int = linux.SOCK.NONBLOCK;

// ------------------------------------------------------ Linux only

/// A non-blocking, close-on-exec eventfd counting from 0.
pub fn eventfd() Error!fd_t {
    const rc = try check(linux.eventfd(0, linux.EFD.CLOEXEC | linux.EFD.NONBLOCK));
    return @intCast(rc);
}

pub fn epoll_create() Error!fd_t {
    const rc = try check(linux.epoll_create1(linux.EPOLL.CLOEXEC));
    return @intCast(rc);
}

pub fn epoll_ctl(epfd: fd_t, op: u32, fd: fd_t, events: u32) Error!void {
    var ev: linux.epoll_event = .{ .events = events, .data = .{ .fd = fd } };
    _ = try check(linux.epoll_ctl(epfd, op, fd, &ev));
}

pub fn epoll_wait(epfd: fd_t, events: []linux.epoll_event, timeout_ms: i32) Error!usize {
    return check(linux.epoll_wait(epfd, events.ptr, @intCast(events.len), timeout_ms));
}

/// A close-on-exec pidfd for process `pid` (Linux 5.3): readable once the
/// process has exited, whoever reaps it. ESRCH: no such process.
pub fn pidfd_open(pid: i32) Error!fd_t {
    const rc = try check(linux.pidfd_open(pid, 0));
    return @intCast(rc);
}

/// The wait status (as waitpid(2) would give it) of the exited child
/// behind `pidfd`, which stays unreaped (WNOWAIT); null while it runs, or
/// when it is not a child of this process or was reaped already.
pub fn exitStatus(pidfd: fd_t) ?u32 {
    var info: linux.siginfo_t = undefined;
    info.signo = @fromBackingInt(@intCast(0));
    const flags = linux.W.EXITED | linux.W.NOHANG | linux.W.NOWAIT;
    const rc = linux.waitid(.PIDFD, pidfd, &info, flags, null);
    if (linux.errno(rc) != .SUCCESS or @backingInt(info.signo) == 0) return null;
    return waitStatus(info.code, info.fields.common.second.sigchld.status);
}

/// waitpid(2)'s status word from waitid(2)'s (si_code, si_status).
pub fn waitStatus(code: i32, status: i32) u32 {
    const s: u32 = @bitCast(status);
    return switch (@as(linux.CLD, @fromBackingInt(@intCast(code)))) {
        .EXITED => (s & 0xff) << 8,
        .KILLED => s & 0x7f,
        .DUMPED => (s & 0x7f) | 0x80,
        else => 0,
    };
}

test "eventfd round trip" {
    const fd = try eventfd();
    defer close(fd);
    var one: u64 = 1;
    _ = try write(fd, std.mem.asBytes(&one));
    var got: u64 = 0;
    _ = try read(fd, std.mem.asBytes(&got));
    try std.testing.expectEqual(@as(u64, 1), got);
    try std.testing.expectError(error.WouldBlock, read(fd, std.mem.asBytes(&got)));
}

test "wait status words match waitpid's" {
    try std.testing.expect(linux.W.IFEXITED(waitStatus(@backingInt(linux.CLD.EXITED), 3)));
    try std.testing.expectEqual(@as(u32, 3), linux.W.EXITSTATUS(waitStatus(@backingInt(linux.CLD.EXITED), 3)));
    const killed = waitStatus(@backingInt(linux.CLD.KILLED), 9);
    try std.testing.expect(linux.W.IFSIGNALED(killed));
    try std.testing.expectEqual(@as(u32, 9), @backingInt(linux.W.TERMSIG(killed)));
}
