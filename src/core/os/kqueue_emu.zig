//! kqueue(2) for Linux, over epoll, timerfd, pidfd and eventfd: test
//! infrastructure, so that the kqueue backend (and the whole loop on it,
//! `ZLOOP_BACKEND=kqueue`) runs on the Linux machines zloop is developed
//! on. Compiled only by a `-Dportable=true` build (through `kq.zig`);
//! never by a default build, a release or a wheel.
//!
//! It follows FreeBSD's kqueue(2) (and macOS's where they agree), with
//! FreeBSD 12+'s `struct kevent` (`ext[4]`) and constants:
//! - a kevent is identified by (ident, filter); the change list is applied
//!   in order, before any event is read; EV_RECEIPT or an error puts an
//!   EV_ERROR entry (`data` = errno, 0 for success) in the event list when
//!   there is room, else the call fails and later changes are not applied;
//!   a call that placed such entries returns them without waiting;
//! - EV_ADD of an existing kevent modifies it (`udata`, `fflags`, `data`;
//!   not its EV_ONESHOT/EV_DISPATCH/EV_CLEAR, fixed at creation, as
//!   FreeBSD's kqueue_register does) and enables it unless EV_DISABLE;
//!   EV_DELETE, EV_ENABLE or EV_DISABLE of an absent one is ENOENT;
//! - EV_ONESHOT deletes after the first report, EV_DISPATCH disables,
//!   EV_CLEAR resets the state (an fd filter then reports new data only);
//! - EVFILT_READ: `data` = bytes readable (a listening TCP socket: pending
//!   connections); EV_EOF once the read side is shut, with data possibly
//!   still pending. EVFILT_WRITE: `data` = room in the send buffer (a
//!   pipe: in the pipe); EV_EOF once the reader is gone;
//! - EVFILT_TIMER (ms by default; NOTE_SECONDS/MSECONDS/USECONDS/NSECONDS,
//!   NOTE_ABSTIME), periodic unless EV_ONESHOT, `data` = expirations;
//!   re-adding restarts it;
//! - EVFILT_USER with NOTE_TRIGGER and NOTE_FFNOP/FFAND/FFOR/FFCOPY;
//! - EVFILT_SIGNAL, counting deliveries in `data` (EV_CLEAR), beside the
//!   process's own handlers: a counting handler chained in front of them;
//! - EVFILT_PROC with NOTE_EXIT, the wait status in `data`, EV_EOF and
//!   EV_ONESHOT on the report (any process: a pidfd);
//! - closing an fd removes its filters: epoll forgets a closed file, and a
//!   filter whose number now names another file (told by the file's
//!   identity recorded at EV_ADD, or by epoll no longer knowing the pair)
//!   is dropped unreported, so a reused number never reports for the file
//!   before it.
//!
//! Where Linux cannot do what kqueue does, it says so:
//! - EV_EOF's `fflags` (the socket's pending error) is 0: Linux reads a
//!   socket error only by clearing it (SO_ERROR), which would take it from
//!   the application's next call (a personality below reports the one
//!   error it can tell without reading it);
//! - regular files fail EV_ADD with EPERM, as epoll refuses them (kqueue
//!   watches vnodes; a personality below watches them);
//! - directories fail EV_ADD with EPERM under every personality (FreeBSD
//!   watches them as vnodes; XNU's vnode filters take regular files and
//!   FIFOs only);
//! - EVFILT_SIGNAL counts only while its handler is installed: a handler
//!   set after the filter replaces the counting one;
//! - EV_CLEAR on an anonymous-inode file (eventfd, timerfd, ...) cannot
//!   tell a reused number from the file it watched (they share one inode).
//!
//! Personalities. Where macOS and FreeBSD differ from each other, or
//! from what the emulation does by default, a queue follows one kernel's
//! rules when `ZLOOP_KQUEUE_PERSONALITY` names it (`macos`, `freebsd`) as
//! `kqueue()` makes the queue; unset or empty, the rules above; any other
//! value fails `kqueue()` with EINVAL. Each rule's test cites its source.
//! - both: a regular file is watched, as the vnode it is. A BSD checks
//!   a vnode kevent when it is added or enabled and when the file is
//!   written (here: its size or mtime changed), not when it is sought;
//!   once active it reports until a check finds it quiet. EVFILT_READ is
//!   active while the file offset is short of the end (`data` = size -
//!   offset), EVFILT_WRITE always (`data` 0 on FreeBSD, 1 on macOS);
//!   EV_CLEAR quiets it once reported, until the next write;
//! - both: EV_EOF's `fflags` is an AF_UNIX socket's error, ECONNRESET,
//!   the only one Linux sets on such a socket (told by EPOLLERR, so read
//!   without clearing it); other sockets' stays 0, as above;
//! - `macos`: EVFILT_PROC on a process that has exited, reaped or not, is
//!   refused with ESRCH (XNU drops an exiting process from proc_find
//!   before it posts NOTE_EXIT); FreeBSD (and the default) report NOTE_EXIT
//!   at once for a zombie;
//! - `freebsd`: EVFILT_WRITE on a pipe or FIFO whose reader is gone is
//!   refused with EPIPE (macOS takes it, and reports EV_EOF).
//! One XNU rule no personality follows: XNU posts NOTE_EXIT before the
//! process turns zombie, so waitpid(WNOHANG) may still return 0 after the
//! report; Linux tells nothing of an exit before the zombie, so tests make
//! that lag themselves (tests/test_subprocess.py patches waitpid).
//!
//! Every epoll registration is one-shot or edge-triggered and re-armed by
//! hand, so that a registration left behind for a file still open
//! elsewhere (a dup, a child between fork and exec) fires at most once and
//! is then ignored: an fd number's stale registration never spins a wait.
//! All state sits behind one mutex, released while a thread waits; a
//! trigger from another thread wakes it through the queue's eventfd.
const std = @import("std");
const linux = std.os.linux;
const c = std.c;
const linux_os = @import("linux.zig");

// ------------------------------------------------------------ interface

/// FreeBSD 12+'s `struct kevent`.
pub const Kevent = extern struct {
    ident: usize,
    filter: i16,
    flags: u16,
    fflags: u32,
    data: i64,
    udata: usize,
    ext: [4]u64 = @splat(0),
};

/// FreeBSD's action and return flags.
pub const EV = struct {
    pub const ADD = 0x0001;
    pub const DELETE = 0x0002;
    pub const ENABLE = 0x0004;
    pub const DISABLE = 0x0008;
    pub const ONESHOT = 0x0010;
    pub const CLEAR = 0x0020;
    pub const RECEIPT = 0x0040;
    pub const DISPATCH = 0x0080;
    pub const SYSFLAGS = 0xF000;
    pub const ERROR = 0x4000;
    pub const EOF = 0x8000;
};

/// FreeBSD's filters (the ones emulated).
pub const EVFILT = struct {
    pub const READ = -1;
    pub const WRITE = -2;
    pub const PROC = -5;
    pub const SIGNAL = -6;
    pub const TIMER = -7;
    pub const USER = -11;
};

/// FreeBSD's filter flags (the ones emulated).
pub const NOTE = struct {
    pub const FFNOP = 0x00000000;
    pub const FFAND = 0x40000000;
    pub const FFOR = 0x80000000;
    pub const FFCOPY = 0xc0000000;
    pub const FFCTRLMASK = 0xc0000000;
    pub const FFLAGSMASK = 0x00ffffff;
    pub const TRIGGER = 0x01000000;
    pub const EXIT = 0x80000000;
    pub const SECONDS = 0x01;
    pub const MSECONDS = 0x02;
    pub const USECONDS = 0x04;
    pub const NSECONDS = 0x08;
    pub const ABSTIME = 0x10;
};

/// The kernel a queue follows where the BSDs differ (see the header).
pub const Personality = enum { default, macos, freebsd };

/// The environment variable that names a new queue's personality.
pub const personality_env = "ZLOOP_KQUEUE_PERSONALITY";

/// Tests only: the personality new queues follow, in place of the
/// environment's (null: the environment's). Not thread-safe.
pub var personality_override: ?Personality = null;

/// The personality a queue made now follows; null for an unknown name.
fn personalityNow() ?Personality {
    if (personality_override) |p| return p;
    const raw = std.c.getenv(personality_env) orelse return .default;
    const name = std.mem.span(raw);
    if (name.len == 0) return .default;
    if (std.mem.eql(u8, name, "macos")) return .macos;
    if (std.mem.eql(u8, name, "freebsd")) return .freebsd;
    return null;
}

/// A new queue's fd (an epoll fd), or -1 and errno.
pub fn kqueue() c_int {
    const personality = personalityNow() orelse return failC(.INVAL);
    forks.watch();
    lock();
    defer unlock();
    const q = Queue.create(personality) catch |err| return failC(errnoOf(err));
    registry.put(gpa, q.ep, q) catch {
        q.destroy();
        return failC(.NOMEM);
    };
    return q.ep;
}

/// kevent(2): see the file's header for the rules followed.
pub fn kevent(
    kq: c_int,
    changelist: [*]const Kevent,
    nchanges: c_int,
    eventlist: [*]Kevent,
    nevents: c_int,
    timeout: ?*const c.timespec,
) c_int {
    if (nchanges < 0 or nevents < 0) return failC(.INVAL);
    lock();
    defer unlock();
    const q = registry.get(kq) orelse return failC(.BADF);
    const out = eventlist[0..@intCast(nevents)];
    const changes = changelist[0..@intCast(nchanges)];
    const placed = q.applyChanges(changes, out) catch return failC(failed_errno);
    // Entries placed for the change list are the answer: no wait.
    if (placed > 0 or out.len == 0) return @intCast(placed);
    const deadline_ns = deadlineOf(timeout);
    const n = q.scan(out, deadline_ns) catch return failC(failed_errno);
    return @intCast(n);
}

/// Closes queue `kq` and frees its state (a plain close would leak it).
pub fn close(kq: c_int) void {
    lock();
    defer unlock();
    const entry = registry.fetchRemove(kq) orelse {
        _ = c.close(kq);
        return;
    };
    const q = entry.value;
    if (q.waiting > 0) {
        q.closed = true; // the waiting thread frees it when it wakes
        return;
    }
    q.destroy();
}

