//! BSD/macOS readiness backend: kqueue, one filter per direction.
//!
//! Written against the small interface in `os/kq.zig`: libc's kqueue on
//! macOS and the BSDs, the test-only emulation on Linux portable builds
//! (`ZLOOP_BACKEND=kqueue`), where this same file runs.
//!
//! Level-triggered by default, one-shot on request: a one-shot direction
//! is an EV_DISPATCH filter, which the kernel disables after its event and
//! EV_ENABLE re-arms, without the removal and re-addition EV_ONESHOT would
//! cost. A re-added filter keeps the EV_DISPATCH/EV_CLEAR flags it was
//! created with on FreeBSD, so switching a direction between level and
//! one-shot deletes and re-adds it. The backend remembers what the kernel
//! holds per fd and direction (`Filter`).
//!
//! epoll reports an fd once per wait with both directions; kqueue reports
//! each filter apart, so `poll` merges an fd's read and write events into
//! one `api.Event`. A one-shot registration of both directions is one
//! registration to the reactor: when one direction fires, the other is
//! disabled before `poll` returns (epoll's EPOLLONESHOT disarms the whole
//! entry).
//!
//! Every change is applied at once, with EV_RECEIPT: each change gets its
//! own result, and no pending event is drained by a change (the event
//! list is exactly as long as the change list). An error for a filter of
//! an fd that was closed (ENOENT, EBADF) is not fatal: the kernel dropped
//! the filters with the file, as epoll does.
//!
//! The backend wakes itself (EVFILT_USER, triggered from any thread) and
//! watches child exits itself (EVFILT_PROC with NOTE_EXIT, one-shot, the
//! wait status in `data`). Signals need nothing here: the adapter hears
//! them through Python's wakeup fd, an fd like any other.
const std = @import("std");
const kq = @import("../os/kq.zig");
const api = @import("api.zig");
const sys = @import("../sys.zig");

pub const name = "kqueue";

/// What the kernel holds for one direction of one fd.
const Filter = enum(u2) {
    absent,
    /// Level-triggered and enabled.
    level,
    /// EV_DISPATCH, enabled: reports once, then the kernel disables it.
    armed,
    /// EV_DISPATCH, disabled (fired, or disabled by the backend).
    disarmed,

    fn dispatch(f: Filter) bool {
        return f == .armed or f == .disarmed;
    }
};

/// The backend's view of one fd.
const Slot = struct {
    read: Filter = .absent,
    write: Filter = .absent,
    /// The `poll` that last reported this fd (`Backend.stamp`) and where
    /// in its output: a second filter's event merges into that one.
    stamp: u32 = 0,
    out: u16 = 0,
    /// A one-shot direction fired in this `poll`: the other is disabled.
    fired: bool = false,
};

/// One planned change and the state it leaves on success.
const Change = struct {
    kev: kq.Kevent,
    fd: sys.fd_t,
    dir: Dir,
    then: Filter,
};

const Dir = enum { read, write };

