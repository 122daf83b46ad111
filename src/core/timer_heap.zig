//! Intrusive binary min-heap of timers keyed on (deadline, insertion order),
//! so timers due at the same instant fire in the order they were scheduled.
//! Each timer knows its slot, so cancelling removes it in O(log n) instead of
//! leaving a tombstone behind as `asyncio`'s heapq does.
const std = @import("std");

pub const Timer = struct {
    /// Absolute deadline on the loop clock, in seconds (as `loop.time()`).
    when_s: f64 = 0,
    seq: u64 = 0,
    /// Index in the heap array, or `not_queued`.
    index: u32 = not_queued,

    pub const not_queued = std.math.maxInt(u32);

    pub fn queued(t: *const Timer) bool {
        return t.index != not_queued;
    }
};

/// Deadline order, then insertion order. A NaN deadline (`call_at(nan)`)
/// sorts before every number: it is due at once, as asyncio's pass finds
/// it (`when >= end_time` is False), and never hides below a later timer
/// where a comparison that is false both ways would leave it.
fn before(a: *const Timer, b: *const Timer) bool {
    if (a.when_s < b.when_s) return true;
    if (a.when_s > b.when_s) return false;
    const a_nan = std.math.isNan(a.when_s);
    if (a_nan != std.math.isNan(b.when_s)) return a_nan;
    return a.seq < b.seq;
}

pub const TimerHeap = struct {
    items: std.ArrayList(*Timer) = .empty,
    next_seq: u64 = 0,

    pub fn deinit(h: *TimerHeap, gpa: std.mem.Allocator) void {
        h.items.deinit(gpa);
    }

    pub fn count(h: *const TimerHeap) usize {
        return h.items.items.len;
    }

    pub fn peek(h: *const TimerHeap) ?*Timer {
        return if (h.items.items.len == 0) null else h.items.items[0];
    }

    pub fn insert(h: *TimerHeap, gpa: std.mem.Allocator, t: *Timer) error{OutOfMemory}!void {
        std.debug.assert(!t.queued());
        t.seq = h.next_seq;
        h.next_seq += 1;
        try h.items.append(gpa, t);
        t.index = @intCast(h.items.items.len - 1);
        h.siftUp(t.index);
    }

    pub fn pop(h: *TimerHeap) ?*Timer {
        const top = h.peek() orelse return null;
        h.remove(top);
        return top;
    }

    /// Removes a queued timer wherever it sits.
    pub fn remove(h: *TimerHeap, t: *Timer) void {
        std.debug.assert(t.queued());
        const i = t.index;
        const last = h.items.pop().?;
        t.index = Timer.not_queued;
        if (last == t) return;
        h.items.items[i] = last;
        last.index = i;
        h.siftUp(i);
        h.siftDown(last.index);
    }

    fn swap(h: *TimerHeap, i: u32, j: u32) void {
        const a = h.items.items[i];
        const b = h.items.items[j];
        h.items.items[i] = b;
        h.items.items[j] = a;
        b.index = i;
        a.index = j;
    }

    fn siftUp(h: *TimerHeap, start: u32) void {
        var i = start;
        while (i > 0) {
            const parent = (i - 1) / 2;
            if (!before(h.items.items[i], h.items.items[parent])) break;
            h.swap(i, parent);
            i = parent;
        }
    }

    fn siftDown(h: *TimerHeap, start: u32) void {
        var i = start;
        const n: u32 = @intCast(h.items.items.len);
        while (true) {
            const l = 2 * i + 1;
            if (l >= n) break;
            var m = l;
            const r = l + 1;
            if (r < n and before(h.items.items[r], h.items.items[l])) m = r;
            if (!before(h.items.items[m], h.items.items[i])) break;
            h.swap(i, m);
            i = m;
        }
    }
};

test "timers pop in deadline order, ties in insertion order" {
    const gpa = std.testing.allocator;
    var h: TimerHeap = .{};
    defer h.deinit(gpa);
    var ts: [64]Timer = undefined;
    var prng = std.Random.DefaultPrng.init(42);
    for (&ts) |*t| {
        t.* = .{ .when_s = @floatFromInt(prng.random().uintLessThan(u32, 16)) };
        try h.insert(gpa, t);
    }
    // Remove a few from the middle, as cancel() does.
    h.remove(&ts[3]);
    h.remove(&ts[40]);
    h.remove(&ts[63]);
    var prev: ?*Timer = null;
    var n: usize = 0;
    while (h.pop()) |t| : (n += 1) {
        if (prev) |p| try std.testing.expect(before(p, t));
        try std.testing.expect(!t.queued());
        prev = t;
    }
    try std.testing.expectEqual(@as(usize, 61), n);
}

test "NaN deadlines pop first, in insertion order; infinities keep their place" {
    const gpa = std.testing.allocator;
    var h: TimerHeap = .{};
    defer h.deinit(gpa);
    const nan = std.math.nan(f64);
    const inf = std.math.inf(f64);
    const deadlines = [_]f64{ inf, 3, nan, -inf, 1, nan, 2 };
    var ts: [deadlines.len]Timer = undefined;
    for (&ts, deadlines) |*t, d| {
        t.* = .{ .when_s = d };
        try h.insert(gpa, t);
    }
    const want = [_]usize{ 2, 5, 3, 4, 6, 1, 0 };
    for (want) |i| try std.testing.expectEqual(&ts[i], h.pop().?);
    try std.testing.expect(h.pop() == null);
}
