//! `zloop._zloop.LoopCore`: the native half of `zloop.Loop`. Scheduling,
//! timers, fd readiness and the run loop live here; the Python subclass in
//! `zloop/_loop.py` adds the cold paths (executors, DNS, signals, servers).
const std = @import("std");
const trim = @import("trim.zig");
const core = @import("core");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const state = @import("../capi/state.zig");
const handle = @import("handle.zig");
const sockops = @import("../sock/ready.zig");
const sockcall = @import("../sock/calls.zig");
const borrowed = @import("../transport/borrowed.zig");
const children = @import("children.zig");
const Handle = handle.Handle;
const TimerHandle = handle.TimerHandle;
// Native transports of every kind (stream, datagram...), by their watchers.
const transport = @import("watchers.zig");

const recvpool = @import("../transport/recvpool.zig");

const gpa = std.heap.c_allocator;

pub const Loop = struct {
    ob_base: Obj,
    reactor: core.Reactor,
    has_reactor: bool,
    closed: bool,
    debug: bool,
    /// What `set_debug` was given when that is not a bool (a number, say):
    /// `get_debug()` returns it, as asyncio's returns `self._debug`.
    debug_given: ?*Obj,
    /// Thread running the loop (0 when not running), as `loop._thread_id`.
    thread_id: c_ulong,
    slow_callback_duration_s: f64,
    /// The `slow_callback_duration` object assigned, returned as assigned
    /// (asyncio's is a plain attribute); null: the default 0.1.
    slow_given: ?*Obj,
    tstate: ?*c.PyThreadState,
    weakreflist: ?*Obj,
    /// `loop._task_factory` (None: asyncio.Task).
    task_factory: ?*Obj,
    /// The stream transports' read buffer, one per loop (see
    /// transport/stream/read.zig's `readReady`): a `bytes` of `read_spare_bytes`, or
    /// null while handed to a protocol.
    read_spare: ?*Obj,
    /// The buffer small reads are lent in (transport/stream/read.zig's
    /// `readLent`): a `bytes` of `read_lent_bytes`, or null while lent.
    read_lent: ?*Obj,
    /// The buffers native receives land in (io_uring; see transport/recvpool.zig):
    /// empty until a transport first reads that way, freed after the
    /// reactor.
    recv_pool: recvpool.Pool,
    /// Its watch for a quiet moment to give freed memory back (trim.zig).
    trim_probe: trim.Probe,
};

comptime {
    std.debug.assert(@offsetOf(Loop, "ob_base") == 0);
}

pub var LoopType: c.PyTypeObject = undefined;

/// add_reader/add_writer and sock_* wait state for one fd.
///
/// A watcher whose handles are all `sock_*` waits registers one-shot (see
/// `core.Reactor.armOnce`): the wait that finishes leaves a disarmed kernel
/// entry and the watcher stays in the table without handles ("parked"), so
/// the next wait on that fd re-arms it instead of adding it anew, and no
/// wait pays a removal. Any plain add_reader/add_writer handle makes the
/// watcher level-triggered, as asyncio's selector is.
const FdWatcher = struct {
    w: core.IoWatcher,
    reader: ?*Handle = null,
    writer: ?*Handle = null,

    fn idle(fw: *const FdWatcher) bool {
        return fw.reader == null and fw.writer == null;
    }

    fn interest(fw: *const FdWatcher) core.Interest {
        return .{ .read = fw.reader != null, .write = fw.writer != null };
    }

    /// Every handle present is a sock_* wait (so one-shot fits).
    fn onlyWaits(fw: *const FdWatcher) bool {
        inline for (.{ fw.reader, fw.writer }) |slot| {
            if (slot) |h| if (h.kind != .sock) return false;
        }
        return true;
    }

    /// Tells the kernel what the handles now want.
    fn apply(fw: *FdWatcher, loop: *Loop) core.sys.Error!void {
        const want = fw.interest();
        if (fw.onlyWaits()) return loop.reactor.armOnce(&fw.w, want);
        return loop.reactor.setInterest(&fw.w, want);
    }
};

pub fn isDebug(loop: ?*Obj) bool {
    const l = loop orelse return false;
    return py.cast(Loop, l).debug;
}

// --------------------------------------------------------------- running

/// Runs one handle's callback; the one place callbacks are called.
pub fn runHandle(h: *Handle) core.RunError!void {
    const loop = py.cast(Loop, h.loop.?);
    // Threads waiting in cancel() of a thread-safe handle go on once the
    // callback and the report of its exception are done, as asyncio's
    // _ThreadSafeHandle._run holds its lock over both.
    defer handle.openGate(h);
    handle.startRun(h);
    // Timed only if debug was on when it started, as asyncio's _run_once:
    // a callback that turns debug on has no start time to measure from.
    const timed = loop.debug;
    const t0 = if (timed) core.sys.monotonic_s() else 0;
    const result = handle.invoke(h);
    h.running = false;
    const finished = py.isTrue(result); // what a sock_* wait's callback says
    if (result) |r| py.decref(r) else try reportError(loop, h);
    if (h.kind == .sock) sockWaitRan(loop, h, finished);
    if (timed) try checkSlow(loop, h, core.sys.monotonic_s() - t0);
    // One-shot handles let go of their callback once it ran (uvloop does
    // the same); handles are not GC-tracked, so this is what breaks cycles.
    const repeats = h.kind == .io or h.kind == .sock;
    if (!repeats or h.cancelled) handle.releaseCallback(h);
}

/// Hands a callback's exception to `loop.call_exception_handler` (through
/// the Python side), unless it must abort the loop.
fn reportError(loop: *Loop, h: *Handle) core.RunError!void {
    if (py.pendingIsFatal()) return error.Aborted;
    const exc = py.fetchException() orelse return;
    defer py.decref(exc);
    const r = py.callMethod(py.obj(loop), state.get().str_report, .{ py.obj(h), exc });
    if (r) |o| {
        py.decref(o);
        return;
    }
    if (py.pendingIsFatal()) return error.Aborted;
    c.PyErr_WriteUnraisable(py.obj(loop));
}

fn checkSlow(loop: *Loop, h: *Handle, dt_s: f64) core.RunError!void {
    return logIfSlow(loop, dt_s, state.get().str_log_slow, py.obj(h), py.none());
}

/// In debug mode, as `runHandle` times a handle: the readiness work of a
/// native transport `owner` (its protocol's data_received, get_buffer,
/// buffer_updated, eof_received, datagram_received, error_received,
/// resume_writing, its TLS records), which asyncio runs in the transport's
/// reader or writer Handle (`reading`), and times as that Handle.
pub fn checkSlowIo(loop: *Loop, owner: *Obj, reading: bool, dt_s: f64) core.RunError!void {
    return logIfSlow(loop, dt_s, state.get().str_log_slow_io, owner, py.boolean(reading));
}

/// `loop.<method>(what, extra, dt)` if `dt_s` reaches the loop's
/// `slow_callback_duration`; for a handle, `extra` is None and not passed.
fn logIfSlow(loop: *Loop, dt_s: f64, method: *Obj, what: *Obj, extra: *Obj) core.RunError!void {
    // Not `dt_s < duration`: a NaN duration never logs, as `dt >= nan`.
    if (!(dt_s >= loop.slow_callback_duration_s)) return;
    const dt = c.PyFloat_FromDouble(dt_s) orelse return error.Aborted;
    defer py.decref(dt);
    const r = if (extra == py.none())
        py.callMethod(py.obj(loop), method, .{ what, dt })
    else
        py.callMethod(py.obj(loop), method, .{ what, extra, dt });
    if (r) |o| py.decref(o) else {
        if (py.pendingIsFatal()) return error.Aborted;
        c.PyErr_WriteUnraisable(py.obj(loop));
    }
}

fn beforeWait(ctx: *anyopaque, timeout_ms: i32) i32 {
    const loop: *Loop = @ptrCast(@alignCast(ctx));
    loop.tstate = c.PyEval_SaveThread();
    // With memory owed to the system, the wait first looks for a quiet
    // moment to give it back in (trim.zig).
    return loop.trim_probe.beforeWait(timeout_ms);
}

