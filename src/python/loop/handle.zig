//! `Handle` and `TimerHandle`: what `call_soon`/`call_later` return and what
//! the ready queue and the timer heap carry. The core's intrusive nodes live
//! inside the Python object, so scheduling allocates exactly one object.
//!
//! Lifecycle: the ready queue (or timer heap) owns one reference while the
//! handle is queued; `run` consumes it, `drop` releases it unrun (close()).
//!
//! Handles are not tracked by the cyclic GC: a loop schedules millions of
//! them, and tracking each one made gen-0 collections walk every queued
//! handle (measured: ~20% of call_soon's instructions). Cycles through a
//! handle (callback -> bound method -> owner -> handle) are broken instead
//! by letting go of the callback as soon as the handle ran or was cancelled,
//! as `asyncio.Handle.cancel` does.
const std = @import("std");
const core = @import("core");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const state = @import("../capi/state.zig");
const loop_mod = @import("loop.zig");

/// Positional arguments kept inline; more go to a tuple.
pub const inline_args = 4;

pub const Kind = enum(u8) {
    /// call_soon/call_soon_threadsafe: runs once, then lets go of its callback.
    once,
    /// add_reader/add_writer: runs on every readiness event.
    io,
    /// call_later/call_at.
    timer,
    /// A `sock_*` wait (`LoopCore._sock_wait`): an fd handle whose callback
    /// returns True once it finished its future; the watcher then drops it.
    sock,
};

pub const Handle = struct {
    ob_base: Obj,
    callback: ?*Obj,
    /// Slot 0 is scratch so vectorcall may use PY_VECTORCALL_ARGUMENTS_OFFSET.
    argv: [inline_args + 1]?*Obj,
    nargs: u8,
    kind: Kind,
    cancelled: bool,
    /// Set while the callback executes, so a cancel() from inside it does
    /// not free the callable out from under the running call.
    running: bool,
    /// From call_soon_threadsafe on 3.14+, asyncio's `_ThreadSafeHandle`:
    /// from another thread, cancel() and cancelled() wait for a running
    /// callback to return.
    threadsafe: bool,
    /// Positional arguments when there are more than `inline_args`.
    args_tuple: ?*Obj,
    context: ?*Obj,
    loop: ?*Obj,
    source_traceback: ?*Obj,
    /// repr() taken at cancel() in debug mode, as asyncio keeps `_repr`.
    repr_cache: ?*Obj,
    /// Where other threads wait for the running callback of a thread-safe
    /// handle (see `threadsafe`): made by the first such thread, opened by
    /// the runner when the callback is done. Null until someone waits, so
    /// scheduling and running pay nothing for it.
    gate: c.PyThread_type_lock,
    /// The thread running the callback (while `running`), so that a
    /// cancel() from inside the callback does not wait for itself.
    runner_thread: c_ulong,
    weakreflist: ?*Obj,
    /// For an fd handle (`sock`, or `io` made by `_add_reader_for`): the
    /// object its fd came from, a socket or file object user code may close
    /// behind the loop's back (owned; see transport/borrowed.zig). Null: nothing to
    /// ask (a plain add_reader's fd is the caller's to keep open).
    owner: ?*Obj,
    node: core.Callback,
};

pub const TimerHandle = struct {
    base: Handle,
    entry: core.TimerEntry,
    scheduled: bool,
};

comptime {
    std.debug.assert(@offsetOf(Handle, "ob_base") == 0);
    std.debug.assert(@offsetOf(TimerHandle, "base") == 0);
}

pub var HandleType: c.PyTypeObject = undefined;
pub var TimerHandleType: c.PyTypeObject = undefined;

