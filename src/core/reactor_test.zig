//! The reactor's tests (`reactor.zig`), on every backend the platform
//! has: callbacks and their order, timers, wake-ups from other threads,
//! posters held back, fd watchers, aborted passes, child watches, a fork
//! child's abandon.
const std = @import("std");
const sys = @import("sys.zig");
const backend = @import("backend.zig");
const reactor = @import("reactor.zig");
const api = backend.api;
const Reactor = reactor.Reactor;
const Callback = reactor.Callback;
const Flush = reactor.Flush;
const IoWatcher = reactor.IoWatcher;
const ChildWatcher = reactor.ChildWatcher;
const Event = reactor.Event;
const RunError = reactor.RunError;
const Timer = reactor.Timer;
const TimerEntry = reactor.TimerEntry;
const Posted = reactor.Posted;
const dropNothing = reactor.dropNothing;

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