/// A kqueue is not inherited across fork(): FreeBSD's `fdcopy` copies
/// "all passable descriptors (i.e. not kqueue)", and `kqueueops` carries no
/// DFLAG_PASSABLE (sys/kern/kern_descrip.c, sys/kern/kern_event.c); XNU's
/// `kqueue_internal` marks a queue's file FG_CONFINED and FP_CLOFORK, which
/// `fdt_fork` does not copy (bsd/kern/kern_event.c, bsd/kern/kern_descrip.c).
/// So a child starts with none of its parent's queues: their numbers are
/// free, and closing or using one there touches whatever file took it. An
/// fd of epoll is inherited, so the emulation makes the same so: in the
/// child, every queue's descriptors close at fork (`forgetAll`), each
/// touching nothing the parent's queue holds.
const forks = struct {
    var watching = std.atomic.Value(bool).init(false);

    fn watch() void {
        if (watching.swap(true, .acq_rel)) return;
        _ = c.pthread_atfork(prepare, parent, child);
    }

    /// The state is consistent while the fork copies it.
    fn prepare() callconv(.c) void {
        lock();
    }

    fn parent() callconv(.c) void {
        unlock();
    }

    fn child() callconv(.c) void {
        forgetAll();
        unlock();
    }
};

/// A fork child's queues go (see `forks`): their descriptors and their
/// knotes' own (timers, pidfds) close, with no epoll_ctl on the epoll
/// instances the parent still uses; signal counting stops. The mutex is
/// held.
fn forgetAll() void {
    var it = registry.valueIterator();
    while (it.next()) |entry| {
        const q = entry.*;
        var kit = q.knotes.valueIterator();
        while (kit.next()) |kn| {
            switch (kn.*.kind) {
                .timer, .proc => closeFd(kn.*.fd),
                .signal => signals.detach(@intCast(kn.*.ident)),
                .fd, .user, .vnode => {},
            }
            gpa.destroy(kn.*);
        }
        q.knotes.deinit(gpa);
        q.by_serial.deinit(gpa);
        q.soft.deinit(gpa);
        q.closeFds();
        gpa.destroy(q);
    }
    registry.clearAndFree(gpa);
}

// ------------------------------------------------------- shared state

const gpa = std.heap.c_allocator;
var mutex: c.pthread_mutex_t = .{};
var registry: std.AutoHashMapUnmanaged(c_int, *Queue) = .empty;

fn lock() void {
    std.debug.assert(c.pthread_mutex_lock(&mutex) == .SUCCESS);
}

fn unlock() void {
    std.debug.assert(c.pthread_mutex_unlock(&mutex) == .SUCCESS);
}

const E = linux.E;

fn failC(e: E) c_int {
    c._errno().* = @backingInt(e);
    return -1;
}

/// A call failed; its errno is in `failed_errno` (guarded by the mutex).
const Failed = error{Failed};
var failed_errno: E = .SUCCESS;

fn fail(e: E) Failed {
    std.debug.assert(e != .SUCCESS);
    failed_errno = e;
    return error.Failed;
}

fn errnoOf(err: (Failed || std.mem.Allocator.Error)) E {
    return switch (err) {
        error.OutOfMemory => .NOMEM,
        error.Failed => failed_errno,
    };
}

/// A raw syscall's errno (`.SUCCESS` when it worked).
fn sysErr(rc: usize) E {
    return linux.errno(rc);
}

fn check(rc: usize) Failed!usize {
    const e = sysErr(rc);
    if (e != .SUCCESS) return fail(e);
    return rc;
}

fn closeFd(fd: i32) void {
    if (fd >= 0) _ = linux.close(fd);
}

/// What an outer registration (in `Queue.ep`) stands for.
const Tag = enum(u8) { read_set = 1, write_set, user, signal, timer, proc };

fn tagData(tag: Tag, serial: u32) u64 {
    return (@as(u64, @backingInt(tag)) << 32) | serial;
}

fn epollCtl(ep: i32, op: u32, fd: i32, events: u32, data: u64) E {
    var ev: linux.epoll_event = .{ .events = events, .data = .{ .u64 = data } };
    return sysErr(linux.epoll_ctl(ep, op, fd, &ev));
}

fn newEventfd() Failed!i32 {
    return @intCast(try check(linux.eventfd(0, linux.EFD.CLOEXEC | linux.EFD.NONBLOCK)));
}

fn newEpoll() Failed!i32 {
    return @intCast(try check(linux.epoll_create1(linux.EPOLL.CLOEXEC)));
}

// ---------------------------------------------------------------- queue

const Key = struct { ident: usize, filter: i16 };

const Queue = struct {
    /// The queue's fd: what `kqueue()` returned.
    ep: i32,
    /// One epoll per fd filter, so that an fd's READ and WRITE kevents
    /// each have their own registration and flags; both sit in `ep`.
    read_set: i32,
    write_set: i32,
    /// Written by a trigger (EVFILT_USER) to wake a waiting thread.
    user_fd: i32,
    knotes: std.AutoHashMapUnmanaged(Key, *Knote) = .empty,
    by_serial: std.AutoHashMapUnmanaged(u32, *Knote) = .empty,
    /// USER and SIGNAL kevents: their state is checked on every scan.
    soft: std.ArrayList(*Knote) = .empty,
    next_serial: u32 = 1,
    /// Threads in a wait on this queue (which must not be freed then).
    waiting: u32 = 0,
    /// `close` came while a thread waited: the last one out frees it.
    closed: bool = false,
    signal_registered: bool = false,
    personality: Personality,

    fn create(personality: Personality) (Failed || std.mem.Allocator.Error)!*Queue {
        const q = try gpa.create(Queue);
        errdefer gpa.destroy(q);
        q.* = .{ .ep = -1, .read_set = -1, .write_set = -1, .user_fd = -1, .personality = personality };
        errdefer q.closeFds();
        q.ep = try newEpoll();
        q.read_set = try newEpoll();
        q.write_set = try newEpoll();
        q.user_fd = try newEventfd();
        const IN = linux.EPOLL.IN;
        const outer = .{ .{ q.read_set, Tag.read_set }, .{ q.write_set, Tag.write_set }, .{ q.user_fd, Tag.user } };
        inline for (outer) |reg| {
            const e = epollCtl(q.ep, linux.EPOLL.CTL_ADD, reg[0], IN, tagData(reg[1], 0));
            if (e != .SUCCESS) return fail(e);
        }
        return q;
    }

    fn closeFds(q: *Queue) void {
        inline for (.{ q.ep, q.read_set, q.write_set, q.user_fd }) |fd| closeFd(fd);
    }

    fn destroy(q: *Queue) void {
        var it = q.knotes.valueIterator();
        while (it.next()) |kn| _ = kn.*.detach(q);
        it = q.knotes.valueIterator();
        while (it.next()) |kn| gpa.destroy(kn.*);
        q.knotes.deinit(gpa);
        q.by_serial.deinit(gpa);
        q.soft.deinit(gpa);
        q.closeFds();
        gpa.destroy(q);
    }

    /// Applies `changes` in order. Returns how many EV_ERROR entries it
    /// placed in `out`; fails with the errno of an error it had no room
    /// for (the changes after it are not applied).
    fn applyChanges(q: *Queue, changes: []const Kevent, out: []Kevent) Failed!usize {
        var placed: usize = 0;
        for (changes) |change| {
            var kev = change; // `out` may alias `changes`
            if (kev.filter == 0) continue;
            kev.flags &= ~@as(u16, EV.SYSFLAGS);
            const e = q.register(&kev);
            if (e == .SUCCESS and kev.flags & EV.RECEIPT == 0) continue;
            if (placed == out.len) {
                if (e != .SUCCESS) return fail(e);
                return 0; // a receipt with no room: stop here (FreeBSD)
            }
            kev.flags = EV.ERROR;
            kev.data = @backingInt(e);
            out[placed] = kev;
            placed += 1;
        }
        return placed;
    }

    /// Applies one change; its errno (`.SUCCESS` when it took).
    fn register(q: *Queue, kev: *const Kevent) E {
        const kind = Kind.of(kev.filter) orelse return .INVAL;
        const key: Key = .{ .ident = kev.ident, .filter = kev.filter };
        var found = q.knotes.get(key);
        if (kind == .fd) {
            // FreeBSD looks the descriptor up first: EBADF for a bad one.
            const id = identityOf(kev.ident) catch {
                if (found) |kn| q.drop(kn); // its fd was closed
                return failed_errno;
            };
            if (found) |kn| if (!kn.identity.eql(id)) {
                q.drop(kn); // the number names another file now
                found = null;
            };
        }
        const kn = found orelse {
            if (kev.flags & EV.ADD == 0) return .NOENT;
            return q.add(kind, kev);
        };
        if (kev.flags & EV.DELETE != 0) {
            const stale = kn.detach(q);
            q.forget(kn);
            return if (stale) .NOENT else .SUCCESS;
        }
        return q.modify(kn, kev);
    }

    fn add(q: *Queue, kind: Kind, kev: *const Kevent) E {
        if (!q.reserve()) return .NOMEM;
        const kn = gpa.create(Knote) catch return .NOMEM;
        kn.* = Knote.init(kind, kev, q.next_serial);
        kn.attach(q, kev) catch {
            gpa.destroy(kn);
            return failed_errno;
        };
        q.next_serial +%= 1;
        if (q.next_serial == 0) q.next_serial = 1;
        q.knotes.putAssumeCapacity(.{ .ident = kev.ident, .filter = kev.filter }, kn);
        q.by_serial.putAssumeCapacity(kn.serial, kn);
        // `attach` may have made an fd kevent a vnode one.
        if (kn.kind == .user or kn.kind == .signal or kn.kind == .vnode) q.soft.appendAssumeCapacity(kn);
        if (kind == .user and kev.fflags & NOTE.TRIGGER != 0) q.trigger(kn);
        return .SUCCESS;
    }

    /// Room for one more kevent in every table, so that adding it cannot
    /// fail half-way.
    fn reserve(q: *Queue) bool {
        q.knotes.ensureUnusedCapacity(gpa, 1) catch return false;
        q.by_serial.ensureUnusedCapacity(gpa, 1) catch return false;
        q.soft.ensureUnusedCapacity(gpa, 1) catch return false;
        return true;
    }

    /// EV_ADD of an existing kevent, or a bare EV_ENABLE/EV_DISABLE/
    /// trigger: the new `udata`, `fflags` and `data`, then the state.
    fn modify(q: *Queue, kn: *Knote, kev: *const Kevent) E {
        kn.udata = kev.udata;
        const adding = kev.flags & EV.ADD != 0;
        switch (kn.kind) {
            .user => kn.touchUser(kev.fflags, kev.data),
            .timer => if (adding) {
                kn.sfflags = kev.fflags;
                kn.sdata = kev.data;
                armTimer(kn) catch return failed_errno;
            },
            else => {
                kn.sfflags = kev.fflags;
                kn.sdata = kev.data;
            },
        }
        const enable = kev.flags & EV.DISABLE == 0 and (adding or kev.flags & EV.ENABLE != 0);
        const disable = kev.flags & EV.DISABLE != 0;
        if (enable or disable) {
            kn.enabled = enable;
            kn.rearm(q) catch {
                const e = failed_errno;
                q.drop(kn); // epoll no longer knows the pair: fd closed
                return e;
            };
        }
        if (kn.kind == .vnode and enable) _ = kn.vnodeCheck(true);
        if (kn.kind == .user and kev.fflags & NOTE.TRIGGER != 0) q.trigger(kn);
        return .SUCCESS;
    }

    fn trigger(q: *Queue, kn: *Knote) void {
        kn.triggered = true;
        const one: u64 = 1;
        _ = linux.write(q.user_fd, std.mem.asBytes(&one), 8);
    }

    /// Removes a kevent whose fd was closed: as the kernel would have.
    fn drop(q: *Queue, kn: *Knote) void {
        _ = kn.detach(q);
        q.forget(kn);
    }

    fn forget(q: *Queue, kn: *Knote) void {
        _ = q.knotes.remove(.{ .ident = kn.ident, .filter = kn.filter });
        _ = q.by_serial.remove(kn.serial);
        if (std.mem.indexOfScalar(*Knote, q.soft.items, kn)) |i| _ = q.soft.swapRemove(i);
        gpa.destroy(kn);
    }

    /// Waits until some kevent reports or `deadline_ns` passes (null:
    /// forever); fills `out` and returns how many.
    fn scan(q: *Queue, out: []Kevent, deadline_ns: ?i128) Failed!usize {
        if (!q.signal_registered and q.hasSignals()) try q.watchSignals();
        while (true) {
            // A kevent is reported once per call at most: the soft ones
            // are collected after the wait, which does not block if one is
            // ready already.
            const wait_ms: i32 = if (q.softReady()) 0 else msUntil(deadline_ns);
            var evs: [64]linux.epoll_event = undefined;
            const got = try q.wait(evs[0..@min(evs.len, out.len)], wait_ms);
            var n: usize = 0;
            for (evs[0..got]) |ev| n = q.dispatch(ev.data.u64, out, n);
            n = q.collectSoft(out, n);
            if (n > 0 or wait_ms == 0) return n;
        }
    }

    /// epoll_wait on the queue with the lock released.
    fn wait(q: *Queue, evs: []linux.epoll_event, wait_ms: i32) Failed!usize {
        q.waiting += 1;
        unlock();
        const rc = linux.epoll_wait(q.ep, evs.ptr, @intCast(evs.len), wait_ms);
        lock();
        q.waiting -= 1;
        if (q.closed) {
            if (q.waiting == 0) q.destroy();
            return fail(.BADF);
        }
        return check(rc);
    }

    /// Handles one outer event; returns the new count in `out`.
    fn dispatch(q: *Queue, data: u64, out: []Kevent, n: usize) usize {
        const tag: Tag = @fromBackingInt(@intCast(@as(u8, @truncate(data >> 32))));
        const serial: u32 = @truncate(data);
        switch (tag) {
            .read_set => return q.drainSet(q.read_set, out, n),
            .write_set => return q.drainSet(q.write_set, out, n),
            .user => {
                var count: u64 = 0;
                _ = linux.read(q.user_fd, std.mem.asBytes(&count), 8);
                return n; // the triggered kevents are collected as soft ones
            },
            .signal => return n, // likewise
            .timer, .proc => {
                const kn = q.by_serial.get(serial) orelse return n; // deleted
                if (n == out.len) {
                    kn.rearm(q) catch {};
                    return n;
                }
                return q.report(kn, out, n, 0);
            },
        }
    }

    /// Reads what an fd-filter epoll has ready, as room in `out` allows.
    fn drainSet(q: *Queue, set: i32, out: []Kevent, n_in: usize) usize {
        var n = n_in;
        if (n == out.len) return n;
        var evs: [64]linux.epoll_event = undefined;
        const want = @min(evs.len, out.len - n);
        const rc = linux.epoll_wait(set, &evs, @intCast(want), 0);
        const got = check(rc) catch return n;
        for (evs[0..got]) |ev| {
            const kn = q.by_serial.get(@truncate(ev.data.u64)) orelse continue;
            n = q.report(kn, out, n, ev.events);
        }
        return n;
    }

    fn softReady(q: *Queue) bool {
        for (q.soft.items) |kn| if (kn.enabled and kn.softReady()) return true;
        return false;
    }

    /// Triggered USER kevents, SIGNAL kevents that counted deliveries and
    /// VNODE ones whose condition holds.
    fn collectSoft(q: *Queue, out: []Kevent, n_in: usize) usize {
        var n = n_in;
        var i: usize = 0;
        while (i < q.soft.items.len and n < out.len) {
            const kn = q.soft.items[i];
            const before = q.soft.items.len;
            if (kn.enabled and kn.softReady()) n = q.report(kn, out, n, 0);
            // EV_ONESHOT removed it: another kevent took its place.
            if (q.soft.items.len == before) i += 1;
        }
        return n;
    }

    /// Reports `kn` in `out[n]` if its condition holds (`revents`: what
    /// epoll saw, for an fd filter), then applies ONESHOT, DISPATCH or
    /// CLEAR, or re-arms a level-triggered one.
    fn report(q: *Queue, kn: *Knote, out: []Kevent, n: usize, revents: u32) usize {
        if (!kn.enabled) return n; // a disarmed registration's last word
        const ev = kn.poll(q, revents) orelse return n;
        out[n] = ev;
        if (kn.flags & EV.ONESHOT != 0 or ev.flags & EV.ONESHOT != 0) {
            q.drop(kn);
        } else if (kn.flags & EV.DISPATCH != 0) {
            kn.enabled = false;
            kn.rearm(q) catch q.drop(kn);
        } else {
            kn.afterReport(q) catch q.drop(kn);
        }
        return n + 1;
    }

    fn hasSignals(q: *const Queue) bool {
        for (q.soft.items) |kn| if (kn.kind == .signal) return true;
        return false;
    }

    /// Puts the process-wide signal eventfd in this queue, edge-triggered
    /// (it is never drained: every delivery is an edge for every queue).
    fn watchSignals(q: *Queue) Failed!void {
        const fd = try signals.wakeFd();
        const mask = linux.EPOLL.IN | linux.EPOLL.ET;
        const e = epollCtl(q.ep, linux.EPOLL.CTL_ADD, fd, mask, tagData(.signal, 0));
        if (e != .SUCCESS and e != .EXIST) return fail(e);
        q.signal_registered = true;
    }
};