/// Builds a handle. Steals nothing; `context` may be null/None (then the
/// current context is copied, as `asyncio.Handle.__init__`).
pub fn create(
    tp: *c.PyTypeObject,
    kind: Kind,
    loop: *Obj,
    callback: *Obj,
    args: []const ?*Obj,
    context: ?*Obj,
) ?*Handle {
    const ctx: *Obj = if (py.isNone(context))
        c.PyContext_CopyCurrent() orelse return null
    else
        py.newref(context.?);
    var tuple: ?*Obj = null;
    if (args.len > inline_args) {
        tuple = c.PyTuple_New(@intCast(args.len)) orelse {
            py.decref(ctx);
            return null;
        };
        for (args, 0..) |a, i| _ = c.PyTuple_SetItem(tuple, @intCast(i), py.newref(a.?));
    }
    const raw = c._PyObject_New(tp) orelse {
        py.decref(ctx);
        py.xdecref(tuple);
        return null;
    };
    const h: *Handle = py.cast(Handle, raw);
    h.callback = py.newref(callback);
    h.argv = @splat(null);
    h.nargs = @intCast(@min(args.len, 255));
    if (tuple == null) {
        for (args, 0..) |a, i| h.argv[i + 1] = py.newref(a.?);
    }
    h.args_tuple = tuple;
    h.kind = kind;
    h.cancelled = false;
    h.running = false;
    h.context = ctx;
    h.loop = py.newref(loop);
    h.source_traceback = null;
    h.repr_cache = null;
    h.threadsafe = false;
    h.gate = null;
    h.runner_thread = 0;
    h.weakreflist = null;
    h.owner = null;
    h.node = .{ .run = runNode, .drop = dropNode };
    if (kind == .timer) {
        const t: *TimerHandle = @fieldParentPtr("base", h);
        t.entry = .{ .callback = .{ .run = runTimerNode, .drop = dropTimerNode } };
        t.scheduled = false;
    }
    return h;
}

/// Makes a fresh handle one that call_soon_threadsafe posts: it tells the
/// loop when it leaves the ready queue, run or dropped, for the loop's
/// count of posted callbacks (`core.reactor.Posted`).
pub fn markPosted(h: *Handle) void {
    h.node = .{ .run = runPostedNode, .drop = dropPostedNode };
}

fn runPostedNode(cb: *core.Callback) core.RunError!void {
    loop_mod.postedTaken(@fieldParentPtr("node", cb));
    return runNode(cb);
}

fn dropPostedNode(cb: *core.Callback) void {
    loop_mod.postedTaken(@fieldParentPtr("node", cb));
    dropNode(cb);
}

fn runNode(cb: *core.Callback) core.RunError!void {
    const h: *Handle = @fieldParentPtr("node", cb);
    defer py.decref(py.obj(h));
    if (h.cancelled) return;
    try loop_mod.runHandle(h);
}

/// Drops a handle the loop closes on, unrun. Its callback goes too: a
/// handle is not tracked by the collector, so one kept by what its callback
/// refers to (an SSLProtocol's handshake timer, whose callback is a lambda
/// over the protocol) would hold that cycle, and its socket, for ever.
fn dropNode(cb: *core.Callback) void {
    const h: *Handle = @fieldParentPtr("node", cb);
    if (!h.running) releaseCallback(h);
    py.decref(py.obj(h));
}

fn runTimerNode(cb: *core.Callback) core.RunError!void {
    const entry: *core.TimerEntry = @fieldParentPtr("callback", cb);
    const t: *TimerHandle = @fieldParentPtr("entry", entry);
    t.scheduled = false;
    defer py.decref(py.obj(t));
    if (t.base.cancelled) return;
    try loop_mod.runHandle(&t.base);
}

fn dropTimerNode(cb: *core.Callback) void {
    const entry: *core.TimerEntry = @fieldParentPtr("callback", cb);
    const t: *TimerHandle = @fieldParentPtr("entry", entry);
    t.scheduled = false;
    if (!t.base.running) releaseCallback(&t.base); // as dropNode
    py.decref(py.obj(t));
}

/// Calls the callback in its context. Returns the result (new reference) or
/// null with the exception set.
pub fn invoke(h: *Handle) ?*Obj {
    const cb = h.callback orelse return py.newref(py.none());
    if (c.PyContext_Enter(h.context) < 0) return null;
    const result = if (h.args_tuple) |t|
        c.PyObject_Call(cb, t, null)
    else
        c.PyObject_Vectorcall(cb, @ptrCast(&h.argv[1]), h.nargs | c.PY_VECTORCALL_ARGUMENTS_OFFSET, null);
    if (c.PyContext_Exit(h.context) < 0) {
        py.xdecref(result);
        return null;
    }
    return result;
}

