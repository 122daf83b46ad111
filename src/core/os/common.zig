//! What every platform file of the OS layer shares: the error set the core
//! speaks (the thread's last errno lives in `sys.zig`, the layer's face),
//! and the `Result` of a call whose every errno matters to the caller (the
//! adapter maps each to the exception stock asyncio raises).
const std = @import("std");
const builtin = @import("builtin");
const sys = @import("../sys.zig");

/// The target's errno numbers (Linux's, macOS's or FreeBSD's: they differ,
/// and Python's `errno` module follows the platform it runs on).
pub const E = if (builtin.os.tag == .linux) std.os.linux.E else std.c.E;

pub const fd_t = i32;

/// Errors surfaced by the OS layer. `Unexpected` carries errno in
/// `last_errno`; so do the others, for error messages.
pub const Error = error{ WouldBlock, Interrupted, BadFd, NoMemory, Unexpected };

/// A call's outcome where the caller tells errnos apart: the value, or the
/// target's errno (never `.SUCCESS`).
pub fn Result(comptime T: type) type {
    return union(enum) {
        ok: T,
        err: E,

        /// The value, or `Error` with `last_errno` set (for callers that
        /// only tell the common cases apart).
        pub fn unwrap(r: @This()) Error!T {
            return switch (r) {
                .ok => |v| v,
                .err => |e| fail(e),
            };
        }
    };
}

/// Records `e` as the thread's last errno and returns its `Error`.
pub fn fail(e: E) Error {
    std.debug.assert(e != .SUCCESS);
    sys.last_errno = @backingInt(e);
    return errorOf(e);
}

fn errorOf(e: E) Error {
    return switch (e) {
        .AGAIN => error.WouldBlock,
        .INTR => error.Interrupted,
        .BADF => error.BadFd,
        .NOMEM, .NOSPC, .MFILE, .NFILE => error.NoMemory,
        else => error.Unexpected,
    };
}

test "an errno becomes its error and is remembered" {
    try std.testing.expectError(error.WouldBlock, @as(Error!void, fail(.AGAIN)));
    try std.testing.expectEqual(@as(u16, @backingInt(E.AGAIN)), sys.last_errno);
    const r: Result(usize) = .{ .err = .BADF };
    try std.testing.expectError(error.BadFd, r.unwrap());
    const ok: Result(usize) = .{ .ok = 7 };
    try std.testing.expectEqual(@as(usize, 7), try ok.unwrap());
}
