//! The scheduler: ready queue, timer heap, fd watchers and `runOnce`, the
//! one place where callbacks are actually called (as
//! `asyncio.base_events._run_once`). Pure Zig: the CPython adapter plugs in
//! through `Callback`, `IoWatcher` and `Hooks` and owns every reference.
const std = @import("std");
const sys = @import("sys.zig");
const backend = @import("backend.zig");
const RingQueue = @import("queue.zig").RingQueue;
const timer_heap = @import("timer_heap.zig");

const api = backend.api;
pub const Interest = backend.api.Interest;
pub const Event = backend.api.Event;
pub const Recv = backend.api.Recv;
pub const recv_buffers_max = backend.recv_buffers_max;
pub const Timer = timer_heap.Timer;

/// Raised out of `runOnce` when a callback must abort the loop (in CPython
/// terms: KeyboardInterrupt or SystemExit, or a failing signal check).
pub const RunError = error{Aborted};
pub const Error = sys.Error || error{OutOfMemory};
/// `init`'s errors: `UnknownBackend` when `ZLOOP_BACKEND` names no backend.
pub const InitError = Error || error{UnknownBackend};

/// Something that can sit in the ready queue or the timer heap. Whoever
/// queues it hands the queue one reference: `run` consumes it; `drop`
/// releases it unrun (when the loop closes with work still queued).
pub const Callback = struct {
    run: *const fn (*Callback) RunError!void,
    drop: *const fn (*Callback) void,
};

fn dropNothing(_: *Callback) void {}

/// Work deferred to the end of the callback that is running: the adapter
/// queues one with `deferFlush` from inside a callback (a transport holding
/// back small writes so that several go out in one send), and the reactor
/// runs it as soon as that callback returns, before the next one starts.
/// As with `Callback`, queuing hands over one reference: `cb.run` consumes
/// it, `cb.drop` releases it unrun.
pub const Flush = struct {
    cb: Callback,
    next: ?*Flush = null,
    queued: bool = false,
};

/// Interest in one fd. The reactor never owns watchers; it finds them by fd
/// at dispatch time, so a watcher removed by an earlier callback in the same
/// batch is simply skipped.
pub const IoWatcher = struct {
    fd: sys.fd_t,
    /// What the kernel will report now (kept by `setInterest`/`armOnce`,
    /// and dropped to none by the reactor when a one-shot entry fires).
    interest: Interest = .{},
    on_ready: *const fn (*IoWatcher, Event) RunError!void,
    /// The current registration is one-shot (see `armOnce`).
    oneshot: bool = false,
    /// The kernel may hold an entry for `fd`, disarmed by a one-shot event:
    /// arming again modifies it instead of adding one.
    registered: bool = false,
    /// Read interest is to be served by native receives where the backend
    /// has them (`Reactor.nativeRecv`): `on_ready` then gets `Event.recv`.
    /// Takes effect with the next `setInterest`.
    recv: bool = false,
    /// What the kernel was last told of `recv`.
    recv_applied: bool = false,
    /// The fd belongs to user code (add_reader, sock_*), which may close it
    /// without telling the loop: see `backend.api.Arm.borrowed`.
    borrowed: bool = false,
};

/// A watch for one child process's exit (`Reactor.watchChild`). The caller
/// owns it and keeps it alive, in place, until `on_exit` has been called or
/// `unwatchChild` has returned (a kqueue filter points at it).
pub const ChildWatcher = struct {
    /// Called once, from the loop, when the child has exited, with its
    /// wait status (as waitpid(2) gives it) where the platform tells it
    /// without reaping (kqueue's NOTE_EXIT; waitid(WNOWAIT) on Linux), or
    /// null (not a child of this process, or reaped already by someone
    /// else). The child is NOT reaped: the caller reaps it (waitpid), as
    /// asyncio's child watchers do. The watch is over when this runs.
    on_exit: *const fn (*ChildWatcher, status: ?u32) RunError!void,
    /// What a backend that watches children itself sees (`api.ChildExit`).
    exit: api.ChildExit = .{ .pid = 0, .serial = 0 },
    /// Elsewhere (Linux): the child's pidfd, watched as any fd.
    io: IoWatcher = .{ .fd = -1, .on_ready = childReady },
    reactor: ?*Reactor = null,
    /// Between `watchChild` and the exit's report (or `unwatchChild`).
    active: bool = false,
};

/// Adapter hooks around the blocking wait (the CPython adapter releases and
/// re-takes the GIL there) and after every wait (its signal check).
pub const Hooks = struct {
    ctx: *anyopaque,
    /// Before a wait that may block, told how long (ms; -1: until an
    /// event); returns how long it may block: that, or less (upkeep that
    /// waits for a quiet loop shortens it; the pass after it waits again).
    before_wait: *const fn (*anyopaque, timeout_ms: i32) i32,
    /// After that wait, with the number of events it brought (0 also when
    /// a signal cut it short).
    after_wait: *const fn (*anyopaque, events: usize) void,
    /// After every wait, before any of its events is dispatched or any
    /// callback run (not on a pass that skips its wait: see
    /// `waitForEvents`). An error aborts the pass; the wait's events stay
    /// for the next one.
    check_signals: *const fn (*anyopaque) RunError!void,
};

/// Back-pressure on callbacks posted from other threads (the adapter's
/// call_soon_threadsafe). Posting costs a producer thread far less than
/// running the callback costs the loop, so producers would outrun it: the
/// ready queue, the memory and the lateness of every timer due behind it
/// would grow without bound (asyncio's producers are held back by the
/// `send()` and the GIL hand-off each post pays). So a producer that finds
/// more than `high` posted callbacks waiting blocks until the loop has run
/// them down to `low`, woken the moment it has.
///
/// Only while the loop drains: a loop blocked in a callback (one that joins
/// the producer, or takes a lock the producer holds while it posts) runs
/// nothing, and a producer waiting for it would only wait. A wait in which
/// the loop runs no callback for `stall_ns` while the process sits idle
/// ends then and marks the loop stalled: nobody waits until `high` more
/// are posted or the loop has run `high` callbacks. So a stall costs its
/// producers about `stall_ns` for every `high` posts (a wait that timed
/// out cost 50 ms), and what a stall lets through stays bounded: a loop
/// that runs again, or was only blocked for a moment (in a thread's
/// `start()`), holds producers back again soon. The counts change under
/// the adapter's lock (the GIL), as the ready queue does; `drained`,
/// `waiters` and `Reactor.ran` are atomics because producers wait on them
/// without that lock.
pub const Posted = struct {
    /// Posted and neither run nor dropped yet.
    pending: usize = 0,
    /// Bumped, with every waiter woken, when `pending` comes down to `low`
    /// and when the loop stops or closes: what waiting producers block on.
    drained: std.atomic.Value(u32) = .init(0),
    /// Producers blocked in `awaitDrained` (or about to be).
    waiters: std.atomic.Value(u32) = .init(0),
    /// `Reactor.ran` when a producer last found the loop stalled (see
    /// above): nobody waits until the loop has run `high` callbacks since,
    /// or `high` more are posted (`stalled_until`), whichever comes first.
    stalled_ran: ?u64 = null,
    stalled_until: usize = 0,
    /// How long a waiting producer lets the loop run no callback (with the
    /// process idle) before it takes the loop for stalled. A loop that is
    /// draining runs one every few microseconds once it has the GIL; one
    /// switch interval (5 ms) covers its wait for the GIL behind producers
    /// still posting, and CPU time other processes took on a busy machine
    /// can make the process look idle meanwhile. Measured: at 1 ms, eight
    /// flooding producers on a loaded two-core machine made the loop's
    /// timers up to four times later than at 5 ms. A field, so that a test
    /// can pick another.
    stall_ns: u64 = 5 * std.time.ns_per_ms,
    /// The longest one wait lasts while the loop runs callbacks but does
    /// not get down to `low` (a loop that keeps posting to itself).
    wait_ns: u64 = 50 * std.time.ns_per_ms,

    /// Producers that find more waiting than this wait. asyncio's
    /// producers peak at a few thousand (one producer) to a few tens of
    /// thousands (eight) under a flood.
    pub const high: usize = 4096;
    /// ... until the loop has run the queue down to this.
    pub const low: usize = 1024;

    pub const Outcome = enum { drained, stalled, timed_out };
};

