//! Transport methods that the stream transport (transport.zig) and the
//! datagram transport (datagram.zig) share word for word: the write-buffer
//! limits and pausing/resuming reading. Each file instantiates
//! `Methods(@This())`; the file provides `Transport` (a Python object whose
//! `inner: ?*Inner` is null once the transport is gone), and `innerOrRaise`,
//! `updateInterest`, `captureContext` and `maybePause`, and `Inner` has
//! `closing`, `paused`, `low` and `high`.
const std = @import("std");
const py = @import("py.zig");
const c = py.c;
const Obj = py.Obj;

pub fn Methods(comptime M: type) type {
    return struct {
        pub fn getWriteBufferLimits(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
            const in = M.innerOrRaise(self) orelse return null;
            const low: py.Ssize = @intCast(in.low);
            const high: py.Ssize = @intCast(in.high);
            return c.Py_BuildValue("(nn)", low, high);
        }

        /// `_set_limits(high, low)`: already validated by the Python side.
        pub fn setLimits(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
            const in = M.innerOrRaise(self) orelse return null;
            if (nargs != 2) return py.raise(c.PyExc_TypeError, "_set_limits(high, low)");
            const high = c.PyLong_AsSize_t(args[0]);
            if (high == std.math.maxInt(usize) and c.PyErr_Occurred() != null) return null;
            const low = c.PyLong_AsSize_t(args[1]);
            if (low == std.math.maxInt(usize) and c.PyErr_Occurred() != null) return null;
            in.high = high;
            in.low = low;
            if (!M.maybePause(py.cast(M.Transport, self.?))) return null;
            return py.newref(py.none());
        }

        pub fn pauseReading(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
            const in = M.innerOrRaise(self) orelse return null;
            if (in.closing or in.paused) return py.newref(py.none());
            in.paused = true;
            M.updateInterest(py.cast(M.Transport, self.?));
            return py.newref(py.none());
        }

        pub fn resumeReading(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
            const in = M.innerOrRaise(self) orelse return null;
            if (in.closing or !in.paused) return py.newref(py.none());
            if (!M.captureContext(in)) return null;
            in.paused = false;
            M.updateInterest(py.cast(M.Transport, self.?));
            return py.newref(py.none());
        }

        pub fn isReading(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
            const t = py.cast(M.Transport, self.?);
            const in = t.inner orelse return py.boolean(false);
            return py.boolean(!in.closing and !in.paused);
        }

        pub fn isClosing(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
            const t = py.cast(M.Transport, self.?);
            const in = t.inner orelse return py.boolean(true);
            return py.boolean(in.closing);
        }
    };
}