fn afterWait(ctx: *anyopaque, events: usize) void {
    const loop: *Loop = @ptrCast(@alignCast(ctx));
    _ = loop.trim_probe.afterWait(events);
    c.PyEval_RestoreThread(loop.tstate);
    loop.tstate = null;
}

/// After every wait, before its events are dispatched: the Python-level
/// handlers of signals that arrived run now, and what one raises leaves
/// run_forever/run_until_complete, as on asyncio, where the selector's wait
/// returns into Python code that runs them first thing (a KeyboardInterrupt
/// from the default SIGINT handler, pytest-timeout's Failed, a deadline's
/// exception). Nearly free when none is pending (an atomic load).
fn checkSignals(_: *anyopaque) core.RunError!void {
    if (c.PyErr_CheckSignals() < 0) return error.Aborted;
}

fn hooksOf(loop: *Loop) core.reactor.Hooks {
    return .{ .ctx = loop, .before_wait = beforeWait, .after_wait = afterWait, .check_signals = checkSignals };
}

fn runResult(result: anytype) ?*Obj {
    result catch |err| switch (err) {
        error.OutOfMemory => return c.PyErr_NoMemory(),
        error.Aborted => {
            if (c.PyErr_Occurred() == null) {
                _ = py.raiseErrno(core.sys.last_errno);
            }
            return null;
        },
    };
    return py.newref(py.none());
}

fn runForeverNative(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (!loop.has_reactor) return py.raise(c.PyExc_RuntimeError, "Event loop is closed");
    loop.reactor.hooks = hooksOf(loop);
    return runResult(loop.reactor.runForever());
}

fn runOnceNative(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (!loop.has_reactor) return py.raise(c.PyExc_RuntimeError, "Event loop is closed");
    loop.reactor.hooks = hooksOf(loop);
    return runResult(loop.reactor.runOnce());
}

// ------------------------------------------------------------ scheduling

fn checkClosed(loop: *Loop) bool {
    if (!loop.closed) return true;
    c.PyErr_SetString(c.PyExc_RuntimeError, "Event loop is closed");
    return false;
}

/// Debug-mode checks done in Python (cold): thread check, callback check.
fn debugCheck(loop: *Loop, callback: *Obj, method: *Obj, check_thread: bool) bool {
    // Borrowed: callMethod takes no reference of its arguments.
    const flag: *Obj = if (check_thread) @ptrCast(&c._Py_TrueStruct) else @ptrCast(&c._Py_FalseStruct);
    const r = py.callMethod(py.obj(loop), state.get().str_debug_check, .{ callback, method, flag });
    if (r) |o| {
        py.decref(o);
        return true;
    }
    return false;
}

fn debugTraceback(loop: *Loop, h: *Handle) bool {
    const r = py.callMethod(py.obj(loop), state.get().str_debug_traceback, .{py.obj(h)});
    if (r) |o| {
        py.decref(o);
        return true;
    }
    return false;
}

fn scheduleSoon(
    self: ?*Obj,
    args: [*c]const ?*Obj,
    nargs: py.Ssize,
    kwnames: ?*Obj,
    comptime name: [:0]const u8,
    comptime threadsafe: bool,
) ?*Obj {
    const loop = py.cast(Loop, self.?);
    var buf: [1]?*Obj = undefined;
    const a = py.bindScheduleArgs(name, args, nargs, kwnames, state.get().str_context, &.{"callback"}, &buf) orelse return null;
    const ctx = a.context;
    if (a.nargs < 1) return py.raise(c.PyExc_TypeError, name ++ "() missing 1 required positional argument: 'callback'");
    if (!checkClosed(loop)) return null;
    const cb = a.args[0].?;
    if (loop.debug) {
        const m = if (threadsafe) state.get().str_call_soon_threadsafe else state.get().str_call_soon;
        if (!debugCheck(loop, cb, m, !threadsafe)) return null;
    }
    const rest = a.args[1..a.nargs];
    const h = handle.create(&handle.HandleType, .once, self.?, cb, rest, ctx) orelse return null;
    h.threadsafe = py.at_least_314 and threadsafe;
    if (loop.debug and !debugTraceback(loop, h)) {
        py.decref(py.obj(h));
        return null;
    }
    if (threadsafe) handle.markPosted(h);
    const queued = if (threadsafe)
        loop.reactor.callSoonPosted(&h.node)
    else
        loop.reactor.callSoon(&h.node);
    queued catch {
        py.decref(py.obj(h));
        return c.PyErr_NoMemory();
    };
    py.incref(py.obj(h)); // the ready queue's reference
    if (threadsafe) {
        loop.reactor.wake();
        if (loop.reactor.postersShouldWait()) holdBackPoster(loop);
    }
    return py.obj(h);
}

/// A thread posting to a loop whose posted callbacks pile up waits, with the
/// GIL released, until the loop has run them down (see `core.reactor.Posted`:
/// bounded, and not while the loop makes no progress). Never the loop's own
/// thread, nor while the loop is not running: then nothing would drain it.
fn holdBackPoster(loop: *Loop) void {
    if (loop.thread_id == 0 or loop.thread_id == c.PyThread_get_thread_ident()) return;
    const r = &loop.reactor;
    const w = r.postWaitBegin();
    const ts = c.PyEval_SaveThread();
    const outcome = r.awaitDrained(w);
    c.PyEval_RestoreThread(ts);
    // The loop may have closed meanwhile (its reactor gone; `awaitDrained`
    // touched only its atomics, which live in this object).
    if (loop.has_reactor) r.postWaitEnd(w, outcome);
}

/// A posted handle left the ready queue (see `handle.markPosted`).
pub fn postedTaken(h: *Handle) void {
    const loop = py.cast(Loop, h.loop.?);
    if (loop.has_reactor) loop.reactor.postedTaken();
}

fn callSoon(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kw: ?*Obj) callconv(.c) ?*Obj {
    return scheduleSoon(self, args, nargs, kw, "call_soon", false);
}

fn callSoonThreadsafe(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kw: ?*Obj) callconv(.c) ?*Obj {
    return scheduleSoon(self, args, nargs, kw, "call_soon_threadsafe", true);
}

fn scheduleAt(loop: *Loop, when_s: f64, args: []const ?*Obj, ctx: ?*Obj, method: *Obj) ?*Obj {
    if (!checkClosed(loop)) return null;
    const cb = args[0].?;
    if (loop.debug and !debugCheck(loop, cb, method, true)) return null;
    const h = handle.create(&handle.TimerHandleType, .timer, py.obj(loop), cb, args[1..], ctx) orelse return null;
    const t: *TimerHandle = @fieldParentPtr("base", h);
    t.entry.timer.when_s = when_s;
    if (loop.debug and !debugTraceback(loop, h)) {
        py.decref(py.obj(h));
        return null;
    }
    loop.reactor.addTimer(&t.entry.timer) catch {
        py.decref(py.obj(h));
        return c.PyErr_NoMemory();
    };
    t.scheduled = true;
    py.incref(py.obj(h)); // the timer heap's reference
    return py.obj(h);
}

fn toSeconds(o: *Obj) ?f64 {
    const v = c.PyFloat_AsDouble(o);
    if (v == -1.0 and c.PyErr_Occurred() != null) return null;
    return v;
}

fn callLater(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kw: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    var buf: [2]?*Obj = undefined;
    const a = py.bindScheduleArgs("call_later", args, nargs, kw, state.get().str_context, &.{ "delay", "callback" }, &buf) orelse return null;
    if (a.nargs < 2) return missingTwo("call_later", a.nargs, "delay");
    const delay = a.args[0].?;
    if (delay == py.none()) return py.raise(c.PyExc_TypeError, "delay must not be None");
    const now_s = core.sys.monotonic_s();
    var when_s: f64 = undefined;
    if (c.PyFloat_CheckExact(delay) != 0 or c.PyLong_CheckExact(delay) != 0) {
        when_s = now_s + (toSeconds(delay) orelse return null);
    } else {
        // Anything else goes through `loop.time() + delay`, so odd types fail
        // (or succeed) exactly as they would in asyncio.
        const now = c.PyFloat_FromDouble(now_s) orelse return null;
        defer py.decref(now);
        const sum = c.PyNumber_Add(now, delay) orelse return null;
        defer py.decref(sum);
        when_s = toSeconds(sum) orelse return null;
    }
    return scheduleAt(loop, when_s, a.args[1..a.nargs], a.context, state.get().str_call_at);
}

