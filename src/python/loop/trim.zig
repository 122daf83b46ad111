//! Memory given back to the system after a burst. A server whose clients
//! stop reading buffers what it writes to them (10,000 such connections,
//! 256 KiB each: 2.5 GiB); once they close, the buffers are freed, but
//! glibc's malloc keeps the freed heap (a buffer under its mmap threshold
//! lives in the heap, and the heap only shrinks from its top), so the
//! process stays 1-3 GiB larger for good, on stock asyncio as on zloop.
//! `malloc_trim(0)` hands the free pages back (`madvise`).
//!
//! A trim is not free: it walks every free chunk of every arena under the
//! arena's lock, with an madvise per chunk, so a heap holed by a burst of
//! small writes between live objects takes tens of ms (256 MiB freed in
//! 16 KiB writes: 16-40 ms, measured), and the loop thread does nothing
//! else meanwhile (nor could another thread: every malloc of the main
//! arena waits on that lock). So a trim runs only once the loop is quiet:
//! once the write buffers have freed `owed_bytes` since the last trim
//! (`released`), a loop about to block waits at most `quiet_ms` first, and
//! a wait that long that brought no event at all (no I/O, no timer due, no
//! callback posted from another thread) is followed by the trim, the GIL
//! still released. A loop that is never quiet that long never trims: the
//! memory then serves its next burst, as on stock asyncio, rather than
//! stalling the traffic it serves. glibc only; elsewhere nothing (macOS's
//! allocator gives large frees back by itself).
const std = @import("std");
const builtin = @import("builtin");
const core = @import("core");

/// Bytes freed from write buffers since the last trim (approximate: a
/// buffered `bytes` may live on elsewhere).
var released_bytes = std.atomic.Value(usize).init(0);

/// Freed since the last trim before a quiet loop trims.
pub const owed_bytes: usize = 8 * 1024 * 1024;

/// How long a loop must have waited with nothing to do before it trims.
pub const quiet_ms: i32 = 100;

const has_trim = builtin.os.tag == .linux and builtin.abi.isGnu();
const malloc_trim = if (has_trim)
    @extern(?*const fn (usize) callconv(.c) c_int, .{ .name = "malloc_trim", .linkage = .weak })
else
    null;

/// A write buffer let go of `n` bytes.
pub inline fn released(n: usize) void {
    if (comptime !has_trim) return;
    _ = released_bytes.fetchAdd(n, .monotonic);
}

/// A loop's watch for a quiet moment to trim in (one per loop).
pub const Probe = struct {
    /// When the shortened wait began (`monotonic_s`); null: no probe.
    since_s: ?f64 = null,

    /// Before a wait that may block `timeout_ms` (-1: until an event),
    /// GIL released: the timeout the wait takes. With a trim owed and no
    /// timer due within `quiet_ms`, the wait lasts at most that long, so
    /// that its end tells whether the loop was quiet all along. Only an
    /// atomic load when nothing is owed.
    pub fn beforeWait(p: *Probe, timeout_ms: i32) i32 {
        p.since_s = null;
        if (comptime !has_trim) return timeout_ms;
        if (released_bytes.load(.monotonic) < owed_bytes) return timeout_ms;
        // A timer is due soon: the loop is busy, not quiet.
        if (timeout_ms >= 0 and timeout_ms < quiet_ms) return timeout_ms;
        p.since_s = core.sys.monotonic_s();
        return quiet_ms;
    }

    /// After that wait, GIL still released: `events` it brought. A probe
    /// that waited its whole `quiet_ms` and brought nothing (not cut short
    /// by a signal either) trims. True if it trimmed.
    pub fn afterWait(p: *Probe, events: usize) bool {
        const since = p.since_s orelse return false;
        p.since_s = null;
        if (events != 0) return false;
        const waited_s = core.sys.monotonic_s() - since;
        if (waited_s < @as(f64, @floatFromInt(quiet_ms)) * 0.9e-3) return false;
        return trimOwed();
    }
};

/// Trims if `owed_bytes` were freed since the last trim. One loop trims;
/// another that got here at the same time goes on.
fn trimOwed() bool {
    const trim = malloc_trim orelse return false;
    const seen = released_bytes.swap(0, .monotonic);
    if (seen < owed_bytes) {
        _ = released_bytes.fetchAdd(seen, .monotonic);
        return false;
    }
    _ = trim(0);
    _ = trims.fetchAdd(1, .monotonic);
    return true;
}

/// Trims done in this process (`_zloop._trims()`, for tests).
pub var trims = std.atomic.Value(u32).init(0);
