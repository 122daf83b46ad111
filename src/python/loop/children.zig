//! `LoopCore._watch_child(pid, callback, *args)` and `_unwatch_child`: the
//! loop hears a child process's exit natively, through the core's
//! `Reactor.watchChild` (a pidfd watched as any fd on Linux, kqueue's
//! EVFILT_PROC with NOTE_EXIT on macOS and the BSDs), with no thread and no
//! SIGCHLD handler. The child is not reaped here: when it has exited, the
//! handle `_watch_child` returned joins the ready callbacks, once, and its
//! callback (`zloop._unix._SubprocessTransport._reap`) reaps it with
//! `os.waitpid`, as asyncio's child watchers do; what it raises goes to the
//! exception handler like any callback's.
//!
//! Each watch is a `ChildWatch` in native memory, found through the
//! reactor's list of active child watches: it holds the handle (a strong
//! reference, reported to the collector by the loop's traverse) until the
//! exit queues it or `_unwatch_child` (or the loop's close) drops it.
const std = @import("std");
const core = @import("core");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const handle = @import("handle.zig");
const Handle = handle.Handle;

const gpa = std.heap.c_allocator;

const ChildWatch = struct {
    w: core.reactor.ChildWatcher = .{ .on_exit = onExit },
    /// Queued when the child has exited; owned until then.
    handle: *Handle,
};

/// The reactor's watch is over (it dropped it from its list): the handle
/// joins the ready callbacks, taking the watch's reference, unless it was
/// cancelled meanwhile.
fn onExit(w: *core.reactor.ChildWatcher, _: ?u32) core.RunError!void {
    const cw: *ChildWatch = @fieldParentPtr("w", w);
    const h = cw.handle;
    const reactor = w.reactor.?;
    gpa.destroy(cw);
    if (h.cancelled) {
        py.decref(py.obj(h));
        return;
    }
    reactor.callSoon(&h.node) catch {
        py.decref(py.obj(h));
        return error.Aborted;
    };
}

fn watchOf(w: *core.reactor.ChildWatcher) *ChildWatch {
    return @fieldParentPtr("w", w);
}

/// `_watch_child(pid, callback, *args)`: watches child `pid` until it
/// exits, then schedules `callback(*args)` once, in the current context;
/// returns that `Handle`. OSError when the process cannot be watched: no
/// such process (ESRCH: reaped already; on macOS also one that has exited
/// or is exiting), or no way to watch it (a Linux kernel without pidfds,
/// ENOSYS): the caller then reaps or waits another way. On kqueue the
/// callback (or an ESRCH) may come before waitpid can collect the status
/// (XNU posts NOTE_EXIT before the zombie): `_reap` then asks again on a
/// timer that backs off.
pub fn watchChild(
    reactor: *core.Reactor,
    loop: *Obj,
    args: [*c]const ?*Obj,
    nargs: py.Ssize,
) ?*Obj {
    if (nargs < 2) return py.raise(c.PyExc_TypeError, "_watch_child(pid, callback, *args)");
    const pid_long = c.PyLong_AsLong(args[0]);
    if (pid_long == -1 and c.PyErr_Occurred() != null) return null;
    if (pid_long <= 0 or pid_long > std.math.maxInt(i32)) return py.raise(c.PyExc_ValueError, "invalid pid");
    if (c.PyCallable_Check(args[1]) == 0) return py.raise(c.PyExc_TypeError, "callback must be callable");
    const extra = args[2..@intCast(nargs)];
    const h = handle.create(&handle.HandleType, .once, loop, args[1].?, extra, null) orelse return null;
    const cw = gpa.create(ChildWatch) catch {
        py.decref(py.obj(h));
        return c.PyErr_NoMemory();
    };
    cw.* = .{ .handle = h };
    reactor.watchChild(&cw.w, @intCast(pid_long)) catch |err| {
        gpa.destroy(cw);
        py.decref(py.obj(h));
        return switch (err) {
            error.OutOfMemory => c.PyErr_NoMemory(),
            else => py.raiseErrno(core.sys.last_errno),
        };
    };
    return py.newref(py.obj(h)); // the watch keeps its own reference
}

/// `_unwatch_child(handle)`: stops the watch that would queue `handle`
/// (nothing if it is over: the exit was heard, or it was never a watch's).
pub fn unwatchChild(reactor: *core.Reactor, h: *Obj) void {
    for (reactor.children.items) |w| {
        const cw = watchOf(w);
        if (py.obj(cw.handle) != h) continue;
        drop(reactor, cw);
        return;
    }
}

fn drop(reactor: *core.Reactor, cw: *ChildWatch) void {
    reactor.unwatchChild(&cw.w);
    const h = cw.handle;
    gpa.destroy(cw);
    py.decref(py.obj(h));
}

/// The handle of the watch whose pidfd watcher is `w` (watchers.zig).
pub fn ownerOfWatcher(w: *core.IoWatcher) *Obj {
    return py.obj(watchOf(core.reactor.childWatcherOf(w)).handle);
}

/// The loop is closing: the watch whose pidfd watcher is `w` stops.
pub fn loopClosing(w: *core.IoWatcher) void {
    const cw = watchOf(core.reactor.childWatcherOf(w));
    drop(cw.w.reactor.?, cw);
}

/// Stops every watch (the loop closes, or the collector clears it).
pub fn dropAll(reactor: *core.Reactor) void {
    while (reactor.children.items.len > 0) {
        drop(reactor, watchOf(reactor.children.items[reactor.children.items.len - 1]));
    }
}

/// Visits the handles the watches hold (the loop's tp_traverse).
pub fn traverse(reactor: *const core.Reactor, visit: c.visitproc, arg: ?*anyopaque) c_int {
    for (reactor.children.items) |w| {
        const rc = visit.?(py.obj(watchOf(w).handle), arg);
        if (rc != 0) return rc;
    }
    return 0;
}