/// Lets go of what the callback keeps alive (after a one-shot run or a
/// cancel), breaking reference cycles through bound methods early.
pub fn releaseCallback(h: *Handle) void {
    py.clear(&h.callback);
    var i: usize = 1;
    while (i <= inline_args) : (i += 1) py.clear(&h.argv[i]);
    py.clear(&h.args_tuple);
    h.nargs = 0;
}

/// A one-shot handle that calls `h`'s callback, with its arguments and in
/// its context, the next time the ready queue runs (queued, holding the
/// queue's reference). For an fd handle taken off its fd because its
/// owner closed it (loop.zig's `evictStale`): one last call, as if the fd
/// were ready, in which the callback finds its object closed and fails as
/// its system call would. False with the Python error set.
pub fn callOnceMore(h: *Handle, reactor: *core.Reactor) bool {
    const cb = h.callback orelse return true;
    const args: []const ?*Obj = if (h.args_tuple) |t| blk: {
        const tuple: *c.PyTupleObject = @ptrCast(@alignCast(t));
        const items: [*]?*Obj = @ptrCast(&tuple.ob_item);
        break :blk items[0..@intCast(c.PyTuple_Size(t))];
    } else h.argv[1 .. @as(usize, h.nargs) + 1];
    const once = create(&HandleType, .once, h.loop.?, cb, args, h.context) orelse return false;
    reactor.callSoon(&once.node) catch {
        py.decref(py.obj(once));
        _ = c.PyErr_NoMemory();
        return false;
    };
    return true;
}

/// The positional arguments as a new tuple (for repr and exception context).
pub fn argsTuple(h: *Handle) ?*Obj {
    if (h.args_tuple) |t| return py.newref(t);
    const t = c.PyTuple_New(h.nargs) orelse return null;
    var i: usize = 0;
    while (i < h.nargs) : (i += 1) _ = c.PyTuple_SetItem(t, @intCast(i), py.newref(h.argv[i + 1].?));
    return t;
}

// ------------------------------------------------------------ Python side

/// The Python object that owns a queued core callback.
/// Whether a queued callback is a handle's (not a transport's I/O).
pub fn isHandleNode(cb: *core.Callback) bool {
    return cb.run == runNode or cb.run == runPostedNode or cb.run == runTimerNode;
}

pub fn ownerOf(cb: *core.Callback) *Obj {
    std.debug.assert(isHandleNode(cb));
    if (cb.run != runTimerNode) return py.obj(@as(*Handle, @fieldParentPtr("node", cb)));
    const entry: *core.TimerEntry = @fieldParentPtr("callback", cb);
    return py.obj(@as(*TimerHandle, @fieldParentPtr("entry", entry)));
}

fn clearSlots(h: *Handle) void {
    releaseCallback(h);
    py.clear(&h.owner);
    py.clear(&h.context);
    py.clear(&h.loop);
    py.clear(&h.source_traceback);
    py.clear(&h.repr_cache);
}

fn dealloc(self: ?*Obj) callconv(.c) void {
    const h = py.cast(Handle, self.?);
    if (h.weakreflist != null) c.PyObject_ClearWeakRefs(self);
    clearSlots(h);
    // No thread waits at the gate any more: each held a reference to `h`.
    if (h.gate) |gate| c.PyThread_free_lock(gate);
    c.PyObject_Free(self);
}

/// As asyncio's `_ThreadSafeHandle` (whose RLock the callback holds while
/// it runs): from a thread other than the one running its callback, wait
/// until the callback is done. The GIL is released while waiting; all the
/// state checked here changes only under it.
fn waitForRunningCallback(h: *Handle) bool {
    if (!h.threadsafe or !h.running) return true;
    if (h.runner_thread == c.PyThread_get_thread_ident()) return true;
    if (h.gate == null) {
        // The gate starts closed; `openGate` opens it once the callback is done.
        const gate = c.PyThread_allocate_lock() orelse {
            _ = c.PyErr_NoMemory();
            return false;
        };
        _ = c.PyThread_acquire_lock(gate, c.WAIT_LOCK);
        h.gate = gate;
    }
    const gate = h.gate;
    const saved = c.PyEval_SaveThread();
    _ = c.PyThread_acquire_lock(gate, c.WAIT_LOCK);
    c.PyThread_release_lock(gate); // open again for the next waiter
    c.PyEval_RestoreThread(saved);
    return true;
}

