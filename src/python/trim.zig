//! Memory given back to the system after a burst. A server whose clients
//! stop reading buffers what it writes to them (10,000 such connections,
//! 256 KiB each: 2.5 GiB); once they close, the buffers are freed, but
//! glibc's malloc keeps the freed heap (a buffer under its mmap threshold
//! lives in the heap, and the heap only shrinks from its top), so the
//! process stays 1-3 GiB larger for good, on stock asyncio as on zloop.
//! `malloc_trim(0)` hands the free pages back (`madvise`), in a few
//! milliseconds for a heap of gigabytes.
//!
//! So the write buffers count what they release (`released`), and a loop
//! about to block in its wait, with the GIL released, trims once that
//! reaches `threshold_bytes`: only after a burst of that size, and never on
//! the way of a callback (the loop has nothing to run). A server streaming
//! to slow readers pays one trim per `threshold_bytes` it frees. A loop
//! about to wait idle (`idle_wait_ms` or more) also trims the tail of a
//! burst, once `tail_bytes` were freed since the last trim. glibc
//! only; elsewhere nothing (macOS's allocator gives large frees back by
//! itself).
const std = @import("std");
const builtin = @import("builtin");

/// Bytes freed from write buffers since the last trim (approximate: a
/// buffered `bytes` may live on elsewhere).
var released_bytes = std.atomic.Value(usize).init(0);

pub const threshold_bytes: usize = 64 * 1024 * 1024;
pub const tail_bytes: usize = threshold_bytes / 8;

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

/// A wait at least this long (or with no timeout) is an idle loop's.
pub const idle_wait_ms = 100;

/// Before a wait that may block (GIL released): trims if a burst freed
/// `threshold_bytes` since the last trim, or, before an idle loop's wait
/// (`idle`), `tail_bytes`. The second is a burst's tail: the frees of a
/// burst may come over several passes (completions reaped in batches), and
/// what came after the trim the first part paid for would otherwise stay
/// in the heap until the next burst. True if it trimmed.
pub fn maybeTrim(idle: bool) bool {
    if (comptime !has_trim) return false;
    const needed = if (idle) tail_bytes else threshold_bytes;
    if (released_bytes.load(.monotonic) < needed) return false;
    const trim = malloc_trim orelse return false;
    // One loop trims; another that got here at the same time goes on.
    const seen = released_bytes.swap(0, .monotonic);
    if (seen < needed) {
        _ = released_bytes.fetchAdd(seen, .monotonic);
        return false;
    }
    _ = trim(0);
    _ = trims.fetchAdd(1, .monotonic);
    return true;
}

/// Trims done in this process (`_zloop._trims()`, for tests).
pub var trims = std.atomic.Value(u32).init(0);