pub const Backend = struct {
    /// EV_DISPATCH: a one-shot filter stays, disabled, after its event.
    pub const has_oneshot = true;
    pub const wakes_itself = true;
    pub const watches_children = true;

    kq: sys.fd_t,
    /// Indexed by fd; grows by doubling when a larger fd registers. `api`
    /// gives `init` no allocator, so it comes from the page allocator.
    slots: std.ArrayList(Slot) = .empty,
    buf: [max_events]kq.Kevent = undefined,
    /// Counts `poll`s (see `Slot.stamp`); slots start at 0, so it starts
    /// at 1 after the first increment.
    stamp: u32 = 0,

    const max_events = 256;
    const slot_gpa = std.heap.page_allocator;
    /// The ident of the EVFILT_USER filter that wakes the backend.
    const wake_ident = 0;

    pub fn init() sys.Error!Backend {
        const fd = kq.kqueue();
        if (fd < 0) return fail(kq.errno());
        errdefer kq.close(fd);
        var b: Backend = .{ .kq = fd };
        const flags = kq.EV.ADD | kq.EV.CLEAR;
        var waker = [_]kq.Kevent{kq.make(wake_ident, kq.EVFILT.USER, flags, 0, 0)};
        try b.submit(&waker);
        if (receiptErrno(waker[0]) != .SUCCESS) return fail(receiptErrno(waker[0]));
        return b;
    }

    /// Closes the queue: the kernel drops every filter with it.
    pub fn deinit(b: *Backend) void {
        kq.close(b.kq);
        b.kq = -1;
        b.slots.deinit(slot_gpa);
    }

    /// `deinit` in a process that did not make the queue (a fork child).
    /// A kqueue is not inherited across fork(): FreeBSD's `fdcopy` copies
    /// only descriptors whose file ops are DFLAG_PASSABLE, which
    /// `kqueueops` are not (sys/kern/kern_descrip.c, sys/kern/kern_event.c);
    /// XNU's `kqueue_internal` marks the file FG_CONFINED and FP_CLOFORK,
    /// and `fdt_fork` skips such files (bsd/kern/kern_event.c,
    /// bsd/kern/kern_descrip.c). Its number is free in the child and may
    /// name another file by now: it is not closed.
    pub fn abandon(b: *Backend) void {
        b.kq = -1;
        b.slots.deinit(slot_gpa);
    }

    /// Moves `fd` from interest `old` to interest `new`, one-shot when
    /// `how.oneshot`. What the kernel holds is the backend's own record,
    /// unless `old` is none and `how.registered` false: then nothing of
    /// the fd's is held (see below); a new registration
    /// of a bad fd fails here with `error.BadFd`, as epoll's CTL_ADD does.
    pub fn setInterest(
        b: *Backend,
        fd: sys.fd_t,
        old: api.Interest,
        new: api.Interest,
        how: api.Arm,
    ) sys.Error!void {
        std.debug.assert(fd >= 0);
        const slot = try b.slotFor(fd);
        // The reactor holds nothing registered for `fd` (a new watcher, or
        // one whose file was closed behind it: `Reactor.forgetFile`): any
        // filter recorded here belonged to a file the kernel dropped on
        // close, so this registration starts afresh with EV_ADD.
        if (old.none() and !how.registered) {
            slot.read = .absent;
            slot.write = .absent;
        }
        // Dropping all interest is a removal to the reactor, which then
        // holds nothing registered for the fd (its next registration comes
        // with `how.registered` false, as after epoll's CTL_DEL): a
        // disarmed one-shot filter of the other direction goes too, or it
        // would outlive the record of it and keep its EV_DISPATCH through
        // the next EV_ADD (a "level" filter that reports once).
        var drop = how;
        if (new.none() and !old.none()) drop.forget = true;
        var plan: [4]Change = undefined;
        var n: usize = 0;
        inline for (.{ Dir.read, Dir.write }) |dir| {
            const want = @field(new, @tagName(dir));
            n += planFilter(plan[n..], fd, dir, @field(slot, @tagName(dir)), want, drop);
        }
        if (n == 0) return;
        return b.apply(plan[0..n]);
    }

    /// The changes that take direction `dir` of `fd` from `cur` to what
    /// `want` and `how` ask; at most two, written to `out`.
    fn planFilter(out: []Change, fd: sys.fd_t, dir: Dir, cur: Filter, want: bool, how: api.Arm) usize {
        const filter = filterOf(dir);
        const ident: usize = @intCast(fd);
        const target: Filter = if (!want) .absent else if (how.oneshot) .armed else .level;
        if (target == cur) return 0;
        const EV = kq.EV;
        const one = struct {
            fn change(o: []Change, i: usize, f: sys.fd_t, d: Dir, kev: kq.Kevent, then: Filter) usize {
                o[i] = .{ .kev = kev, .fd = f, .dir = d, .then = then };
                return i + 1;
            }
        }.change;
        switch (target) {
            // A disarmed one-shot filter reports nothing: it stays, and goes
            // with its file, as a disarmed EPOLLONESHOT entry does, unless
            // the fd is leaving or losing all interest (see `setInterest`).
            // An armed one is disabled rather than deleted unless so.
            .absent => return switch (cur) {
                .absent => 0,
                .disarmed => if (how.forget)
                    one(out, 0, fd, dir, kq.make(ident, filter, EV.DELETE, 0, 0), .absent)
                else
                    0,
                .armed => if (how.forget)
                    one(out, 0, fd, dir, kq.make(ident, filter, EV.DELETE, 0, 0), .absent)
                else
                    one(out, 0, fd, dir, kq.make(ident, filter, EV.DISABLE, 0, 0), .disarmed),
                .level => one(out, 0, fd, dir, kq.make(ident, filter, EV.DELETE, 0, 0), .absent),
            },
            .armed => if (cur == .disarmed) {
                return one(out, 0, fd, dir, kq.make(ident, filter, EV.ENABLE, 0, 0), .armed);
            },
            .level, .disarmed => {},
        }
        // Level <-> one-shot: FreeBSD keeps a filter's creation flags when
        // it is re-added, so the old one goes first.
        var n: usize = 0;
        if (cur.dispatch() != (target == .armed) and cur != .absent) {
            n = one(out, n, fd, dir, kq.make(ident, filter, EV.DELETE, 0, 0), .absent);
        }
        const mode: u16 = if (target == .armed) EV.DISPATCH else 0;
        return one(out, n, fd, dir, kq.make(ident, filter, EV.ADD | EV.ENABLE | mode, 0, 0), target);
    }

    /// Submits `plan` and records what it left. An EV_ENABLE whose filter
    /// is gone (its fd was closed, the number since reused) is re-added.
    fn apply(b: *Backend, plan: []Change) sys.Error!void {
        std.debug.assert(plan.len <= 4);
        var kevs: [4]kq.Kevent = undefined;
        for (plan, kevs[0..plan.len]) |ch, *k| k.* = ch.kev;
        try b.submit(kevs[0..plan.len]);
        var failed: ?sys.Error = null;
        for (plan, kevs[0..plan.len]) |*ch, k| {
            b.settle(ch, receiptErrno(k)) catch |err| {
                failed = failed orelse err;
            };
        }
        if (failed) |err| return err;
    }

    /// Records the outcome `e` of change `ch`; re-adds a vanished filter
    /// that was to be enabled.
    fn settle(b: *Backend, ch: *const Change, e: sys.E) sys.Error!void {
        const state = b.filterState(ch.fd, ch.dir);
        if (e == .SUCCESS) {
            state.* = ch.then;
            return;
        }
        state.* = .absent;
        const flags = ch.kev.flags;
        // Removing what the kernel already dropped with its file.
        if (flags & (kq.EV.DELETE | kq.EV.DISABLE) != 0 and (e == .NOENT or e == .BADF)) return;
        if (flags & kq.EV.ENABLE != 0 and flags & kq.EV.ADD == 0 and e == .NOENT) {
            const ident: usize = @intCast(ch.fd);
            const flags_add = kq.EV.ADD | kq.EV.ENABLE | kq.EV.DISPATCH;
            const add = kq.make(ident, ch.kev.filter, flags_add, 0, 0);
            var again = [_]Change{.{ .kev = add, .fd = ch.fd, .dir = ch.dir, .then = .armed }};
            return b.apply(&again);
        }
        return fail(e);
    }

    /// Applies `changes` with EV_RECEIPT, each change's result written
    /// back in its place (EV_ERROR, `data` the errno or 0).
    fn submit(b: *Backend, changes: []kq.Kevent) sys.Error!void {
        for (changes) |*ch| ch.flags |= kq.EV.RECEIPT;
        const n: c_int = @intCast(changes.len);
        const zero: kq.timespec = .{ .sec = 0, .nsec = 0 };
        while (true) {
            const rc = kq.kevent(b.kq, changes.ptr, n, changes.ptr, n, &zero);
            if (rc >= 0) {
                // One receipt per change: the event list has no room left
                // for a pending event.
                std.debug.assert(rc == n);
                return;
            }
            const e = kq.errno();
            if (e != .INTR) return fail(e);
        }
    }

    fn filterState(b: *Backend, fd: sys.fd_t, dir: Dir) *Filter {
        const slot = &b.slots.items[@intCast(fd)];
        return switch (dir) {
            .read => &slot.read,
            .write => &slot.write,
        };
    }

    fn slotFor(b: *Backend, fd: sys.fd_t) sys.Error!*Slot {
        const i: usize = @intCast(fd);
        if (i >= b.slots.items.len) {
            const old_len = b.slots.items.len;
            b.slots.resize(slot_gpa, @max(i + 1, old_len * 2, 64)) catch return fail(.NOMEM);
            @memset(b.slots.items[old_len..], .{});
        }
        return &b.slots.items[i];
    }

    /// Waits up to `timeout_ms` (-1: forever) and returns the ready events,
    /// an fd's two directions merged into one.
    pub fn poll(b: *Backend, timeout_ms: i32, out: []api.Event) sys.Error!usize {
        var ts: kq.timespec = undefined;
        var tsp: ?*const kq.timespec = null;
        if (timeout_ms >= 0) {
            const ns_per_ms = 1_000_000;
            ts = .{ .sec = @divTrunc(timeout_ms, 1000), .nsec = @rem(timeout_ms, 1000) * ns_per_ms };
            tsp = &ts;
        }
        const want: c_int = @intCast(@min(out.len, max_events));
        const rc = kq.kevent(b.kq, &b.buf, 0, &b.buf, want, tsp);
        if (rc < 0) return fail(kq.errno());
        b.stamp +%= 1;
        if (b.stamp == 0) b.stamp = 1;
        var n: usize = 0;
        for (b.buf[0..@intCast(rc)]) |*ev| n = b.translate(ev, out, n);
        try b.disarmSiblings(out[0..n]);
        return n;
    }

    /// Adds `ev` to `out[0..n]`; returns the new count.
    fn translate(b: *Backend, ev: *const kq.Kevent, out: []api.Event, n: usize) usize {
        // An in-band error (never asked for: changes are applied apart).
        if (ev.flags & kq.EV.ERROR != 0) return n;
        if (ev.filter == kq.EVFILT.USER) {
            out[n] = .{ .fd = api.wake_fd, .readable = true, .writable = false };
            return n + 1;
        }
        if (ev.filter == kq.EVFILT.PROC) return childExited(ev, out, n);
        const fd: sys.fd_t = @intCast(ev.ident);
        std.debug.assert(fd >= 0 and @as(usize, @intCast(fd)) < b.slots.items.len);
        const slot = &b.slots.items[@intCast(fd)];
        const read = ev.filter == kq.EVFILT.READ;
        const dir = if (read) &slot.read else &slot.write;
        if (dir.* == .armed) {
            dir.* = .disarmed; // the kernel disabled it (EV_DISPATCH)
            slot.fired = true;
        }
        // EOF with data still pending is readable, not an error; a socket
        // error (`fflags`) or a write side gone wakes both directions, as
        // epoll's EPOLLERR/EPOLLHUP do, so the callback finds the error.
        const eof = ev.flags & kq.EV.EOF != 0;
        const both = eof and (!read or ev.fflags != 0);
        if (slot.stamp == b.stamp) {
            const o = &out[slot.out];
            o.readable = o.readable or read or both;
            o.writable = o.writable or !read or both;
            return n;
        }
        slot.stamp = b.stamp;
        slot.out = @intCast(n);
        out[n] = .{ .fd = fd, .readable = read or both, .writable = !read or both };
        return n + 1;
    }

    fn childExited(ev: *const kq.Kevent, out: []api.Event, n: usize) usize {
        const exit: *api.ChildExit = @ptrFromInt(ev.udata);
        // NOTE_EXIT reports once; the filter is gone (EV_ONESHOT).
        exit.status = @truncate(@as(u64, @bitCast(@as(i64, ev.data))));
        out[n] = .{ .fd = api.childEventFd(exit.serial), .readable = true, .writable = false };
        return n + 1;
    }

    /// One direction of a one-shot registration fired: the other, still
    /// armed, is disabled, as one EPOLLONESHOT entry disarms both.
    fn disarmSiblings(b: *Backend, events: []const api.Event) sys.Error!void {
        for (events) |ev| {
            if (ev.fd < 0) continue;
            const slot = &b.slots.items[@intCast(ev.fd)];
            if (!slot.fired) continue;
            slot.fired = false;
            var plan: [2]Change = undefined;
            var n: usize = 0;
            inline for (.{ Dir.read, Dir.write }) |dir| {
                const cur = @field(slot, @tagName(dir));
                if (cur == .armed) n += planFilter(plan[n..], ev.fd, dir, cur, false, .{});
            }
            if (n > 0) try b.apply(plan[0..n]);
        }
    }

    /// Wakes a blocked `poll` from any thread (EVFILT_USER, NOTE_TRIGGER);
    /// the wake-up is reported once, as an event on `api.wake_fd`, however
    /// many wakes came before it (EV_CLEAR).
    pub fn wake(b: *Backend) void {
        const trigger = [_]kq.Kevent{kq.make(wake_ident, kq.EVFILT.USER, 0, kq.NOTE.TRIGGER, 0)};
        var none: [0]kq.Kevent = .{};
        _ = kq.kevent(b.kq, &trigger, 1, &none, 0, null);
    }

    /// Watches `exit.pid`'s exit: reported once as an event on
    /// `api.childEventFd(exit.serial)`, with `exit.status` written first.
    /// `exit` must stay valid until then or until `unwatchChild`.
    pub fn watchChild(b: *Backend, exit: *api.ChildExit) sys.Error!void {
        const pid: usize = @intCast(exit.pid);
        const flags = kq.EV.ADD | kq.EV.ONESHOT;
        var ch = [_]kq.Kevent{kq.make(pid, kq.EVFILT.PROC, flags, kq.note_exit, @intFromPtr(exit))};
        try b.submit(&ch);
        const e = receiptErrno(ch[0]);
        if (e != .SUCCESS) return fail(e);
    }

    /// Stops watching `exit` (gone already if its exit was reported).
    pub fn unwatchChild(b: *Backend, exit: *api.ChildExit) void {
        const pid: usize = @intCast(exit.pid);
        var ch = [_]kq.Kevent{kq.make(pid, kq.EVFILT.PROC, kq.EV.DELETE, 0, 0)};
        b.submit(&ch) catch {};
    }
};