pub const Reactor = struct {
    gpa: std.mem.Allocator,
    backend: backend.Backend,
    ready: RingQueue(*Callback) = .{},
    timers: timer_heap.TimerHeap = .{},
    watchers: std.ArrayList(?*IoWatcher) = .empty,
    events: [256]Event = undefined,
    /// The last wait's events not dispatched yet: `events[event_next..
    /// event_end]`. Some are left only when a handler aborted the pass (a
    /// KeyboardInterrupt out of a server's protocol factory); the next pass
    /// dispatches them before it waits again, so nothing the kernel
    /// reported is lost (an entry it disarmed, a native receive's data).
    event_next: usize = 0,
    event_end: usize = 0,
    /// Where the backend wakes itself (`backend.wakesItself`), no fds:
    /// `read_fd` is `api.wake_fd`, the fd of the backend's wake-up events,
    /// and `write_fd` -1.
    waker: sys.Waker,
    wake_pending: std.atomic.Value(bool) = .init(false),
    stopping: bool = false,
    /// As `loop._clock_resolution`: timers due within it fire this pass.
    clock_resolution_s: f64 = 1e-9,
    hooks: ?Hooks = null,
    /// True while `runOnce` runs the ready callbacks: `deferFlush` is only
    /// valid then (outside, a flush would have no callback end to wait for).
    in_callbacks: bool = false,
    /// Flushes queued by the running callback, last queued first.
    flushes: ?*Flush = null,
    /// The last pass blocked in its wait and woke on events: the next
    /// pass runs what they queued without polling first (see `runOnce`).
    woke_on_events: bool = false,
    /// The active child watches (see `watchChild`).
    children: std.ArrayList(*ChildWatcher) = .empty,
    /// The serial the next child watch gets (`api.ChildExit.serial`).
    next_child_serial: u32 = 0,
    /// Callbacks run so far (wrapping): the loop's progress, as producers
    /// held back by `posted` see it.
    ran: std.atomic.Value(u64) = .init(0),
    posted: Posted = .{},
    /// The process that made the backend: only it may change what the
    /// kernel holds for it (see `abandon`).
    owner_pid: i32,
    /// Set by `abandon`: this process did not make the backend, and no
    /// call from here on changes what the kernel holds for it.
    abandoned: bool = false,

    /// A reactor on the backend `ZLOOP_BACKEND` names (see backend.zig).
    pub fn init(gpa: std.mem.Allocator) InitError!Reactor {
        return withBackend(gpa, try backend.initFromEnv());
    }

    /// A reactor on the backend of `kind` (io_uring may fall back to epoll).
    pub fn initKind(gpa: std.mem.Allocator, kind: backend.Kind) Error!Reactor {
        return withBackend(gpa, try backend.initKind(kind));
    }

    fn withBackend(gpa: std.mem.Allocator, started: backend.Backend) Error!Reactor {
        var b = started;
        errdefer b.deinit();
        const pid = sys.getpid();
        if (backend.wakesItself(&b)) {
            const waker: sys.Waker = .{ .read_fd = api.wake_fd, .write_fd = -1 };
            return .{ .gpa = gpa, .backend = b, .waker = waker, .owner_pid = pid };
        }
        var waker = try sys.Waker.init();
        errdefer waker.deinit();
        try b.setInterest(waker.read_fd, .{}, .{ .read = true }, .{});
        return .{ .gpa = gpa, .backend = b, .waker = waker, .owner_pid = pid };
    }

    /// Whether this process is not the one that made the reactor: a fork
    /// child, which shares the parent's epoll instance or ring (a kqueue
    /// it does not inherit at all). One getpid(2) per call.
    pub fn inherited(r: *const Reactor) bool {
        return sys.getpid() != r.owner_pid;
    }

    /// From here on, nothing this reactor does changes a kernel object it
    /// shares with the process that made it (`inherited`): no epoll_ctl,
    /// no ring entry, submission, registration or buffer, no kevent.
    /// Watchers still detach and child watches end (their table entries
    /// and pidfds are this process's own), and `deinit` closes only what
    /// this process holds. For the loop's close() in a fork child, as
    /// stock asyncio's close() there only closes its selector's fd.
    pub fn abandon(r: *Reactor) void {
        r.abandoned = true;
        // What the parent's last wait reported is the parent's to handle.
        r.event_next = 0;
        r.event_end = 0;
    }

    /// Frees the reactor's own memory. The adapter must have drained the
    /// ready queue, the timers and its watchers first (it owns them).
    /// Child watches still active are dropped unreported.
    pub fn deinit(r: *Reactor) void {
        std.debug.assert(r.flushes == null);
        while (r.children.items.len > 0) r.unwatchChild(r.children.items[r.children.items.len - 1]);
        r.children.deinit(r.gpa);
        r.ready.deinit(r.gpa);
        r.timers.deinit(r.gpa);
        r.watchers.deinit(r.gpa);
        if (!r.wakesItself()) r.waker.deinit();
        if (r.abandoned) r.backend.abandon() else r.backend.deinit();
    }

    /// The backend wakes itself (kqueue's EVFILT_USER): no waker fds.
    inline fn wakesItself(r: *const Reactor) bool {
        return switch (backend.wake_duty) {
            .never => false,
            .always => true,
            .per_instance => r.waker.write_fd < 0,
        };
    }

    /// The name of the backend this reactor runs on ("epoll", "io_uring",
    /// "kqueue"): fixed for its lifetime.
    pub fn backendName(r: *const Reactor) []const u8 {
        return backend.activeName(&r.backend);
    }

    /// The optional backend features in use, a bit per
    /// `backend.feature_names` entry (io_uring's; none on epoll).
    pub fn backendFeatures(r: *const Reactor) u32 {
        return backend.features(&r.backend);
    }

    /// Whether watchers asking for `recv` get native receives (io_uring
    /// with a provided-buffer ring); once buffers are provided.
    pub fn nativeRecv(r: *const Reactor) bool {
        return backend.nativeRecv(&r.backend);
    }

    /// Provides receive buffer `id` (below `recv_buffers_max`): new, or
    /// handed back by the owner of a `recv` event that carried it. The
    /// memory must stay valid until the id comes back in an event, or
    /// until `deinit` returns.
    pub fn provideRecvBuffer(r: *Reactor, id: u16, buf: []u8) void {
        if (backend.is_linux and !r.abandoned) r.backend.provideRecvBuffer(id, buf);
    }

    /// Gives back, unread, the buffer a `recv` event carried.
    pub fn recycleRecvBuffer(r: *Reactor, id: u16) void {
        if (backend.is_linux and !r.abandoned) r.backend.recycleRecvBuffer(id);
    }

    pub fn now_s(r: *const Reactor) f64 {
        _ = r;
        return sys.monotonic_s();
    }

    /// Queues `cb` for the next pass (or this one, if called while
    /// dispatching I/O). Not thread-safe on its own: callers hold the GIL.
    pub fn callSoon(r: *Reactor, cb: *Callback) error{OutOfMemory}!void {
        try r.ready.push(r.gpa, cb);
    }

    pub fn readyCount(r: *const Reactor) usize {
        return r.ready.len;
    }

    /// Pops a queued callback without running it (for close()).
    pub fn popReady(r: *Reactor) ?*Callback {
        return r.ready.pop();
    }

    /// Wakes a blocked `runOnce` from any thread. Writes the eventfd (the
    /// pipe; triggers the backend's own wake-up) at most once until the
    /// loop has seen it, so a burst of threadsafe calls costs one syscall.
    pub fn wake(r: *Reactor) void {
        if (r.wake_pending.swap(true, .acq_rel)) return;
        if (r.wakesItself()) r.backend.wake() else r.waker.wake();
    }

    /// Queues `cb` as `callSoon` does, counted as posted from another
    /// thread (see `Posted`): whoever runs or drops it calls `postedTaken`.
    pub fn callSoonPosted(r: *Reactor, cb: *Callback) error{OutOfMemory}!void {
        try r.ready.push(r.gpa, cb);
        r.posted.pending += 1;
    }

    /// A posted callback left the queue (to run, or dropped unrun).
    pub fn postedTaken(r: *Reactor) void {
        std.debug.assert(r.posted.pending > 0);
        r.posted.pending -= 1;
        // Only the step down to `low` wakes: later ones find no waiter
        // left, or one that registered after it, too late for this one.
        if (r.posted.pending == Posted.low and r.posted.waiters.load(.monotonic) != 0) {
            r.releasePosters();
        }
    }

    /// Wakes every producer waiting in `awaitDrained`.
    pub fn releasePosters(r: *Reactor) void {
        _ = r.posted.drained.fetchAdd(1, .release);
        sys.futexWakeAll(&r.posted.drained);
    }

    /// Whether a producer posting now should wait for the loop (called
    /// under the lock, by a thread that is not the loop's, while it runs).
    pub fn postersShouldWait(r: *const Reactor) bool {
        const p = &r.posted;
        if (p.pending <= Posted.high) return false;
        const stalled = p.stalled_ran orelse return true;
        return p.pending >= p.stalled_until or r.ran.raw -% stalled >= Posted.high;
    }

    /// What a producer reads, under the lock, before `awaitDrained`.
    pub const PostWait = struct { drained: u32, ran: u64 };

    /// Registers a producer about to wait (under the lock).
    pub fn postWaitBegin(r: *Reactor) PostWait {
        _ = r.posted.waiters.fetchAdd(1, .monotonic);
        return .{ .drained = r.posted.drained.load(.acquire), .ran = r.ran.raw };
    }

    /// Blocks, WITHOUT the lock, until the loop drains the posted queue to
    /// `Posted.low` (or stops), or is found stalled, or `posted.wait_ns`
    /// passes. Stalled: it ran no callback for `posted.stall_ns` while the
    /// process sat idle (it used less than half that in CPU time). A loop
    /// that runs nothing while the process is busy waits for the GIL,
    /// which other producers hold, and will drain once it has it. Touches
    /// only atomics: the loop may close meanwhile.
    pub fn awaitDrained(r: *Reactor, w: PostWait) Posted.Outcome {
        defer _ = r.posted.waiters.fetchSub(1, .monotonic);
        const stall_s = nsToS(r.posted.stall_ns);
        var mark_s = sys.monotonic_s();
        var mark_cpu_s = sys.processCpu_s();
        var ran = w.ran;
        const deadline_s = mark_s + nsToS(r.posted.wait_ns);
        while (r.posted.drained.load(.acquire) == w.drained) {
            const t = sys.monotonic_s();
            const ran_now = r.ran.load(.monotonic);
            if (ran_now != ran or t - mark_s >= stall_s) {
                const cpu_s = sys.processCpu_s();
                if (ran_now == ran and cpu_s - mark_cpu_s < (t - mark_s) / 2) return .stalled;
                ran = ran_now;
                mark_s = t;
                mark_cpu_s = cpu_s;
            }
            const until_s = @min(deadline_s, mark_s + stall_s);
            if (!(until_s > t)) return .timed_out;
            sys.futexWait(&r.posted.drained, w.drained, @intFromFloat((until_s - t) * 1e9));
        }
        return .drained;
    }

    fn nsToS(ns: u64) f64 {
        return @as(f64, @floatFromInt(ns)) * 1e-9;
    }

    /// After `awaitDrained`, under the lock again: a wait that found the
    /// loop stalled, or reached its bound without the loop running one
    /// callback, marks it stalled (see `Posted`).
    pub fn postWaitEnd(r: *Reactor, w: PostWait, outcome: Posted.Outcome) void {
        const still = r.ran.raw == w.ran;
        if (outcome == .stalled or (outcome == .timed_out and still)) {
            r.posted.stalled_ran = r.ran.raw;
            r.posted.stalled_until = r.posted.pending +| Posted.high;
        }
    }

    pub fn addTimer(r: *Reactor, t: *Timer) error{OutOfMemory}!void {
        try r.timers.insert(r.gpa, t);
    }

    pub fn cancelTimer(r: *Reactor, t: *Timer) void {
        if (t.queued()) r.timers.remove(t);
    }

    /// Pops a scheduled timer's callback without running it (for close()).
    pub fn popTimer(r: *Reactor) ?*Callback {
        const t = r.timers.pop() orelse return null;
        return timerCallback(t);
    }

    pub fn timerCount(r: *const Reactor) usize {
        return r.timers.count();
    }

    pub fn watcherFor(r: *const Reactor, fd: sys.fd_t) ?*IoWatcher {
        if (fd < 0 or @as(usize, @intCast(fd)) >= r.watchers.items.len) return null;
        return r.watchers.items[@intCast(fd)];
    }

    /// Registers `w` under its fd (replacing nothing: one watcher per fd).
    /// An fd beyond the table must be open (else `error.BadFd`) before the
    /// table grows to it: the table then never outgrows the process's own
    /// fd table, whatever number a caller passes.
    pub fn attach(r: *Reactor, w: *IoWatcher) Error!void {
        std.debug.assert(w.fd >= 0);
        const i: usize = @intCast(w.fd);
        if (i >= r.watchers.items.len) {
            try sys.checkOpen(w.fd);
            const old_len = r.watchers.items.len;
            try r.watchers.resize(r.gpa, @max(i + 1, old_len * 2, 64));
            @memset(r.watchers.items[old_len..], null);
        }
        std.debug.assert(r.watchers.items[i] == null);
        r.watchers.items[i] = w;
    }

    /// Drops `w` from the table and from the kernel's interest list.
    /// Whatever the kernel still holds for the fd is dropped unreported
    /// (a paused native receive's data included): the fd may close next.
    pub fn detach(r: *Reactor, w: *IoWatcher) void {
        std.debug.assert(r.watcherFor(w.fd) == w);
        r.dropEventsFor(w.fd);
        const how: backend.api.Arm = .{ .registered = w.registered, .forget = true, .borrowed = w.borrowed };
        if (!r.abandoned) r.backend.setInterest(w.fd, w.interest, .{}, how) catch {};
        if (!w.interest.none()) w.registered = false;
        w.interest = .{};
        w.recv_applied = false;
        r.watchers.items[@intCast(w.fd)] = null;
    }

    /// Events of the last wait not dispatched yet that name `fd` are the
    /// detached watcher's: none may reach a watcher that takes the number
    /// next. Emptied where they lie (no readiness, no receive; see
    /// `dispatchEvents`), a receive's buffer back to the kernel. Nothing
    /// to look at unless a handler running user code detaches (a protocol
    /// factory closing another connection) or a pass aborted.
    fn dropEventsFor(r: *Reactor, fd: sys.fd_t) void {
        for (r.events[r.event_next..r.event_end]) |*ev| {
            if (ev.fd != fd) continue;
            if (ev.recv) |rv| if (rv.res > 0) r.recycleRecvBuffer(rv.buffer);
            ev.* = .{ .fd = fd, .readable = false, .writable = false };
        }
    }

    /// The file `w` was registered for is gone from its fd number (closed
    /// behind the loop's back; the number may stand for another file now):
    /// forgets its registration with no system call, so that the next arm
    /// registers whatever file holds the number afresh, and a removal
    /// touches nothing. Only for borrowed watchers, whose backends (epoll,
    /// io_uring's epoll instance) forgot a closed file by themselves.
    pub fn forgetFile(r: *Reactor, w: *IoWatcher) void {
        std.debug.assert(w.borrowed and r.watcherFor(w.fd) == w);
        w.interest = .{};
        w.registered = false;
        w.oneshot = false;
        w.recv_applied = false;
    }

    /// Level-triggered interest: reported on every pass while ready.
    pub fn setInterest(r: *Reactor, w: *IoWatcher, interest: Interest) sys.Error!void {
        return r.arm(w, interest, false);
    }

    /// One-shot interest: reported once, after which the kernel disarms the
    /// entry by itself and the reactor sets `w.interest` to none before
    /// `on_ready` runs. Arming it again costs one modification (epoll,
    /// kqueue's EV_ENABLE) or nothing until the next wait (io_uring), and
    /// a wait that finished needs no syscall to stop listening: what a
    /// `sock_recv` loop pays per wait, where add-then-remove costs two. A
    /// disarmed entry left behind reports nothing, whatever becomes of its
    /// fd. Level-triggered where the backend has no one-shot mode.
    pub fn armOnce(r: *Reactor, w: *IoWatcher, interest: Interest) sys.Error!void {
        return r.arm(w, interest, backend.Backend.has_oneshot);
    }

    fn arm(r: *Reactor, w: *IoWatcher, interest: Interest, oneshot: bool) sys.Error!void {
        const same = @as(u2, @bitCast(w.interest)) == @as(u2, @bitCast(interest));
        if (same and (interest.none() or (w.oneshot == oneshot and w.recv_applied == w.recv))) return;
        const how: backend.api.Arm = .{ .oneshot = oneshot, .registered = w.registered, .recv = w.recv, .borrowed = w.borrowed };
        // Abandoned (a fork child closing the loop): what the kernel holds
        // is the parent's; only the watcher's own record changes.
        if (!r.abandoned) try r.backend.setInterest(w.fd, w.interest, interest, how);
        if (!interest.none()) {
            w.registered = true;
            w.oneshot = oneshot;
            w.recv_applied = w.recv;
        } else if (!w.interest.none()) {
            w.registered = false; // removed from the kernel
        }
        w.interest = interest;
    }

    /// How long the next wait may block, in ms (-1: until an event).
    fn timeoutMs(r: *const Reactor) i32 {
        if (r.ready.len > 0 or r.stopping) return 0;
        const next = r.timers.peek() orelse return -1;
        const delay_s = next.when_s - sys.monotonic_s();
        // NaN too (a timer at NaN): asyncio's `max(0, when - now)` is 0
        // for it, and the pass below finds it due.
        if (!(delay_s > 0)) return 0;
        // Round up, as asyncio's selector does, so a timer never wakes early
        // only to sleep again for 0 ms; cap to stay inside i32.
        const ms = @ceil(delay_s * 1000.0);
        return if (ms > 86_400_000.0) 86_400_000 else @intFromFloat(ms);
    }

    fn wait(r: *Reactor, timeout_ms: i32) RunError!usize {
        const blocking = timeout_ms != 0;
        var timeout = timeout_ms;
        if (blocking) if (r.hooks) |h| {
            timeout = h.before_wait(h.ctx, timeout_ms);
        };
        const result = r.backend.poll(timeout, &r.events);
        // A signal that cut the wait short brought nothing: `waitForEvents`
        // runs its handlers, as after any wait.
        const n = result catch |err| switch (err) {
            error.Interrupted => 0,
            // Anything else means the backend itself is broken; there is
            // nothing to dispatch, and spinning would hide it, so abort.
            else => {
                if (blocking) if (r.hooks) |h| h.after_wait(h.ctx, 0);
                return error.Aborted;
            },
        };
        if (blocking) if (r.hooks) |h| h.after_wait(h.ctx, n);
        return n;
    }

    fn drainWake(r: *Reactor) void {
        if (!r.wakesItself()) r.waker.drain();
        r.wake_pending.store(false, .release);
    }

    /// One pass: wait for I/O (or not, if work is ready), dispatch it, move
    /// due timers to the ready queue, then run exactly the callbacks that
    /// were ready at that point. Callbacks queued meanwhile wait for the
    /// next pass, as in `asyncio.base_events._run_once`.
    pub fn runOnce(r: *Reactor) (RunError || error{OutOfMemory})!void {
        // Left over from a pass that aborted inside a flush.
        try r.runFlushes();
        // Events left by a pass that aborted in a handler go first, and
        // this pass does not wait.
        if (r.event_next == r.event_end) try r.waitForEvents();
        try r.dispatchEvents();
        const end_s = sys.monotonic_s() + r.clock_resolution_s;
        while (r.timers.peek()) |t| {
            if (t.when_s >= end_s) break;
            r.timers.remove(t);
            const cb: *Callback = timerCallback(t);
            try r.ready.push(r.gpa, cb);
        }
        r.in_callbacks = true;
        defer r.in_callbacks = false;
        var todo = r.ready.len;
        while (todo > 0) : (todo -= 1) {
            const cb = r.ready.pop().?;
            // One writer (the loop); producers read it while they wait.
            r.ran.store(r.ran.raw +% 1, .monotonic);
            const result = cb.run(cb);
            // What the callback deferred goes out even if it aborts the
            // loop (a KeyboardInterrupt must not eat written bytes).
            if (r.flushes != null) try r.runFlushes();
            try result;
        }
    }

    /// The pass's wait (see `runOnce`): its events into `events`.
    fn waitForEvents(r: *Reactor) RunError!void {
        const timeout_ms = r.timeoutMs();
        // After a wait that blocked and woke on events, the pass that
        // follows (the task their callbacks woke, typically) does not poll
        // first: a non-blocking poll microseconds after the blocking one
        // costs a syscall and finds nothing, nearly always. What it would
        // have found is dispatched one pass later, which is the same as
        // that I/O arriving a moment later; the pass after this one polls
        // again, so I/O never waits behind more than one pass.
        const skip = timeout_ms == 0 and r.woke_on_events;
        if (skip) {
            r.woke_on_events = false;
            r.event_next = 0;
            r.event_end = 0;
            return;
        }
        const n = try r.wait(timeout_ms);
        r.woke_on_events = timeout_ms != 0 and n > 0;
        r.event_next = 0;
        r.event_end = n;
        // Signals that arrived while it waited are handled before anything
        // it brought, as asyncio's selector returns into Python code first.
        if (r.hooks) |h| try h.check_signals(h.ctx);
    }

    /// Hands the waited events to their watchers, in order. A handler
    /// that aborts leaves the rest for the next pass.
    fn dispatchEvents(r: *Reactor) RunError!void {
        while (r.event_next < r.event_end) {
            const ev = r.events[r.event_next];
            r.event_next += 1;
            if (ev.fd == r.waker.read_fd) {
                r.drainWake();
                continue;
            }
            const w = r.watcherFor(ev.fd) orelse {
                if (backend.child_duty != .never) {
                    if (api.childSerial(ev.fd)) |serial| try r.childExited(serial);
                }
                // Removed by an earlier event's handler: nobody reads it.
                if (ev.recv) |rv| if (rv.res > 0) r.recycleRecvBuffer(rv.buffer);
                continue;
            };
            // Emptied by `dropEventsFor`: its watcher is gone.
            if (!ev.readable and !ev.writable and ev.recv == null) continue;
            if (w.oneshot) w.interest = .{}; // the kernel disarmed it
            try w.on_ready(w, ev);
        }
    }

    /// Queues `f` (not queued yet: see `Flush.queued`) to run when the
    /// running callback returns. Only while `in_callbacks`.
    pub fn deferFlush(r: *Reactor, f: *Flush) void {
        std.debug.assert(r.in_callbacks and !f.queued);
        f.queued = true;
        f.next = r.flushes;
        r.flushes = f;
    }

    fn popFlush(r: *Reactor) ?*Flush {
        const f = r.flushes orelse return null;
        r.flushes = f.next;
        f.next = null;
        f.queued = false;
        return f;
    }

    /// Runs every queued flush (those queued meanwhile too). A flush that
    /// aborts stops the rest, which stay queued for `dropFlushes`.
    fn runFlushes(r: *Reactor) RunError!void {
        while (r.popFlush()) |f| try f.cb.run(&f.cb);
    }

    /// Releases flushes left queued by an aborted pass (the adapter calls
    /// this before closing; a later pass would run them).
    pub fn dropFlushes(r: *Reactor) void {
        while (r.popFlush()) |f| f.cb.drop(&f.cb);
    }

    /// Watches child `pid` until it exits, then calls `w.on_exit` once from
    /// the loop (see `ChildWatcher`). The backend watches it where it can
    /// (kqueue: EVFILT_PROC, NOTE_EXIT); elsewhere (Linux) a pidfd is
    /// watched as any fd. Fails with `error.Unexpected` and `last_errno`
    /// ESRCH when there is no such process (reaped already; on macOS also
    /// a child that has exited or is exiting: reap it then). On kqueue the
    /// exit may be heard (or refused so) before the child turns zombie
    /// (XNU posts NOTE_EXIT first): waitpid(WNOHANG) may still say 0 for
    /// a moment, and the caller asks again later, not at once.
    pub fn watchChild(r: *Reactor, w: *ChildWatcher, pid: i32) Error!void {
        std.debug.assert(!w.active and pid > 0);
        try r.children.ensureUnusedCapacity(r.gpa, 1);
        w.reactor = r;
        if (backend.watchesChildren(&r.backend)) {
            w.exit = .{ .pid = pid, .serial = r.nextChildSerial() };
            try r.backend.watchChild(&w.exit);
        } else {
            try r.watchPidfd(w, pid);
        }
        w.active = true;
        r.children.appendAssumeCapacity(w);
    }

    fn nextChildSerial(r: *Reactor) u32 {
        const serial = r.next_child_serial;
        r.next_child_serial = if (serial == api.max_child_serial) 0 else serial + 1;
        return serial;
    }

    fn watchPidfd(r: *Reactor, w: *ChildWatcher, pid: i32) Error!void {
        if (!sys.is_linux) unreachable; // no pidfds: the backend watches children
        const fd = if (sys.is_linux) try sys.linux.pidfd_open(pid) else unreachable;
        errdefer sys.close(fd);
        w.io = .{ .fd = fd, .on_ready = childReady };
        try r.attach(&w.io);
        errdefer r.detach(&w.io);
        try r.setInterest(&w.io, .{ .read = true });
    }

    /// Stops watching `w` (nothing if its exit was reported already): its
    /// `on_exit` will not run.
    pub fn unwatchChild(r: *Reactor, w: *ChildWatcher) void {
        if (!w.active) return;
        std.debug.assert(w.reactor == r);
        const i = std.mem.indexOfScalar(*ChildWatcher, r.children.items, w).?;
        _ = r.children.swapRemove(i);
        w.active = false;
        if (backend.watchesChildren(&r.backend)) {
            if (!r.abandoned) r.backend.unwatchChild(&w.exit);
        } else {
            r.detach(&w.io);
            sys.close(w.io.fd);
            w.io.fd = -1;
        }
    }

    /// The backend reported watch `serial`'s exit (it dropped the watch).
    fn childExited(r: *Reactor, serial: u32) RunError!void {
        for (r.children.items, 0..) |w, i| {
            if (w.exit.serial != serial) continue;
            _ = r.children.swapRemove(i);
            w.active = false;
            return w.on_exit(w, w.exit.status);
        }
        // Unwatched by an earlier event's handler: nobody hears it.
    }

    /// Runs passes until `stopping` is set, then clears it.
    pub fn runForever(r: *Reactor) (RunError || error{OutOfMemory})!void {
        defer r.stopping = false;
        // A loop that stops makes no more progress: nobody waits on it.
        defer if (r.posted.waiters.load(.monotonic) != 0) r.releasePosters();
        r.woke_on_events = false; // a run starts with a poll
        while (true) {
            try r.runOnce();
            if (r.stopping) break;
        }
    }
};