/// Marks a callback as running in this thread (for `waitForRunningCallback`).
pub fn startRun(h: *Handle) void {
    h.running = true;
    if (h.threadsafe) h.runner_thread = c.PyThread_get_thread_ident();
}

/// Lets the threads waiting for a thread-safe handle's callback go on.
pub fn openGate(h: *Handle) void {
    const gate = h.gate orelse return;
    // Closed as its first waiter made it; open after an earlier run (a
    // second `_run()` by hand). Either way it is left open.
    _ = c.PyThread_acquire_lock(gate, c.NOWAIT_LOCK);
    c.PyThread_release_lock(gate);
}

fn cancel(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const h = py.cast(Handle, self.?);
    if (!waitForRunningCallback(h)) return null;
    return cancelNow(h);
}

fn cancelNow(h: *Handle) ?*Obj {
    if (!h.cancelled) {
        h.cancelled = true;
        if (h.kind == .timer) loop_mod.timerCancelled(@fieldParentPtr("base", h));
        // As asyncio: drop the callback at once so that cycles through it
        // are broken; debug mode first keeps its text for repr() and logs.
        if (loop_mod.isDebug(h.loop) and h.repr_cache == null) {
            h.repr_cache = repr(py.obj(h)) orelse return null;
        }
        if (!h.running) releaseCallback(h);
    }
    return py.newref(py.none());
}

fn cancelledM(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const h = py.cast(Handle, self.?);
    if (!waitForRunningCallback(h)) return null;
    return py.boolean(h.cancelled);
}

fn getContext(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const h = py.cast(Handle, self.?);
    return py.newref(h.context orelse py.none());
}

fn runM(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    // `Handle._run()`, used by some libraries and tests directly.
    const h = py.cast(Handle, self.?);
    loop_mod.runHandle(h) catch return null;
    return py.newref(py.none());
}

fn when(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(TimerHandle, self.?);
    return c.PyFloat_FromDouble(t.entry.timer.when_s);
}

fn getCallback(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.newref(py.cast(Handle, self.?).callback orelse py.none());
}

fn getArgs(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const h = py.cast(Handle, self.?);
    if (h.callback == null) return py.newref(py.none());
    return argsTuple(h);
}

fn getLoop(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.newref(py.cast(Handle, self.?).loop orelse py.none());
}

fn getCancelled(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.boolean(py.cast(Handle, self.?).cancelled);
}

fn getContextAttr(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return getContext(self, null);
}

fn getTb(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.newref(py.cast(Handle, self.?).source_traceback orelse py.none());
}

fn setTb(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    const h = py.cast(Handle, self.?);
    const old = h.source_traceback;
    h.source_traceback = if (value == null or value.? == py.none()) null else py.newref(value.?);
    py.xdecref(old);
    return 0;
}

fn getWhen(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return when(self, null);
}

fn getScheduled(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.boolean(py.cast(TimerHandle, self.?).scheduled);
}

fn repr(self: ?*Obj) callconv(.c) ?*Obj {
    if (py.cast(Handle, self.?).repr_cache) |cached| return py.newref(cached);
    // Formatting is a cold path: asyncio's own format helpers do it, so the
    // text matches stock asyncio's exactly.
    return c.PyObject_CallOneArg(state.get().handle_repr, self);
}

fn timerHash(self: ?*Obj) callconv(.c) c.Py_hash_t {
    const t = py.cast(TimerHandle, self.?);
    const f = c.PyFloat_FromDouble(t.entry.timer.when_s) orelse return -1;
    defer py.decref(f);
    return c.PyObject_Hash(f);
}

