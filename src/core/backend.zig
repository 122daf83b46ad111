//! Backend selection, done once per reactor.
//!
//! macOS and the BSDs have one backend, kqueue, chosen at compile time. On
//! Linux `Backend` is a tagged union of epoll and io_uring, chosen when the
//! reactor starts from the `ZLOOP_BACKEND` environment variable:
//!   unset or ""  epoll (the default, `name`)
//!   "epoll"      epoll
//!   "io_uring"   io_uring; if the kernel cannot set up a ring (too old,
//!                io_uring_disabled, a seccomp filter) the reactor quietly
//!                falls back to epoll: the loop still works, and
//!                `Backend.activeName` tells which backend runs it.
//!   other        `error.UnknownBackend`: a misspelt name fails loudly
//!                rather than silently measuring the wrong backend.
const std = @import("std");
const builtin = @import("builtin");
const sys = @import("sys.zig");
pub const api = @import("backend/api.zig");

pub const is_linux = builtin.os.tag == .linux;
const epoll = @import("backend/epoll.zig");
const io_uring = @import("backend/io_uring.zig");
const kqueue = @import("backend/kqueue.zig");

comptime {
    switch (builtin.os.tag) {
        .linux, .macos, .freebsd, .netbsd, .openbsd, .dragonfly => {},
        else => @compileError("zloop supports Linux and the BSDs/macOS"),
    }
}

/// The backends this platform offers; the first is the default.
pub const Kind = if (is_linux) enum { epoll, io_uring } else enum { kqueue };

/// The default backend's name (what `zloop.BACKEND` reports when
/// `ZLOOP_BACKEND` is unset).
pub const name = @tagName(@as(Kind, @enumFromInt(0)));

/// Every backend name this build accepts, the default first: what
/// `zloop.BACKENDS` lists and `ZLOOP_BACKEND` may name.
pub const names = std.meta.fieldNames(Kind);

/// `names` as an error message lists them: `'epoll', 'io_uring'`.
pub const names_quoted = blk: {
    var text: []const u8 = "";
    for (names, 0..) |n, i| text = text ++ (if (i == 0) "" else ", ") ++ "'" ++ n ++ "'";
    break :blk text;
};

pub const InitError = sys.Error || error{UnknownBackend};

/// The variable that picks the backend on Linux.
pub const env_var = "ZLOOP_BACKEND";

/// Parses a backend name; "" means the default.
pub fn parseKind(text: []const u8) ?Kind {
    if (text.len == 0) return @enumFromInt(0);
    return std.meta.stringToEnum(Kind, text);
}

/// The kind named by `ZLOOP_BACKEND`. It is read from the C environment, so
/// `os.environ[...] = ...` in Python before the loop is created takes
/// effect; a build without libc (the core's unit tests) sees the default.
pub fn kindFromEnv() error{UnknownBackend}!Kind {
    if (!builtin.link_libc) return @enumFromInt(0);
    const raw = std.c.getenv(env_var) orelse return @enumFromInt(0);
    return parseKind(std.mem.span(raw)) orelse {
        // The adapter raises OSError(EINVAL) from the last errno.
        sys.last_errno = @intFromEnum(std.os.linux.E.INVAL);
        return error.UnknownBackend;
    };
}

pub const Backend = if (is_linux) Linux else kqueue.Backend;