fn filterOf(dir: Dir) i16 {
    return switch (dir) {
        .read => kq.EVFILT.READ,
        .write => kq.EVFILT.WRITE,
    };
}

/// The errno of an EV_RECEIPT result (`.SUCCESS` when the change took).
fn receiptErrno(k: kq.Kevent) sys.E {
    std.debug.assert(k.flags & kq.EV.ERROR != 0);
    return @fromBackingInt(@intCast(@as(u16, @intCast(k.data))));
}

const fail = sys.fail;

// ---------------------------------------------------------------- tests

const testing = @import("../os/testing.zig");
const expect = std.testing.expect;
const expectEqual = std.testing.expectEqual;

fn pollOne(b: *Backend, timeout_ms: i32) !api.Event {
    var out: [8]api.Event = undefined;
    const n = try api.pollRetrying(b, timeout_ms, &out);
    try expectEqual(@as(usize, 1), n);
    return out[0];
}

fn pollNone(b: *Backend) !void {
    var out: [8]api.Event = undefined;
    try expectEqual(@as(usize, 0), try b.poll(0, &out));
}

test "kqueue: level-triggered read is reported on every poll while data waits; removal stops it" {
    var b = try Backend.init();
    defer b.deinit();
    const pair = try testing.socketPair();
    defer sys.close(pair[0]);
    defer sys.close(pair[1]);
    try b.setInterest(pair[0], .{}, .{ .read = true }, .{});
    try pollNone(&b);
    _ = try sys.write(pair[1], "abcd");
    for (0..2) |_| {
        const ev = try pollOne(&b, 1000);
        try expect(ev.fd == pair[0] and ev.readable and !ev.writable);
    }
    var buf: [8]u8 = undefined;
    _ = try sys.read(pair[0], &buf);
    try pollNone(&b);
    _ = try sys.write(pair[1], "e");
    try b.setInterest(pair[0], .{ .read = true }, .{}, .{});
    try pollNone(&b);
}

