//! The loop's buffers for native receives (io_uring, see the backend's
//! `provideRecvBuffer`): each is a `bytes` object whose payload the kernel
//! receives into, so what arrived reaches `data_received` with no copy and
//! no allocation, as the lent buffer does on a readiness backend
//! (transport/stream/read.zig's `readLent`). A buffer id is either in the kernel's ring
//! (its object held here) or handed out with a `recv` event (taken: its
//! slot here is empty until `give` or `refill`).
//!
//! The pool starts with `first_count` buffers and doubles, up to the ring's
//! `core.recv_buffers_max`, whenever a receive found none free (ENOBUFS,
//! `grow`): more connections with data arriving in one wait than there are
//! buffers. Every buffer is back in the ring by the end of the pass that
//! handed it out (a reader that pauses with data not yet delivered keeps
//! its objects and the ids get new ones, `refill`), so a full pool only
//! delays receives by a pass, never stalls them.
//!
//! It shrinks again once a burst is over: over each window of
//! `window_per_buffer` handed-out buffers per buffer in the pool, it keeps
//! the most that were out at once; a window whose peak used a quarter of
//! the pool or less halves it (not below `first_count`). The ids above
//! the new size leave as they come back (the kernel hands buffers out in
//! the order they went in, so each comes back within one turn of the
//! ring), their objects freed. A loop that receives nothing keeps what it
//! has: 16 MiB at most.
const std = @import("std");
const core = @import("core");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;

const gpa = std.heap.c_allocator;

/// One buffer's payload: the lent buffer's size, so a connection's small
/// reads take the same path on either backend.
pub const buffer_bytes = 16 * 1024;
const first_count = 64;

/// Where a buffer id is.
const State = enum(u8) {
    /// Out of the ring, not handed out: never made, retired by a shrink,
    /// or its allocation failed. `grow` makes it again.
    out,
    /// In the kernel's ring, its object in `objs`.
    ring,
    /// Handed out with a `recv` event, until `give` or `refill`.
    taken,
};

/// A shrink window lasts this many handed-out buffers per pool buffer.
const window_per_buffer = 16;

pub const Pool = struct {
    /// By buffer id: the object in the ring, or null. Allocated with the
    /// first buffers.
    objs: []?*Obj = &.{},
    /// By buffer id: where it is.
    state: []State = &.{},
    /// The pool's size: ids 0..count go back in the ring; those above it
    /// (left by a shrink) are retired as they come back.
    count: u16 = 0,
    /// Ids handed out now, the most of them at once in this window, and
    /// the buffers handed out in this window.
    out_now: u16 = 0,
    out_peak: u16 = 0,
    window_takes: u32 = 0,

    /// Whether native receives can be used: the reactor has them and the
    /// first buffers exist (made here on first use). False without a
    /// Python error: the transport then reads the usual way.
    pub fn ready(p: *Pool, r: *core.Reactor) bool {
        if (p.count > 0) return true;
        if (!r.nativeRecv()) return false;
        const objs = gpa.alloc(?*Obj, core.recv_buffers_max) catch return false;
        const state = gpa.alloc(State, core.recv_buffers_max) catch {
            gpa.free(objs);
            return false;
        };
        @memset(objs, null);
        @memset(state, .out);
        p.objs = objs;
        p.state = state;
        p.grow(r);
        return p.count > 0;
    }

    /// A receive found no buffer free: doubles the pool (up to the ring's
    /// size), making every id below the new size that is out of the ring.
    pub fn grow(p: *Pool, r: *core.Reactor) void {
        if (p.objs.len == 0) return;
        p.count = @intCast(@min(@max(first_count, @as(usize, p.count) * 2), core.recv_buffers_max));
        for (0..p.count) |i| {
            if (p.state[i] == .out) p.refill(r, @intCast(i));
        }
        p.startWindow();
    }

    /// The object of buffer `id`, just handed out by a `recv` event: the
    /// caller's reference, its size still the full buffer.
    pub fn take(p: *Pool, id: u16) *Obj {
        const o = p.objs[id].?;
        p.objs[id] = null;
        p.state[id] = .taken;
        p.out_now += 1;
        p.out_peak = @max(p.out_peak, p.out_now);
        p.window_takes += 1;
        if (p.window_takes >= @as(u32, p.count) * window_per_buffer) p.endWindow();
        return o;
    }

    /// A window is over: halves the pool if its busiest moment used a
    /// quarter of it or less.
    fn endWindow(p: *Pool) void {
        if (@as(u32, p.out_peak) * 4 <= p.count and p.count > first_count) {
            p.count = @max(first_count, p.count / 2);
        }
        p.startWindow();
    }

    /// A new shrink window, from what is out now.
    fn startWindow(p: *Pool) void {
        p.window_takes = 0;
        p.out_peak = p.out_now;
    }

    /// Puts buffer `id` back in the ring with `o` (consumed), the object
    /// `take` gave: itself if nobody else holds it, else a new one.
    pub fn give(p: *Pool, r: *core.Reactor, id: u16, o: *Obj) void {
        if (c.Py_REFCNT(o) == 1 and id < p.count) {
            p.returned(id);
            py.setBytesSize(o, buffer_bytes);
            p.provide(r, id, o);
            return;
        }
        py.decref(o);
        p.refill(r, id);
    }

    /// Puts buffer `id` back in the ring with a new object: the one `take`
    /// gave stays with its holder. An id above the pool's size (a shrink)
    /// stays out instead, as does one whose allocation fails, until a
    /// `grow`.
    pub fn refill(p: *Pool, r: *core.Reactor, id: u16) void {
        p.returned(id);
        if (id >= p.count) return;
        const o = c.PyBytes_FromStringAndSize(null, buffer_bytes) orelse {
            c.PyErr_Clear();
            return;
        };
        p.provide(r, id, o);
    }

    /// Buffer `id` is no longer handed out (or was never): out of the
    /// ring until `provide`.
    fn returned(p: *Pool, id: u16) void {
        if (p.state[id] == .taken) p.out_now -= 1;
        p.state[id] = .out;
    }

    fn provide(p: *Pool, r: *core.Reactor, id: u16, o: *Obj) void {
        std.debug.assert(p.objs[id] == null and p.state[id] == .out);
        p.objs[id] = o;
        p.state[id] = .ring;
        r.provideRecvBuffer(id, c.PyBytes_AS_STRING(o)[0..buffer_bytes]);
    }

    /// Buffers made and not freed: in the ring or handed out (for tests:
    /// the pool's memory).
    pub fn held(p: *const Pool) usize {
        var n: usize = 0;
        for (p.state) |s| n += @intFromBool(s != .out);
        return n;
    }

    /// Frees the objects still in the ring; only once the reactor is gone
    /// (its `deinit` unregisters the ring, so the kernel no longer writes).
    pub fn deinit(p: *Pool) void {
        for (p.objs) |*slot| py.clear(slot);
        if (p.objs.len > 0) {
            gpa.free(p.objs);
            gpa.free(p.state);
        }
        p.* = .{};
    }
};
