//! Backend selection, done once per reactor.
//!
//! macOS and the BSDs have one backend, kqueue, chosen at compile time. On
//! Linux `Backend` holds one of several, chosen when the reactor starts
//! from the `ZLOOP_BACKEND` environment variable:
//!   unset or ""  the first of `Kind` (the default, `name`): epoll
//!   "epoll"      epoll
//!   "io_uring"   io_uring (default builds); if the kernel cannot set up a
//!                ring (too old, io_uring_disabled, a seccomp filter) the
//!                reactor quietly falls back to epoll: the loop still
//!                works, and `activeName` tells which backend runs it.
//!                `ZLOOP_URING_OFF` turns io_uring's optional ring
//!                features off (see `io_uring.Feature`).
//!   "kqueue"     kqueue over the test-only emulation (`-Dportable=true`
//!                builds, which offer epoll and kqueue and no io_uring:
//!                nothing of io_uring runs on macOS or the BSDs, and a
//!                portable build exists to run what they run).
//!   other        `error.UnknownBackend`: a misspelt name fails loudly
//!                rather than silently measuring the wrong backend.
const std = @import("std");
const builtin = @import("builtin");
const sys = @import("sys.zig");
pub const api = @import("backend/api.zig");

pub const is_linux = sys.is_linux;
const epoll = @import("backend/epoll.zig");
const io_uring = @import("backend/io_uring.zig");
const kqueue = @import("backend/kqueue.zig");

comptime {
    switch (builtin.os.tag) {
        .linux, .macos, .freebsd, .netbsd, .openbsd, .dragonfly => {},
        else => @compileError("zloop supports Linux and the BSDs/macOS"),
    }
}

/// The backends this build offers; the first is the default.
pub const Kind = if (!is_linux)
    enum { kqueue }
else if (sys.portable)
    enum { epoll, kqueue }
else
    enum { epoll, io_uring };

/// The backend type of `kind`.
fn Of(comptime kind: Kind) type {
    return switch (kind) {
        inline else => |k| @field(@This(), @tagName(k)).Backend,
    };
}

/// The default backend's name (what `zloop.BACKEND` reports when
/// `ZLOOP_BACKEND` is unset).
pub const name = @tagName(default_kind);

/// The default backend: the first of `Kind`.
const default_kind: Kind = @fromBackingInt(0);

/// This build's backends by name, the default first.
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
    if (text.len == 0) return default_kind;
    return std.meta.stringToEnum(Kind, text);
}

/// The kind named by `ZLOOP_BACKEND`. It is read from the C environment, so
/// `os.environ[...] = ...` in Python before the loop is created takes
/// effect; a build without libc (the core's unit tests) sees the default.
pub fn kindFromEnv() error{UnknownBackend}!Kind {
    if (!builtin.link_libc) return default_kind;
    const raw = std.c.getenv(env_var) orelse return default_kind;
    return parseKind(std.mem.span(raw)) orelse {
        // The adapter raises OSError(EINVAL) from the last errno.
        sys.last_errno = @backingInt(sys.E.INVAL);
        return error.UnknownBackend;
    };
}

pub const Backend = if (is_linux) Multi else kqueue.Backend;

/// Whether a duty (`api`'s `wakes_itself`, `watches_children`) is the
/// backend's for every backend of this build, for none, or depends on the
/// one chosen at start-up.
pub const Duty = enum { never, always, per_instance };

fn duty(comptime decl: []const u8) Duty {
    var any = false;
    var all = true;
    for (std.meta.tags(Kind)) |kind| {
        const own: bool = @field(Of(kind), decl);
        any = any or own;
        all = all and own;
    }
    return if (all) .always else if (any) .per_instance else .never;
}

/// Who wakes a blocked wait: the backend itself, or an fd it watches.
pub const wake_duty = duty("wakes_itself");
/// Who watches child exits: the backend itself, or a pidfd it watches.
pub const child_duty = duty("watches_children");

const Chosen = @Union(.auto, Kind, std.meta.fieldNames(Kind), &types: {
    var list: [std.meta.tags(Kind).len]type = undefined;
    for (std.meta.tags(Kind), &list) |kind, *t| t.* = Of(kind);
    break :types list;
}, &@splat(.{}));

