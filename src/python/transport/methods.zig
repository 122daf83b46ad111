//! What the stream transport (stream.zig) and the datagram transport
//! (datagram.zig) share word for word: how readiness reaches them (queued
//! behind the ready callbacks, `onReady`), the write-buffer limits and
//! pausing/resuming reading. `transport_object.Object(M)` instantiates
//! `Methods(M)` for each file (`object.methods`); the file provides
//! `Transport` (a Python object with `loop` and an `inner: ?*Inner` that is
//! null once the transport is gone), `Inner` (with `owner`, `w`,
//! `io: IoQueued`, `closing`, `paused`, `started`, `low`, `high`, `limits`
//! and `sysFd()`), `updateInterest`, `captureContext`, `maybePause` and
//! `failGone(t)`; `transport_object.Object(M)` the rest.
const std = @import("std");
const core = @import("core");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const loop_mod = @import("../loop/loop.zig");
const transport_object = @import("object.zig");

/// A transport's place in the loop's ready queue, with the readiness seen
/// since it was queued.
pub const IoQueued = struct {
    node: core.Callback,
    queued: bool = false,
    readable: bool = false,
    writable: bool = false,
};

pub fn Methods(comptime M: type) type {
    const object = transport_object.Object(M);
    return struct {
        /// The reactor's readiness callback. It records what is ready and
        /// queues the transport behind the callbacks already in the ready
        /// queue, to be dispatched in this same pass: asyncio queues its
        /// reader and writer handles the same way, so a callback scheduled
        /// before the poll (a future a coroutine is about to wait on, say)
        /// runs before data_received, as on asyncio and uvloop.
        pub fn onReady(w: *core.IoWatcher, ev: core.reactor.Event) core.RunError!void {
            const in: *M.Inner = @fieldParentPtr("w", w);
            if (@hasDecl(M, "onRecv")) {
                if (ev.recv) |rv| return M.onRecv(in, rv);
            }
            in.io.readable = in.io.readable or ev.readable;
            in.io.writable = in.io.writable or ev.writable;
            queueIo(in) catch return error.Aborted;
        }

        /// Queues the transport's dispatch behind the ready callbacks,
        /// unless it is queued already.
        pub fn queueIo(in: *M.Inner) error{OutOfMemory}!void {
            if (in.io.queued) return;
            const l = py.cast(loop_mod.Loop, in.owner.loop.?);
            try l.reactor.callSoon(&in.io.node);
            in.io.queued = true;
            py.incref(py.obj(in.owner)); // the queue's reference
        }

        /// A fresh `Inner.io`.
        pub fn ioQueued() IoQueued {
            return .{ .node = .{ .run = runQueued, .drop = dropQueued } };
        }

        fn runQueued(cb: *core.Callback) core.RunError!void {
            const io: *IoQueued = @fieldParentPtr("node", cb);
            const in: *M.Inner = @fieldParentPtr("io", io);
            const owner = in.owner;
            defer py.decref(py.obj(owner));
            const ev: core.reactor.Event = .{ .fd = in.w.fd, .readable = io.readable, .writable = io.writable };
            io.queued = false;
            io.readable = false;
            io.writable = false;
            return object.dispatchReady(&in.w, ev);
        }

        fn dropQueued(cb: *core.Callback) void {
            const io: *IoQueued = @fieldParentPtr("node", cb);
            const in: *M.Inner = @fieldParentPtr("io", io);
            io.queued = false;
            py.decref(py.obj(in.owner));
        }

        /// loop/loop.zig's `evictStale`: another watcher wants the fd, and the
        /// user's socket this transport works on no longer stands for it
        /// (`Inner.sysFd`). The transport leaves the reactor now and fails
        /// as its next system call would (`M.failGone`). False with the
        /// Python error set when that failure must abort the caller.
        pub fn evictIfStale(w: *core.IoWatcher) bool {
            const in: *M.Inner = @fieldParentPtr("w", w);
            if (in.sysFd() >= 0) return true;
            const t = in.owner;
            py.incref(py.obj(t)); // leaving drops the reactor's reference
            defer py.decref(py.obj(t));
            object.loopClosing(w);
            return M.failGone(t);
        }

        /// `(low, high)` as `set_write_buffer_limits` was given them, as
        /// asyncio's `_FlowControlMixin` returns them (an int too big for a
        /// size, a float, a bool: the caller's own object); the defaults
        /// before any call.
        pub fn getWriteBufferLimits(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
            const in = object.innerOrRaise(self) orelse return null;
            if (in.limits) |given| return py.newref(given);
            const low = c.PyLong_FromSize_t(in.low);
            const high = c.PyLong_FromSize_t(in.high);
            return c.Py_BuildValue("(NN)", low, high);
        }

        /// `_set_limits(high, low, given)`: the marks as sizes (validated,
        /// floored and clamped to SIZE_MAX by `_flow.write_limits`, so the
        /// comparisons with the buffer's size are asyncio's), and the
        /// `(low, high)` pair the getter returns.
        pub fn setLimits(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
            const in = object.innerOrRaise(self) orelse return null;
            if (nargs != 3) return py.raise(c.PyExc_TypeError, "_set_limits(high, low, given)");
            const high = c.PyLong_AsSize_t(args[0]);
            if (high == std.math.maxInt(usize) and c.PyErr_Occurred() != null) return null;
            const low = c.PyLong_AsSize_t(args[1]);
            if (low == std.math.maxInt(usize) and c.PyErr_Occurred() != null) return null;
            in.high = high;
            in.low = low;
            py.clear(&in.limits);
            in.limits = py.newref(args[2].?);
            if (!M.maybePause(py.cast(M.Transport, self.?))) return null;
            return py.newref(py.none());
        }

        pub fn pauseReading(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
            const in = object.innerOrRaise(self) orelse return null;
            if (in.closing or in.paused) return py.newref(py.none());
            in.paused = true;
            M.updateInterest(py.cast(M.Transport, self.?));
            object.debugLog(py.cast(M.Transport, self.?), transport_object.names.pauses_reading);
            return py.newref(py.none());
        }

        pub fn resumeReading(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
            const in = object.innerOrRaise(self) orelse return null;
            if (in.closing or !in.paused) return py.newref(py.none());
            if (!M.captureContext(in)) return null;
            in.paused = false;
            M.updateInterest(py.cast(M.Transport, self.?));
            object.debugLog(py.cast(M.Transport, self.?), transport_object.names.resumes_reading);
            return py.newref(py.none());
        }

        pub fn isReading(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
            const t = py.cast(M.Transport, self.?);
            const in = t.inner orelse return py.boolean(false);
            return py.boolean(!in.closing and !in.paused);
        }

        /// `_start_reading()`: connection_made ran; reading starts, in a
        /// copy of the current context.
        pub fn startReading(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
            const in = object.innerOrRaise(self) orelse return null;
            if (!M.captureContext(in)) return null;
            in.started = true;
            M.updateInterest(py.cast(M.Transport, self.?));
            return py.newref(py.none());
        }

        pub fn isClosing(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
            const t = py.cast(M.Transport, self.?);
            const in = t.inner orelse return py.boolean(true);
            return py.boolean(in.closing);
        }
    };
}