/// CPython's words for a Python function called with fewer than its two
/// leading positional parameters (`first`, then `callback`).
fn missingTwo(comptime name: [:0]const u8, nargs: usize, comptime first: [:0]const u8) ?*Obj {
    if (nargs == 1) return py.raise(c.PyExc_TypeError, name ++ "() missing 1 required positional argument: 'callback'");
    return py.raise(c.PyExc_TypeError, name ++ "() missing 2 required positional arguments: '" ++ first ++ "' and 'callback'");
}

fn callAt(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kw: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    var buf: [2]?*Obj = undefined;
    const a = py.bindScheduleArgs("call_at", args, nargs, kw, state.get().str_context, &.{ "when", "callback" }, &buf) orelse return null;
    if (a.nargs < 2) return missingTwo("call_at", a.nargs, "when");
    const when = a.args[0].?;
    if (when == py.none()) return py.raise(c.PyExc_TypeError, "when cannot be None");
    const when_s = toSeconds(when) orelse return null;
    return scheduleAt(loop, when_s, a.args[1..a.nargs], a.context, state.get().str_call_at);
}

/// TimerHandle.cancel(): take it off the heap now rather than leaving a
/// tombstone, and give back the heap's reference.
pub fn timerCancelled(t: *TimerHandle) void {
    const loop = py.cast(Loop, t.base.loop orelse return);
    if (!t.entry.timer.queued()) return;
    loop.reactor.cancelTimer(&t.entry.timer);
    t.scheduled = false;
    py.decref(py.obj(t));
}

fn time(_: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    return c.PyFloat_FromDouble(core.sys.monotonic_s());
}

fn stop(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (loop.has_reactor) loop.reactor.stopping = true;
    return py.newref(py.none());
}

fn isClosed(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    return py.boolean(py.cast(Loop, self.?).closed);
}

fn isRunning(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    return py.boolean(py.cast(Loop, self.?).thread_id != 0);
}

fn getDebug(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (loop.debug_given) |o| return py.newref(o);
    return py.boolean(loop.debug);
}

// ---------------------------------------------------------- futures, tasks

/// `create_future()`: asyncio's current `futures.Future(loop=self)`, called
/// without a Python frame in between.
fn createFuture(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const s = state.get();
    const future_type = state.futureType() orelse return null;
    defer py.decref(future_type);
    const argv = [_]?*Obj{ null, self };
    return c.PyObject_Vectorcall(future_type, @ptrCast(&argv[1]), 0 | c.PY_VECTORCALL_ARGUMENTS_OFFSET, s.kw_loop);
}

/// `create_task()` as asyncio's of the running Python: through the task
/// factory if one is set, else asyncio's current `tasks.Task`. Debug mode
/// takes the Python path, which trims the task's source traceback as
/// asyncio does.
fn createTask(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (loop.debug) return createTaskInPython(self.?, args, nargs, kwnames);
    if (py.at_least_314) return createTaskKw(loop, args, nargs, kwnames);
    return createTaskNamed(loop, args, nargs, kwnames);
}

fn createTaskInPython(self: *Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) ?*Obj {
    const slow = c.PyObject_GetAttr(self, state.get().str_create_task_py) orelse return null;
    defer py.decref(slow);
    return c.PyObject_Vectorcall(slow, args, @intCast(nargs), kwnames);
}

/// Keyword arguments passed through on 3.14 without the Python path.
const max_task_kwargs = 6;

/// 3.14's `create_task(coro, **kwargs)`: the keywords (name=, context=,
/// eager_start=, ...) go as given to `factory(loop, coro, **kwargs)` or to
/// `Task(coro, loop=loop, **kwargs)`, which checks them. Unusual calls
/// (coro by keyword, many keywords, a wrong count) take the Python path,
/// whose signature raises asyncio's errors.
fn createTaskKw(loop: *Loop, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) ?*Obj {
    const self = py.obj(loop);
    const nkw: usize = if (kwnames) |names| @intCast(c.PyTuple_Size(names)) else 0;
    if (nargs != 1 or nkw > max_task_kwargs) return createTaskInPython(self, args, nargs, kwnames);
    if (!checkClosed(loop)) return null;
    // Slot 0 is scratch (PY_VECTORCALL_ARGUMENTS_OFFSET); the keyword values
    // follow the two positional arguments.
    var argv: [3 + max_task_kwargs]?*Obj = undefined;
    argv[0] = null;
    for (0..nkw) |i| argv[3 + i] = args[1 + i];
    const call_nargs = 2 | c.PY_VECTORCALL_ARGUMENTS_OFFSET;
    if (loop.task_factory) |factory| {
        argv[1] = self;
        argv[2] = args[0];
        return c.PyObject_Vectorcall(factory, @ptrCast(&argv[1]), call_nargs, kwnames);
    }
    const task_type = state.taskType() orelse return null;
    defer py.decref(task_type);
    // Task(coro, loop, **kwargs): `loop` is passed by keyword, as
    // base_events does, so its keyword names are ("loop",) + kwnames.
    argv[1] = args[0];
    argv[2] = self;
    if (nkw == 0) {
        return c.PyObject_Vectorcall(task_type, @ptrCast(&argv[1]), 1 | c.PY_VECTORCALL_ARGUMENTS_OFFSET, state.get().kw_loop);
    }
    const names = withLoopFirst(kwnames.?, nkw) orelse return null;
    defer py.decref(names);
    return c.PyObject_Vectorcall(task_type, @ptrCast(&argv[1]), 1 | c.PY_VECTORCALL_ARGUMENTS_OFFSET, names);
}

/// ("loop",) + kwnames: a new tuple.
fn withLoopFirst(kwnames: *Obj, nkw: usize) ?*Obj {
    const names = c.PyTuple_New(@intCast(nkw + 1)) orelse return null;
    _ = c.PyTuple_SetItem(names, 0, py.newref(state.get().str_loop));
    for (0..nkw) |i| {
        const key = c.PyTuple_GetItem(kwnames, @intCast(i)) orelse unreachable;
        _ = c.PyTuple_SetItem(names, @intCast(i + 1), py.newref(key));
    }
    return names;
}