test "kqueue: an fd's read and write events merge into one event" {
    var b = try Backend.init();
    defer b.deinit();
    const pair = try testing.socketPair();
    defer sys.close(pair[0]);
    defer sys.close(pair[1]);
    _ = try sys.write(pair[1], "x");
    try b.setInterest(pair[0], .{}, .{ .read = true, .write = true }, .{});
    const ev = try pollOne(&b, 1000);
    try expect(ev.fd == pair[0] and ev.readable and ev.writable);
}

test "kqueue: a one-shot registration of both directions is disarmed whole by one event" {
    var b = try Backend.init();
    defer b.deinit();
    const pair = try testing.socketPair();
    defer sys.close(pair[0]);
    defer sys.close(pair[1]);
    // Writable at once, readable later: the write event disarms reads too.
    try b.setInterest(pair[0], .{}, .{ .read = true, .write = true }, .{ .oneshot = true });
    const ev = try pollOne(&b, 1000);
    try expect(ev.writable and !ev.readable);
    _ = try sys.write(pair[1], "x");
    try pollNone(&b);
    // Re-armed (EV_ENABLE): reported again, once.
    try b.setInterest(pair[0], .{}, .{ .read = true }, .{ .oneshot = true, .registered = true });
    try expect((try pollOne(&b, 1000)).readable);
    try pollNone(&b);
    // Level-triggered from now on: the filter is re-created.
    try b.setInterest(pair[0], .{}, .{ .read = true }, .{ .registered = true });
    for (0..2) |_| try expect((try pollOne(&b, 1000)).readable);
    try b.setInterest(pair[0], .{ .read = true }, .{}, .{ .forget = true });
    try pollNone(&b);
}