/// A timer and the callback it queues when due, kept side by side so the
/// reactor can move a due timer to the ready queue without allocating.
pub const TimerEntry = struct {
    timer: Timer = .{},
    callback: Callback,
};

/// Whether `w` is a child watch's pidfd watcher (Linux: `watchChild`
/// registers one in the watcher table, beside the caller's own watchers).
pub fn isChildWatcher(w: *const IoWatcher) bool {
    return w.on_ready == childReady;
}

/// The child watch a pidfd watcher belongs to (`isChildWatcher`).
pub fn childWatcherOf(w: *IoWatcher) *ChildWatcher {
    std.debug.assert(isChildWatcher(w));
    return @fieldParentPtr("io", w);
}

/// A child's pidfd turned readable: it has exited (Linux).
fn childReady(io: *IoWatcher, _: Event) RunError!void {
    if (!sys.is_linux) unreachable; // no pidfds: the backend watches children
    const w: *ChildWatcher = @fieldParentPtr("io", io);
    std.debug.assert(w.active);
    const status = if (sys.is_linux) sys.linux.exitStatus(io.fd) else null;
    w.reactor.?.unwatchChild(w);
    return w.on_exit(w, status);
}

fn timerCallback(t: *Timer) *Callback {
    const entry: *TimerEntry = @fieldParentPtr("timer", t);
    return &entry.callback;
}

