//! BSD/macOS readiness backend: kqueue with one filter per direction.
//! Written for macOS; it cannot be compiled or run on the Linux CI machines.
const std = @import("std");
const c = std.c;
const api = @import("api.zig");
const sys = @import("../sys.zig");

pub const name = "kqueue";

pub const Backend = struct {
    /// Not yet: EV_DISPATCH would be the equivalent. The reactor then keeps
    /// every registration level-triggered and removes it explicitly.
    pub const has_oneshot = false;

    kq: c.fd_t,
    buf: [max_events]c.Kevent = undefined,

    const max_events = 256;

    pub fn init() sys.Error!Backend {
        const kq = c.kqueue();
        if (kq < 0) return error.Unexpected;
        return .{ .kq = kq };
    }

    pub fn deinit(b: *Backend) void {
        _ = c.close(b.kq);
        b.kq = -1;
    }

    fn change(fd: c.fd_t, filter: i16, flags: u16) c.Kevent {
        return .{
            .ident = @intCast(fd),
            .filter = filter,
            .flags = flags,
            .fflags = 0,
            .data = 0,
            .udata = 0,
        };
    }

    pub fn setInterest(b: *Backend, fd: c.fd_t, old: api.Interest, new: api.Interest, how: api.Arm) sys.Error!void {
        std.debug.assert(!how.oneshot); // has_oneshot is false
        var changes: [2]c.Kevent = undefined;
        var n: usize = 0;
        if (old.read != new.read) {
            const flags: u16 = if (new.read) c.EV.ADD else c.EV.DELETE;
            changes[n] = change(fd, c.EVFILT.READ, flags);
            n += 1;
        }
        if (old.write != new.write) {
            const flags: u16 = if (new.write) c.EV.ADD else c.EV.DELETE;
            changes[n] = change(fd, c.EVFILT.WRITE, flags);
            n += 1;
        }
        if (n == 0) return;
        const rc = c.kevent(b.kq, &changes, @intCast(n), &b.buf, 0, null);
        // Deleting a filter of an fd that was already closed fails with
        // ENOENT/EBADF; the kernel dropped it already, like epoll's DEL.
        if (rc < 0 and !new.none()) return error.Unexpected;
    }

    pub fn poll(b: *Backend, timeout_ms: i32, out: []api.Event) sys.Error!usize {
        var ts: c.timespec = undefined;
        var tsp: ?*const c.timespec = null;
        if (timeout_ms >= 0) {
            ts = .{ .sec = @divTrunc(timeout_ms, 1000), .nsec = @rem(timeout_ms, 1000) * 1_000_000 };
            tsp = &ts;
        }
        const want: c_int = @intCast(@min(out.len, max_events));
        const rc = c.kevent(b.kq, &b.buf, 0, &b.buf, want, tsp);
        if (rc < 0) return if (c._errno().* == @intFromEnum(c.E.INTR)) error.Interrupted else error.Unexpected;
        const n: usize = @intCast(rc);
        for (b.buf[0..n], out[0..n]) |ev, *o| {
            const failed = ev.flags & (c.EV.EOF | c.EV.ERROR) != 0;
            o.* = .{
                .fd = @intCast(ev.ident),
                .readable = ev.filter == c.EVFILT.READ or failed,
                .writable = ev.filter == c.EVFILT.WRITE or failed,
            };
        }
        return n;
    }
};