test "kqueue: dropping all interest removes a disarmed one-shot filter too; what comes next is level-triggered" {
    var b = try Backend.init();
    defer b.deinit();
    const pair = try testing.socketPair();
    defer sys.close(pair[0]);
    defer sys.close(pair[1]);
    // A one-shot write fires (a connect's wait), leaving its filter disarmed.
    try b.setInterest(pair[0], .{}, .{ .write = true }, .{ .oneshot = true });
    try expect((try pollOne(&b, 1000)).writable);
    // A level read is added, then dropped: to the reactor nothing of the fd
    // is registered any more, so its next registration says so.
    try b.setInterest(pair[0], .{}, .{ .read = true }, .{ .registered = true });
    try b.setInterest(pair[0], .{ .read = true }, .{}, .{ .registered = true });
    try b.setInterest(pair[0], .{}, .{ .write = true }, .{});
    // Reported on every poll: an EV_ADD onto the stale EV_DISPATCH filter
    // (kqueue(2): "re-adding an existing event will modify the parameters
    // of the original event") would have reported once.
    for (0..2) |_| try expect((try pollOne(&b, 1000)).writable);
}

test "kqueue: end of file with data pending is readable, not an error; a write side gone wakes both" {
    var b = try Backend.init();
    defer b.deinit();
    const pair = try testing.socketPair();
    defer sys.close(pair[0]);
    _ = try sys.write(pair[1], "last");
    sys.close(pair[1]);
    try b.setInterest(pair[0], .{}, .{ .read = true }, .{});
    const ev = try pollOne(&b, 1000);
    try expect(ev.readable and !ev.writable);
    var buf: [8]u8 = undefined;
    try expectEqual(@as(usize, 4), try sys.read(pair[0], &buf));
    try b.setInterest(pair[0], .{ .read = true }, .{ .write = true }, .{});
    const gone = try pollOne(&b, 1000);
    try expect(gone.writable and gone.readable);
}

