//! A growable FIFO ring of pointers: the ready queue. Growth is the only
//! allocation; a steady-state loop pushes and pops without allocating.
const std = @import("std");

pub fn RingQueue(comptime T: type) type {
    return struct {
        const Queue = @This();

        items: []T = &.{},
        head: usize = 0,
        len: usize = 0,

        pub fn deinit(q: *Queue, gpa: std.mem.Allocator) void {
            gpa.free(q.items);
            q.* = .{};
        }

        /// Appends at the tail; allocates only when full (capacity doubles).
        pub fn push(q: *Queue, gpa: std.mem.Allocator, item: T) error{OutOfMemory}!void {
            if (q.len == q.items.len) try q.grow(gpa);
            const mask = q.items.len - 1;
            q.items[(q.head + q.len) & mask] = item;
            q.len += 1;
        }

        pub fn pop(q: *Queue) ?T {
            if (q.len == 0) return null;
            const item = q.items[q.head];
            q.head = (q.head + 1) & (q.items.len - 1);
            q.len -= 1;
            return item;
        }

        fn grow(q: *Queue, gpa: std.mem.Allocator) error{OutOfMemory}!void {
            const new_cap = if (q.items.len == 0) 64 else q.items.len * 2;
            const fresh = try gpa.alloc(T, new_cap);
            // Unroll the ring so that head is at 0 again.
            var i: usize = 0;
            while (i < q.len) : (i += 1) {
                fresh[i] = q.items[(q.head + i) & (q.items.len -% 1)];
            }
            gpa.free(q.items);
            q.items = fresh;
            q.head = 0;
            std.debug.assert(std.math.isPowerOfTwo(new_cap));
        }
    };
}

test "fifo order survives wrap-around and growth" {
    const gpa = std.testing.allocator;
    var q: RingQueue(usize) = .{};
    defer q.deinit(gpa);
    var next_in: usize = 0;
    var next_out: usize = 0;
    var round: usize = 0;
    while (round < 10) : (round += 1) {
        var i: usize = 0;
        while (i < 50 + round * 20) : (i += 1) {
            try q.push(gpa, next_in);
            next_in += 1;
        }
        i = 0;
        while (i < 40) : (i += 1) {
            try std.testing.expectEqual(next_out, q.pop().?);
            next_out += 1;
        }
    }
    while (q.pop()) |v| {
        try std.testing.expectEqual(next_out, v);
        next_out += 1;
    }
    try std.testing.expectEqual(next_in, next_out);
}