/// One of this build's Linux backends, dispatching the backend API to the
/// one chosen at start-up.
pub const Multi = struct {
    chosen: Chosen,

    /// The backend named by `ZLOOP_BACKEND`.
    pub fn init() InitError!Multi {
        return Multi.initKind(try kindFromEnv());
    }

    /// Starts `kind`; an io_uring the kernel refuses falls back to epoll.
    pub fn initKind(kind: Kind) sys.Error!Multi {
        switch (kind) {
            inline else => |k| {
                const started = Of(k).init() catch |err| return fallBack(k, err);
                return .{ .chosen = @unionInit(Chosen, @tagName(k), started) };
            },
        }
    }

    fn fallBack(comptime kind: Kind, err: anytype) sys.Error!Multi {
        if (comptime std.mem.eql(u8, @tagName(kind), "io_uring")) {
            if (err == error.Unsupported) {
                return .{ .chosen = .{ .epoll = try epoll.Backend.init() } };
            }
        }
        return @errorCast(err);
    }

    pub fn deinit(b: *Multi) void {
        switch (b.chosen) {
            inline else => |*x| x.deinit(),
        }
    }

    pub fn abandon(b: *Multi) void {
        switch (b.chosen) {
            inline else => |*x| x.abandon(),
        }
    }

    /// Every backend offered disarms a one-shot registration after its
    /// event.
    pub const has_oneshot = all: {
        for (std.meta.tags(Kind)) |kind| if (!Of(kind).has_oneshot) break :all false;
        break :all true;
    };
    pub const wakes_itself = wake_duty == .always;
    pub const watches_children = child_duty == .always;

    pub fn setInterest(
        b: *Multi,
        fd: sys.fd_t,
        old: api.Interest,
        new: api.Interest,
        how: api.Arm,
    ) sys.Error!void {
        switch (b.chosen) {
            inline else => |*x| return x.setInterest(fd, old, new, how),
        }
    }

    pub fn poll(b: *Multi, timeout_ms: i32, out: []api.Event) sys.Error!usize {
        switch (b.chosen) {
            inline else => |*x| return x.poll(timeout_ms, out),
        }
    }

    /// The name of the backend actually running.
    pub fn activeName(b: *const Multi) []const u8 {
        return @tagName(b.chosen);
    }

    /// The optional features in use (`feature_names`), as a bit set: io_uring's; none on epoll.
    pub fn features(b: *const Multi) u32 {
        switch (b.chosen) {
            inline else => |*x| {
                if (!@hasDecl(@TypeOf(x.*), "features")) return 0;
                // Each feature asked in turn: an `EnumSet` iterator counts
                // trailing zeros, an instruction above x86-64-v2.
                const in_use = x.features();
                var bits: u32 = 0;
                inline for (comptime std.enums.values(io_uring.Feature), 0..) |f, i| {
                    if (in_use.contains(f)) bits |= @as(u32, 1) << i;
                }
                return bits;
            },
        }
    }

    /// Whether `api.Arm.recv` is served by native receives (io_uring).
    pub fn nativeRecv(b: *const Multi) bool {
        switch (b.chosen) {
            inline else => |*x| {
                if (!@hasDecl(@TypeOf(x.*), "nativeRecv")) return false;
                return x.nativeRecv();
            },
        }
    }

    /// Provides receive buffer `id` (see io_uring's `provideRecvBuffer`);
    /// nothing on a backend that never hands one out.
    pub fn provideRecvBuffer(b: *Multi, id: u16, buf: []u8) void {
        switch (b.chosen) {
            inline else => |*x| {
                if (@hasDecl(@TypeOf(x.*), "provideRecvBuffer")) x.provideRecvBuffer(id, buf);
            },
        }
    }

    /// Gives back, unread, the buffer of a `recv` event.
    pub fn recycleRecvBuffer(b: *Multi, id: u16) void {
        switch (b.chosen) {
            inline else => |*x| {
                if (@hasDecl(@TypeOf(x.*), "recycleRecvBuffer")) x.recycleRecvBuffer(id);
            },
        }
    }

    /// Whether the running backend wakes itself (see `api`).
    pub fn wakesItself(b: *const Multi) bool {
        switch (b.chosen) {
            inline else => |*x| return @TypeOf(x.*).wakes_itself,
        }
    }

    /// Wakes a blocked `poll` from any thread; only where `wakesItself`.
    pub fn wake(b: *Multi) void {
        switch (b.chosen) {
            inline else => |*x| {
                if (comptime @TypeOf(x.*).wakes_itself) x.wake() else unreachable;
            },
        }
    }

    /// Whether the running backend watches child exits itself (see `api`).
    pub fn watchesChildren(b: *const Multi) bool {
        switch (b.chosen) {
            inline else => |*x| return @TypeOf(x.*).watches_children,
        }
    }

    /// Watches `exit.pid`'s exit; only where `watchesChildren`.
    pub fn watchChild(b: *Multi, exit: *api.ChildExit) sys.Error!void {
        switch (b.chosen) {
            inline else => |*x| {
                return if (comptime @TypeOf(x.*).watches_children) x.watchChild(exit) else unreachable;
            },
        }
    }

    /// Stops watching `exit`; only where `watchesChildren`.
    pub fn unwatchChild(b: *Multi, exit: *api.ChildExit) void {
        switch (b.chosen) {
            inline else => |*x| {
                if (comptime @TypeOf(x.*).watches_children) x.unwatchChild(exit) else unreachable;
            },
        }
    }
};