// ---------------------------------------------------------------- tests

/// Runs `case` on a fresh reactor of every backend this platform has.
fn eachBackend(case: fn (*Reactor) anyerror!void) !void {
    inline for (comptime std.meta.tags(backend.Kind)) |kind| {
        var r = try Reactor.initKind(std.testing.allocator, kind);
        defer r.deinit();
        case(&r) catch |err| {
            std.debug.print("backend {s}: {s}\n", .{ r.backendName(), @errorName(err) });
            return err;
        };
    }
}

const Probe = struct {
    cb: Callback = .{ .run = run, .drop = dropNothing },
    log: *std.ArrayList(u32),
    id: u32,
    reactor: *Reactor,
    requeue: bool = false,
    stop: bool = false,

    fn run(cb: *Callback) RunError!void {
        const p: *Probe = @fieldParentPtr("cb", cb);
        p.log.append(std.testing.allocator, p.id) catch return error.Aborted;
        if (p.requeue) {
            p.requeue = false;
            p.reactor.callSoon(&p.cb) catch return error.Aborted;
        }
        if (p.stop) p.reactor.stopping = true;
    }
};

test "callbacks run FIFO; those queued during a pass wait for the next" {
    try eachBackend(caseCallbacksRunFifo);
}

fn caseCallbacksRunFifo(r: *Reactor) !void {
    var log: std.ArrayList(u32) = .empty;
    defer log.deinit(std.testing.allocator);
    var a: Probe = .{ .log = &log, .id = 1, .reactor = r, .requeue = true };
    var b: Probe = .{ .log = &log, .id = 2, .reactor = r };
    try r.callSoon(&a.cb);
    try r.callSoon(&b.cb);
    try r.runOnce();
    try std.testing.expectEqualSlices(u32, &.{ 1, 2 }, log.items);
    try r.runOnce();
    try std.testing.expectEqualSlices(u32, &.{ 1, 2, 1 }, log.items);
}