// ---------------------------------------------------------------- knote

const Kind = enum {
    fd,
    /// An EVFILT_READ/WRITE kevent on a regular file (a personality's):
    /// epoll cannot watch it, so the scan checks it (`vnodeCheck`).
    vnode,
    timer,
    user,
    signal,
    proc,

    fn of(filter: i16) ?Kind {
        return switch (filter) {
            EVFILT.READ, EVFILT.WRITE => .fd,
            EVFILT.TIMER => .timer,
            EVFILT.USER => .user,
            EVFILT.SIGNAL => .signal,
            EVFILT.PROC => .proc,
            else => null,
        };
    }
};

/// Which file an fd number named when its kevent was added (and its
/// type, which `eql` leaves out).
const Identity = struct {
    dev_major: u32 = 0,
    dev_minor: u32 = 0,
    ino: u64 = 0,
    mode: u16 = 0,

    fn eql(a: Identity, b: Identity) bool {
        return a.dev_major == b.dev_major and a.dev_minor == b.dev_minor and a.ino == b.ino;
    }
};

/// The identity of the file `ident` names; EBADF if none, EPERM for a
/// directory (epoll refuses it; no personality watches one).
fn identityOf(ident: usize) Failed!Identity {
    if (ident > std.math.maxInt(i32)) return fail(.BADF);
    const fd: i32 = @intCast(ident);
    var st: linux.Statx = undefined;
    const mask: linux.STATX = .{ .INO = true, .TYPE = true };
    const rc = linux.statx(fd, "", linux.AT.EMPTY_PATH, mask, &st);
    _ = try check(rc);
    if (linux.S.ISDIR(st.mode)) return fail(.PERM);
    return .{ .dev_major = st.dev_major, .dev_minor = st.dev_minor, .ino = st.ino, .mode = st.mode };
}

