//! Backend selection, done once at compile time for the platform. The
//! io_uring backend will join epoll on Linux as a run-time choice.
const builtin = @import("builtin");
pub const api = @import("backend/api.zig");

pub const Backend = switch (builtin.os.tag) {
    .linux => @import("backend/epoll.zig").Backend,
    .macos, .freebsd, .netbsd, .openbsd, .dragonfly => @import("backend/kqueue.zig").Backend,
    else => @compileError("zloop supports Linux and the BSDs/macOS"),
};

pub const name = switch (builtin.os.tag) {
    .linux => @import("backend/epoll.zig").name,
    else => @import("backend/kqueue.zig").name,
};

comptime {
    api.check(Backend);
}