const TimerProbe = struct {
    entry: TimerEntry = .{ .callback = .{ .run = run, .drop = dropNothing } },
    log: *std.ArrayList(u32),
    id: u32,
    reactor: *Reactor,
    stop: bool = false,

    fn run(cb: *Callback) RunError!void {
        const entry: *TimerEntry = @fieldParentPtr("callback", cb);
        const p: *TimerProbe = @fieldParentPtr("entry", entry);
        p.log.append(std.testing.allocator, p.id) catch return error.Aborted;
        if (p.stop) p.reactor.stopping = true;
    }
};

const FlushProbe = struct {
    cb: Callback = .{ .run = run, .drop = dropNothing },
    flush: Flush = .{ .cb = .{ .run = runFlush, .drop = dropFlush } },
    log: *std.ArrayList(u32),
    id: u32,
    reactor: *Reactor,
    dropped: bool = false,

    fn run(cb: *Callback) RunError!void {
        const p: *FlushProbe = @fieldParentPtr("cb", cb);
        p.log.append(std.testing.allocator, p.id) catch return error.Aborted;
        p.reactor.deferFlush(&p.flush);
        if (p.id == 3) return error.Aborted;
    }

    fn runFlush(cb: *Callback) RunError!void {
        const f: *Flush = @fieldParentPtr("cb", cb);
        const p: *FlushProbe = @fieldParentPtr("flush", f);
        p.log.append(std.testing.allocator, p.id + 100) catch return error.Aborted;
    }

    fn dropFlush(cb: *Callback) void {
        const f: *Flush = @fieldParentPtr("cb", cb);
        const p: *FlushProbe = @fieldParentPtr("flush", f);
        p.dropped = true;
    }
};