const Knote = struct {
    kind: Kind,
    ident: usize,
    filter: i16,
    /// EV_ONESHOT, EV_CLEAR, EV_DISPATCH (fixed at creation) and the
    /// other flags FreeBSD keeps, returned with each report.
    flags: u16,
    sfflags: u32,
    sdata: i64,
    udata: usize,
    serial: u32,
    enabled: bool,
    /// READ/WRITE: the file watched; TIMER: a timerfd; PROC: a pidfd.
    fd: i32 = -1,
    identity: Identity = .{},
    /// USER: NOTE_TRIGGER seen and not yet cleared.
    triggered: bool = false,
    /// SIGNAL: the delivery count last reported.
    seen: u64 = 0,
    /// VNODE: the file's size and mtime at the last check, and whether the
    /// kevent is active (see the header).
    file_stamp: [2]u64 = .{ 0, 0 },
    active: bool = false,

    fn init(kind: Kind, kev: *const Kevent, serial: u32) Knote {
        var flags = kev.flags & ~@as(u16, EV.ADD | EV.DELETE | EV.ENABLE | EV.DISABLE);
        // "This filter automatically sets the EV_CLEAR flag internally."
        if (kind == .signal or kind == .timer) flags |= EV.CLEAR;
        return .{
            .kind = kind,
            .ident = kev.ident,
            .filter = kev.filter,
            .flags = flags,
            .sfflags = if (kind == .user) kev.fflags & NOTE.FFLAGSMASK else kev.fflags,
            .sdata = kev.data,
            .udata = kev.udata,
            .serial = serial,
            .enabled = kev.flags & EV.DISABLE == 0,
        };
    }

    /// Sets up what the kevent watches through.
    fn attach(kn: *Knote, q: *Queue, kev: *const Kevent) Failed!void {
        switch (kn.kind) {
            .fd => {
                kn.fd = @intCast(kev.ident);
                kn.identity = try identityOf(kev.ident);
                if (linux.S.ISREG(kn.identity.mode)) {
                    // epoll refuses regular files (EPERM); a BSD watches
                    // the vnode, which the scan checks itself.
                    if (q.personality == .default) return fail(.PERM);
                    kn.kind = .vnode;
                    _ = kn.vnodeCheck(true) orelse return fail(.BADF);
                    return;
                }
                const write = kn.filter == EVFILT.WRITE;
                if (write and q.personality == .freebsd and readerGone(kn.fd, kn.identity.mode)) {
                    return fail(.PIPE);
                }
                const e = epollCtl(kn.set(q), linux.EPOLL.CTL_ADD, kn.fd, kn.fdMask(), kn.serial);
                if (e != .SUCCESS) return fail(e);
            },
            .vnode => unreachable, // made from .fd above
            .timer => {
                const flags: linux.TFD = .{ .CLOEXEC = true, .NONBLOCK = true };
                kn.fd = @intCast(try check(linux.timerfd_create(timerClock(kev.fflags), flags)));
                errdefer closeFd(kn.fd);
                try armTimer(kn);
                try kn.addOuter(q, .timer);
            },
            .proc => {
                if (kev.ident > std.math.maxInt(i32) or kev.ident == 0) return fail(.SRCH);
                kn.fd = @intCast(try check(linux.pidfd_open(@intCast(kev.ident), 0)));
                errdefer closeFd(kn.fd);
                // XNU takes an exiting process out of proc_find before it
                // posts NOTE_EXIT; FreeBSD reports a zombie's exit at once.
                if (q.personality == .macos and readable(kn.fd)) return fail(.SRCH);
                try kn.addOuter(q, .proc);
            },
            .signal => try signals.attach(kn, kev.ident),
            .user => {},
        }
    }

    fn addOuter(kn: *Knote, q: *Queue, tag: Tag) Failed!void {
        const mask = if (kn.enabled) linux.EPOLL.IN | linux.EPOLL.ONESHOT else linux.EPOLL.ONESHOT;
        const e = epollCtl(q.ep, linux.EPOLL.CTL_ADD, kn.fd, mask, tagData(tag, kn.serial));
        if (e != .SUCCESS) return fail(e);
    }

    /// Undoes `attach`. True when the fd filter's registration was gone
    /// already (its fd closed, the number perhaps reused).
    fn detach(kn: *Knote, q: *Queue) bool {
        switch (kn.kind) {
            .fd => {
                const e = epollCtl(kn.set(q), linux.EPOLL.CTL_DEL, kn.fd, 0, 0);
                return e == .NOENT or e == .BADF;
            },
            .timer, .proc => closeFd(kn.fd),
            .signal => signals.detach(@intCast(kn.ident)),
            .user, .vnode => {},
        }
        return false;
    }

    fn set(kn: *const Knote, q: *const Queue) i32 {
        return if (kn.filter == EVFILT.READ) q.read_set else q.write_set;
    }

    /// The fd filter's registration: edge-triggered for EV_CLEAR, else
    /// one-shot (re-armed by hand); nothing but a last ERR/HUP once
    /// disabled.
    fn fdMask(kn: *const Knote) u32 {
        const EP = linux.EPOLL;
        if (!kn.enabled) return EP.ONESHOT;
        const dir: u32 = if (kn.filter == EVFILT.READ) EP.IN | EP.RDHUP else EP.OUT;
        return dir | if (kn.flags & EV.CLEAR != 0) EP.ET else EP.ONESHOT;
    }

    /// Re-arms the registration for the current state; NOENT or BADF when
    /// an fd filter's file is gone.
    fn rearm(kn: *Knote, q: *Queue) Failed!void {
        const EP = linux.EPOLL;
        const e = switch (kn.kind) {
            .fd => epollCtl(kn.set(q), EP.CTL_MOD, kn.fd, kn.fdMask(), kn.serial),
            .timer, .proc => blk: {
                const mask = if (kn.enabled) EP.IN | EP.ONESHOT else EP.ONESHOT;
                const tag: Tag = if (kn.kind == .timer) .timer else .proc;
                break :blk epollCtl(q.ep, EP.CTL_MOD, kn.fd, mask, tagData(tag, kn.serial));
            },
            .user, .signal, .vnode => E.SUCCESS,
        };
        if (e != .SUCCESS) return fail(e);
    }

    /// After a report that keeps the kevent enabled: a level-triggered fd
    /// filter is re-armed (epoll re-checks readiness when it next waits);
    /// EV_CLEAR resets a USER kevent; a periodic timer is re-armed.
    fn afterReport(kn: *Knote, q: *Queue) Failed!void {
        switch (kn.kind) {
            .fd => if (kn.flags & EV.CLEAR == 0) try kn.rearm(q),
            .timer => try kn.rearm(q),
            .user => if (kn.flags & EV.CLEAR != 0) {
                kn.triggered = false;
            },
            .signal, .proc, .vnode => {},
        }
    }

    fn softReady(kn: *Knote) bool {
        return switch (kn.kind) {
            .user => kn.triggered,
            .signal => signals.count(@intCast(kn.ident)) != kn.seen,
            // A file closed or replaced is ready too: its report drops it.
            .vnode => if (kn.vnodeCheck(false)) |data| data != null else true,
            else => false,
        };
    }

    /// Checks a vnode kevent, as a BSD does on `fresh` (EV_ADD, EV_ENABLE)
    /// and when the file was written (its size or mtime changed since the
    /// last check), and re-checks an active one, which a check that finds
    /// it quiet deactivates. Returns the `data` of an active kevent, null
    /// (inside) for a quiet one; null when its fd was closed or names
    /// another file. FreeBSD's filt_vfsread: "kn_data = va.va_size -
    /// kn->kn_fp->f_offset; res = ... kn->kn_data != 0", filt_vfswrite
    /// "kn->kn_data = 0; return (1)"; XNU's filt_vnode_common: "activate =
    /// (data != 0)", the read data the same, the write data 1.
    fn vnodeCheck(kn: *Knote, fresh: bool) ??i64 {
        var st: linux.Statx = undefined;
        const mask: linux.STATX = .{ .INO = true, .TYPE = true, .SIZE = true, .MTIME = true };
        if (sysErr(linux.statx(kn.fd, "", linux.AT.EMPTY_PATH, mask, &st)) != .SUCCESS) return null;
        const id: Identity = .{ .dev_major = st.dev_major, .dev_minor = st.dev_minor, .ino = st.ino };
        if (!id.eql(kn.identity)) return null;
        const mtime_ns = @as(u64, @bitCast(st.mtime.sec)) *% std.time.ns_per_s +% st.mtime.nsec;
        const stamp: [2]u64 = .{ st.size, mtime_ns };
        const written = !std.mem.eql(u64, &stamp, &kn.file_stamp);
        kn.file_stamp = stamp;
        if (!fresh and !written and !kn.active) return @as(?i64, null);
        if (kn.filter == EVFILT.WRITE) {
            kn.active = true;
            return @as(?i64, 0);
        }
        const at = linux.lseek(kn.fd, 0, linux.SEEK.CUR);
        if (sysErr(at) != .SUCCESS) return null;
        const data = @as(i64, @bitCast(st.size)) - @as(i64, @bitCast(at));
        kn.active = data != 0;
        return if (kn.active) data else @as(?i64, null);
    }

    /// The event `kn` reports now, or null if its condition no longer
    /// holds (or its fd now names another file: it is then dropped by
    /// the caller's next re-arm, which fails).
    fn poll(kn: *Knote, q: *Queue, revents: u32) ?Kevent {
        var ev: Kevent = .{
            .ident = kn.ident,
            .filter = kn.filter,
            .flags = kn.flags,
            .fflags = 0,
            .data = 0,
            .udata = kn.udata,
        };
        switch (kn.kind) {
            .fd => return kn.pollFd(q, revents, ev),
            .vnode => {
                const checked = kn.vnodeCheck(false) orelse {
                    q.drop(kn); // closed, or the number reused
                    return null;
                };
                const data = checked orelse return null; // quiet
                ev.data = if (kn.filter == EVFILT.WRITE and q.personality == .macos) 1 else data;
                // "After the event is retrieved by the user, its state is reset."
                if (kn.flags & EV.CLEAR != 0) kn.active = false;
            },
            .timer => {
                var count: u64 = 0;
                const rc = linux.read(kn.fd, std.mem.asBytes(&count), 8);
                if (sysErr(rc) != .SUCCESS or count == 0) {
                    kn.rearm(q) catch {};
                    return null;
                }
                ev.data = @intCast(count);
            },
            .user => {
                ev.fflags = kn.sfflags;
                ev.data = kn.sdata;
            },
            .signal => {
                const now = signals.count(@intCast(kn.ident));
                ev.data = @intCast(now -% kn.seen);
                kn.seen = now;
            },
            .proc => {
                ev.fflags = kn.sfflags & NOTE.EXIT;
                // 0 when it is not a child of this process.
                ev.data = linux_os.exitStatus(kn.fd) orelse 0;
                // "the kevent is ... EV_EOF and EV_ONESHOT" on exit.
                ev.flags |= EV.EOF | EV.ONESHOT;
            },
        }
        return ev;
    }

    fn pollFd(kn: *Knote, q: *Queue, revents: u32, ev_in: Kevent) ?Kevent {
        var ev = ev_in;
        const id = identityOf(kn.ident) catch Identity{};
        if (!id.eql(kn.identity)) {
            q.drop(kn); // closed, or the number reused: never reported
            return null;
        }
        const EP = linux.EPOLL;
        if (kn.filter == EVFILT.READ) {
            ev.data = @intCast(bytesReadable(kn.fd));
            if (revents & (EP.RDHUP | EP.HUP | EP.ERR) != 0) ev.flags |= EV.EOF;
        } else {
            ev.data = @intCast(writeSpace(kn.fd));
            if (revents & (EP.HUP | EP.ERR) != 0) ev.flags |= EV.EOF;
        }
        if (revents & EP.ERR != 0 and q.personality != .default) ev.fflags = socketError(kn.fd);
        return ev;
    }

    /// NOTE_FFNOP/FFAND/FFOR/FFCOPY on the user flags; `data` replaced.
    fn touchUser(kn: *Knote, fflags: u32, data: i64) void {
        const ffl = fflags & NOTE.FFLAGSMASK;
        switch (fflags & NOTE.FFCTRLMASK) {
            NOTE.FFAND => kn.sfflags &= ffl,
            NOTE.FFOR => kn.sfflags |= ffl,
            NOTE.FFCOPY => kn.sfflags = ffl,
            else => {},
        }
        kn.sdata = data;
    }
};

/// EV_EOF's `fflags` for a socket epoll reported EPOLLERR on: the error
/// where it can be told without SO_ERROR, which would clear it. On an
/// AF_UNIX socket that is ECONNRESET, the only error af_unix.c sets (a
/// peer gone with data unread: "WRITE_ONCE(skpair->sk_err, ECONNRESET)"),
/// and unix_poll's EPOLLERR is "if (READ_ONCE(sk->sk_err))"; elsewhere 0.
fn socketError(fd: i32) u32 {
    var domain: c_int = 0;
    var len: linux.socklen_t = @sizeOf(c_int);
    const rc = linux.getsockopt(fd, linux.SOL.SOCKET, linux.SO.DOMAIN, std.mem.asBytes(&domain), &len);
    if (sysErr(rc) != .SUCCESS or domain != linux.AF.UNIX) return 0;
    return @backingInt(E.CONNRESET);
}

