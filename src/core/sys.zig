//! The one shim between the core and the operating system, so Zig's std
//! churn (0.15-0.17 moved `posix`) is absorbed here and nowhere else: raw
//! syscalls with their errno decoded on Linux, libc on macOS and the BSDs.
const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;
const is_linux = builtin.os.tag == .linux;

pub const fd_t = i32;

/// Errors surfaced by the shim. `unexpected` carries errno in `last_errno`.
pub const Error = error{ WouldBlock, Interrupted, BadFd, NoMemory, Unexpected };

/// The errno of the last failed call on this thread, for error messages.
pub threadlocal var last_errno: u16 = 0;

fn check(rc: usize) Error!usize {
    const e = linux.errno(rc);
    if (e == .SUCCESS) return rc;
    last_errno = @intFromEnum(e);
    return errorOf(e);
}

/// libc's convention (-1 and errno), for the platforms without raw syscalls.
fn checkC(rc: anytype) Error!usize {
    const e = std.c.errno(rc);
    if (e == .SUCCESS) return @intCast(rc);
    last_errno = @intFromEnum(e);
    return errorOf(e);
}

fn errorOf(e: anytype) Error {
    return switch (e) {
        .AGAIN => error.WouldBlock,
        .INTR => error.Interrupted,
        .BADF => error.BadFd,
        .NOMEM, .NOSPC, .MFILE, .NFILE => error.NoMemory,
        else => error.Unexpected,
    };
}

/// Monotonic clock in seconds, the clock `time.monotonic()` reads.
///
/// Through libc whenever it is linked (the extension module always is):
/// glibc reads the clock from the vDSO, with no syscall. Zig's own
/// `linux.clock_gettime` finds the vDSO only through the auxiliary vector
/// its start-up code saves, which a library loaded by CPython never runs,
/// so there it falls back to a real syscall on every call.
pub fn monotonic_s() f64 {
    if (is_linux and !builtin.link_libc) {
        var ts: linux.timespec = undefined;
        _ = linux.clock_gettime(.MONOTONIC, &ts);
        return @as(f64, @floatFromInt(ts.sec)) + @as(f64, @floatFromInt(ts.nsec)) * 1e-9;
    }
    var ts: std.c.timespec = undefined;
    _ = std.c.clock_gettime(.MONOTONIC, &ts);
    return @as(f64, @floatFromInt(ts.sec)) + @as(f64, @floatFromInt(ts.nsec)) * 1e-9;
}

pub fn close(fd: fd_t) void {
    if (is_linux) _ = linux.close(fd) else _ = std.c.close(fd);
}

pub fn read(fd: fd_t, buf: []u8) Error!usize {
    if (is_linux) return check(linux.read(fd, buf.ptr, buf.len));
    return checkC(std.c.read(fd, buf.ptr, buf.len));
}

pub fn write(fd: fd_t, buf: []const u8) Error!usize {
    if (is_linux) return check(linux.write(fd, buf.ptr, buf.len));
    return checkC(std.c.write(fd, buf.ptr, buf.len));
}

/// Wakes a reactor blocked in its backend from any thread: an eventfd on
/// Linux (one fd, an 8-byte counter), a non-blocking pipe elsewhere.
pub const Waker = struct {
    read_fd: fd_t,
    write_fd: fd_t,

    pub fn init() Error!Waker {
        if (is_linux) {
            const fd = try eventfd();
            return .{ .read_fd = fd, .write_fd = fd };
        }
        var fds: [2]fd_t = undefined;
        _ = try checkC(std.c.pipe(&fds));
        for (fds) |fd| {
            const fl = std.c.fcntl(fd, std.c.F.GETFL);
            _ = std.c.fcntl(fd, std.c.F.SETFL, fl | @as(c_int, @bitCast(std.c.O{ .NONBLOCK = true })));
            _ = std.c.fcntl(fd, std.c.F.SETFD, @as(c_int, std.c.FD_CLOEXEC));
        }
        return .{ .read_fd = fds[0], .write_fd = fds[1] };
    }

    pub fn deinit(w: *Waker) void {
        close(w.read_fd);
        if (w.write_fd != w.read_fd) close(w.write_fd);
        w.* = .{ .read_fd = -1, .write_fd = -1 };
    }

    /// A full pipe or a saturated counter already means "wake up".
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

/// Blocks the calling thread while `word` holds `expect`, for at most
/// `timeout_ns`. It may return early (a wake, a signal, a spurious wake-up):
/// callers check their condition and their own deadline. A private futex on
/// Linux; elsewhere a sleep of at most 100 µs, which `futexWake` does not cut
/// short (those platforms poll).
pub fn futexWait(word: *const std.atomic.Value(u32), expect: u32, timeout_ns: u64) void {
    if (is_linux) {
        const ts: linux.timespec = .{
            .sec = @intCast(timeout_ns / std.time.ns_per_s),
            .nsec = @intCast(timeout_ns % std.time.ns_per_s),
        };
        // EAGAIN (the word changed), EINTR and ETIMEDOUT all mean "look again".
        _ = linux.futex_4arg(&word.raw, .{ .cmd = .WAIT, .private = true }, expect, &ts);
        return;
    }
    if (word.load(.acquire) != expect) return;
    const nap_ns = @min(timeout_ns, 100 * std.time.ns_per_us);
    const ts: std.c.timespec = .{ .sec = 0, .nsec = @intCast(nap_ns) };
    _ = std.c.nanosleep(&ts, null);
}

/// Wakes every thread blocked in `futexWait` on `word` (Linux; elsewhere the
/// waiters poll).
pub fn futexWakeAll(word: *const std.atomic.Value(u32)) void {
    if (!is_linux) return;
    const all: u32 = std.math.maxInt(i32);
    _ = linux.futex_3arg(&word.raw, .{ .cmd = .WAKE, .private = true }, all);
}

/// Fails with `error.BadFd` unless `fd` is an open descriptor: F_GETFD
/// asks the fd table only, whatever the file is.
pub fn checkOpen(fd: fd_t) Error!void {
    if (is_linux) {
        _ = try check(linux.fcntl(fd, linux.F.GETFD, 0));
        return;
    }
    _ = try checkC(std.c.fcntl(fd, std.c.F.GETFD));
}

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

test "monotonic clock advances" {
    const a = monotonic_s();
    const b = monotonic_s();
    try std.testing.expect(b >= a);
    try std.testing.expect(a > 0);
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