test "a deferred flush runs when its callback returns, before the next; also when it aborts" {
    try eachBackend(caseDeferredFlush);
}

fn caseDeferredFlush(r: *Reactor) !void {
    var log: std.ArrayList(u32) = .empty;
    defer log.deinit(std.testing.allocator);
    var a: FlushProbe = .{ .log = &log, .id = 1, .reactor = r };
    var b: FlushProbe = .{ .log = &log, .id = 2, .reactor = r };
    var c: FlushProbe = .{ .log = &log, .id = 3, .reactor = r };
    try r.callSoon(&a.cb);
    try r.callSoon(&b.cb);
    try r.callSoon(&c.cb);
    try std.testing.expect(!r.in_callbacks);
    try std.testing.expectError(error.Aborted, r.runOnce());
    try std.testing.expectEqualSlices(u32, &.{ 1, 101, 2, 102, 3, 103 }, log.items);
    try std.testing.expect(!r.in_callbacks and r.flushes == null);
    // dropFlushes releases what an aborted flush left.
    r.in_callbacks = true;
    r.deferFlush(&a.flush);
    r.in_callbacks = false;
    r.dropFlushes();
    try std.testing.expect(a.dropped and !a.flush.queued and r.flushes == null);
}

test "due timers fire in deadline order; cancelled ones never; stop ends runForever" {
    try eachBackend(caseDueTimersFireInOrder);
}

fn caseDueTimersFireInOrder(r: *Reactor) !void {
    var log: std.ArrayList(u32) = .empty;
    defer log.deinit(std.testing.allocator);
    const now = r.now_s();
    var late: TimerProbe = .{ .log = &log, .id = 2, .reactor = r, .stop = true };
    var early: TimerProbe = .{ .log = &log, .id = 1, .reactor = r };
    var gone: TimerProbe = .{ .log = &log, .id = 3, .reactor = r };
    late.entry.timer.when_s = now + 0.002;
    early.entry.timer.when_s = now + 0.001;
    gone.entry.timer.when_s = now;
    try r.addTimer(&late.entry.timer);
    try r.addTimer(&early.entry.timer);
    try r.addTimer(&gone.entry.timer);
    r.cancelTimer(&gone.entry.timer);
    try std.testing.expectEqual(@as(usize, 2), r.timerCount());
    try r.runForever();
    try std.testing.expectEqualSlices(u32, &.{ 1, 2 }, log.items);
    try std.testing.expect(r.now_s() >= now + 0.002);
    try std.testing.expect(!r.stopping);
}

test "a timer at NaN or -inf is due at once; one at +inf caps the wait" {
    try eachBackend(caseTimersAtOddDeadlines);
}

fn caseTimersAtOddDeadlines(r: *Reactor) !void {
    var log: std.ArrayList(u32) = .empty;
    defer log.deinit(std.testing.allocator);
    var never: TimerProbe = .{ .log = &log, .id = 3, .reactor = r };
    never.entry.timer.when_s = std.math.inf(f64);
    try r.addTimer(&never.entry.timer);
    try std.testing.expectEqual(@as(i32, 86_400_000), r.timeoutMs());
    // Asyncio's `max(0, when - now)` waits 0 ms for NaN; an unguarded
    // conversion of NaN to an int would be undefined (a wait for ever).
    var nan: TimerProbe = .{ .log = &log, .id = 1, .reactor = r };
    var past: TimerProbe = .{ .log = &log, .id = 2, .reactor = r, .stop = true };
    nan.entry.timer.when_s = std.math.nan(f64);
    past.entry.timer.when_s = -std.math.inf(f64);
    try r.addTimer(&nan.entry.timer);
    try r.addTimer(&past.entry.timer);
    try r.runForever();
    try std.testing.expectEqualSlices(u32, &.{ 1, 2 }, log.items);
    r.cancelTimer(&never.entry.timer);
}

test "wake from another thread unblocks an infinite wait" {
    try eachBackend(caseWakeUnblocksAnInfiniteWait);
}

fn caseWakeUnblocksAnInfiniteWait(r: *Reactor) !void {
    const Waking = struct {
        r: *Reactor,
        posting: std.atomic.Value(bool) = .init(false),
        fn run(w: *@This()) void {
            // Said before the wake, not after: a flag set after `wake()`
            // could still read false once the wake was drained, and the
            // loop below would then wait forever for a wake already seen.
            w.posting.store(true, .release);
            w.r.wake();
        }
    };
    var waking: Waking = .{ .r = r };
    const t = try std.Thread.spawn(.{}, Waking.run, .{&waking});
    defer t.join();
    // A wait can also end early with nothing drained: a signal handler, or
    // the whole process stopped and continued (epoll_wait fails with EINTR
    // even without a handler then). The next pass must still see the wake,
    // so pass until the wake was posted and drained (`wake` raises
    // `wake_pending` before it writes), at least once, so that a wake still
    // between `posting` and its write is waited for; only a lost wake
    // blocks forever here.
    var passes: u32 = 0;
    while (passes == 0 or !waking.posting.load(.acquire) or r.wake_pending.load(.acquire)) : (passes += 1) {
        if (passes == 100) return error.TestUnexpectedResult;
        try r.runOnce();
    }
}

/// A callback posted from another thread: taking it off the queue is what
/// the adapter's posted handles tell the reactor.
const PostedProbe = struct {
    cb: Callback = .{ .run = run, .drop = dropNothing },
    r: *Reactor,

    fn run(cb: *Callback) RunError!void {
        const p: *PostedProbe = @fieldParentPtr("cb", cb);
        p.r.postedTaken();
    }
};

test "posters wait above high until the loop runs the queue down to low; a stalled loop is seen at once" {
    try eachBackend(casePostersWait);
}