/// 3.11-3.13's `create_task(coro, *, name=None, context=None)`: a factory
/// gets `(loop, coro)` (and `context=` when given), then `set_name(name)`.
fn createTaskNamed(loop: *Loop, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) ?*Obj {
    const self = py.obj(loop);
    const s = state.get();
    if (nargs > 1) return py.raise(c.PyExc_TypeError, "create_task() takes 1 positional argument");
    var coro_arg: ?*Obj = if (nargs == 1) args[0].? else null;
    var name: *Obj = py.none();
    var context: *Obj = py.none();
    if (kwnames) |names| {
        const nkw = c.PyTuple_Size(names);
        var i: py.Ssize = 0;
        while (i < nkw) : (i += 1) {
            const key = c.PyTuple_GetItem(names, i);
            const value = args[@intCast(nargs + i)].?;
            if (key == s.str_name or c.PyUnicode_Compare(key, s.str_name) == 0) {
                name = value;
            } else if (key == s.str_context or c.PyUnicode_Compare(key, s.str_context) == 0) {
                context = value;
            } else if (c.PyUnicode_CompareWithASCIIString(key, "coro") == 0) {
                if (coro_arg != null) return py.raise(c.PyExc_TypeError, "create_task() got multiple values for argument 'coro'");
                coro_arg = value;
            } else {
                _ = c.PyErr_Format(c.PyExc_TypeError, "create_task() got an unexpected keyword argument '%U'", key);
                return null;
            }
        }
    }
    const coro = coro_arg orelse return py.raise(c.PyExc_TypeError, "create_task() missing 1 required positional argument: 'coro'");
    if (!checkClosed(loop)) return null;
    const factory = loop.task_factory orelse {
        const task_type = state.taskType() orelse return null;
        defer py.decref(task_type);
        const argv = [_]?*Obj{ null, coro, self, name, context };
        return c.PyObject_Vectorcall(task_type, @ptrCast(&argv[1]), 1 | c.PY_VECTORCALL_ARGUMENTS_OFFSET, s.kw_task);
    };
    const task = if (context == py.none()) blk: {
        const argv = [_]?*Obj{ null, self, coro };
        break :blk c.PyObject_Vectorcall(factory, @ptrCast(&argv[1]), 2 | c.PY_VECTORCALL_ARGUMENTS_OFFSET, null);
    } else blk: {
        const argv = [_]?*Obj{ null, self, coro, context };
        break :blk c.PyObject_Vectorcall(factory, @ptrCast(&argv[1]), 2 | c.PY_VECTORCALL_ARGUMENTS_OFFSET, s.kw_context);
    };
    const t = task orelse return null;
    if (name != py.none()) {
        const r = py.callMethod(t, s.str_set_name, .{name}) orelse {
            py.decref(t);
            return null;
        };
        py.decref(r);
    }
    return t;
}

const create_task_doc = (if (py.at_least_314)
    "create_task($self, coro, **kwargs)"
else
    "create_task($self, coro, *, name=None, context=None)") ++
    "\n--\n\nSchedule a coroutine as a task (through the task factory if set).";

fn getTaskFactory(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.newref(py.cast(Loop, self.?).task_factory orelse py.none());
}

fn setTaskFactory(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    const loop = py.cast(Loop, self.?);
    const old = loop.task_factory;
    loop.task_factory = if (value == null or value.? == py.none()) null else py.newref(value.?);
    py.xdecref(old);
    return 0;
}

// ------------------------------------------------------------- fd watchers

fn onFdReady(w: *core.IoWatcher, ev: core.reactor.Event) core.RunError!void {
    const fw: *FdWatcher = @fieldParentPtr("w", w);
    // Parked: only a stale kernel entry (an fd closed while armed, whose
    // file lives on elsewhere) can still report, and nobody is waiting.
    if (fw.idle()) return;
    const loop = py.cast(Loop, watcherLoop(fw));
    if (ev.readable) if (fw.reader) |h| try queueIo(loop, fw, h, true);
    if (ev.writable) if (fw.writer) |h| try queueIo(loop, fw, h, false);
}

fn watcherLoop(fw: *FdWatcher) *Obj {
    const h = fw.reader orelse fw.writer.?;
    return h.loop.?;
}

/// As the selector loop's `_process_events`: a cancelled handle unregisters
/// its direction; a live one joins this pass's ready callbacks.
fn queueIo(loop: *Loop, fw: *FdWatcher, h: *Handle, read: bool) core.RunError!void {
    if (h.cancelled) {
        _ = removeIo(loop, fw.w.fd, read) catch {};
        return;
    }
    loop.reactor.callSoon(&h.node) catch return error.Aborted;
    py.incref(py.obj(h));
}

/// add_reader/add_writer's watcher for `fd`. A socket transport's fd has
/// the transport's own watcher (one per fd): asyncio refuses add_reader on
/// it with RuntimeError, and so does this (`error.UsedByTransport`).
fn watcherFor(loop: *Loop, fd: i32, create: bool) (core.reactor.Error || error{UsedByTransport})!?*FdWatcher {
    if (loop.reactor.watcherFor(fd)) |w| {
        if (transport.isTransportWatcher(w)) return error.UsedByTransport;
        return @fieldParentPtr("w", w);
    }
    if (!create) return null;
    const fw = try gpa.create(FdWatcher);
    // Borrowed: user code may close the fd without removing it first.
    fw.* = .{ .w = .{ .fd = fd, .on_ready = onFdReady, .borrowed = true } };
    loop.reactor.attach(&fw.w) catch |err| {
        gpa.destroy(fw);
        return err;
    };
    return fw;
}

/// Frees a watcher left without handles, unless it parks: a disarmed
/// one-shot entry is kept, with its watcher, for the fd's next wait.
fn releaseWatcherIfIdle(loop: *Loop, fw: *FdWatcher) void {
    if (!fw.idle()) return;
    if (fw.w.registered and fw.w.interest.none()) return;
    loop.reactor.detach(&fw.w);
    gpa.destroy(fw);
}

/// For a native transport or server about to watch `fd`: evicts a stale
/// holder (`evictStale`), frees the parked watcher of `fd`, if that is
/// what holds it, and returns whether a disarmed kernel entry remains (the
/// newcomer's `IoWatcher.registered`, so its first registration is a
/// modification). Null with RuntimeError set when a live watcher holds
/// the fd (or with what an eviction raised).
pub fn claimFd(loop: *Loop, fd: i32) ?bool {
    if (!evictStale(loop, fd)) return null;
    const w = loop.reactor.watcherFor(fd) orelse return false;
    const parked = !transport.isTransportWatcher(w) and @as(*FdWatcher, @fieldParentPtr("w", w)).idle();
    if (!parked) {
        _ = c.PyErr_Format(c.PyExc_RuntimeError, "File descriptor %d is used by another watcher", fd);
        return null;
    }
    const registered = w.registered;
    loop.reactor.detach(w);
    gpa.destroy(@as(*FdWatcher, @fieldParentPtr("w", w)));
    return registered;
}

/// A newcomer wants `fd`. Whatever holds it on behalf of an object that
/// no longer stands for it (a socket or pipe closed or detached by user
/// code, its number perhaps the newcomer's own file now) is evicted first
/// and fails as its next system call on the number would (EBADF): a
/// transport gets connection_lost(OSError(EBADF)), a server stops
/// accepting on it, a `sock_*` wait's future gets OSError(EBADF). None of
/// it registers the number with the kernel again: that is the newcomer's
/// to do. False with the Python error set when the eviction raised.
fn evictStale(loop: *Loop, fd: i32) bool {
    const w = loop.reactor.watcherFor(fd) orelse return true;
    if (transport.isTransportWatcher(w)) return transport.evictIfStale(w);
    return evictStaleHandles(loop, @fieldParentPtr("w", w));
}

/// Whether `h` watches `fd` for an owner (`Handle.owner`) that no longer
/// stands for it.
fn staleHandle(h: *Handle, fd: i32) bool {
    const owner = h.owner orelse return false;
    return !borrowed.owns(owner, fd);
}

/// Takes off `fw` the handles whose owner went away (see `evictStale`),
/// cancelled, each calling its callback once more (`handle.callOnceMore`)
/// to find its object closed and fail as its system call would: a
/// `sock_*` wait rejects its future with OSError(EBADF), a pipe transport
/// loses its connection. What the kernel held for them was the old file's:
/// epoll forgot it when the file closed, so the watcher forgets it too,
/// with no system call, and the next registration adds whatever the
/// number stands for now. False with the Python error set.
fn evictStaleHandles(loop: *Loop, fw: *FdWatcher) bool {
    var evicted = false;
    var ok = true;
    inline for (.{ &fw.reader, &fw.writer }) |slot| {
        if (slot.*) |h| if (staleHandle(h, fw.w.fd)) {
            slot.* = null;
            evicted = true;
            if (ok) ok = handle.callOnceMore(h, &loop.reactor);
            if (!h.running) handle.releaseCallback(h);
            h.cancelled = true;
            py.decref(py.obj(h));
        };
    }
    if (evicted) loop.reactor.forgetFile(&fw.w);
    return ok;
}