/// Whether `fd` polls readable now (a pidfd: its process has exited).
fn readable(fd: i32) bool {
    var p = [_]linux.pollfd{.{ .fd = fd, .events = linux.POLL.IN }};
    const rc = linux.poll(&p, 1, 0);
    return sysErr(rc) == .SUCCESS and rc == 1 and p[0].revents & linux.POLL.IN != 0;
}

/// Whether `fd` (of file type `mode`) is the write end of a pipe or FIFO
/// with no reader left: Linux's pipe_poll says so with POLLERR ("if
/// (!pipe->readers) mask |= EPOLLERR", on an end open for writing).
fn readerGone(fd: i32, mode: u16) bool {
    if (!linux.S.ISFIFO(mode)) return false;
    var p = [_]linux.pollfd{.{ .fd = fd, .events = linux.POLL.OUT }};
    const rc = linux.poll(&p, 1, 0);
    return sysErr(rc) == .SUCCESS and rc == 1 and p[0].revents & linux.POLL.ERR != 0;
}

/// Bytes a read would get (FIONREAD); on a listening TCP socket, the
/// connections waiting (TCP_INFO's tcpi_unacked holds the accept queue's
/// length there); 1 where neither can be told.
fn bytesReadable(fd: i32) u64 {
    var n: c_int = 0;
    const rc_n = linux.ioctl(fd, linux.T.FIONREAD, @intFromPtr(&n));
    if (sysErr(rc_n) == .SUCCESS) return @intCast(@max(n, 0));
    var info: [104]u8 align(8) = undefined;
    var len: linux.socklen_t = info.len;
    const rc = linux.getsockopt(fd, linux.IPPROTO.TCP, linux.TCP.INFO, &info, &len);
    if (sysErr(rc) == .SUCCESS and len >= 28) {
        return std.mem.readInt(u32, info[24..28], .little);
    }
    return 1;
}

/// Room for a write: the send buffer less what is queued in it (a
/// socket), or the pipe's size less what is in it.
fn writeSpace(fd: i32) u64 {
    var sndbuf: c_int = 0;
    var len: linux.socklen_t = @sizeOf(c_int);
    const opt = std.mem.asBytes(&sndbuf);
    const rc = linux.getsockopt(fd, linux.SOL.SOCKET, linux.SO.SNDBUF, opt, &len);
    if (sysErr(rc) == .SUCCESS) {
        var queued: c_int = 0;
        _ = linux.ioctl(fd, linux.T.IOCOUTQ, @intFromPtr(&queued));
        return @intCast(@max(sndbuf - queued, 0));
    }
    const size = linux.fcntl(fd, linux.F.GETPIPE_SZ, 0);
    if (sysErr(size) != .SUCCESS) return 0;
    var in_pipe: c_int = 0;
    _ = linux.ioctl(fd, linux.T.FIONREAD, @intFromPtr(&in_pipe));
    return @intCast(@max(@as(i64, @intCast(size)) - in_pipe, 0));
}

// --------------------------------------------------------------- timers

fn timerClock(fflags: u32) linux.timerfd_clockid_t {
    return if (fflags & NOTE.ABSTIME != 0) .REALTIME else .MONOTONIC;
}

/// (Re)starts a timer kevent: `sdata` in the unit `sfflags` names (ms by
/// default), periodic unless EV_ONESHOT or NOTE_ABSTIME. Re-arming
/// discards expirations not yet reported.
fn armTimer(kn: *Knote) Failed!void {
    if (kn.sdata < 0) return fail(.INVAL);
    const unit_ns: i128 = switch (kn.sfflags & 0x0f) {
        NOTE.SECONDS => std.time.ns_per_s,
        NOTE.USECONDS => std.time.ns_per_us,
        NOTE.NSECONDS => 1,
        else => std.time.ns_per_ms,
    };
    // A zero timeout still fires (timerfd takes 0 as "disarm").
    const ns: i128 = @max(@as(i128, kn.sdata) * unit_ns, 1);
    const value = timespecOf(ns);
    const absolute = kn.sfflags & NOTE.ABSTIME != 0;
    const periodic = kn.flags & EV.ONESHOT == 0 and !absolute;
    const spec: linux.itimerspec = .{
        .it_value = value,
        .it_interval = if (periodic) value else .{ .sec = 0, .nsec = 0 },
    };
    const rc = linux.timerfd_settime(kn.fd, .{ .ABSTIME = absolute }, &spec, null);
    _ = try check(rc);
}

fn timespecOf(ns: i128) linux.timespec {
    return .{
        .sec = @intCast(@divTrunc(ns, std.time.ns_per_s)),
        .nsec = @intCast(@rem(ns, std.time.ns_per_s)),
    };
}

fn monotonicNs() i128 {
    var ts: linux.timespec = undefined;
    _ = linux.clock_gettime(.MONOTONIC, &ts);
    return @as(i128, ts.sec) * std.time.ns_per_s + ts.nsec;
}

fn deadlineOf(timeout: ?*const c.timespec) ?i128 {
    const t = timeout orelse return null;
    return monotonicNs() + @as(i128, t.sec) * std.time.ns_per_s + t.nsec;
}

/// Milliseconds left until `deadline_ns` (rounded up), -1 for none.
fn msUntil(deadline_ns: ?i128) i32 {
    const d = deadline_ns orelse return -1;
    const left = d - monotonicNs();
    if (left <= 0) return 0;
    const ms = @divFloor(left + std.time.ns_per_ms - 1, std.time.ns_per_ms);
    return @intCast(@min(ms, std.math.maxInt(i32)));
}

// -------------------------------------------------------------- signals

/// EVFILT_SIGNAL, process-wide: a counting handler installed in front of
/// the signal's own disposition, which it then runs (a handler is
/// called; SIG_IGN ignores; SIG_DFL's action is taken by restoring it and
/// re-raising, unless that action is to ignore). kqueue "coexists with
/// signal() and sigaction()" and records deliveries even of an ignored
/// signal, "except SIGCHLD, which, if ignored, won't be recorded": its
/// SIG_IGN (which also reaps children) is left alone.
const signals = struct {
    const max = 65;
    var counts: [max]std.atomic.Value(u64) = @splat(.init(0));
    var users: [max]u32 = @splat(0);
    var saved: [max]c.Sigaction = undefined;
    var installed: [max]bool = @splat(false);
    /// Written on every delivery; each queue with a SIGNAL kevent watches
    /// it edge-triggered. Created once, never closed.
    var wake_fd: std.atomic.Value(i32) = .init(-1);

    fn wakeFd() Failed!i32 {
        const fd = wake_fd.load(.acquire);
        if (fd >= 0) return fd;
        const new = try newEventfd();
        wake_fd.store(new, .release);
        return new;
    }

    fn count(sig: usize) u64 {
        return counts[sig].load(.acquire);
    }

    fn attach(kn: *Knote, ident: usize) Failed!void {
        if (ident == 0 or ident >= max) return fail(.INVAL);
        _ = try wakeFd();
        const sig: u6 = @intCast(ident);
        if (users[sig] == 0) try install(sig);
        users[sig] += 1;
        kn.seen = count(sig);
    }

    fn install(sig: u6) Failed!void {
        var old: c.Sigaction = undefined;
        if (c.sigaction(@fromBackingInt(@intCast(sig)), null, &old) < 0) return fail(.INVAL);
        const chld_ignored = sig == @backingInt(c.SIG.CHLD) and old.handler.handler == c.SIG.IGN;
        if (chld_ignored) return;
        var act: c.Sigaction = .{
            .handler = .{ .sigaction = handle },
            .mask = std.mem.zeroes(c.sigset_t),
            .flags = c.SA.SIGINFO | c.SA.RESTART,
        };
        if (c.sigaction(@fromBackingInt(@intCast(sig)), &act, &saved[sig]) < 0) return fail(.INVAL);
        installed[sig] = true;
    }

    fn detach(sig: u6) void {
        std.debug.assert(users[sig] > 0);
        users[sig] -= 1;
        if (users[sig] > 0 or !installed[sig]) return;
        installed[sig] = false;
        var now: c.Sigaction = undefined;
        _ = c.sigaction(@fromBackingInt(@intCast(sig)), null, &now);
        // Put back what was there, unless someone replaced ours since.
        if (now.handler.sigaction == handle) _ = c.sigaction(@fromBackingInt(@intCast(sig)), &saved[sig], null);
    }

    fn handle(sig: c.SIG, info: *const c.siginfo_t, ctx: ?*anyopaque) callconv(.c) void {
        const s = @backingInt(sig);
        if (s >= max) return;
        _ = counts[s].fetchAdd(1, .acq_rel);
        const one: u64 = 1;
        const fd = wake_fd.load(.acquire);
        if (fd >= 0) _ = linux.write(fd, std.mem.asBytes(&one), 8);
        chain(sig, info, ctx);
    }

    fn chain(sig: c.SIG, info: *const c.siginfo_t, ctx: ?*anyopaque) void {
        const old = saved[@backingInt(sig)];
        if (old.flags & c.SA.SIGINFO != 0) {
            if (old.handler.sigaction) |f| f(sig, info, ctx);
            return;
        }
        const h = old.handler.handler;
        if (h == c.SIG.IGN) return;
        if (h != c.SIG.DFL) return h.?(sig);
        switch (sig) {
            .CHLD, .WINCH, .URG, .CONT => return, // their default: ignore
            else => {
                _ = c.sigaction(sig, &old, null);
                _ = c.raise(sig);
            },
        }
    }
};

// ---------------------------------------------------------------- tests
//
// Each test names the rule of kqueue(2) it checks, quoted from FreeBSD's
// manual page (and macOS's where they agree).

const testing = @import("testing.zig");
const expect = std.testing.expect;
const expectEqual = std.testing.expectEqual;

fn make(ident: usize, filter: i16, flags: u16, fflags: u32, data: i64, udata: usize) Kevent {
    return .{ .ident = ident, .filter = filter, .flags = flags, .fflags = fflags, .data = data, .udata = udata };
}

