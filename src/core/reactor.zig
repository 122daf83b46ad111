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

/// A callback's `drop` that has nothing to let go of. Public for the tests
/// (`reactor_test.zig`).
pub fn dropNothing(_: *Callback) void {}

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
    /// Public for the tests (`reactor_test.zig`).
    pub fn timeoutMs(r: *const Reactor) i32 {
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

    /// The pass's wait (see `runOnce`): its events into `events`. Public
    /// for the tests (`reactor_test.zig`).
    pub fn waitForEvents(r: *Reactor) RunError!void {
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
    /// that aborts leaves the rest for the next pass. Public for the tests.
    pub fn dispatchEvents(r: *Reactor) RunError!void {
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

test {
    _ = @import("reactor_test.zig");
}