/// `_add_reader(fd, callback, *args)` / `_add_writer`: fd is already an
/// int. `owner`: the object fd came from (`_add_reader_for`), or null.
fn addIo(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, read: bool, owner: ?*Obj) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (nargs < 2) return py.raise(c.PyExc_TypeError, "expected (fd, callback, *args)");
    if (!checkClosed(loop)) return null;
    const fd_long = c.PyLong_AsLong(args[0]);
    if (fd_long == -1 and c.PyErr_Occurred() != null) return null;
    if (fd_long < 0) return py.raise(c.PyExc_ValueError, "Invalid file descriptor");
    // What epoll's register raises for an fd beyond a C int.
    if (fd_long > std.math.maxInt(i32)) return py.raise(c.PyExc_OverflowError, "signed integer is greater than maximum");
    const fd: i32 = @intCast(fd_long);
    const h = handle.create(&handle.HandleType, .io, self.?, args[0 + 1].?, args[2..@intCast(nargs)], null) orelse return null;
    if (owner) |o| h.owner = py.newref(o);
    if (!installIo(loop, fd, read, h)) return null;
    return py.newref(py.obj(h));
}

/// `_add_reader_for(owner, fd, callback, *args)` / `_add_writer_for`:
/// `_add_reader` on behalf of `owner`, the socket or file object `fd`
/// came from (zloop's pipe transports, the Python accept loop). Once user
/// code closed `owner`, a newcomer on the number evicts the handle
/// (`evictStale`), which then calls its callback once more to find out.
fn addIoFor(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, read: bool) ?*Obj {
    if (nargs < 3) return py.raise(c.PyExc_TypeError, "expected (owner, fd, callback, *args)");
    return addIo(self, args + 1, nargs - 1, read, args[0].?);
}

/// Puts `h` (its creation reference, consumed) in fd's reader or writer
/// slot, cancelling the handle it replaces, and updates the kernel's
/// interest. False with the Python error set when that fails.
fn installIo(loop: *Loop, fd: i32, read: bool, h: *Handle) bool {
    if (!evictStale(loop, fd)) {
        py.decref(py.obj(h));
        return false;
    }
    const fw = (watcherFor(loop, fd, true) catch |err| {
        py.decref(py.obj(h));
        _ = usedByTransport(loop, fd, err);
        return false;
    }).?;
    const slot = if (read) &fw.reader else &fw.writer;
    const old = slot.*;
    slot.* = h; // the watcher owns the creation reference
    fw.apply(loop) catch {
        const errno = core.sys.last_errno;
        slot.* = old;
        py.decref(py.obj(h));
        fw.apply(loop) catch {};
        releaseWatcherIfIdle(loop, fw);
        _ = py.raiseErrno(errno);
        return false;
    };
    if (old) |o| {
        o.cancelled = true;
        handle.releaseCallback(o);
        py.decref(py.obj(o));
    }
    return true;
}

// ---------------------------------------------------------- sock_* waits

/// `_sock_wait(fd, write, ready, sock, *args)` -> a new future. Installs
/// `ready(fut, fd, sock, *args)` as fd's reader (writer if `write`),
/// one-shot: it runs on each readiness until it returns True (it finished
/// `fut`, or found it done), then leaves the watcher with no syscall. As
/// asyncio's add_reader in `sock_recv`, it replaces a reader already
/// there. `sock` is the object `fd` came from: `ready` makes its syscall
/// only while `sock` still stands for `fd`, and a newcomer on `fd` ends the
/// wait with OSError(EBADF) once it no longer does (`evictStale`).
pub fn sockWait(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (nargs < 4 or nargs > 1 + handle.inline_args) {
        return py.raise(c.PyExc_TypeError, "_sock_wait(fd, write, ready, sock, *args): wrong arguments");
    }
    if (!checkClosed(loop)) return null;
    const fd = parseFd(args[0]) orelse return null;
    const write = c.PyObject_IsTrue(args[1]);
    if (write < 0) return null;
    const fut = createFuture(self, null) orelse return null;
    var argv: [handle.inline_args]?*Obj = undefined;
    argv[0] = fut;
    argv[1] = args[0];
    const extra: usize = @intCast(nargs - 3);
    for (0..extra) |i| argv[2 + i] = args[3 + i];
    const h = handle.create(&handle.HandleType, .sock, self.?, args[2].?, argv[0 .. 2 + extra], null) orelse {
        py.decref(fut);
        return null;
    };
    h.owner = py.newref(args[3].?);
    if (!installIo(loop, fd, write == 0, h)) {
        py.decref(fut);
        return null;
    }
    return fut;
}

/// `_sock_cancel(fd, fut)`: the wait for `fut` on fd (cancelled, or its
/// coroutine closed) stops watching now, as asyncio's done-callback does.
/// Nothing happens if it already finished or was replaced.
pub fn sockCancel(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (nargs != 2) return py.raise(c.PyExc_TypeError, "_sock_cancel(fd, fut)");
    if (loop.closed or !loop.has_reactor) return py.newref(py.none());
    const fd = parseFd(args[0]) orelse return null;
    const fw = (watcherFor(loop, fd, false) catch null) orelse return py.newref(py.none());
    inline for (.{ &fw.reader, &fw.writer }) |slot| {
        if (slot.*) |h| if (h.kind == .sock and h.argv[1] == args[1]) {
            dropIo(loop, fw, slot);
            return py.newref(py.none());
        };
    }
    return py.newref(py.none());
}

/// After a sock_* wait's callback ran: a finished wait leaves its slot
/// (its one-shot entry already disarmed: no syscall); an unfinished one
/// (spurious wake-up) is armed again.
fn sockWaitRan(loop: *Loop, h: *Handle, finished: bool) void {
    if (h.cancelled or !loop.has_reactor) return; // replaced or removed meanwhile
    const fd = parseFd(h.argv[2]) orelse {
        c.PyErr_Clear();
        return;
    };
    const fw = (watcherFor(loop, fd, false) catch null) orelse return;
    const slot = if (fw.reader == h) &fw.reader else if (fw.writer == h) &fw.writer else return;
    if (finished) return dropIo(loop, fw, slot);
    fw.apply(loop) catch {
        // Re-arming failed (the fd went away): end the wait with the error
        // rather than leave it pending forever.
        const errno = core.sys.last_errno;
        failWait(h.argv[1].?, errno);
        dropIo(loop, fw, slot);
    };
}

/// `fut.set_exception(OSError(errno))` unless fut is done (sockops'
/// own rejection); errors from that are reported as unraisable.
fn failWait(fut: *Obj, errno: u16) void {
    const done = sockops.futureDone(fut) orelse return c.PyErr_WriteUnraisable(fut);
    if (done) return;
    const r = sockops.reject(fut, errno) orelse return c.PyErr_WriteUnraisable(fut);
    py.decref(r);
}

pub fn parseFd(o: ?*Obj) ?i32 {
    const v = c.PyLong_AsLong(o);
    if (v == -1 and c.PyErr_Occurred() != null) return null;
    if (v < 0 or v > std.math.maxInt(i32)) {
        c.PyErr_SetString(c.PyExc_ValueError, "Invalid file descriptor");
        return null;
    }
    return @intCast(v);
}

/// Raises what `core.Reactor.attach`'s `err` means: MemoryError, or the
/// OSError of an fd found closed (as the selector's register raises it).
pub fn attachFailed(err: anyerror) ?*Obj {
    if (err == error.OutOfMemory) return c.PyErr_NoMemory();
    return py.raiseErrno(core.sys.last_errno);
}

fn usedByTransport(loop: *Loop, fd: i32, err: anyerror) ?*Obj {
    if (err != error.UsedByTransport) return attachFailed(err);
    const w = loop.reactor.watcherFor(fd).?;
    return c.PyErr_Format(c.PyExc_RuntimeError, "File descriptor %d is used by transport %R", fd, transport.ownerOfWatcher(w));
}

fn removeIo(loop: *Loop, fd: i32, read: bool) error{Failed}!bool {
    const fw = (watcherFor(loop, fd, false) catch |err| {
        _ = usedByTransport(loop, fd, err);
        return error.Failed;
    }) orelse return false;
    const slot = if (read) &fw.reader else &fw.writer;
    if (slot.* == null) return false;
    dropIo(loop, fw, slot);
    return true;
}