const Kq = struct {
    fd: c_int,

    fn open() !Kq {
        const fd = kqueue();
        if (fd < 0) return error.Unexpected;
        return .{ .fd = fd };
    }

    fn deinit(q: Kq) void {
        close(q.fd);
    }

    /// Applies `changes`, expecting success and no entry back.
    fn apply(q: Kq, changes: []const Kevent) !void {
        var none: [0]Kevent = .{};
        try expectEqual(@as(c_int, 0), kevent(q.fd, changes.ptr, @intCast(changes.len), &none, 0, null));
    }

    /// Applies one change that must fail; its errno.
    fn refuse(q: Kq, ch: Kevent) !E {
        var none: [0]Kevent = .{};
        try expectEqual(@as(c_int, -1), kevent(q.fd, &[_]Kevent{ch}, 1, &none, 0, null));
        return @fromBackingInt(@intCast(c._errno().*));
    }

    /// Waits up to `ms` for events.
    fn wait(q: Kq, out: []Kevent, ms: i64) !usize {
        const ts: c.timespec = .{ .sec = @intCast(@divTrunc(ms, 1000)), .nsec = @intCast(@rem(ms, 1000) * 1_000_000) };
        const rc = kevent(q.fd, out.ptr, 0, out.ptr, @intCast(out.len), &ts);
        if (rc < 0) return error.Unexpected;
        return @intCast(rc);
    }

    /// Exactly one event within `ms`.
    fn one(q: Kq, ms: i64) !Kevent {
        var out: [4]Kevent = undefined;
        try expectEqual(@as(usize, 1), try q.wait(&out, ms));
        return out[0];
    }

    fn quiet(q: Kq) !void {
        var out: [4]Kevent = undefined;
        try expectEqual(@as(usize, 0), try q.wait(&out, 0));
    }
};

fn writeAll(fd: i32, bytes: []const u8) !void {
    try expectEqual(bytes.len, try check(linux.write(fd, bytes.ptr, bytes.len)));
}

test "EVFILT_READ: 'data contains the number of bytes of protocol data available to read'; udata 'passed through the kernel unchanged'" {
    const q = try Kq.open();
    defer q.deinit();
    const pair = try testing.socketPair();
    defer testing.close(pair[0]);
    defer testing.close(pair[1]);
    try q.apply(&.{make(@intCast(pair[0]), EVFILT.READ, EV.ADD, 0, 0, 0xfeed)});
    try q.quiet();
    try writeAll(pair[1], "hello");
    const ev = try q.one(1000);
    try expect(ev.ident == @as(usize, @intCast(pair[0])) and ev.filter == EVFILT.READ);
    try expectEqual(@as(i64, 5), ev.data);
    try expectEqual(@as(usize, 0xfeed), ev.udata);
    try expect(ev.flags & EV.EOF == 0);
    // Level-triggered: still there while the data waits.
    try expectEqual(@as(i64, 5), (try q.one(0)).data);
}

test "'Re-adding an existing event will modify the parameters of the original event, and not result in a duplicate entry'" {
    const q = try Kq.open();
    defer q.deinit();
    const pair = try testing.socketPair();
    defer testing.close(pair[0]);
    defer testing.close(pair[1]);
    try writeAll(pair[1], "x");
    try q.apply(&.{
        make(@intCast(pair[0]), EVFILT.READ, EV.ADD, 0, 0, 1),
        make(@intCast(pair[0]), EVFILT.READ, EV.ADD, 0, 0, 2),
    });
    const ev = try q.one(1000);
    try expectEqual(@as(usize, 2), ev.udata);
}

test "'EV_DELETE ... ENOENT: The event could not be found to be modified or deleted'; EV_ENABLE and EV_DISABLE likewise" {
    const q = try Kq.open();
    defer q.deinit();
    const fds = try testing.blockingPipe();
    defer testing.close(fds[0]);
    defer testing.close(fds[1]);
    inline for (.{ EV.DELETE, EV.ENABLE, EV.DISABLE }) |flag| {
        try expectEqual(E.NOENT, try q.refuse(make(@intCast(fds[0]), EVFILT.READ, flag, 0, 0, 0)));
    }
    try expectEqual(E.NOENT, try q.refuse(make(9, EVFILT.USER, EV.DELETE, 0, 0, 0)));
    try expectEqual(E.INVAL, try q.refuse(make(1, 99, EV.ADD, 0, 0, 0)));
}

test "'If an error occurs while processing an element of the changelist and there is enough room in the eventlist, then the event will be placed in the eventlist with EV_ERROR set in flags and the system error in data'" {
    const q = try Kq.open();
    defer q.deinit();
    var io = [_]Kevent{
        make(7, EVFILT.USER, EV.DELETE, 0, 0, 0x77),
        make(8, EVFILT.USER, EV.ADD | EV.CLEAR, NOTE.TRIGGER, 0, 0),
    };
    // Placed as it happens, the later change still applied; the entries
    // come back at once, without the pending trigger.
    var out: [4]Kevent = undefined;
    try expectEqual(@as(c_int, 1), kevent(q.fd, &io, 2, &out, 4, null));
    try expectEqual(@as(u16, EV.ERROR), out[0].flags);
    try expectEqual(@as(i64, @backingInt(E.NOENT)), out[0].data);
    try expect(out[0].ident == 7 and out[0].udata == 0x77);
    try expectEqual(@as(usize, 8), (try q.one(0)).ident);
}

test "'Otherwise, -1 will be returned, and errno will be set to indicate the error condition' (and the changes after it are not applied)" {
    const q = try Kq.open();
    defer q.deinit();
    const changes = [_]Kevent{
        make(7, EVFILT.USER, EV.DELETE, 0, 0, 0),
        make(8, EVFILT.USER, EV.ADD, NOTE.TRIGGER, 0, 0),
    };
    var none: [0]Kevent = .{};
    try expectEqual(@as(c_int, -1), kevent(q.fd, &changes, 2, &none, 0, null));
    try expectEqual(@as(c_int, @backingInt(E.NOENT)), c._errno().*);
    try expectEqual(E.NOENT, try q.refuse(make(8, EVFILT.USER, EV.DELETE, 0, 0, 0)));
}

test "EV_RECEIPT 'forces EV_ERROR to always be returned. When a filter is successfully added the data field will be zero'; no pending event is drained" {
    const q = try Kq.open();
    defer q.deinit();
    try q.apply(&.{make(1, EVFILT.USER, EV.ADD, NOTE.TRIGGER, 0, 0)}); // pending
    var io = [_]Kevent{
        make(2, EVFILT.USER, EV.ADD | EV.RECEIPT, 0, 0, 0),
        make(3, EVFILT.USER, EV.DELETE | EV.RECEIPT, 0, 0, 0),
    };
    try expectEqual(@as(c_int, 2), kevent(q.fd, &io, 2, &io, 2, null));
    try expect(io[0].flags == EV.ERROR and io[0].data == 0 and io[0].ident == 2);
    try expect(io[1].flags == EV.ERROR and io[1].data == @backingInt(E.NOENT));
    try expectEqual(@as(usize, 1), (try q.one(0)).ident);
}

test "'The changelist' is applied in order: an add then a delete leaves nothing; a delete then an add leaves the filter" {
    const q = try Kq.open();
    defer q.deinit();
    try q.apply(&.{ make(1, EVFILT.USER, EV.ADD, 0, 0, 0), make(1, EVFILT.USER, EV.DELETE, 0, 0, 0) });
    try expectEqual(E.NOENT, try q.refuse(make(1, EVFILT.USER, EV.DELETE, 0, 0, 0)));
    try q.apply(&.{make(2, EVFILT.USER, EV.ADD, 0, 0, 0)});
    try q.apply(&.{ make(2, EVFILT.USER, EV.DELETE, 0, 0, 0), make(2, EVFILT.USER, EV.ADD, NOTE.TRIGGER, 0, 0) });
    try expectEqual(@as(usize, 2), (try q.one(0)).ident);
}

test "EV_ONESHOT 'Causes the event to return only the first occurrence of the filter being triggered. After the user retrieves the event from the kqueue, it is deleted.'" {
    const q = try Kq.open();
    defer q.deinit();
    const pair = try testing.socketPair();
    defer testing.close(pair[0]);
    defer testing.close(pair[1]);
    try writeAll(pair[1], "x");
    try q.apply(&.{make(@intCast(pair[0]), EVFILT.READ, EV.ADD | EV.ONESHOT, 0, 0, 0)});
    try expect((try q.one(1000)).flags & EV.ONESHOT != 0);
    try q.quiet();
    try expectEqual(E.NOENT, try q.refuse(make(@intCast(pair[0]), EVFILT.READ, EV.DELETE, 0, 0, 0)));
}

test "EV_DISPATCH 'Disable the event source immediately after delivery of an event'; EV_ENABLE 'Permit kevent() to return the event if it is triggered'" {
    const q = try Kq.open();
    defer q.deinit();
    const pair = try testing.socketPair();
    defer testing.close(pair[0]);
    defer testing.close(pair[1]);
    const id: usize = @intCast(pair[0]);
    try writeAll(pair[1], "x");
    try q.apply(&.{make(id, EVFILT.READ, EV.ADD | EV.DISPATCH, 0, 0, 0)});
    _ = try q.one(1000);
    try q.quiet(); // still readable, but disabled
    try q.apply(&.{make(id, EVFILT.READ, EV.ENABLE, 0, 0, 0)});
    _ = try q.one(1000);
    try q.quiet();
    // Re-adding keeps EV_DISPATCH (fixed at creation) and enables it.
    try q.apply(&.{make(id, EVFILT.READ, EV.ADD, 0, 0, 0)});
    try expect((try q.one(1000)).flags & EV.DISPATCH != 0);
    try q.quiet();
}

test "EV_DISABLE 'Disable the event so kevent() will not return it'; 'Adding an event automatically enables it, unless overridden by the EV_DISABLE flag'" {
    const q = try Kq.open();
    defer q.deinit();
    try q.apply(&.{make(1, EVFILT.USER, EV.ADD | EV.DISABLE, NOTE.TRIGGER, 0, 0)});
    try q.quiet();
    try q.apply(&.{make(1, EVFILT.USER, EV.ADD, 0, 0, 0)});
    try expectEqual(@as(usize, 1), (try q.one(0)).ident);
    try q.apply(&.{make(1, EVFILT.USER, EV.DISABLE, 0, 0, 0)});
    try q.quiet();
}

test "EV_CLEAR 'After the event is retrieved by the user, its state is reset': a socket reports new data only" {
    const q = try Kq.open();
    defer q.deinit();
    const pair = try testing.socketPair();
    defer testing.close(pair[0]);
    defer testing.close(pair[1]);
    try q.apply(&.{make(@intCast(pair[0]), EVFILT.READ, EV.ADD | EV.CLEAR, 0, 0, 0)});
    try writeAll(pair[1], "ab");
    try expectEqual(@as(i64, 2), (try q.one(1000)).data);
    try q.quiet(); // the data is still there, unread
    try writeAll(pair[1], "c");
    try expectEqual(@as(i64, 3), (try q.one(1000)).data);
}

