//! `zloop._zloop.LoopCore`: the native half of `zloop.Loop`. Scheduling,
//! timers and the run loop live here, fd readiness (`add_reader`, the
//! `sock_*` waits) in readers.zig; the Python subclass in `zloop/_loop.py`
//! adds the cold paths (executors, DNS, signals, servers).
const std = @import("std");
const trim = @import("trim.zig");
const core = @import("core");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const state = @import("../capi/state.zig");
const handle = @import("handle.zig");
const sockcall = @import("../sock/calls.zig");
const children = @import("children.zig");
const readers = @import("readers.zig");
const FdWatcher = readers.FdWatcher;
// What the loop's fd watchers (readers.zig) offer the rest of the adapter.
pub const claimFd = readers.claimFd;
pub const parseFd = readers.parseFd;
pub const attachFailed = readers.attachFailed;
pub const sockWait = readers.sockWait;
pub const sockCancel = readers.sockCancel;
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
    if (h.kind == .sock) readers.sockWaitRan(loop, h, finished);
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
/// exception). About 70 instructions a wait on 3.12 when none is pending
/// (CPython's main-thread test and its pending flag): what asyncio pays
/// in the bytecode after its selector returns.
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

pub fn checkClosed(loop: *Loop) bool {
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
pub fn createFuture(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
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
    py.methodFast("_add_reader", readers.addReader, null),
    py.methodFast("_add_writer", readers.addWriter, null),
    py.methodFast("_add_reader_for", readers.addReaderFor, null),
    py.methodFast("_add_writer_for", readers.addWriterFor, null),
    py.methodFast("sock_recv", sockcall.sockRecv, "sock_recv($self, sock, n)\n--\n\nReceive up to n bytes from a non-blocking socket (a coroutine)."),
    py.methodFast("sock_sendall", sockcall.sockSendall, "sock_sendall($self, sock, data)\n--\n\nSend all of data on a non-blocking socket (a coroutine)."),
    py.methodFast("_sock_wait", readers.sockWait, null),
    py.methodFast("_sock_cancel", readers.sockCancel, null),
    py.methodO("_remove_reader", readers.removeReader, null),
    py.methodO("_remove_writer", readers.removeWriter, null),
    py.methodO("_io_handles", readers.ioHandles, null),
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