/// How many receive buffers a caller may provide (ids below this).
pub const recv_buffers_max: u16 = if (@hasField(Kind, "io_uring"))
    io_uring.Backend.recv_buffers_max
else
    0;

/// The names of the optional backend features `features` reports, by bit:
/// io_uring's (see `io_uring.Feature`), in builds that have it.
pub const feature_names: []const []const u8 = if (@hasField(Kind, "io_uring"))
    std.meta.fieldNames(io_uring.Feature)
else
    &.{};

/// The optional features `b` uses, a bit per `feature_names` entry.
pub fn features(b: *const Backend) u32 {
    if (is_linux) return b.features();
    return 0;
}

/// Whether `b` serves `api.Arm.recv` with native receives.
pub fn nativeRecv(b: *const Backend) bool {
    if (is_linux) return b.nativeRecv();
    return false;
}

/// Starts the backend of `kind` (on Linux, with io_uring's fallback).
pub fn initKind(kind: Kind) sys.Error!Backend {
    if (is_linux) return Multi.initKind(kind);
    return kqueue.Backend.init();
}

/// Starts the backend `ZLOOP_BACKEND` names (the only one off Linux,
/// where another name is refused all the same).
pub fn initFromEnv() InitError!Backend {
    if (is_linux) return Multi.init();
    _ = try kindFromEnv();
    return kqueue.Backend.init();
}

/// The name of the backend running `b`.
pub fn activeName(b: *const Backend) []const u8 {
    if (is_linux) return b.activeName();
    return kqueue.name;
}

/// Whether `b` wakes itself rather than through a watched fd.
pub inline fn wakesItself(b: *const Backend) bool {
    return switch (wake_duty) {
        .never => false,
        .always => true,
        .per_instance => b.wakesItself(),
    };
}

/// Whether `b` watches child exits itself rather than through pidfds.
pub inline fn watchesChildren(b: *const Backend) bool {
    return switch (child_duty) {
        .never => false,
        .always => true,
        .per_instance => b.watchesChildren(),
    };
}

comptime {
    api.check(Backend);
    for (std.meta.tags(Kind)) |kind| api.check(Of(kind));
}

test "backend names parse; unknown ones are refused" {
    try std.testing.expectEqual(@as(?Kind, default_kind), parseKind(""));
    if (is_linux) {
        try std.testing.expectEqual(@as(?Kind, .epoll), parseKind("epoll"));
        try std.testing.expectEqualStrings("epoll", name);
    }
    if (@hasField(Kind, "io_uring")) try std.testing.expectEqual(@as(?Kind, .io_uring), parseKind("io_uring"));
    if (@hasField(Kind, "kqueue")) try std.testing.expectEqual(@as(?Kind, .kqueue), parseKind("kqueue"));
    try std.testing.expectEqual(@as(?Kind, null), parseKind("uring"));
    if (!is_linux) try std.testing.expectEqualStrings("'kqueue'", names_quoted);
    if (is_linux and sys.portable) try std.testing.expectEqualStrings("'epoll', 'kqueue'", names_quoted);
    try std.testing.expectEqualStrings(name, names[0]);
    if (@hasField(Kind, "io_uring")) try std.testing.expectEqualStrings("'epoll', 'io_uring'", names_quoted);
}

test "each backend starts and reports its name" {
    inline for (comptime std.meta.tags(Kind)) |kind| {
        var b = try initKind(kind);
        defer b.deinit();
        // io_uring may fall back to epoll on a kernel without it.
        const got = activeName(&b);
        try std.testing.expect(std.mem.eql(u8, got, @tagName(kind)) or std.mem.eql(u8, got, "epoll"));
    }
}

test {
    inline for (comptime std.meta.tags(Kind)) |kind| _ = @field(@This(), @tagName(kind));
}