/// Empties one of fw's slots: the handle is cancelled and released, the
/// kernel told (nothing to tell for a fired one-shot entry), and the
/// watcher freed or parked if that was its last handle.
fn dropIo(loop: *Loop, fw: *FdWatcher, slot: *?*Handle) void {
    const old = slot.*.?;
    slot.* = null;
    fw.apply(loop) catch {};
    if (!old.running) handle.releaseCallback(old);
    old.cancelled = true;
    py.decref(py.obj(old));
    releaseWatcherIfIdle(loop, fw);
}

fn removeIoM(self: ?*Obj, fd_obj: ?*Obj, read: bool) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (loop.closed) return py.boolean(false);
    const fd_long = c.PyLong_AsLong(fd_obj);
    if (fd_long == -1 and c.PyErr_Occurred() != null) {
        // Too big for a C long: never registered, as asyncio's lookup finds.
        if (c.PyErr_ExceptionMatches(c.PyExc_OverflowError) == 0) return null;
        c.PyErr_Clear();
        return py.boolean(false);
    }
    if (fd_long < 0 or fd_long > std.math.maxInt(i32)) return py.boolean(false);
    const removed = removeIo(loop, @intCast(fd_long), read) catch return null;
    return py.boolean(removed);
}

fn addReader(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    return addIo(self, args, nargs, true, null);
}

fn addWriter(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    return addIo(self, args, nargs, false, null);
}

fn addReaderFor(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    return addIoFor(self, args, nargs, true);
}

fn addWriterFor(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    return addIoFor(self, args, nargs, false);
}

fn removeReader(self: ?*Obj, fd: ?*Obj) callconv(.c) ?*Obj {
    return removeIoM(self, fd, true);
}

fn removeWriter(self: ?*Obj, fd: ?*Obj) callconv(.c) ?*Obj {
    return removeIoM(self, fd, false);
}

/// `_io_handles(fd)` -> (reader, writer): for `_ensure_fd_no_transport`
/// style checks and tests.
fn ioHandles(self: ?*Obj, fd_obj: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    const fd_long = c.PyLong_AsLong(fd_obj);
    if (fd_long == -1 and c.PyErr_Occurred() != null) return null;
    var r: *Obj = py.none();
    var w: *Obj = py.none();
    if (loop.has_reactor and fd_long >= 0 and fd_long <= std.math.maxInt(i32)) {
        if (watcherFor(loop, @intCast(fd_long), false) catch null) |fw| {
            if (fw.reader) |h| r = py.obj(h);
            if (fw.writer) |h| w = py.obj(h);
        }
    }
    return c.Py_BuildValue("(OO)", r, w);
}

/// `_make_handle(callback, *args)`: a reusable handle (signal handlers).
fn makeHandle(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    if (nargs < 1) return py.raise(c.PyExc_TypeError, "_make_handle(callback, *args)");
    const h = handle.create(&handle.HandleType, .io, self.?, args[0].?, args[1..@intCast(nargs)], null) orelse return null;
    return py.obj(h);
}

/// `_watch_child(pid, callback, *args)`: see children.zig.
fn watchChild(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (!checkClosed(loop)) return null;
    return children.watchChild(&loop.reactor, self.?, args, nargs);
}

/// `_unwatch_child(handle)`: see children.zig.
fn unwatchChild(self: ?*Obj, h: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (loop.has_reactor) children.unwatchChild(&loop.reactor, h.?);
    return py.newref(py.none());
}

/// `_add_callback(handle)`: queue an existing handle unless cancelled.
fn addCallback(self: ?*Obj, arg: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (c.PyObject_TypeCheck(arg, &handle.HandleType) == 0 or c.PyObject_TypeCheck(arg, &handle.TimerHandleType) != 0) {
        return py.raise(c.PyExc_TypeError, "_add_callback() expects a zloop Handle");
    }
    if (!checkClosed(loop)) return null;
    const h = py.cast(Handle, arg.?);
    if (!h.cancelled) {
        loop.reactor.callSoon(&h.node) catch return c.PyErr_NoMemory();
        py.incref(py.obj(h));
        loop.reactor.wake();
    }
    return py.newref(py.none());
}

// ------------------------------------------------------------ lifecycle

/// Releases every queued handle, timer and fd watcher. Leaves the reactor
/// usable (GC clear) or, with `close_reactor`, frees it (close()).
fn drain(loop: *Loop, close_reactor: bool) void {
    if (!loop.has_reactor) return;
    // In a fork child, what the kernel holds is the parent's (see
    // `abandonIfForked`): this close changes none of it.
    abandonIfForked(loop);
    loop.reactor.dropFlushes();
    while (loop.reactor.popReady()) |cb| cb.drop(cb);
    while (loop.reactor.popTimer()) |cb| cb.drop(cb);
    for (loop.reactor.watchers.items) |maybe| {
        const w = maybe orelse continue;
        if (transport.isTransportWatcher(w)) {
            // A transport outlives a GC clear; on close() it leaves.
            if (close_reactor) transport.loopClosing(w);
            continue;
        }
        const fw: *FdWatcher = @fieldParentPtr("w", w);
        const r = fw.reader;
        const wr = fw.writer;
        fw.reader = null;
        fw.writer = null;
        loop.reactor.detach(w);
        gpa.destroy(fw);
        if (r) |h| py.decref(py.obj(h));
        if (wr) |h| py.decref(py.obj(h));
    }
    children.dropAll(&loop.reactor);
    if (close_reactor) {
        // Producers waiting for the queue to drain wait no more.
        loop.reactor.releasePosters();
        loop.reactor.deinit();
        loop.has_reactor = false;
        loop.recv_pool.deinit();
    }
}

/// A loop closed (or collected) in a process other than the one that
/// made it, a fork child, shares its epoll instance or io_uring ring with
/// that parent (on kqueue: nothing, the queue is not inherited). Closing
/// it there must leave them as they are, as asyncio's close() there only
/// closes its selector's fd: from here on the reactor makes no call that
/// changes them (`Reactor.abandon`). One getpid(2), once.
fn abandonIfForked(loop: *Loop) void {
    if (!loop.reactor.abandoned and loop.reactor.inherited()) loop.reactor.abandon();
}

/// `_abandon_if_forked()`: what close() asks first; True in a fork child
/// (whose close() then leaves the parent's children and kernel objects
/// alone).
fn abandonIfForkedMethod(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (!loop.has_reactor) return py.boolean(false);
    abandonIfForked(loop);
    return py.boolean(loop.reactor.abandoned);
}

fn closeNative(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    loop.closed = true;
    drain(loop, true);
    py.clear(&loop.read_spare);
    py.clear(&loop.read_lent);
    return py.newref(py.none());
}

fn counts(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    // (ready, timers, fd watchers): debug counters for leak tests.
    const loop = py.cast(Loop, self.?);
    if (!loop.has_reactor) return c.Py_BuildValue("(nnn)", @as(py.Ssize, 0), @as(py.Ssize, 0), @as(py.Ssize, 0));
    var nw: py.Ssize = 0;
    for (loop.reactor.watchers.items) |maybe| {
        const w = maybe orelse continue;
        // A parked watcher holds no handle and no reference: not counted.
        if (!transport.isTransportWatcher(w) and @as(*FdWatcher, @fieldParentPtr("w", w)).idle()) continue;
        nw += 1;
    }
    return c.Py_BuildValue("(nnn)", @as(py.Ssize, @intCast(loop.reactor.readyCount())), @as(py.Ssize, @intCast(loop.reactor.timerCount())), nw);
}

/// `_recv_buffers()`: how many buffers the native-receive pool holds now,
/// in the ring or handed out (0: no stream transport has received
/// natively), for tests.
fn recvBuffers(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    return c.PyLong_FromSize_t(py.cast(Loop, self.?).recv_pool.held());
}

