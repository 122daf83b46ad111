//! Which reactor watchers belong to native transports, and how each kind
//! leaves the reactor when its loop closes. `loop.zig` asks here (not each
//! transport file) so a new kind of native transport registers in one place.
//! Each transport file's `object` (transport/object.zig) answers for its
//! kind. A child
//! watch's pidfd (`_watch_child` on Linux: the reactor registers it in the
//! watcher table) counts as one too: it is no add_reader watcher.
const core = @import("core");
const py = @import("../capi/py.zig");
const transport = @import("../transport/stream.zig");
const datagram = @import("../transport/datagram.zig");
const accept = @import("../transport/accept.zig");
const children = @import("children.zig");

/// True when `w` is owned by a native transport or a server's acceptor
/// (not an add_reader watcher).
pub fn isTransportWatcher(w: *core.IoWatcher) bool {
    return transport.object.isWatcher(w) or datagram.object.isWatcher(w) or accept.isWatcher(w) or
        core.reactor.isChildWatcher(w);
}

/// The transport object owning `w`; `w` must satisfy `isTransportWatcher`.
pub fn ownerOfWatcher(w: *core.IoWatcher) *py.Obj {
    if (datagram.object.isWatcher(w)) return datagram.object.ownerOfWatcher(w);
    if (accept.isWatcher(w)) return accept.ownerOfWatcher(w);
    if (core.reactor.isChildWatcher(w)) return children.ownerOfWatcher(w);
    return transport.object.ownerOfWatcher(w);
}

/// The loop is closing: `w`'s transport leaves the reactor.
pub fn loopClosing(w: *core.IoWatcher) void {
    if (datagram.object.isWatcher(w)) return datagram.object.loopClosing(w);
    if (accept.isWatcher(w)) return accept.loopClosing(w);
    if (core.reactor.isChildWatcher(w)) return children.loopClosing(w);
    transport.object.loopClosing(w);
}

/// Another watcher wants `w`'s fd: if `w`'s transport or server works on a
/// socket user code has closed since (loop.zig's `evictStale`), it fails
/// as its next system call would and leaves the reactor. False with the
/// Python error set when that failure raised.
pub fn evictIfStale(w: *core.IoWatcher) bool {
    if (datagram.object.isWatcher(w)) return datagram.object.methods.evictIfStale(w);
    if (accept.isWatcher(w)) return accept.evictIfStale(w);
    // A pidfd is the loop's own: never stale.
    if (core.reactor.isChildWatcher(w)) return true;
    return transport.object.methods.evictIfStale(w);
}