fn casePostersWait(r: *Reactor) !void {
    const probes = try std.testing.allocator.alloc(PostedProbe, Posted.high + 1);
    defer std.testing.allocator.free(probes);
    for (probes) |*p| {
        p.* = .{ .r = r };
        try r.callSoonPosted(&p.cb);
    }
    try std.testing.expect(r.postersShouldWait());
    // Nobody runs the loop and the process is idle: the wait ends after
    // `stall_ns`, long before its bound, and the loop counts as stalled,
    // so posters go on without waiting until they have posted `high` more
    // (or it has run `high` callbacks).
    r.posted.stall_ns = std.time.ns_per_ms;
    r.posted.wait_ns = std.time.ns_per_hour;
    const idle = r.postWaitBegin();
    try std.testing.expectEqual(Posted.Outcome.stalled, r.awaitDrained(idle));
    r.postWaitEnd(idle, .stalled);
    try std.testing.expect(!r.postersShouldWait());
    r.posted.pending += Posted.high - 1;
    try std.testing.expect(!r.postersShouldWait());
    r.posted.pending += 1;
    try std.testing.expect(r.postersShouldWait());
    r.posted.pending -= Posted.high;
    try std.testing.expectEqual(@as(u32, 0), r.posted.waiters.load(.monotonic));
    // The loop runs on another thread: the wait ends once the queue is down
    // to `low` (the pass runs the rest too). No bound to race here: on a
    // busy machine that thread may not run for a while.
    r.posted.stall_ns = std.time.ns_per_hour;
    const waiting = r.postWaitBegin();
    const Pass = struct {
        fn run(rr: *Reactor, failed: *bool) void {
            rr.runOnce() catch {
                failed.* = true;
            };
        }
    };
    var failed = false;
    const t = try std.Thread.spawn(.{}, Pass.run, .{ r, &failed });
    const outcome = r.awaitDrained(waiting);
    t.join();
    try std.testing.expect(!failed);
    try std.testing.expectEqual(Posted.Outcome.drained, outcome);
    r.postWaitEnd(waiting, outcome);
    try std.testing.expectEqual(@as(usize, 0), r.posted.pending);
    // The loop ran: no longer stalled, posters above `high` wait again.
    for (probes) |*p| try r.callSoonPosted(&p.cb);
    try std.testing.expect(r.postersShouldWait());
    // A loop that stops releases them (`releasePosters`, as runForever's end).
    const released = r.postWaitBegin();
    r.releasePosters();
    try std.testing.expectEqual(Posted.Outcome.drained, r.awaitDrained(released));
    while (r.popReady()) |cb| cb.run(cb) catch unreachable;
}

test "an fd watcher sees readiness" {
    try eachBackend(caseAnFdWatcherSeesReadiness);
}

/// A pipe `[read end, write end]` whose read end turns readable once
/// `makeReadable` wrote to it: an fd every platform has.
fn testPipe() ![2]sys.fd_t {
    return sys.pipe();
}

fn makeReadable(p: [2]sys.fd_t) !void {
    _ = try sys.write(p[1], "x");
}

fn closePipe(p: [2]sys.fd_t) void {
    sys.close(p[0]);
    sys.close(p[1]);
}

fn caseAnFdWatcherSeesReadiness(r: *Reactor) !void {
    const p = try testPipe();
    defer closePipe(p);
    const fd = p[0];
    const W = struct {
        w: IoWatcher,
        hits: u32 = 0,
        fn onReady(w: *IoWatcher, ev: Event) RunError!void {
            const self: *@This() = @fieldParentPtr("w", w);
            if (ev.readable) self.hits += 1;
        }
    };
    var w: W = .{ .w = .{ .fd = fd, .on_ready = W.onReady } };
    try r.attach(&w.w);
    try r.setInterest(&w.w, .{ .read = true });
    try makeReadable(p);
    try r.runOnce();
    try std.testing.expectEqual(@as(u32, 1), w.hits);
    r.detach(&w.w);
    try std.testing.expect(r.watcherFor(fd) == null);
}

test "a fork child that abandons the reactor changes nothing the parent's holds: readiness pending at the fork reaches the parent" {
    try eachBackend(caseForkChildAbandons);
}

fn caseForkChildAbandons(r: *Reactor) !void {
    const p = try testPipe();
    defer closePipe(p);
    const W = struct {
        w: IoWatcher,
        hits: u32 = 0,
        fn onReady(w: *IoWatcher, ev: Event) RunError!void {
            const self: *@This() = @fieldParentPtr("w", w);
            if (ev.readable) self.hits += 1;
        }
    };
    var w: W = .{ .w = .{ .fd = p[0], .on_ready = W.onReady } };
    try r.attach(&w.w);
    try r.setInterest(&w.w, .{ .read = true });
    // Armed in the kernel and reported once; the byte stays unread.
    try makeReadable(p);
    try r.runOnce();
    try std.testing.expectEqual(@as(u32, 1), w.hits);
    try std.testing.expect(!r.inherited());
    const pid = try testing.fork();
    if (pid == 0) {
        // The child: what a loop's close() does there.
        if (!r.inherited()) testing.exitNow(2);
        r.abandon();
        r.detach(&w.w);
        r.deinit();
        testing.exitNow(0);
    }
    try std.testing.expectEqual(@as(u32, 0), try testing.reap(pid));
    // Level-triggered: still readable, still registered, still reported.
    try r.runOnce();
    try std.testing.expectEqual(@as(u32, 2), w.hits);
    r.detach(&w.w);
}

test "a handler that aborts the pass leaves the rest of its events for the next pass, none lost" {
    try eachBackend(caseAbortedPassKeepsItsEvents);
}

fn caseAbortedPassKeepsItsEvents(r: *Reactor) !void {
    const a = try testPipe();
    defer closePipe(a);
    const b = try testPipe();
    defer closePipe(b);
    const W = struct {
        w: IoWatcher,
        hits: u32 = 0,
        abort_first: bool,
        fn onReady(w: *IoWatcher, ev: Event) RunError!void {
            const self: *@This() = @fieldParentPtr("w", w);
            if (!ev.readable) return;
            self.hits += 1;
            if (self.abort_first and self.hits == 1) return error.Aborted;
        }
    };
    // Both one-shot: the kernel reports each once, so an event dropped with
    // the aborted pass would never come again.
    var wa: W = .{ .w = .{ .fd = a[0], .on_ready = W.onReady }, .abort_first = true };
    var wb: W = .{ .w = .{ .fd = b[0], .on_ready = W.onReady }, .abort_first = true };
    try r.attach(&wa.w);
    defer r.detach(&wa.w);
    try r.attach(&wb.w);
    defer r.detach(&wb.w);
    try r.armOnce(&wa.w, .{ .read = true });
    try r.armOnce(&wb.w, .{ .read = true });
    try makeReadable(a);
    try makeReadable(b);
    // The first event's handler aborts the pass; the other event waits.
    try std.testing.expectError(error.Aborted, r.runOnce());
    try std.testing.expectEqual(@as(u32, 1), wa.hits + wb.hits);
    // The next pass hands it over before it waits again.
    wa.abort_first = false;
    wb.abort_first = false;
    try r.runOnce();
    try std.testing.expectEqual(@as(u32, 1), wa.hits);
    try std.testing.expectEqual(@as(u32, 1), wb.hits);
    try std.testing.expectEqual(r.event_next, r.event_end);
}

test "a watcher detached while its event waits in the pass never gets it; nor does the fd's next watcher" {
    try eachBackend(caseDetachDropsPendingEvents);
}

fn caseDetachDropsPendingEvents(r: *Reactor) !void {
    const a = try testPipe();
    defer closePipe(a);
    const W = struct {
        w: IoWatcher,
        hits: u32 = 0,
        fn onReady(w: *IoWatcher, ev: Event) RunError!void {
            const self: *@This() = @fieldParentPtr("w", w);
            if (ev.readable) self.hits += 1;
        }
    };
    var old: W = .{ .w = .{ .fd = a[0], .on_ready = W.onReady } };
    try r.attach(&old.w);
    try r.armOnce(&old.w, .{ .read = true });
    try makeReadable(a);
    // As a pass that aborted before this event: it waits in `events`.
    try r.waitForEvents();
    try std.testing.expectEqual(@as(usize, 1), r.event_end - r.event_next);
    r.detach(&old.w);
    var newcomer: W = .{ .w = .{ .fd = a[0], .on_ready = W.onReady } };
    try r.attach(&newcomer.w);
    defer r.detach(&newcomer.w);
    try r.dispatchEvents();
    try std.testing.expectEqual(@as(u32, 0), old.hits + newcomer.hits);
}

fn runNothing(_: *Callback) RunError!void {}

test "the pass after a wait that blocked and woke on events does not poll; the next one does" {
    try eachBackend(caseNoPollRightAfterABlockingWake);
}

