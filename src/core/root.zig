//! zloop's core: the pure-Zig domain. No Python.h here; `zig build test`
//! runs everything below without an interpreter.
pub const sys = @import("sys.zig");
pub const queue = @import("queue.zig");
pub const timer_heap = @import("timer_heap.zig");
pub const backend = @import("backend.zig");
pub const reactor = @import("reactor.zig");

pub const Reactor = reactor.Reactor;
pub const Callback = reactor.Callback;
pub const Flush = reactor.Flush;
pub const IoWatcher = reactor.IoWatcher;
pub const TimerEntry = reactor.TimerEntry;
pub const Interest = reactor.Interest;
pub const Recv = reactor.Recv;
pub const recv_buffers_max = reactor.recv_buffers_max;
pub const RunError = reactor.RunError;

test {
    _ = sys;
    _ = queue;
    _ = timer_heap;
    _ = reactor;
    _ = backend;
}