test "EVFILT_READ on a socket: 'If the read direction of the socket has shutdown, then the filter also sets EV_EOF'; 'It is possible for EOF to be returned ... while there is still data pending'" {
    const q = try Kq.open();
    defer q.deinit();
    const pair = try testing.socketPair();
    defer testing.close(pair[0]);
    try writeAll(pair[1], "tail");
    testing.close(pair[1]);
    try q.apply(&.{make(@intCast(pair[0]), EVFILT.READ, EV.ADD, 0, 0, 0)});
    const ev = try q.one(1000);
    try expect(ev.flags & EV.EOF != 0);
    try expectEqual(@as(i64, 4), ev.data);
    try expectEqual(@as(u32, 0), ev.fflags); // no error to report (see header)
}

test "EVFILT_READ on a listening socket: 'data contains the size of the listen backlog'" {
    const q = try Kq.open();
    defer q.deinit();
    const l = try testing.tcpListener();
    defer testing.close(l.fd);
    try q.apply(&.{make(@intCast(l.fd), EVFILT.READ, EV.ADD, 0, 0, 0)});
    try q.quiet();
    const a = try testing.tcpConnect(l.port);
    defer testing.close(a);
    const b = try testing.tcpConnect(l.port);
    defer testing.close(b);
    try expectEqual(@as(i64, 2), (try q.one(1000)).data);
}

test "EVFILT_WRITE: 'data will contain the amount of space remaining in the write buffer'; 'EV_EOF when the reader disconnects'" {
    const q = try Kq.open();
    defer q.deinit();
    const fds = try testing.blockingPipe();
    defer testing.close(fds[1]);
    try q.apply(&.{make(@intCast(fds[1]), EVFILT.WRITE, EV.ADD, 0, 0, 0)});
    const room = (try q.one(1000)).data;
    try expect(room > 0);
    try writeAll(fds[1], "0123456789");
    try expectEqual(room - 10, (try q.one(1000)).data);
    testing.close(fds[0]);
    try expect((try q.one(1000)).flags & EV.EOF != 0);
}

test "EVFILT_TIMER: 'data contains the number of times the timeout has expired since the last call'; periodic 'unless EV_ONESHOT'" {
    const q = try Kq.open();
    defer q.deinit();
    try q.apply(&.{make(5, EVFILT.TIMER, EV.ADD, NOTE.USECONDS, 1000, 0)});
    const first = try q.one(1000);
    try expect(first.ident == 5 and first.data >= 1 and first.flags & EV.CLEAR != 0);
    _ = try q.one(1000); // periodic: again
    try q.apply(&.{make(5, EVFILT.TIMER, EV.DELETE, 0, 0, 0)});
    try q.apply(&.{make(6, EVFILT.TIMER, EV.ADD | EV.ONESHOT, 0, 1, 0)}); // 1 ms
    try expectEqual(@as(i64, 1), (try q.one(1000)).data);
    var out: [2]Kevent = undefined;
    try expectEqual(@as(usize, 0), try q.wait(&out, 20));
    try expectEqual(E.NOENT, try q.refuse(make(6, EVFILT.TIMER, EV.DELETE, 0, 0, 0)));
}

test "EVFILT_TIMER: 'If an existing timer is re-added, the existing timer will be effectively canceled ... and re-started'" {
    const q = try Kq.open();
    defer q.deinit();
    try q.apply(&.{make(5, EVFILT.TIMER, EV.ADD, NOTE.SECONDS, 3600, 0)});
    try q.quiet();
    try q.apply(&.{make(5, EVFILT.TIMER, EV.ADD, NOTE.NSECONDS, 1000, 0)});
    try expectEqual(@as(usize, 5), (try q.one(1000)).ident);
}

test "EVFILT_USER: 'NOTE_TRIGGER Cause the event to be triggered'; NOTE_FFOR/FFAND/FFCOPY; 'On return, fflags contains the users defined flags in the lower 24 bits'" {
    const q = try Kq.open();
    defer q.deinit();
    try q.apply(&.{make(1, EVFILT.USER, EV.ADD | EV.CLEAR, 0x1, 0, 0)});
    try q.quiet();
    try q.apply(&.{make(1, EVFILT.USER, 0, NOTE.TRIGGER | NOTE.FFOR | 0x6, 42, 0)});
    const ev = try q.one(0);
    try expect(ev.fflags == 0x7 and ev.data == 42);
    try q.quiet(); // EV_CLEAR: reset once retrieved
    try q.apply(&.{make(1, EVFILT.USER, 0, NOTE.TRIGGER | NOTE.FFAND | 0x2, 0, 0)});
    try expectEqual(@as(u32, 0x2), (try q.one(0)).fflags);
    try q.apply(&.{make(1, EVFILT.USER, 0, NOTE.TRIGGER | NOTE.FFCOPY | 0x30, 0, 0)});
    try expectEqual(@as(u32, 0x30), (try q.one(0)).fflags);
    // Without EV_CLEAR a triggered event stays triggered.
    try q.apply(&.{make(2, EVFILT.USER, EV.ADD, NOTE.TRIGGER, 0, 0)});
    for (0..2) |_| try expectEqual(@as(usize, 2), (try q.one(0)).ident);
}

test "EVFILT_USER: a trigger from another thread wakes a kevent() that waits" {
    const q = try Kq.open();
    defer q.deinit();
    try q.apply(&.{make(1, EVFILT.USER, EV.ADD | EV.CLEAR, 0, 0, 0)});
    const Trigger = struct {
        fn run(kq: Kq) void {
            kq.apply(&.{make(1, EVFILT.USER, 0, NOTE.TRIGGER, 0, 0)}) catch {};
        }
    };
    const t = try std.Thread.spawn(.{}, Trigger.run, .{q});
    defer t.join();
    var out: [2]Kevent = undefined;
    const n = kevent(q.fd, &out, 0, &out, 2, null);
    try expectEqual(@as(c_int, 1), n);
}

var chained_calls = std.atomic.Value(u32).init(0);

fn countChained(_: c.SIG) callconv(.c) void {
    _ = chained_calls.fetchAdd(1, .acq_rel);
}

test "EVFILT_SIGNAL: 'data returns the number of times the signal has occurred since the last call'; it 'coexists with the signal() and sigaction() facilities'" {
    const q = try Kq.open();
    defer q.deinit();
    const sig = c.SIG.USR2;
    var own: c.Sigaction = .{ .handler = .{ .handler = countChained }, .mask = std.mem.zeroes(c.sigset_t), .flags = 0 };
    var before: c.Sigaction = undefined;
    try expect(c.sigaction(sig, &own, &before) == 0);
    defer _ = c.sigaction(sig, &before, null);
    try q.apply(&.{make(@backingInt(sig), EVFILT.SIGNAL, EV.ADD, 0, 0, 0)});
    _ = c.raise(sig);
    _ = c.raise(sig);
    const ev = try q.one(1000);
    try expect(ev.data == 2 and ev.flags & EV.CLEAR != 0);
    try expectEqual(@as(u32, 2), chained_calls.load(.acquire)); // the handler ran too
    try q.quiet();
    try q.apply(&.{make(@backingInt(sig), EVFILT.SIGNAL, EV.DELETE, 0, 0, 0)});
    var now: c.Sigaction = undefined;
    _ = c.sigaction(sig, null, &now);
    try expect(now.handler.handler == countChained); // put back
}

test "EVFILT_PROC NOTE_EXIT: 'The exit status will be stored in data'; reported with EV_EOF and EV_ONESHOT; ESRCH: 'The specified process to attach to does not exist'" {
    const q = try Kq.open();
    defer q.deinit();
    const hold = try testing.blockingPipe();
    defer testing.close(hold[0]);
    const pid = try testing.spawnChild(3, hold);
    try q.apply(&.{make(@intCast(pid), EVFILT.PROC, EV.ADD, NOTE.EXIT, 0, 9)});
    try q.quiet();
    testing.close(hold[1]);
    const ev = try q.one(5000);
    try expect(ev.fflags == NOTE.EXIT and ev.data == 3 << 8 and ev.udata == 9);
    try expect(ev.flags & EV.EOF != 0 and ev.flags & EV.ONESHOT != 0);
    try expectEqual(E.NOENT, try q.refuse(make(@intCast(pid), EVFILT.PROC, EV.DELETE, 0, 0, 0)));
    try expectEqual(@as(u32, 3 << 8), try testing.reap(pid)); // not reaped by the filter
    try expectEqual(E.SRCH, try q.refuse(make(@intCast(pid), EVFILT.PROC, EV.ADD, NOTE.EXIT, 0, 0)));
}

test "'The queue is not inherited by a child created with fork(2)' (FreeBSD kqueue(2); kern_descrip.c fdcopy: 'copy all passable descriptors (i.e. not kqueue)'; XNU kern_event.c kqueue_internal: FP_CLOFORK, FG_CONFINED): the child has none, the parent's keeps its kevents" {
    const q = try Kq.open();
    defer q.deinit();
    const pair = try testing.socketPair();
    defer testing.close(pair[0]);
    defer testing.close(pair[1]);
    try q.apply(&.{make(@intCast(pair[0]), EVFILT.READ, EV.ADD, 0, 0, 7)});
    try writeAll(pair[1], "x");
    const pid = try testing.fork();
    if (pid == 0) {
        // The number names nothing; kevent() on it is EBADF, and a new
        // file may take it.
        var none: [0]Kevent = .{};
        if (kevent(q.fd, &none, 0, &none, 0, null) != -1 or c._errno().* != @backingInt(E.BADF)) testing.exitNow(2);
        const again = testing.socketPair() catch testing.exitNow(3);
        if (again[0] != q.fd) testing.exitNow(4);
        testing.exitNow(0);
    }
    try expectEqual(@as(u32, 0), try testing.reap(pid));
    const ev = try q.one(1000);
    try expect(ev.filter == EVFILT.READ and ev.udata == 7);
}

test "'Calling close() on a file descriptor will remove any kevents that reference the descriptor': a reused number does not report" {
    const q = try Kq.open();
    defer q.deinit();
    const old = try testing.socketPair();
    const id: usize = @intCast(old[0]);
    try q.apply(&.{make(id, EVFILT.READ, EV.ADD, 0, 0, 0)});
    testing.close(old[0]);
    testing.close(old[1]);
    try expectEqual(E.BADF, try q.refuse(make(id, EVFILT.READ, EV.DELETE, 0, 0, 0)));
    const new = try testing.socketPair(); // the same numbers again
    defer testing.close(new[0]);
    defer testing.close(new[1]);
    try expectEqual(id, @as(usize, @intCast(new[0])));
    try writeAll(new[1], "x");
    try q.quiet();
    try expectEqual(E.NOENT, try q.refuse(make(id, EVFILT.READ, EV.DELETE, 0, 0, 0)));
}