test "kqueue: EV_EOF with the socket's error in fflags on a read filter wakes the write direction too, as EPOLLERR does" {
    // kqueue(2): "If the read direction of the socket has shutdown, then
    // the filter also sets EV_EOF in flags, and returns the socket error
    // (if any) in fflags". The emulation tells the error under a BSD
    // personality (the queue keeps the one it was made with).
    if (comptime kq.emulated) kq.emulation.personality_override = .freebsd;
    const made = Backend.init();
    if (comptime kq.emulated) kq.emulation.personality_override = null;
    var b = try made;
    defer b.deinit();
    const fd = try testing.resetSocket();
    defer sys.close(fd);
    try b.setInterest(fd, .{}, .{ .read = true }, .{});
    const ev = try pollOne(&b, 1000);
    try expect(ev.fd == fd and ev.readable and ev.writable);
}

test "kqueue: a bad fd fails to register; dropping a closed fd's filters is no error" {
    var b = try Backend.init();
    defer b.deinit();
    const fds = try sys.pipe();
    sys.close(fds[1]);
    try b.setInterest(fds[0], .{}, .{ .read = true }, .{});
    sys.close(fds[0]);
    try std.testing.expectError(error.BadFd, b.setInterest(fds[0], .{}, .{ .write = true }, .{}));
    try b.setInterest(fds[0], .{ .read = true }, .{}, .{ .forget = true });
}

