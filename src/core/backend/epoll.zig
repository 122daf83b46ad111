//! Linux readiness backend: epoll, level-triggered (one-shot on request).
//!
//! The reactor asks for interest per fd and receives `Event`s; nothing else
//! about epoll leaks out. Level-triggered so that an event the reactor could
//! not finish handling (a callback raised mid-batch) is simply reported again.
const std = @import("std");
const linux = std.os.linux;
const sys = @import("../sys.zig");
const api = @import("api.zig");

pub const name = "epoll";

pub const Backend = struct {
    /// EPOLLONESHOT: a one-shot entry stays in the interest list, disabled,
    /// after its event, and `CTL_MOD` re-enables it.
    pub const has_oneshot = true;

    /// The reactor wakes it through an fd it watches, and watches child
    /// exits through pidfds.
    pub const wakes_itself = false;
    pub const watches_children = false;

    epfd: sys.fd_t,
    buf: [max_events]linux.epoll_event = undefined,

    const max_events = 256;

    pub fn init() sys.Error!Backend {
        return .{ .epfd = try sys.epoll_create() };
    }

    pub fn deinit(b: *Backend) void {
        sys.close(b.epfd);
        b.epfd = -1;
    }

    /// `deinit` in a process that did not make the backend (a fork
    /// child): the epoll instance is the parent's too, so nothing in it
    /// changes. Closing this process's descriptor for it only drops the
    /// child's reference: every registration stays, as the parent made it.
    pub fn abandon(b: *Backend) void {
        b.deinit();
    }

    /// Moves `fd` from interest `old` to interest `new` (ADD, MOD or DEL).
    /// Dropping the interest of a disarmed one-shot entry (`old` none)
    /// leaves it in place: it reports nothing, and the kernel removes it
    /// with the file.
    pub fn setInterest(
        b: *Backend,
        fd: sys.fd_t,
        old: api.Interest,
        new: api.Interest,
        how: api.Arm,
    ) sys.Error!void {
        if (old.none() and new.none()) return;
        if (new.none()) {
            sys.epoll_ctl(b.epfd, linux.EPOLL.CTL_DEL, fd, 0) catch |err| switch (err) {
                // The fd was closed before being unregistered: the kernel has
                // already dropped it from the interest list, as asyncio's
                // selector tolerates.
                error.BadFd => {},
                else => return if (sys.last_errno == @backingInt(linux.E.NOENT)) {} else err,
            };
            return;
        }
        var mask: u32 = 0;
        if (new.read) mask |= linux.EPOLL.IN;
        if (new.write) mask |= linux.EPOLL.OUT;
        if (how.oneshot) mask |= linux.EPOLL.ONESHOT;
        const add = old.none() and !how.registered;
        const op: u32 = if (add) linux.EPOLL.CTL_ADD else linux.EPOLL.CTL_MOD;
        sys.epoll_ctl(b.epfd, op, fd, mask) catch |err| {
            // A stale registration survives when an fd was closed and its
            // number reused without unregistering; fix it up in place.
            if (op == linux.EPOLL.CTL_ADD and sys.last_errno == @backingInt(linux.E.EXIST)) {
                return sys.epoll_ctl(b.epfd, linux.EPOLL.CTL_MOD, fd, mask);
            }
            if (op == linux.EPOLL.CTL_MOD and sys.last_errno == @backingInt(linux.E.NOENT)) {
                return sys.epoll_ctl(b.epfd, linux.EPOLL.CTL_ADD, fd, mask);
            }
            return err;
        };
    }

    /// Waits up to `timeout_ms` (-1: forever) and returns the ready events.
    pub fn poll(b: *Backend, timeout_ms: i32, out: []api.Event) sys.Error!usize {
        const want = @min(out.len, max_events);
        const n = try sys.epoll_wait(b.epfd, b.buf[0..want], timeout_ms);
        toEvents(b.buf[0..n], out[0..n]);
        return n;
    }

    /// The events epoll wrote (`raw`), as the reactor's.
    pub fn toEvents(raw: []const linux.epoll_event, out: []api.Event) void {
        for (raw, out) |ev, *o| {
            const err_bits = linux.EPOLL.ERR | linux.EPOLL.HUP;
            o.* = .{
                .fd = ev.data.fd,
                // An error or hang-up wakes both directions, as the selector
                // module reports them, so the callback discovers the error.
                .readable = ev.events & (linux.EPOLL.IN | err_bits) != 0,
                .writable = ev.events & (linux.EPOLL.OUT | err_bits) != 0,
            };
        }
    }
};

test "epoll reports a readable eventfd" {
    var b = try Backend.init();
    defer b.deinit();
    const fd = try sys.eventfd();
    defer sys.close(fd);
    try b.setInterest(fd, .{}, .{ .read = true }, .{});
    var out: [8]api.Event = undefined;
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    var one: u64 = 1;
    _ = try sys.write(fd, std.mem.asBytes(&one));
    try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 100, &out));
    try std.testing.expectEqual(fd, out[0].fd);
    try std.testing.expect(out[0].readable);
    try b.setInterest(fd, .{ .read = true }, .{}, .{});
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
}
