//! The one shim between the core and the operating system: raw Linux syscalls
//! with their errno decoded, so Zig's std churn (0.15-0.17 moved `posix`)
//! is absorbed here and nowhere else.
const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;

pub const fd_t = i32;

/// Errors surfaced by the shim. `unexpected` carries errno in `last_errno`.
pub const Error = error{ WouldBlock, Interrupted, BadFd, NoMemory, Unexpected };

/// The errno of the last failed call on this thread, for error messages.
pub threadlocal var last_errno: u16 = 0;

fn check(rc: usize) Error!usize {
    const e = linux.errno(rc);
    if (e == .SUCCESS) return rc;
    last_errno = @intFromEnum(e);
    return switch (e) {
        .AGAIN => error.WouldBlock,
        .INTR => error.Interrupted,
        .BADF => error.BadFd,
        .NOMEM, .NOSPC, .MFILE, .NFILE => error.NoMemory,
        else => error.Unexpected,
    };
}

/// Monotonic clock in seconds, the clock `time.monotonic()` reads.
pub fn monotonic_s() f64 {
    var ts: linux.timespec = undefined;
    _ = linux.clock_gettime(.MONOTONIC, &ts);
    return @as(f64, @floatFromInt(ts.sec)) + @as(f64, @floatFromInt(ts.nsec)) * 1e-9;
}

pub fn close(fd: fd_t) void {
    _ = linux.close(fd);
}

pub fn read(fd: fd_t, buf: []u8) Error!usize {
    return check(linux.read(fd, buf.ptr, buf.len));
}

pub fn write(fd: fd_t, buf: []const u8) Error!usize {
    return check(linux.write(fd, buf.ptr, buf.len));
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
