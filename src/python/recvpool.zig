//! The loop's buffers for native receives (io_uring, see the backend's
//! `provideRecvBuffer`): each is a `bytes` object whose payload the kernel
//! receives into, so what arrived reaches `data_received` with no copy and
//! no allocation, as the lent buffer does on a readiness backend
//! (transport.zig's `readLent`). A buffer id is either in the kernel's ring
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
const std = @import("std");
const core = @import("core");
const py = @import("py.zig");
const c = py.c;
const Obj = py.Obj;

const gpa = std.heap.c_allocator;

/// One buffer's payload: the lent buffer's size, so a connection's small
/// reads take the same path on either backend.
pub const buffer_bytes = 16 * 1024;
const first_count = 64;

pub const Pool = struct {
    /// By buffer id: the object in the ring, or null while handed out (or
    /// never made). Allocated with the first buffers.
    objs: []?*Obj = &.{},
    /// By buffer id: an allocation failed and the id is out of the ring
    /// (not handed out): `grow` makes it again.
    lost: []bool = &.{},
    /// Ids made so far: 0..count.
    count: u16 = 0,

    /// Whether native receives can be used: the reactor has them and the
    /// first buffers exist (made here on first use). False without a
    /// Python error: the transport then reads the usual way.
    pub fn ready(p: *Pool, r: *core.Reactor) bool {
        if (p.count > 0) return true;
        if (!r.nativeRecv()) return false;
        const objs = gpa.alloc(?*Obj, core.recv_buffers_max) catch return false;
        const lost = gpa.alloc(bool, core.recv_buffers_max) catch {
            gpa.free(objs);
            return false;
        };
        @memset(objs, null);
        @memset(lost, false);
        p.objs = objs;
        p.lost = lost;
        p.grow(r);
        return p.count > 0;
    }

    /// A receive found no buffer free: doubles the pool (up to the ring's
    /// size), and makes again any id a failed allocation left empty.
    pub fn grow(p: *Pool, r: *core.Reactor) void {
        if (p.objs.len == 0) return;
        for (0..p.count) |i| {
            if (p.lost[i]) p.refill(r, @intCast(i));
        }
        const target: u16 = @intCast(@min(@max(first_count, @as(usize, p.count) * 2), core.recv_buffers_max));
        while (p.count < target) {
            p.count += 1;
            p.refill(r, p.count - 1);
        }
    }

    /// The object of buffer `id`, just handed out by a `recv` event: the
    /// caller's reference, its size still the full buffer.
    pub fn take(p: *Pool, id: u16) *Obj {
        const o = p.objs[id].?;
        p.objs[id] = null;
        return o;
    }

    /// Puts buffer `id` back in the ring with `o` (consumed), the object
    /// `take` gave: itself if nobody else holds it, else a new one.
    pub fn give(p: *Pool, r: *core.Reactor, id: u16, o: *Obj) void {
        if (c.Py_REFCNT(o) == 1) {
            py.setBytesSize(o, buffer_bytes);
            p.provide(r, id, o);
            return;
        }
        py.decref(o);
        p.refill(r, id);
    }

    /// Puts buffer `id` back in the ring with a new object: the one `take`
    /// gave stays with its holder. An allocation that fails leaves the id
    /// out of the ring until the next `grow`.
    pub fn refill(p: *Pool, r: *core.Reactor, id: u16) void {
        const o = c.PyBytes_FromStringAndSize(null, buffer_bytes) orelse {
            c.PyErr_Clear();
            p.lost[id] = true;
            return;
        };
        p.lost[id] = false;
        p.provide(r, id, o);
    }

    fn provide(p: *Pool, r: *core.Reactor, id: u16, o: *Obj) void {
        std.debug.assert(p.objs[id] == null);
        p.objs[id] = o;
        const payload: [*]u8 = @ptrCast(c.PyBytes_AsString(o));
        r.provideRecvBuffer(id, payload[0..buffer_bytes]);
    }

    /// Frees the objects still in the ring; only once the reactor is gone
    /// (its `deinit` unregisters the ring, so the kernel no longer writes).
    pub fn deinit(p: *Pool) void {
        for (p.objs) |*slot| py.clear(slot);
        if (p.objs.len > 0) {
            gpa.free(p.objs);
            gpa.free(p.lost);
        }
        p.* = .{};
    }
};