test "kqueue: a disarmed one-shot filter whose fd was closed is added anew for the next file" {
    var b = try Backend.init();
    defer b.deinit();
    const old = try testing.socketPair();
    defer sys.close(old[1]);
    _ = try sys.write(old[1], "x");
    try b.setInterest(old[0], .{}, .{ .read = true }, .{ .oneshot = true });
    try expect((try pollOne(&b, 1000)).readable);
    sys.close(old[0]); // the kernel drops the disarmed filter
    const new = try testing.socketPair(); // likely under the same number
    defer sys.close(new[0]);
    defer sys.close(new[1]);
    _ = try sys.write(new[1], "y");
    try b.setInterest(new[0], .{}, .{ .read = true }, .{ .oneshot = true, .registered = true });
    const ev = try pollOne(&b, 1000);
    try expect(ev.fd == new[0] and ev.readable);
}

test "kqueue: a wake from another thread ends a blocking poll, reported once" {
    var b = try Backend.init();
    defer b.deinit();
    const t = try std.Thread.spawn(.{}, Backend.wake, .{&b});
    const ev = try pollOne(&b, -1);
    t.join();
    try expectEqual(api.wake_fd, ev.fd);
    b.wake();
    b.wake();
    try expectEqual(api.wake_fd, (try pollOne(&b, 0)).fd);
    try pollNone(&b);
}

test "kqueue: a child's exit is reported once, with its wait status; an unwatched one never" {
    var b = try Backend.init();
    defer b.deinit();
    var exit: api.ChildExit = .{ .pid = try testing.spawnChild(7, null), .serial = 3 };
    try b.watchChild(&exit);
    const ev = try pollOne(&b, 5000);
    try expectEqual(api.childEventFd(3), ev.fd);
    try expectEqual(@as(?u32, 7 << 8), exit.status);
    try expectEqual(@as(u32, 7 << 8), try testing.reap(exit.pid));
    const hold = try testing.blockingPipe();
    defer sys.close(hold[0]);
    var other: api.ChildExit = .{ .pid = try testing.spawnChild(0, hold), .serial = 4 };
    try b.watchChild(&other);
    b.unwatchChild(&other);
    sys.close(hold[1]);
    _ = try testing.reap(other.pid);
    try pollNone(&b);
}