fn timerCompare(a: ?*Obj, b: ?*Obj, op: c_int) callconv(.c) ?*Obj {
    if (c.PyObject_TypeCheck(b, &TimerHandleType) == 0) {
        return py.newref(@ptrCast(&c._Py_NotImplementedStruct));
    }
    const x = py.cast(TimerHandle, a.?);
    const y = py.cast(TimerHandle, b.?);
    const wx = x.entry.timer.when_s;
    const wy = y.entry.timer.when_s;
    const same = x.base.callback == y.base.callback and x.base.cancelled == y.base.cancelled;
    const r = switch (op) {
        c.Py_LT => wx < wy,
        c.Py_LE => wx < wy or (wx == wy and same),
        c.Py_GT => wx > wy,
        c.Py_GE => wx > wy or (wx == wy and same),
        c.Py_EQ => wx == wy and same,
        c.Py_NE => !(wx == wy and same),
        else => false,
    };
    return py.boolean(r);
}

var handle_methods = [_]c.PyMethodDef{
    py.methodNoArgs("cancel", cancel, "cancel($self, /)\n--\n\nCancel the call; a no-op if it already ran."),
    py.methodNoArgs("cancelled", cancelledM, "cancelled($self, /)\n--\n\nTrue if cancel() was called."),
    py.methodNoArgs("get_context", getContext, "get_context($self, /)\n--\n\nThe contextvars.Context the call runs in."),
    py.methodNoArgs("_run", runM, null),
    py.sentinel_method,
};

var timer_methods = [_]c.PyMethodDef{
    py.methodNoArgs("when", when, "when($self, /)\n--\n\nThe scheduled time, on the loop's clock (float seconds)."),
    py.sentinel_method,
};

var handle_getset = [_]c.PyGetSetDef{
    py.getset("_callback", getCallback, null),
    py.getset("_args", getArgs, null),
    py.getset("_loop", getLoop, null),
    py.getset("_cancelled", getCancelled, null),
    py.getset("_context", getContextAttr, null),
    py.getset("_source_traceback", getTb, setTb),
    py.sentinel_getset,
};

var timer_getset = [_]c.PyGetSetDef{
    py.getset("_when", getWhen, null),
    py.getset("_scheduled", getScheduled, null),
    py.sentinel_getset,
};

pub fn initTypes(module: *Obj) bool {
    HandleType = std.mem.zeroes(c.PyTypeObject);
    HandleType.tp_name = "zloop.Handle";
    HandleType.tp_basicsize = @sizeOf(Handle);
    HandleType.tp_flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_BASETYPE;
    HandleType.tp_doc = "A callback scheduled on a zloop loop (asyncio.Handle's API).";
    HandleType.tp_dealloc = dealloc;
    HandleType.tp_repr = repr;
    HandleType.tp_methods = &handle_methods;
    HandleType.tp_getset = &handle_getset;
    HandleType.tp_weaklistoffset = @offsetOf(Handle, "weakreflist");
    if (c.PyType_Ready(&HandleType) < 0) return false;

    TimerHandleType = std.mem.zeroes(c.PyTypeObject);
    TimerHandleType.tp_name = "zloop.TimerHandle";
    TimerHandleType.tp_basicsize = @sizeOf(TimerHandle);
    TimerHandleType.tp_flags = c.Py_TPFLAGS_DEFAULT;
    TimerHandleType.tp_doc = "A callback scheduled for a time (asyncio.TimerHandle's API).";
    TimerHandleType.tp_base = &HandleType;
    TimerHandleType.tp_dealloc = dealloc;
    TimerHandleType.tp_repr = repr;
    TimerHandleType.tp_hash = timerHash;
    TimerHandleType.tp_richcompare = timerCompare;
    TimerHandleType.tp_methods = &timer_methods;
    TimerHandleType.tp_getset = &timer_getset;
    if (c.PyType_Ready(&TimerHandleType) < 0) return false;

    if (c.PyModule_AddObjectRef(module, "Handle", py.obj(&HandleType)) < 0) return false;
    if (c.PyModule_AddObjectRef(module, "TimerHandle", py.obj(&TimerHandleType)) < 0) return false;
    return true;
}