test "closing a descriptor removes its kevents even while a duplicate keeps the file open" {
    const q = try Kq.open();
    defer q.deinit();
    const old = try testing.socketPair();
    defer testing.close(old[1]);
    const id: usize = @intCast(old[0]);
    try q.apply(&.{make(id, EVFILT.READ, EV.ADD, 0, 0, 0)});
    const dup: i32 = @intCast(try check(linux.dup(old[0])));
    defer testing.close(dup);
    testing.close(old[0]); // epoll still watches the file (the dup holds it)
    const new = try testing.socketPair();
    defer testing.close(new[0]);
    defer testing.close(new[1]);
    try writeAll(old[1], "old"); // the old file turns readable
    try q.quiet(); // not reported for the number, which names another file
    try writeAll(new[1], "new");
    try q.quiet(); // and the new file was never added
}

test "'When nevents is zero, kevent() will return immediately even if there is a timeout'; 'If the time limit expires, then kevent() returns 0'" {
    const q = try Kq.open();
    defer q.deinit();
    try q.apply(&.{make(1, EVFILT.USER, EV.ADD, 0, 0, 0)});
    var none: [0]Kevent = .{};
    const long: c.timespec = .{ .sec = 3600, .nsec = 0 };
    try expectEqual(@as(c_int, 0), kevent(q.fd, &none, 0, &none, 0, &long));
    var out: [1]Kevent = undefined;
    try expectEqual(@as(usize, 0), try q.wait(&out, 10));
}

test "default: a regular file is refused with EPERM, as epoll refuses it (kqueue would watch the vnode: see the personalities)" {
    const q = try Kq.open();
    defer q.deinit();
    const file = try testing.tempFile("x");
    defer testing.close(file);
    try expectEqual(E.PERM, try q.refuse(make(@intCast(file), EVFILT.READ, EV.ADD, 0, 0, 0)));
    try expectEqual(E.BADF, try q.refuse(make(1 << 40, EVFILT.READ, EV.ADD, 0, 0, 0)));
}

// ------------------------------------------------- personalities' tests
//
// Each names the kernel source (or manual page) of the rule it checks:
// XNU as of xnu-11417.101.15, FreeBSD as of 14.

extern "c" fn setenv(name: [*:0]const u8, value: [*:0]const u8, overwrite: c_int) c_int;
extern "c" fn unsetenv(name: [*:0]const u8) c_int;

/// A queue that follows `p`.
fn openAs(p: Personality) !Kq {
    personality_override = p;
    defer personality_override = null;
    return Kq.open();
}

/// Waits until child `pid` has exited, leaving it unreaped (a zombie).
fn waitExited(pid: i32) !void {
    var info: linux.siginfo_t = undefined;
    const flags = linux.W.EXITED | linux.W.NOWAIT;
    _ = try check(linux.waitid(.PID, pid, &info, flags, null));
}

test "personality: ZLOOP_KQUEUE_PERSONALITY names it; unset or empty is the default; an unknown name fails kqueue() with EINVAL" {
    defer _ = unsetenv(personality_env);
    _ = setenv(personality_env, "freebsd", 1);
    const q = try Kq.open();
    defer q.deinit();
    try expectEqual(Personality.freebsd, registry.get(q.fd).?.personality);
    _ = setenv(personality_env, "", 1);
    const plain = try Kq.open();
    defer plain.deinit();
    try expectEqual(Personality.default, registry.get(plain.fd).?.personality);
    _ = setenv(personality_env, "sunos", 1);
    try expectEqual(@as(c_int, -1), kqueue());
    try expectEqual(@as(c_int, @backingInt(E.INVAL)), c._errno().*);
}

test "macos: EVFILT_PROC on an exited, unreaped child is ESRCH (XNU kern_exit.c proc_exit: 'will not be visible via proc_find' before proc_knote(p, NOTE_EXIT); kern_event.c filt_procattach: 'if (p == NULL) { knote_set_error(kn, ESRCH)')" {
    const q = try openAs(.macos);
    defer q.deinit();
    const pid = try testing.spawnChild(5, null);
    try waitExited(pid);
    try expectEqual(E.SRCH, try q.refuse(make(@intCast(pid), EVFILT.PROC, EV.ADD, NOTE.EXIT, 0, 0)));
    try expectEqual(@as(u32, 5 << 8), try testing.reap(pid));
}

test "freebsd: EVFILT_PROC on a zombie reports NOTE_EXIT at once (kern_event.c filt_procattach: 'Immediately activate ... in the case of a zombie target process, exit notes')" {
    const q = try openAs(.freebsd);
    defer q.deinit();
    const pid = try testing.spawnChild(5, null);
    try waitExited(pid);
    try q.apply(&.{make(@intCast(pid), EVFILT.PROC, EV.ADD, NOTE.EXIT, 0, 0)});
    const ev = try q.one(0);
    try expect(ev.fflags == NOTE.EXIT and ev.data == 5 << 8);
    try expectEqual(@as(u32, 5 << 8), try testing.reap(pid));
}

test "macos, freebsd: a regular file is watched; EVFILT_READ while the offset is short of the end, data = size - offset (FreeBSD vfs_subr.c filt_vfsread: 'kn_data = va.va_size - kn->kn_fp->f_offset; res = ... kn->kn_data != 0'; XNU vfs_vnops.c filt_vnode_common: 'activate = (data != 0)'), checked when added and when the file is written (VFS_KNOTE on VOP_WRITE), not when sought" {
    for ([_]Personality{ .macos, .freebsd }) |p| {
        const q = try openAs(p);
        defer q.deinit();
        const file = try testing.tempFile("abc"); // the offset at the end
        defer testing.close(file);
        const id: usize = @intCast(file);
        try q.apply(&.{make(id, EVFILT.READ, EV.ADD, 0, 0, 7)});
        try q.quiet(); // at the end: nothing to read
        _ = try check(linux.lseek(file, 1, linux.SEEK.SET));
        try q.quiet(); // a seek posts no event
        try writeAll(file, "B"); // a write does: offset 2 of 3
        const ev = try q.one(0);
        try expect(ev.ident == id and ev.data == 1 and ev.udata == 7);
        try expectEqual(@as(i64, 1), (try q.one(0)).data); // level-triggered
        var buf: [4]u8 = undefined;
        _ = try check(linux.read(file, &buf, buf.len));
        try q.quiet(); // re-checked, quiet: inactive until the next write
        // Checked when added: a file read from its start reports at once.
        _ = try check(linux.lseek(file, 0, linux.SEEK.SET));
        try q.apply(&.{make(id, EVFILT.READ, EV.DELETE, 0, 0, 0)});
        try q.apply(&.{make(id, EVFILT.READ, EV.ADD | EV.DISPATCH, 0, 0, 0)});
        try expectEqual(@as(i64, 3), (try q.one(0)).data);
        try q.quiet(); // EV_DISPATCH: disabled once reported
        try q.apply(&.{make(id, EVFILT.READ, EV.ENABLE, 0, 0, 0)});
        try expectEqual(@as(i64, 3), (try q.one(0)).data); // checked again
    }
}

test "macos, freebsd: EVFILT_WRITE on a regular file always reports (FreeBSD filt_vfswrite: 'kn->kn_data = 0; return (1)'; XNU vnode_writable_space_count: 'For regular vnodes, we can always write (1)')" {
    for ([_]Personality{ .macos, .freebsd }) |p| {
        const q = try openAs(p);
        defer q.deinit();
        const file = try testing.tempFile("");
        const id: usize = @intCast(file);
        try q.apply(&.{make(id, EVFILT.WRITE, EV.ADD, 0, 0, 0)});
        const want: i64 = if (p == .macos) 1 else 0;
        for (0..2) |_| try expectEqual(want, (try q.one(0)).data);
        // EV_CLEAR: once, then again when the file has changed.
        try q.apply(&.{make(id, EVFILT.WRITE, EV.DELETE, 0, 0, 0)});
        try q.apply(&.{make(id, EVFILT.WRITE, EV.ADD | EV.CLEAR, 0, 0, 0)});
        _ = try q.one(0);
        try q.quiet();
        try writeAll(file, "more");
        _ = try q.one(0);
        // Closing the file removes its kevents, unreported.
        testing.close(file);
        try q.quiet();
        try expectEqual(E.BADF, try q.refuse(make(id, EVFILT.WRITE, EV.DELETE, 0, 0, 0)));
    }
}

test "macos, freebsd: EV_EOF's fflags is the socket's error (XNU uipc_socket.c filt_soread_common and FreeBSD uipc_socket.c filt_soread: 'kn->kn_flags |= EV_EOF; kn->kn_fflags = so->so_error')" {
    for ([_]Personality{ .default, .macos, .freebsd }) |p| {
        const q = try openAs(p);
        defer q.deinit();
        const pair = try testing.socketPair();
        defer testing.close(pair[0]);
        // The peer goes with data unread: Linux resets the survivor.
        try writeAll(pair[0], "unread");
        testing.close(pair[1]);
        try q.apply(&.{make(@intCast(pair[0]), EVFILT.READ, EV.ADD, 0, 0, 0)});
        const ev = try q.one(1000);
        try expect(ev.flags & EV.EOF != 0);
        const want: u32 = if (p == .default) 0 else @backingInt(E.CONNRESET);
        try expectEqual(want, ev.fflags);
        // Read without clearing it: the application's read still fails.
        var buf: [8]u8 = undefined;
        try expectEqual(E.CONNRESET, sysErr(linux.read(pair[0], &buf, buf.len)));
    }
}

test "freebsd: EVFILT_WRITE on a pipe whose reader is gone is EPIPE (sys_pipe.c pipe_kqfilter: 'if (cpipe->pipe_peer->pipe_present != PIPE_ACTIVE) { /* other end of pipe has been closed */ ... return (EPIPE)'); macOS takes it (XNU sys_pipe.c pipe_kqfilter: 'FreeBSD will fail the attach with EPIPE ... this isn't a programming error')" {
    for ([_]Personality{ .default, .macos, .freebsd }) |p| {
        const q = try openAs(p);
        defer q.deinit();
        const fds = try testing.blockingPipe();
        defer testing.close(fds[1]);
        testing.close(fds[0]);
        const change = make(@intCast(fds[1]), EVFILT.WRITE, EV.ADD, 0, 0, 0);
        if (p == .freebsd) {
            try expectEqual(E.PIPE, try q.refuse(change));
        } else {
            try q.apply(&.{change});
            try expect((try q.one(1000)).flags & EV.EOF != 0);
        }
        // A reader still there: taken by every personality.
        const live = try testing.blockingPipe();
        defer testing.close(live[0]);
        defer testing.close(live[1]);
        try q.apply(&.{make(@intCast(live[1]), EVFILT.WRITE, EV.ADD, 0, 0, 0)});
    }
}