/// glibc's malloc serves blocks over its mmap threshold (128 KiB at start)
/// with mmap, and trims the heap whenever more than its trim threshold
/// (128 KiB) lies free at the top. Both thresholds adapt, but only once a
/// block served with mmap is freed: they rise to its size and twice that.
/// Until then, a server that allocates and frees ~100 KiB buffers (asyncio's
/// StreamReader copies each large read into one and slices it out again)
/// hands the heap top back to the kernel and faults it in again for nearly
/// every message: 0.7 brk and 20-26 page faults per 100 KiB echo through
/// streams, a third of its cost. Most long-running programs free some big
/// block early and never see this; a fresh benchmark process does, and
/// which one depends on heap layout luck. So the first loop a process
/// creates frees one 512 KiB block, giving every run glibc's adapted
/// thresholds (mmap 512 KiB, trim 1 MiB) from the start. No effect where
/// the thresholds were set explicitly (mallopt, GLIBC_TUNABLES: glibc
/// stops adapting) or off glibc; ZLOOP_MALLOC_PRIME=0 turns it off.
fn primeMalloc() void {
    if (malloc_prime_tried) return;
    malloc_prime_tried = true;
    if (comptime !(@import("builtin").os.tag == .linux and @import("builtin").abi.isGnu())) return;
    if (std.c.getenv("ZLOOP_MALLOC_PRIME")) |v| {
        if (std.mem.eql(u8, std.mem.span(v), "0")) return;
    }
    const block: [*]volatile u8 = @ptrCast(std.c.malloc(512 * 1024) orelse return);
    block[0] = 0; // a use, so the compiler cannot drop the pair
    std.c.free(@ptrCast(@volatileCast(block)));
    malloc_primed = true;
}

var malloc_prime_tried = false;
var malloc_primed = false;

/// `_zloop._malloc_primed()`: whether this process's first loop freed the
/// block (see `primeMalloc`); for tests.
pub fn mallocPrimed(_: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    return py.boolean(malloc_primed);
}

fn new(tp: ?*c.PyTypeObject, _: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    primeMalloc();
    const raw = py.allocInstance(tp) orelse return null;
    const loop = py.cast(Loop, raw);
    loop.closed = false;
    loop.debug = false;
    loop.debug_given = null;
    loop.thread_id = 0;
    loop.slow_callback_duration_s = 0.1;
    loop.slow_given = null;
    loop.tstate = null;
    loop.weakreflist = null;
    loop.task_factory = null;
    loop.read_spare = null;
    loop.read_lent = null;
    loop.recv_pool = .{};
    loop.trim_probe = .{};
    loop.has_reactor = false;
    loop.reactor = core.Reactor.init(gpa) catch |err| {
        // Raise first, then free: marked closed, the half-made loop's
        // __del__ (a Python subclass's) has nothing to clean up or warn about.
        _ = switch (err) {
            error.OutOfMemory => c.PyErr_NoMemory(),
            error.UnknownBackend => raiseUnknownBackend(),
            else => py.raiseErrno(core.sys.last_errno),
        };
        loop.closed = true;
        const exc = py.fetchException();
        py.decref(raw);
        if (exc) |e| py.restoreException(e);
        return null;
    };
    loop.has_reactor = true;
    loop.reactor.clock_resolution_s = 1e-9;
    return raw;
}

fn traverse(self: ?*Obj, visit: c.visitproc, arg: ?*anyopaque) callconv(.c) c_int {
    const loop = py.cast(Loop, self.?);
    // A Python subclass (a heap type) is visited by CPython's
    // subtype_traverse before it calls this; visiting it again would skew
    // the collector's counts.
    inline for (.{ loop.task_factory, loop.debug_given, loop.slow_given }) |m| if (m) |o| {
        const rc = visit.?(o, arg);
        if (rc != 0) return rc;
    };
    if (!loop.has_reactor) return 0;
    const q = &loop.reactor.ready;
    var i: usize = 0;
    while (i < q.len) : (i += 1) {
        const cb = q.items[(q.head + i) & (q.items.len - 1)];
        // A queued transport (its I/O, see transport/methods.zig) is not
        // the loop's to report.
        if (!handle.isHandleNode(cb)) continue;
        const rc = visit.?(handle.ownerOf(cb), arg);
        if (rc != 0) return rc;
    }
    for (loop.reactor.timers.items.items) |t| {
        const entry: *core.TimerEntry = @fieldParentPtr("timer", t);
        const rc = visit.?(handle.ownerOf(&entry.callback), arg);
        if (rc != 0) return rc;
    }
    for (loop.reactor.watchers.items) |maybe| {
        const w = maybe orelse continue;
        // A transport's reference to itself is not the loop's to report.
        if (transport.isTransportWatcher(w)) continue;
        const fw: *FdWatcher = @fieldParentPtr("w", w);
        inline for (.{ fw.reader, fw.writer }) |hh| if (hh) |h| {
            const rc = visit.?(py.obj(h), arg);
            if (rc != 0) return rc;
        };
    }
    return children.traverse(&loop.reactor, visit, arg);
}

fn clearGc(self: ?*Obj) callconv(.c) c_int {
    py.clear(&py.cast(Loop, self.?).task_factory);
    py.clear(&py.cast(Loop, self.?).debug_given);
    py.clear(&py.cast(Loop, self.?).slow_given);
    py.clear(&py.cast(Loop, self.?).read_spare);
    py.clear(&py.cast(Loop, self.?).read_lent);
    drain(py.cast(Loop, self.?), false);
    return 0;
}

fn dealloc(self: ?*Obj) callconv(.c) void {
    const loop = py.cast(Loop, self.?);
    c.PyObject_GC_UnTrack(self);
    if (loop.weakreflist != null) c.PyObject_ClearWeakRefs(self);
    drain(loop, true);
    py.clear(&loop.task_factory);
    py.clear(&loop.debug_given);
    py.clear(&loop.slow_given);
    py.clear(&loop.read_spare);
    py.clear(&loop.read_lent);
    // subtype_dealloc drops the reference a heap subclass's instance holds
    // on its type; this static base must not drop it again.
    c.Py_TYPE(self).*.tp_free.?(self);
}

// ----------------------------------------------------------- attributes

fn getThreadId(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const id = py.cast(Loop, self.?).thread_id;
    if (id == 0) return py.newref(py.none());
    return c.PyLong_FromUnsignedLong(id);
}

fn setThreadId(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    const loop = py.cast(Loop, self.?);
    if (value == null or value.? == py.none()) {
        loop.thread_id = 0;
        return 0;
    }
    const v = c.PyLong_AsUnsignedLong(value);
    if (v == std.math.maxInt(c_ulong) and c.PyErr_Occurred() != null) return -1;
    loop.thread_id = v;
    return 0;
}

fn getDebugAttr(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return getDebug(self, null);
}

/// `_debug = enabled` (set_debug): the loop runs on its truth value and
/// keeps the object for `get_debug()` (see `debug_given`).
fn setDebugAttr(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    const loop = py.cast(Loop, self.?);
    const given = value orelse return noDelete("_debug");
    const v = c.PyObject_IsTrue(given);
    if (v < 0) return -1;
    loop.debug = v != 0;
    py.clear(&loop.debug_given);
    if (c.PyBool_Check(given) == 0) loop.debug_given = py.newref(given);
    return 0;
}

fn noDelete(comptime name: [:0]const u8) c_int {
    _ = py.raise(c.PyExc_TypeError, "cannot delete " ++ name);
    return -1;
}

fn getStopping(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    return py.boolean(loop.has_reactor and loop.reactor.stopping);
}

fn setStopping(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    const loop = py.cast(Loop, self.?);
    const v = c.PyObject_IsTrue(value orelse return -1);
    if (v < 0) return -1;
    if (loop.has_reactor) loop.reactor.stopping = v != 0;
    return 0;
}

fn getSlow(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (loop.slow_given) |o| return py.newref(o);
    return c.PyFloat_FromDouble(loop.slow_callback_duration_s);
}

