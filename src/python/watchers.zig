//! Which reactor watchers belong to native transports, and how each kind
//! leaves the reactor when its loop closes. `loop.zig` asks here (not each
//! transport file) so a new kind of native transport registers in one place.
//! The names match `transport.zig`'s, which this file extends.
const core = @import("core");
const py = @import("py.zig");
const transport = @import("transport.zig");
const datagram = @import("datagram.zig");
const accept = @import("accept.zig");

/// True when `w` is owned by a native transport or a server's acceptor
/// (not an add_reader watcher).
pub fn isTransportWatcher(w: *core.IoWatcher) bool {
    return transport.isTransportWatcher(w) or datagram.isWatcher(w) or accept.isWatcher(w);
}

/// The transport object owning `w`; `w` must satisfy `isTransportWatcher`.
pub fn ownerOfWatcher(w: *core.IoWatcher) *py.Obj {
    if (datagram.isWatcher(w)) return datagram.ownerOfWatcher(w);
    if (accept.isWatcher(w)) return accept.ownerOfWatcher(w);
    return transport.ownerOfWatcher(w);
}

/// The loop is closing: `w`'s transport leaves the reactor.
pub fn loopClosing(w: *core.IoWatcher) void {
    if (datagram.isWatcher(w)) return datagram.loopClosing(w);
    if (accept.isWatcher(w)) return accept.loopClosing(w);
    transport.loopClosing(w);
}

/// Another watcher wants `w`'s fd: if `w`'s transport or server works on a
/// socket user code has closed since (loop.zig's `evictStale`), it fails
/// as its next system call would and leaves the reactor. False with the
/// Python error set when that failure raised.
pub fn evictIfStale(w: *core.IoWatcher) bool {
    if (datagram.isWatcher(w)) return datagram.evictIfStale(w);
    if (accept.isWatcher(w)) return accept.evictIfStale(w);
    return transport.evictIfStale(w);
}