fn caseNoPollRightAfterABlockingWake(r: *Reactor) !void {
    const p = try testPipe();
    defer closePipe(p);
    const fd = p[0];
    var log: std.ArrayList(u32) = .empty;
    defer log.deinit(std.testing.allocator);
    const W = struct {
        w: IoWatcher,
        hits: u32 = 0,
        // Runs in the event's pass and queues itself for the next one (a
        // woken task's step, say), which therefore does not block.
        follow_up: Probe,
        fn onReady(w: *IoWatcher, ev: Event) RunError!void {
            const self: *@This() = @fieldParentPtr("w", w);
            if (ev.readable) self.hits += 1;
            if (self.hits > 1) return;
            self.follow_up.requeue = true;
            self.follow_up.reactor.callSoon(&self.follow_up.cb) catch return error.Aborted;
        }
    };
    var w: W = .{
        .w = .{ .fd = fd, .on_ready = W.onReady },
        .follow_up = .{ .log = &log, .id = 1, .reactor = r },
    };
    try r.attach(&w.w);
    defer r.detach(&w.w);
    try r.setInterest(&w.w, .{ .read = true }); // level-triggered
    try makeReadable(p); // readable from now on
    try std.testing.expectEqual(@as(i32, -1), r.timeoutMs());
    try pollRetryingPass(r, &w.hits, 1); // blocked (nothing ready), woke on the fd
    try r.runOnce(); // runs the follow-up without polling: the fd is not seen
    try std.testing.expectEqual(@as(u32, 1), w.hits);
    try std.testing.expectEqualSlices(u32, &.{ 1, 1 }, log.items);
    var nop: Callback = .{ .run = runNothing, .drop = dropNothing };
    try r.callSoon(&nop);
    try r.runOnce(); // polls again (non-blocking): seen
    try std.testing.expectEqual(@as(u32, 2), w.hits);
}

/// Blocking passes until `hits` reaches `want` (a stop-and-continue of the
/// process can end a blocking wait early with nothing).
fn pollRetryingPass(r: *Reactor, hits: *const u32, want: u32) !void {
    var passes: u32 = 0;
    while (hits.* < want) : (passes += 1) {
        if (passes == 100) return error.TestUnexpectedResult;
        try r.runOnce();
    }
}

test "a one-shot watcher fires once, stays quiet, and fires again once re-armed" {
    try eachBackend(caseOneShotWatcher);
}

fn caseOneShotWatcher(r: *Reactor) !void {
    const p = try testPipe();
    defer closePipe(p);
    const fd = p[0];
    const W = struct {
        w: IoWatcher,
        hits: u32 = 0,
        fn onReady(w: *IoWatcher, ev: Event) RunError!void {
            const self: *@This() = @fieldParentPtr("w", w);
            // A one-shot entry is disarmed before the call.
            std.debug.assert(!w.oneshot or w.interest.none());
            if (ev.readable) self.hits += 1;
        }
    };
    var w: W = .{ .w = .{ .fd = fd, .on_ready = W.onReady } };
    // Something ready keeps each pass from blocking.
    var nop: Callback = .{ .run = runNothing, .drop = dropNothing };
    try r.attach(&w.w);
    try r.armOnce(&w.w, .{ .read = true });
    try makeReadable(p); // readable from now on
    for (0..3) |_| {
        try r.callSoon(&nop);
        try r.runOnce();
    }
    try std.testing.expectEqual(@as(u32, 1), w.hits);
    try std.testing.expect(w.w.registered and w.w.interest.none());
    try r.armOnce(&w.w, .{ .read = true });
    try r.callSoon(&nop);
    try r.runOnce();
    try std.testing.expectEqual(@as(u32, 2), w.hits);
    // Level-triggered again: reported on every pass.
    try r.setInterest(&w.w, .{ .read = true });
    for (0..2) |_| {
        try r.callSoon(&nop);
        try r.runOnce();
    }
    try std.testing.expectEqual(@as(u32, 4), w.hits);
    r.detach(&w.w);
}

const testing = @import("os/testing.zig");

const ChildProbe = struct {
    w: ChildWatcher = .{ .on_exit = onExit },
    exits: u32 = 0,
    status: ?u32 = null,

    fn onExit(w: *ChildWatcher, status: ?u32) RunError!void {
        const p: *ChildProbe = @fieldParentPtr("w", w);
        std.debug.assert(!w.active); // the watch is over when this runs
        p.exits += 1;
        p.status = status;
    }
};

test "a child's exit is reported once, with its wait status, and the child left to reap" {
    try eachBackend(caseChildExit);
}

fn caseChildExit(r: *Reactor) !void {
    const hold = try testing.blockingPipe();
    defer sys.close(hold[0]);
    const pid = try testing.spawnChild(5, hold);
    var probe: ChildProbe = .{};
    try r.watchChild(&probe.w, pid);
    try std.testing.expect(probe.w.active);
    var nop: Callback = .{ .run = runNothing, .drop = dropNothing };
    try r.callSoon(&nop);
    try r.runOnce(); // running: nothing to report
    try std.testing.expectEqual(@as(u32, 0), probe.exits);
    sys.close(hold[1]); // the child exits now
    try pollRetryingPass(r, &probe.exits, 1);
    try std.testing.expectEqual(@as(?u32, 5 << 8), probe.status);
    try std.testing.expect(!probe.w.active and r.children.items.len == 0);
    // Not reaped by the watch: waitpid still finds it.
    try std.testing.expectEqual(@as(u32, 5 << 8), try testing.reap(pid));
}

test "an unwatched child's exit is never reported; a process that is gone cannot be watched" {
    try eachBackend(caseChildUnwatched);
}

fn caseChildUnwatched(r: *Reactor) !void {
    const hold = try testing.blockingPipe();
    defer sys.close(hold[0]);
    const pid = try testing.spawnChild(0, hold);
    var probe: ChildProbe = .{};
    try r.watchChild(&probe.w, pid);
    r.unwatchChild(&probe.w);
    r.unwatchChild(&probe.w); // twice is nothing
    sys.close(hold[1]);
    _ = try testing.reap(pid);
    var nop: Callback = .{ .run = runNothing, .drop = dropNothing };
    try r.callSoon(&nop);
    try r.runOnce();
    try std.testing.expectEqual(@as(u32, 0), probe.exits);
    // Reaped: no such process any more (ESRCH).
    try std.testing.expectError(error.Unexpected, r.watchChild(&probe.w, pid));
    try std.testing.expectEqual(@as(u16, @backingInt(sys.E.SRCH)), sys.last_errno);
    try std.testing.expect(!probe.w.active and r.children.items.len == 0);
}

test "a borrowed fd closed behind its watcher: forgetFile lets the next arm register the new file" {
    try eachBackend(caseForgetFile);
}

fn caseForgetFile(r: *Reactor) !void {
    const p = try testPipe();
    defer closePipe(p);
    const fd = p[0];
    const W = struct {
        w: IoWatcher,
        hits: u32 = 0,
        fn onReady(w: *IoWatcher, ev: Event) RunError!void {
            const self: *@This() = @fieldParentPtr("w", w);
            if (ev.readable) self.hits += 1;
        }
    };
    var w: W = .{ .w = .{ .fd = fd, .on_ready = W.onReady, .borrowed = true } };
    try r.attach(&w.w);
    defer r.detach(&w.w);
    try r.setInterest(&w.w, .{ .read = true });
    // The user closes the file; another takes its number (readable at once).
    const other = try testPipe();
    defer closePipe(other);
    try makeReadable(other);
    try testing.dup2(other[0], fd);
    var nop: Callback = .{ .run = runNothing, .drop = dropNothing };
    // The kernel forgot the old file: the watcher hears nothing of the new
    // one, and asking for the same interest again would change nothing.
    try r.callSoon(&nop);
    try r.runOnce();
    try std.testing.expectEqual(@as(u32, 0), w.hits);
    r.forgetFile(&w.w);
    try std.testing.expect(w.w.interest.none() and !w.w.registered);
    try r.setInterest(&w.w, .{ .read = true });
    try r.callSoon(&nop);
    try r.runOnce();
    try std.testing.expectEqual(@as(u32, 1), w.hits);
}