/// `slow_callback_duration = value`: kept as given, for reading back as
/// asyncio's plain attribute is, and as seconds for the comparison its pass
/// makes (`dt >= value`). A number is required now (asyncio fails in its
/// next debug pass); an int beyond a double compares as ±inf, as it would.
fn setSlow(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    const loop = py.cast(Loop, self.?);
    const given = value orelse return noDelete("slow_callback_duration");
    var seconds = c.PyFloat_AsDouble(given);
    if (seconds == -1.0 and c.PyErr_Occurred() != null) {
        const overflow = c.PyErr_ExceptionMatches(c.PyExc_OverflowError) != 0;
        if (c.PyLong_Check(given) == 0 or !overflow) return -1;
        c.PyErr_Clear();
        var sign: c_int = 0;
        _ = c.PyLong_AsLongLongAndOverflow(given, &sign);
        seconds = if (sign > 0) std.math.inf(f64) else -std.math.inf(f64);
    }
    loop.slow_callback_duration_s = seconds;
    py.clear(&loop.slow_given);
    loop.slow_given = py.newref(given);
    return 0;
}

fn getClosed(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.boolean(py.cast(Loop, self.?).closed);
}

/// Raises the `ValueError` of a `ZLOOP_BACKEND` that names no backend of
/// this build: loop creation and `zloop.BACKEND` (`_selected_backend`)
/// refuse a name alike.
pub fn raiseUnknownBackend() ?*Obj {
    const raw: [*:0]const u8 = std.c.getenv(core.backend.env_var) orelse "";
    _ = c.PyErr_Format(c.PyExc_ValueError, "ZLOOP_BACKEND is '%s', which is not a backend " ++
        "of this build of zloop: choose from " ++ core.backend.names_quoted, raw);
    return null;
}

/// `_selected_backend()`: the backend a loop created now asks for (the
/// name `ZLOOP_BACKEND` gives, else the default), checked as loop creation
/// checks it.
pub fn selectedBackend(_: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const kind = core.backend.kindFromEnv() catch return raiseUnknownBackend();
    const name = @tagName(kind);
    return c.PyUnicode_FromStringAndSize(name.ptr, @intCast(name.len));
}

/// `_backend`: the name of the backend this loop's reactor runs on.
fn getBackend(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (!loop.has_reactor) return py.raise(c.PyExc_RuntimeError, "Event loop is closed");
    const name = loop.reactor.backendName();
    return c.PyUnicode_FromStringAndSize(name.ptr, @intCast(name.len));
}

/// `_backend_features`: the optional features the backend uses (on
/// io_uring, the `ZLOOP_URING_OFF` names: "single_issuer", "recv"...),
/// a tuple of names; empty on epoll and kqueue.
fn getBackendFeatures(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (!loop.has_reactor) return py.raise(c.PyExc_RuntimeError, "Event loop is closed");
    const bits = loop.reactor.backendFeatures();
    const names = core.backend.feature_names;
    const tuple = c.PyTuple_New(@intCast(@popCount(bits))) orelse return null;
    var k: c.Py_ssize_t = 0;
    for (names, 0..) |name, i| {
        if (bits & (@as(u32, 1) << @intCast(i)) == 0) continue;
        const item = c.PyUnicode_FromStringAndSize(name.ptr, @intCast(name.len)) orelse {
            py.decref(tuple);
            return null;
        };
        _ = c.PyTuple_SetItem(tuple, k, item);
        k += 1;
    }
    return tuple;
}

fn getResolution(_: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return c.PyFloat_FromDouble(1e-9);
}

var methods = [_]c.PyMethodDef{
    py.methodFast("call_soon", callSoon, "call_soon($self, callback, *args, context=None)\n--\n\nSchedule callback(*args) for the next pass of the loop."),
    py.methodFast("call_soon_threadsafe", callSoonThreadsafe, "call_soon_threadsafe($self, callback, *args, context=None)\n--\n\nLike call_soon(), from any thread; wakes the loop."),
    py.methodFast("call_later", callLater, "call_later($self, delay, callback, *args, context=None)\n--\n\nSchedule callback(*args) after delay seconds."),
    py.methodFast("call_at", callAt, "call_at($self, when, callback, *args, context=None)\n--\n\nSchedule callback(*args) at loop time `when`."),
    py.methodNoArgs("time", time, "time($self, /)\n--\n\nThe loop's monotonic clock, in seconds."),
    py.methodNoArgs("create_future", createFuture, "create_future($self, /)\n--\n\nA new asyncio.Future attached to this loop."),
    py.methodFast("create_task", createTask, create_task_doc),
    py.methodNoArgs("stop", stop, "stop($self, /)\n--\n\nStop after the current pass."),
    py.methodNoArgs("is_closed", isClosed, "is_closed($self, /)\n--\n\nTrue once close() was called."),
    py.methodNoArgs("is_running", isRunning, "is_running($self, /)\n--\n\nTrue while run_forever() runs."),
    py.methodNoArgs("get_debug", getDebug, "get_debug($self, /)\n--\n\nTrue in debug mode."),
    py.methodNoArgs("_run_forever_native", runForeverNative, null),
    py.methodNoArgs("_run_once", runOnceNative, null),
    py.methodNoArgs("_close_native", closeNative, null),
    py.methodNoArgs("_abandon_if_forked", abandonIfForkedMethod, null),
    py.methodNoArgs("_debug_counts", counts, null),
    py.methodNoArgs("_recv_buffers", recvBuffers, null),
    py.methodFast("_add_reader", addReader, null),
    py.methodFast("_add_writer", addWriter, null),
    py.methodFast("_add_reader_for", addReaderFor, null),
    py.methodFast("_add_writer_for", addWriterFor, null),
    py.methodFast("sock_recv", sockcall.sockRecv, "sock_recv($self, sock, n)\n--\n\nReceive up to n bytes from a non-blocking socket (a coroutine)."),
    py.methodFast("sock_sendall", sockcall.sockSendall, "sock_sendall($self, sock, data)\n--\n\nSend all of data on a non-blocking socket (a coroutine)."),
    py.methodFast("_sock_wait", sockWait, null),
    py.methodFast("_sock_cancel", sockCancel, null),
    py.methodO("_remove_reader", removeReader, null),
    py.methodO("_remove_writer", removeWriter, null),
    py.methodO("_io_handles", ioHandles, null),
    py.methodFast("_make_handle", makeHandle, null),
    py.methodO("_add_callback", addCallback, null),
    py.methodFast("_watch_child", watchChild, null),
    py.methodO("_unwatch_child", unwatchChild, null),
    py.sentinel_method,
};

var getsets = [_]c.PyGetSetDef{
    py.getset("_thread_id", getThreadId, setThreadId),
    py.getset("_task_factory", getTaskFactory, setTaskFactory),
    py.getset("_debug", getDebugAttr, setDebugAttr),
    py.getset("_stopping", getStopping, setStopping),
    py.getset("_closed", getClosed, null),
    py.getset("slow_callback_duration", getSlow, setSlow),
    py.getset("_clock_resolution", getResolution, null),
    py.getset("_backend", getBackend, null),
    py.getset("_backend_features", getBackendFeatures, null),
    py.sentinel_getset,
};

pub fn initTypes(module: *Obj) bool {
    LoopType = std.mem.zeroes(c.PyTypeObject);
    LoopType.tp_name = "zloop._zloop.LoopCore";
    LoopType.tp_basicsize = @sizeOf(Loop);
    LoopType.tp_flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_BASETYPE | c.Py_TPFLAGS_HAVE_GC;
    LoopType.tp_doc = "The native engine of zloop.Loop.";
    LoopType.tp_new = new;
    LoopType.tp_dealloc = dealloc;
    LoopType.tp_traverse = traverse;
    LoopType.tp_clear = clearGc;
    LoopType.tp_methods = &methods;
    LoopType.tp_getset = &getsets;
    LoopType.tp_weaklistoffset = @offsetOf(Loop, "weakreflist");
    if (c.PyType_Ready(&LoopType) < 0) return false;
    return c.PyModule_AddObjectRef(module, "LoopCore", py.obj(&LoopType)) >= 0;
}