/// Epoll or io_uring, dispatching the backend API to the chosen one.
pub const Linux = union(Kind) {
    epoll: epoll.Backend,
    io_uring: io_uring.Backend,

    /// The backend named by `ZLOOP_BACKEND`.
    pub fn init() InitError!Linux {
        return Linux.initKind(try kindFromEnv());
    }

    /// Starts `kind`; an io_uring the kernel refuses falls back to epoll.
    pub fn initKind(kind: Kind) sys.Error!Linux {
        return switch (kind) {
            .epoll => .{ .epoll = try epoll.Backend.init() },
            .io_uring => if (io_uring.Backend.init()) |b|
                .{ .io_uring = b }
            else |err| switch (err) {
                error.Unsupported => .{ .epoll = try epoll.Backend.init() },
                else => |e| e,
            },
        };
    }

    pub fn deinit(b: *Linux) void {
        switch (b.*) {
            inline else => |*x| x.deinit(),
        }
    }

    /// Both Linux backends disarm a one-shot registration after its event.
    pub const has_oneshot = epoll.Backend.has_oneshot and io_uring.Backend.has_oneshot;

    pub fn setInterest(b: *Linux, fd: sys.fd_t, old: api.Interest, new: api.Interest, how: api.Arm) sys.Error!void {
        switch (b.*) {
            inline else => |*x| return x.setInterest(fd, old, new, how),
        }
    }

    pub fn poll(b: *Linux, timeout_ms: i32, out: []api.Event) sys.Error!usize {
        switch (b.*) {
            inline else => |*x| return x.poll(timeout_ms, out),
        }
    }

    /// The name of the backend actually running.
    pub fn activeName(b: *const Linux) []const u8 {
        return @tagName(b.*);
    }

    /// Whether `api.Arm.recv` is served by native receives (io_uring).
    pub fn nativeRecv(b: *const Linux) bool {
        return switch (b.*) {
            .epoll => false,
            .io_uring => |*x| x.nativeRecv(),
        };
    }

    /// Provides receive buffer `id` (see io_uring's `provideRecvBuffer`);
    /// nothing on epoll, which never hands one out.
    pub fn provideRecvBuffer(b: *Linux, id: u16, buf: []u8) void {
        switch (b.*) {
            .epoll => {},
            .io_uring => |*x| x.provideRecvBuffer(id, buf),
        }
    }

    /// Gives back, unread, the buffer of a `recv` event.
    pub fn recycleRecvBuffer(b: *Linux, id: u16) void {
        switch (b.*) {
            .epoll => {},
            .io_uring => |*x| x.recycleRecvBuffer(id),
        }
    }
};

/// How many receive buffers a caller may provide (ids below this).
pub const recv_buffers_max: u16 = if (is_linux) io_uring.Backend.recv_buffers_max else 0;

/// Whether `b` serves `api.Arm.recv` with native receives.
pub fn nativeRecv(b: *const Backend) bool {
    if (is_linux) return b.nativeRecv();
    return false;
}

/// Starts the backend of `kind` (on Linux, with io_uring's fallback).
pub fn initKind(kind: Kind) sys.Error!Backend {
    if (is_linux) return Linux.initKind(kind);
    return kqueue.Backend.init();
}

/// Starts the backend `ZLOOP_BACKEND` names (the only one off Linux,
/// where another name is refused all the same).
pub fn initFromEnv() InitError!Backend {
    if (is_linux) return Linux.init();
    _ = try kindFromEnv();
    return kqueue.Backend.init();
}

/// The name of the backend running `b`.
pub fn activeName(b: *const Backend) []const u8 {
    if (is_linux) return b.activeName();
    return kqueue.name;
}

comptime {
    api.check(Backend);
    if (is_linux) {
        api.check(epoll.Backend);
        api.check(io_uring.Backend);
    }
}

test "backend names parse; unknown ones are refused" {
    try std.testing.expectEqual(@as(?Kind, @enumFromInt(0)), parseKind(""));
    if (is_linux) {
        try std.testing.expectEqual(@as(?Kind, .io_uring), parseKind("io_uring"));
        try std.testing.expectEqual(@as(?Kind, .epoll), parseKind("epoll"));
        try std.testing.expectEqualStrings("epoll", name);
    }
    try std.testing.expectEqual(@as(?Kind, null), parseKind("uring"));
    try std.testing.expectEqualStrings(name, names[0]);
    if (is_linux) try std.testing.expectEqualStrings("'epoll', 'io_uring'", names_quoted);
}

test "each Linux backend starts and reports its name" {
    if (!is_linux) return error.SkipZigTest;
    inline for (.{ Kind.epoll, Kind.io_uring }) |kind| {
        var b = try initKind(kind);
        defer b.deinit();
        // io_uring may fall back to epoll on a kernel without it.
        const got = activeName(&b);
        try std.testing.expect(std.mem.eql(u8, got, @tagName(kind)) or std.mem.eql(u8, got, "epoll"));
    }
}

test {
    if (is_linux) {
        _ = epoll;
        _ = io_uring;
    }
}
