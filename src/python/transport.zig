//! `zloop._zloop.SocketTransportCore`: the native half of zloop's stream
//! transports over sockets (TCP and Unix). The I/O itself lives here: one
//! `core.IoWatcher` per transport, reads handed to `protocol.data_received`
//! as `bytes` (or received into a `BufferedProtocol`'s
//! buffer), writes that try the socket first and buffer only the rest, and
//! write flow control; `get_extra_info`, `_call_connection_lost` and the
//! attributes asyncio's transports keep (`_sock`, `_loop`, `_extra`...). The
//! Python subclass `zloop._net._SocketTransport` adds the cold paths:
//! construction over a socket object, repr, `_fatal_error`, protocol
//! switching. A server's connections are made here (`serve`), with no
//! socket object and no Python call, their extra info made on first use.
//!
//! The object, its type (derived from `asyncio.Transport`) and what both
//! native transports share of it live in `transport_object.zig`.
//!
//! Lifecycle (as `selector_events._SelectorSocketTransport`):
//!   _setup -> (call_soon) connection_made -> (call_soon) _start_reading
//!   serve -> (one queued step, `runStep`) connection_made, then reading
//!   close(): stop reading; once the buffer is flushed, connection_lost
//!   abort()/fatal error: drop the buffer, connection_lost(exc) next pass
//!   (queued as the transport's own step; a Handle in debug mode).
//! While set up, the transport holds a reference to itself on behalf of the
//! reactor (as asyncio's selector holds its bound `_read_ready`), released
//! when `_call_connection_lost` leaves the reactor.
//!
//! On io_uring, small reads are native receives (`onRecv`): the kernel
//! receives into the loop's buffers (recvpool.zig) and the transport hands
//! them to data_received as it would a read of its own, with no recv
//! syscall; large reads and a BufferedProtocol's read the usual way.
//!
//! Readiness is handled inline from the reactor's I/O dispatch (as libuv
//! calls its read callbacks from the poll phase), not through the ready
//! queue: the ready queue carries only `Handle`s.
const std = @import("std");
const core = @import("core");
const py = @import("py.zig");
const c = py.c;
const Obj = py.Obj;
const loop_mod = @import("loop.zig");
const recvpool = @import("recvpool.zig");
const state = @import("state.zig");
const handle = @import("handle.zig");
const sockaddr = @import("sockaddr.zig");
const server = @import("server.zig");
const borrowed = @import("borrowed.zig");
const trim = @import("trim.zig");
const sockio = @import("sockio.zig");
const transport_object = @import("transport_object.zig");
pub const object = transport_object.Object(@This());
const shared = object.methods;
const common = &transport_object.names;

const gpa = std.heap.c_allocator;

/// After this many write() calls on a lost connection, warn (asyncio's
/// `constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES`).
const log_threshold_conn_lost = 5;

/// `transport_object.Layout(Inner)` (checked there), then the fields only
/// a stream transport has.
pub const Transport = extern struct {
    ob_base: Obj,
    /// `asyncio.BaseTransport._extra`: owned by that slot descriptor (or
    /// null until a served connection's extra info is asked for: see
    /// `Inner.lazy`).
    extra: ?*Obj,
    loop: ?*Obj,
    protocol: ?*Obj,
    inner: ?*Inner,
    /// The `socket.socket` the transport works on (`_sock`): the one it was
    /// made with, or a served connection's, made on first use (see
    /// `Inner.lazy`). Null once the connection is lost.
    sock: ?*Obj,
    /// The server's `ServerConnections` while it counts this connection,
    /// and this transport's place in its list (server.zig).
    conns: ?*Obj,
    conn_prev: ?*Transport,
    conn_next: ?*Transport,
    /// `_sendfile_fut`: loop.sendfile()'s future while it runs, failed if
    /// the connection goes first (as asyncio's empty waiter).
    sendfile_fut: ?*Obj,
    /// connection_lost was called and the transport let go of its socket,
    /// protocol and loop (`_sock` and `_loop` read None).
    lost: bool,
    /// `_protocol_connected`: connection_lost goes to the protocol.
    protocol_connected: bool,
};

pub const Inner = struct {
    owner: *Transport,
    /// Queued behind the ready callbacks when the fd is ready (`shared.onReady`).
    io: transport_object.IoQueued = shared.ioQueued(),
    w: core.IoWatcher,
    /// What write()/writelines() could not send yet (see `WriteQueue`).
    wq: WriteQueue = .{},
    /// Small writes held until the running callback returns (see `Cork`).
    cork: Cork = .{},
    /// Queued with the reactor while `cork` holds something; holds a
    /// reference to the transport.
    flush: core.Flush = .{ .cb = .{ .run = flushCork, .drop = dropCork } },
    high: usize = 64 * 1024,
    low: usize = 16 * 1024,
    /// `(low, high)` as `set_write_buffer_limits` was given them (see
    /// `shared.getWriteBufferLimits`); null until it is called.
    limits: ?*Obj = null,
    conn_lost: u32 = 0,
    /// In the reactor's watcher table, holding the self-reference.
    attached: bool = false,
    /// `_start_reading` ran (connection_made was called first).
    started: bool = false,
    paused: bool = false,
    closing: bool = false,
    /// write_eof() was called.
    eof: bool = false,
    /// The peer's EOF was seen; reading stopped for good.
    read_eof: bool = false,
    buffered: bool = false,
    /// What the protocol's get_buffer() returns every time, when the
    /// transport knows it (zloop's TLS protocol gives out its loop's one
    /// buffer, `_tls._SSLProtocol`): reads go into it without the call.
    fixed_buffer: ?*Obj = null,
    /// The last read brought more than `read_exact_bytes` (or filled the
    /// lent buffer): the next one reads into the spare, and asks the kernel
    /// how much is there first if the protocol keeps data (`readExact`).
    big_reads: bool = false,
    /// The last read filled the lent buffer: the next, into the spare,
    /// takes the rest of that message (and `big_reads` stays whatever it
    /// brings: see `readReady`).
    split: bool = false,
    /// The protocol kept a `bytes` it was handed (see `readReady`).
    keeps_data: bool = false,
    protocol_paused: bool = false,
    /// The `contextvars.Context` the protocol's read-side callbacks run in:
    /// a copy of the current context taken when reading starts or resumes,
    /// as asyncio's `_add_reader` copies it into the reader `Handle`.
    context: ?*Obj = null,
    /// `context` was set by `_set_context` (3.15, gh-140947): it is the
    /// transport's own for its whole life, and resume_reading() keeps it.
    context_fixed: bool = false,
    /// loop.sendfile() owns the socket (`_sendfile_begin`): write() raises,
    /// and once the buffer is flushed each writable event calls this
    /// callable (which runs os.sendfile) instead.
    sendfile_writer: ?*Obj = null,
    /// Native receives not yet delivered, oldest first from `rx_head` (see
    /// `onRecv`).
    rx: RxQueue = .{},
    rx_head: usize = 0,
    /// A served connection's extra info and socket object, made on first
    /// use (see `Lazy`).
    lazy: Lazy = .{},
    /// The connection's own callbacks in the ready queue (`runStep`):
    /// its start, then its end, each queued once at most and in that
    /// order, each entry holding a reference to the transport.
    step: core.Callback = .{ .run = runStep, .drop = dropStep },
    /// `protocol.connection_made`, bound, while the start is queued; and
    /// the context it runs in.
    start_cb: ?*Obj = null,
    start_ctx: ?*Obj = null,
    /// connection_lost's exception (or None) and context, while the end is
    /// queued.
    lost_exc: ?*Obj = null,
    lost_ctx: ?*Obj = null,
    /// The user's socket this transport works on (`create_connection(sock=)`
    /// and the like; owned), or null for one the loop made or accepted,
    /// which user code only sees through `TransportSocket` and cannot
    /// close. Its fd is asked for before each system call (`sysFd`) and
    /// registration (`updateInterest`), so a close() by user code makes
    /// the next one fail with EBADF, as on asyncio, and never reach the
    /// file that took the number since (borrowed.zig). Its watcher is
    /// borrowed and reads are never native receives: on io_uring nothing
    /// in the ring holds the file, so the close really closes.
    sock_owner: ?*Obj = null,

    /// The fd to make a system call on: `w.fd`, or -1 (the call fails
    /// with EBADF) once the user's socket no longer stands for it.
    pub inline fn sysFd(in: *const Inner) i32 {
        return borrowed.fdFor(in.sock_owner, in.w.fd);
    }

    fn pending(in: *const Inner) usize {
        return in.wq.size;
    }

    /// data_received may be called (as asyncio's reader is registered).
    fn reading(in: *const Inner) bool {
        return in.started and !in.paused and !in.closing and !in.read_eof;
    }

    fn rxPending(in: *const Inner) bool {
        return in.rx_head < in.rx.len();
    }
};

/// The native receives of one transport between their wait and their
/// delivery: nearly always one, kept inline, so that an idle connection
/// holds no allocation for them; a second one moves both into a list, freed
/// once they are delivered.
const RxQueue = struct {
    /// The receives: in `single` (`cap` 1) or in an allocation (`cap` more).
    items: []Rx = &.{},
    cap: usize = 0,
    single: [1]Rx = undefined,

    fn len(q: *const RxQueue) usize {
        return q.items.len;
    }

    fn append(q: *RxQueue, item: Rx) error{OutOfMemory}!void {
        if (q.cap == 0) {
            q.items = q.single[0..0];
            q.cap = 1;
        }
        if (q.items.len == q.cap) {
            const more = try gpa.alloc(Rx, @max(4, q.cap * 2));
            @memcpy(more[0..q.items.len], q.items);
            q.release();
            q.items = more[0..q.items.len];
            q.cap = more.len;
        }
        q.items.len += 1;
        q.items[q.items.len - 1] = item;
    }

    /// Empties the queue, freeing an allocation (an idle connection keeps
    /// none).
    fn clear(q: *RxQueue) void {
        q.release();
        q.items = q.single[0..0];
        q.cap = 1;
    }

    fn release(q: *RxQueue) void {
        if (q.cap > 1) gpa.free(q.items.ptr[0..q.cap]);
    }
};

/// What a served connection makes on first use rather than when accepted
/// (uvloop does the same): its `peername` and `sockname` as the kernel gave
/// them (a listener bound to one address shares its own `sockname`
/// object), its `socket.socket`, and the extra info made of them. A
/// connection that nobody asks makes none of these objects.
const Lazy = struct {
    peer: sockaddr.Lazy = .none,
    local: sockaddr.Lazy = .none,
    /// `socket.socket(family, type, proto, fileno)` arguments.
    family: u16 = 0,
    sock_type: i32 = 0,
    proto: i32 = 0,
    /// The fd is the transport's, with no socket object yet: `_sock` makes
    /// one, and connection_lost closes the fd itself.
    sock: bool = false,
    /// Entries of `extra` still to make.
    peername: bool = false,
    sockname: bool = false,
    socket: bool = false,

    fn pending(z: *const Lazy) bool {
        return z.peername or z.sockname or z.socket;
    }

    fn release(z: *Lazy) void {
        z.peer.release();
        z.local.release();
    }
};

/// One native receive (io_uring) between the wait that reported it and
/// its delivery: data (`res` bytes in `data`), end of file (0) or an error
/// (a negated errno).
const Rx = struct {
    res: i32,
    /// The loop's buffer the kernel received into, sized to `res`; ours.
    data: ?*Obj = null,
    /// The buffer id `data` still answers to in the loop's pool, or null
    /// once the pool has a new object for it (a paused reader's, see
    /// `deliverRx`).
    id: ?u16 = null,
    /// Bytes of `data` a BufferedProtocol was handed already: it paused
    /// reading, or handed the transport to another protocol, part way
    /// through (`feedBuffered`). The rest goes first when reading resumes.
    fed: u32 = 0,
};

/// A write's unsent rest of at least this many bytes, from an object whose
/// bytes cannot change (see `immutableOwner`), is kept by reference: a
/// 300 MB `bytes` the socket does not take costs no copy and no memory.
/// Shorter rests are copied into `copy_block_bytes` blocks: a copy this
/// small (about a microsecond) costs no more than a segment of its own
/// (a reference, an iovec, its share of the kernel's per-iovec work), and
/// it keeps many small writes to a few iovecs: a buffer at the default
/// 64 KiB high-water mark spans about five blocks.
const ref_min_bytes = 16 * 1024;
/// The least size of a copy block (a longer mutable rest gets a block of
/// its own length). Small enough to waste little per idle transport.
const copy_block_bytes = 16 * 1024;
/// iovecs per sendmsg (Linux's `UIO_MAXIOV`, the BSDs' `IOV_MAX`: 1024);
/// 16 KiB of stack.
const iov_max = sockio.iov_max;

/// Write coalescing. A write() of an exact `bytes`, made from a loop
/// callback while nothing is buffered, is not sent at once: up to
/// `cork_slots` of them, `cork_max_bytes` in all, are held by reference and
/// go out in one send as soon as the callback returns (a reactor flush,
/// before the next callback runs). uvicorn writes a response's head and
/// its body separately: one sendmsg per response instead of two sendto.
///
/// asyncio sends in write() itself; what a program can see of that is
/// kept. Every method that reads or changes the write side sends what is
/// held first (get_write_buffer_size, is_closing, writelines, write_eof,
/// close, abort, the limits, sendfile, the socket from get_extra_info;
/// StreamWriter.drain() asks is_closing()), and the held
/// bytes never exceed the high-water mark, so pause_writing() comes from
/// the same write() it comes from on asyncio: the rest left by a short
/// send of what was held is at most the held bytes, below the mark. What
/// differs is when the bytes reach the kernel within one callback: at its
/// end, not at each write().
const cork_slots = 4;
const cork_max_bytes = 16 * 1024;

const Cork = struct {
    n: usize = 0,
    size: usize = 0,
    iov: [cork_slots]sockio.iovec_const = undefined,
    /// The `bytes` each iovec points into (strong references).
    held: [cork_slots]*Obj = undefined,

    fn release(k: *Cork) void {
        for (k.held[0..k.n]) |o| py.decref(o);
        k.* = .{};
    }
};

/// One stretch of unsent bytes: `base[start..end]`.
const Seg = struct {
    base: [*]u8,
    start: usize,
    end: usize,
    /// A copy block's allocation size, `end` growing up to it while the
    /// block is the queue's tail; 0 for a reference.
    cap: usize,
    /// The `bytes` holding the data (a strong reference), or null when the
    /// segment owns a copy block.
    owner: ?*Obj,

    fn release(s: *Seg) void {
        trim.released(if (s.owner != null) s.end else s.cap);
        if (s.owner) |o| py.decref(o) else gpa.free(s.base[0..s.cap]);
        s.* = undefined;
    }
};

/// The write buffer: a FIFO of segments, flushed with sendmsg over several
/// iovecs. Exact `bytes` are the only objects referenced, so releasing a
/// segment never runs Python code (no finalizer, no `__release_buffer__`)
/// and may happen anywhere, dealloc and tp_clear included.
const WriteQueue = struct {
    segs: std.ArrayList(Seg) = .empty,
    /// Segments before this index are sent and released.
    head: usize = 0,
    /// Unsent bytes in all segments: get_write_buffer_size(), exactly.
    size: usize = 0,

    fn live(q: *WriteQueue) []Seg {
        return q.segs.items[q.head..];
    }

    /// Copies `data` behind what is queued: first into the tail block's
    /// room, then into one new block. On OutOfMemory nothing is queued.
    fn appendCopy(q: *WriteQueue, data: []const u8) error{OutOfMemory}!void {
        const room = q.tailRoom();
        if (data.len > room) {
            // Before touching the tail: this may move the segment array.
            try q.segs.ensureUnusedCapacity(gpa, 1);
            const rest = data.len - room;
            const block = try gpa.alloc(u8, @max(rest, copy_block_bytes));
            @memcpy(block[0..rest], data[room..]);
            q.segs.appendAssumeCapacity(.{
                .base = block.ptr,
                .start = 0,
                .end = rest,
                .cap = block.len,
                .owner = null,
            });
        }
        const head_part = @min(room, data.len);
        if (head_part > 0) {
            // The old tail: just before the block appended above, if any.
            const s = &q.segs.items[q.segs.items.len - 1 - @intFromBool(data.len > room)];
            std.debug.assert(s.owner == null and s.cap - s.end >= head_part);
            @memcpy(s.base[s.end..][0..head_part], data[0..head_part]);
            s.end += head_part;
        }
        q.size += data.len;
    }

    /// Bytes the tail segment can still take: room left in a copy block.
    fn tailRoom(q: *WriteQueue) usize {
        const segs = q.live();
        if (segs.len == 0) return 0;
        const tail = segs[segs.len - 1];
        return if (tail.owner == null) tail.cap - tail.end else 0;
    }

    /// Queues `data`, which lies inside the immutable `owner`, by reference.
    fn appendRef(q: *WriteQueue, owner: *Obj, data: []const u8) error{OutOfMemory}!void {
        std.debug.assert(c.PyBytes_CheckExact(owner) != 0);
        try q.segs.append(gpa, .{
            .base = @constCast(data.ptr),
            .start = 0,
            .end = data.len,
            .cap = 0,
            .owner = owner,
        });
        py.incref(owner);
        q.size += data.len;
    }

    /// Points `iov` at the first segments; returns how many it filled.
    fn gather(q: *WriteQueue, iov: []sockio.iovec_const) usize {
        const segs = q.live();
        const n = @min(segs.len, iov.len);
        for (segs[0..n], iov[0..n]) |s, *v| {
            v.* = .{ .base = s.base + s.start, .len = s.end - s.start };
        }
        return n;
    }

    /// Drops `sent` bytes from the front, releasing what is fully sent.
    fn consume(q: *WriteQueue, sent: usize) void {
        std.debug.assert(sent <= q.size);
        q.size -= sent;
        var left = sent;
        while (left > 0) {
            const s = &q.segs.items[q.head];
            const n = s.end - s.start;
            if (n > left) {
                s.start += left;
                break;
            }
            left -= n;
            s.release();
            q.head += 1;
        }
        q.compact();
    }

    /// Keeps the segment array from creeping: reset when empty (freed when
    /// a burst grew it big), shifted down when mostly sent.
    fn compact(q: *WriteQueue) void {
        if (q.head == q.segs.items.len) {
            q.segs.clearRetainingCapacity();
            q.head = 0;
            if (q.segs.capacity > 1024) q.segs.clearAndFree(gpa);
        } else if (q.head >= 64 and q.head > q.segs.items.len / 2) {
            const rest = q.segs.items[q.head..];
            std.mem.copyForwards(Seg, q.segs.items[0..rest.len], rest);
            q.segs.shrinkRetainingCapacity(rest.len);
            q.head = 0;
        }
    }

    /// Drops everything unsent (abort, a send error, dealloc).
    fn releaseAll(q: *WriteQueue) void {
        for (q.live()) |*s| s.release();
        q.segs.deinit(gpa);
        q.* = .{};
    }
};

/// The texts of its fatal errors (as asyncio words them), and the names
/// only the stream transport calls (`transport_object.names` has the
/// ones both call).
const Names = struct {
    msg_read: *Obj,
    msg_write: *Obj,
    msg_data: *Obj,
    msg_eof: *Obj,
    msg_get_buffer: *Obj,
    msg_buffer_updated: *Obj,
    connection_made: *Obj,
    connection_lost: *Obj,
    close: *Obj,
    get: *Obj,
    name: *Obj,
    default: *Obj,
    peername: *Obj,
    sockname: *Obj,
    socket: *Obj,
    sendfile_lost: *Obj,
    warn_unclosed: *Obj,
    setblocking: *Obj,
    detach: *Obj,
    msg_gone: *Obj,
};
var names: Names = undefined;

// ------------------------------------------------------------- plumbing

/// A Python error from a callback out of the I/O path: KeyboardInterrupt and
/// SystemExit abort the loop; anything else should never get here (the
/// Python helpers report their own errors), so it is printed, not lost.
fn pendingToRun(t: *Transport) core.RunError!void {
    if (py.pendingIsFatal()) return error.Aborted;
    c.PyErr_WriteUnraisable(py.obj(t));
}

/// `self._fatal_error(exc, message)` with `exc` consumed.
fn fatal(t: *Transport, exc: *Obj, msg: *Obj) core.RunError!void {
    defer py.decref(exc);
    const r = py.callMethod(py.obj(t), common.fatal_error, .{ exc, msg });
    if (r) |o| py.decref(o) else try pendingToRun(t);
}

/// A protocol callback raised: as `_fatal_error` in asyncio's read path.
fn fatalFromPending(t: *Transport, msg: *Obj) core.RunError!void {
    if (py.pendingIsFatal()) return error.Aborted;
    const exc = py.fetchException() orelse return;
    try fatal(t, exc, msg);
}

fn fatalErrno(t: *Transport, errno: u16, msg: *Obj) core.RunError!void {
    const exc = sockio.errnoException(errno) orelse return pendingToRun(t);
    try fatal(t, exc, msg);
}

fn callSelf(t: *Transport, name: *Obj) bool {
    return succeeded(py.callMethod(py.obj(t), name, .{}));
}

const succeeded = transport_object.consumed;
const scheduleConnectionLost = object.scheduleConnectionLost;

/// `scheduleConnectionLost` outside debug mode: asyncio's
/// `loop.call_soon(self._call_connection_lost, exc)` as the transport's
/// own step (`runStep`), next in the ready queue, in `own` (the
/// transport's own context, see `Inner.context_fixed`) or else a copy of
/// the current one, as a Handle's.
pub fn queueConnectionLost(t: *Transport, exc: *Obj, own: ?*Obj) bool {
    const in = t.inner.?;
    const ctx = if (own) |o| py.newref(o) else c.PyContext_CopyCurrent() orelse return false;
    std.debug.assert(in.lost_exc == null and in.lost_ctx == null);
    in.lost_exc = py.newref(exc);
    in.lost_ctx = ctx;
    if (queueStep(t)) return true;
    py.clear(&in.lost_exc);
    py.clear(&in.lost_ctx);
    return false;
}

/// Applies the interest the transport's state calls for.
pub fn updateInterest(t: *Transport) void {
    const l = object.attachedLoop(t) orelse return;
    const in = t.inner.?;
    const want: core.Interest = .{
        .read = in.reading(),
        .write = in.pending() > 0 or (in.sendfile_writer != null and !in.closing),
    };
    // Small reads into the loop's buffers come as native receives where
    // the backend has them (see `onRecv`); large ones, and a buffered
    // protocol's, are read the usual way, as are a user's socket's (see
    // `Inner.sock_owner`).
    in.w.recv = !in.buffered and !in.big_reads and in.sock_owner == null and
        l.recv_pool.ready(&l.reactor);
    if (in.closing) releaseRx(in, l);
    // Receives held over a pause go out once reading resumes (as asyncio
    // re-registers its reader); an allocation failure here leaves them for
    // the next receive's dispatch.
    if (want.read and in.rxPending()) shared.queueIo(in) catch {};
    // A user's socket closed under the transport is registered no more:
    // its number may stand for another file now. The next send or
    // receive fails with EBADF, as asyncio's would.
    if (in.sysFd() < 0) return;
    // epoll_ctl fails only on an fd closed under the transport; the next
    // send/recv reports that as the error asyncio would.
    l.reactor.setInterest(&in.w, want) catch {};
}

pub fn maybePause(t: *Transport) bool {
    if (!uncork(t)) return false;
    const in = t.inner.?;
    if (in.pending() <= in.high or in.protocol_paused) return true;
    in.protocol_paused = true;
    return callSelf(t, common.pause_cb);
}

fn maybeResume(t: *Transport) bool {
    const in = t.inner.?;
    if (!in.protocol_paused or in.pending() > in.low) return true;
    in.protocol_paused = false;
    return callSelf(t, common.resume_cb);
}

// ------------------------------------------------------------ readiness

/// A Python error under `object.dispatchReady` (the protocol's context).
pub const dispatchFailed = pendingToRun;

pub fn dispatch(t: *Transport, ev: core.reactor.Event) core.RunError!void {
    const in = t.inner.?;
    // What native receives took comes first: a readable event of the same
    // pass is a poll's, armed only after the receive's last completion.
    if (in.rxPending()) try deliverRx(t);
    if (ev.readable and in.w.interest.read and !in.rxPending()) {
        const was_big = in.big_reads;
        try readReady(t);
        // Reads that went the usual way because they were large go back
        // to native receives once one is small again.
        if (was_big and !in.big_reads) updateInterest(t);
    }
    if (ev.writable and in.attached and in.w.interest.write and in.conn_lost == 0) try writeReady(t);
}

/// Takes a copy of the current context for the read side (see `Inner.context`).
pub fn captureContext(in: *Inner) bool {
    if (in.context_fixed) return true;
    const ctx = c.PyContext_CopyCurrent() orelse return false;
    py.xdecref(in.context);
    in.context = ctx;
    return true;
}

// ------------------------------------------------------ native receives

/// The reactor's `recv` event (io_uring; see `Inner.w.recv`): the kernel
/// received into one of the loop's buffers (recvpool.zig). Queued in order
/// with the transport, as `shared.onReady` queues readiness, and delivered
/// by `deliverRx`.
pub fn onRecv(in: *Inner, rv: core.Recv) core.RunError!void {
    const l = object.loopOf(in.owner);
    if (rv.res == -@as(i32, @backingInt(sockio.E.NOBUFS))) {
        // Nothing received; the backend receives again on its next wait.
        l.recv_pool.grow(&l.reactor);
        return;
    }
    var item: Rx = .{ .res = rv.res };
    if (rv.res > 0) {
        const data = l.recv_pool.take(rv.buffer);
        sizeBytes(data, @intCast(rv.res));
        item.data = data;
        item.id = rv.buffer;
    }
    in.rx.append(item) catch {
        if (item.data) |d| returnRx(l, item.id, d);
        return error.Aborted;
    };
    shared.queueIo(in) catch return error.Aborted;
}

/// Delivers the receives in order while the protocol is reading. Those
/// left (the protocol paused) keep their data for resume_reading, their
/// buffer ids back in the ring with new objects; a closing transport's
/// are dropped, as asyncio's close() leaves unread data in the socket.
fn deliverRx(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    const delivered = deliverRxItems(t);
    const l = object.loopOf(t);
    if (!in.rxPending()) {
        in.rx.clear();
        in.rx_head = 0;
    } else if (in.closing or in.read_eof) {
        releaseRx(in, l);
    } else if (in.reading()) {
        // A callback raised KeyboardInterrupt or SystemExit out of the
        // loop: the rest goes on the next run, as asyncio's reader, still
        // registered, reads it then.
        shared.queueIo(in) catch {};
    } else if (l.has_reactor) {
        for (in.rx.items[in.rx_head..]) |*item| if (item.id) |id| {
            l.recv_pool.refill(&l.reactor, id);
            item.id = null;
        };
    }
    return delivered;
}

fn deliverRxItems(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    while (in.rxPending() and in.reading()) {
        // Taken off the queue first: a close() in the protocol's callback
        // releases what is queued (`releaseRx`), not this one.
        const index = in.rx_head;
        const items = in.rx.items;
        const item = items[index];
        if (items.len - index > 1) {
            const joined = joinable(in, index);
            if (joined > 1) {
                try deliverJoined(t, index, joined);
                continue;
            }
        }
        in.rx_head += 1;
        if (item.res > 0) {
            try deliverReceived(t, index, item);
        } else if (item.res == 0) {
            try readEof(t);
        } else {
            try fatalErrno(t, @intCast(-item.res), names.msg_read);
        }
    }
}

/// How many receives from `index` on go to a plain protocol as one
/// `data_received` (`deliverJoined`): consecutive data, none handed over
/// in part, up to what one read on the readiness path takes.
fn joinable(in: *Inner, index: usize) usize {
    if (in.buffered) return 0;
    var size: usize = 0;
    var n: usize = 0;
    for (in.rx.items[index..]) |item| {
        if (item.res <= 0 or item.fed != 0) break;
        const len: usize = @intCast(item.res);
        if (size + len > read_spare_bytes) break;
        size += len;
        n += 1;
    }
    return n;
}

/// `count` receives from `index` on (see `joinable`) to the protocol in
/// one `data_received`, as one read of the readiness path would bring
/// them: copied into the loop's spare, lent as `readReady` lends it (a
/// protocol that keeps data gets an exact-size copy), their buffers back
/// to the pool at once. A bulk transfer (a database's COPY) then reaches
/// the protocol in as few calls as on epoll, where the receives a pass
/// brings, one per 16 KiB buffer, would each make a call.
fn deliverJoined(t: *Transport, index: usize, count: usize) core.RunError!void {
    const in = t.inner.?;
    const l = object.loopOf(t);
    const items = in.rx.items[index..][0..count];
    var size: usize = 0;
    var full = false;
    for (items) |item| {
        size += @intCast(item.res);
        full = full or item.res == recvpool.buffer_bytes;
    }
    const lend = !in.keeps_data;
    const data = (if (lend)
        takeBuffer(&l.read_spare, read_spare_bytes)
    else
        c.PyBytes_FromStringAndSize(null, @intCast(size))) orelse {
        // Dropped with the connection, which fails.
        in.rx_head = index + count;
        for (items) |item| returnRx(l, item.id, item.data.?);
        return fatalFromPending(t, names.msg_read);
    };
    const dst: [*]u8 = @ptrCast(c.PyBytes_AsString(data));
    var at: usize = 0;
    for (items) |item| {
        const part = bytesOf(item.data.?);
        @memcpy(dst[at..][0..part.len], part);
        at += part.len;
        returnRx(l, item.id, item.data.?);
    }
    in.rx_head = index + count;
    // As `deliverReceived`: full buffers mean more may be queued; large
    // reads go the usual way.
    if (full and !in.big_reads) {
        in.big_reads = true;
        updateInterest(t);
    }
    if (!lend) return deliver(t, data);
    sizeBytes(data, size);
    py.incref(data); // keeps it alive through the call, to see if it came back
    const delivered = deliver(t, data);
    const flushed = uncorkAfter(t, delivered);
    if (c.Py_REFCNT(data) > 1) in.keeps_data = true;
    returnSpare(l, data);
    try delivered;
    if (!flushed) try pendingToRun(t);
}

/// One native receive (taken from `in.rx.items[index]`) to the protocol,
/// as `readLent` delivers a small read: the loop's buffer itself, taken
/// back if the protocol kept no reference; a protocol that keeps data gets
/// copies of the exact size. A BufferedProtocol that takes only part of it
/// (see `Rx.fed`) leaves the rest first in the queue.
fn deliverReceived(t: *Transport, index: usize, item: Rx) core.RunError!void {
    const in = t.inner.?;
    const l = object.loopOf(t);
    const data = item.data.?;
    const n: usize = @intCast(item.res);
    // A full buffer means more may be queued: large reads go the usual
    // way (one data_received per read of up to 256 KiB).
    if (n == recvpool.buffer_bytes and !in.big_reads and item.fed == 0) {
        in.big_reads = true;
        updateInterest(t);
    }
    if (in.buffered) {
        var fed: usize = item.fed;
        const result = feedBuffered(t, bytesOf(data), &fed);
        // Back to the head of the queue, unless a close() released the
        // queue meanwhile (only the reactor appends, between passes).
        if (fed < n and in.rx_head == index + 1) {
            in.rx_head = index;
            in.rx.items[index].fed = @intCast(fed);
        } else {
            returnRx(l, item.id, data);
        }
        return result;
    }
    if (item.fed == 0) return deliverPlain(t, item);
    // The rest of what a BufferedProtocol left, to the plain protocol that
    // replaced it.
    const rest = bytesOf(data)[item.fed..];
    const copy = c.PyBytes_FromStringAndSize(rest.ptr, @intCast(rest.len));
    returnRx(l, item.id, data);
    return deliver(t, copy orelse return fatalFromPending(t, names.msg_read));
}

/// A whole native receive to a plain protocol (see `deliverReceived`).
fn deliverPlain(t: *Transport, item: Rx) core.RunError!void {
    const in = t.inner.?;
    const l = object.loopOf(t);
    const data = item.data.?;
    const n: usize = @intCast(item.res);
    const id = item.id orelse return deliver(t, data);
    if (in.keeps_data) {
        const copy = c.PyBytes_FromStringAndSize(c.PyBytes_AsString(data), @intCast(n));
        returnRx(l, id, data);
        return deliver(t, copy orelse return fatalFromPending(t, names.msg_read));
    }
    py.incref(data); // keeps it alive through the call, to see if it came back
    const delivered = deliver(t, data);
    const flushed = uncorkAfter(t, delivered);
    if (c.Py_REFCNT(data) > 1) in.keeps_data = true;
    returnRx(l, id, data);
    try delivered;
    if (!flushed) try pendingToRun(t);
}

/// Lets go of a receive's `data` (consumed): back to the pool under its
/// buffer id while it has one and the loop still has its reactor.
fn returnRx(l: *loop_mod.Loop, id: ?u16, data: *Obj) void {
    if (id != null and l.has_reactor) l.recv_pool.give(&l.reactor, id.?, data) else py.decref(data);
}

fn bytesOf(b: *Obj) []const u8 {
    const p: [*]const u8 = @ptrCast(c.PyBytes_AsString(b));
    return p[0..@intCast(c.PyBytes_Size(b))];
}

/// Received bytes to a BufferedProtocol (one that replaced the protocol
/// while receives were in flight: start_tls's): copied into its buffers,
/// get_buffer() and buffer_updated() as many times as it takes, while it
/// is reading and still the protocol: a buffer_updated() that pauses
/// reading, closes the transport or hands it to a plain protocol gets no
/// more. `fed.*`: the bytes handed over so far, advanced as they go (also
/// when a callback aborts the loop).
fn feedBuffered(t: *Transport, bytes: []const u8, fed: *usize) core.RunError!void {
    while (fed.* < bytes.len) {
        const in = t.inner.?;
        if (!in.reading() or !in.buffered) return;
        var view: c.Py_buffer = undefined;
        if (!try getBuffer(t, &view)) return;
        const n = @min(bytes.len - fed.*, @as(usize, @intCast(view.len)));
        const dst: [*]u8 = @ptrCast(view.buf);
        @memcpy(dst[0..n], bytes[fed.*..][0..n]);
        c.PyBuffer_Release(&view);
        fed.* += n;
        try bufferUpdated(t, n);
    }
}

/// Drops the receives not delivered, their buffers back to the pool.
fn releaseRx(in: *Inner, l: *loop_mod.Loop) void {
    for (in.rx.items[in.rx_head..]) |item| {
        returnRx(l, item.id, item.data orelse continue);
    }
    in.rx.clear();
    in.rx_head = 0;
}

/// A connection whose reads are small, and whose protocol has kept nothing
/// it was handed, reads into the loop's lent buffer (`readLent`). Any other
/// read takes up to `read_spare_bytes` (one data_received per message
/// of up to that size, where a 64 KiB chunk took two calls, two reads and
/// two writes for a 100 KiB echo), into a `bytes` the loop keeps for all
/// its stream transports (`Loop.read_spare`). What arrived reaches
/// data_received as a `bytes`:
/// - up to `read_exact_bytes`: copied into a new object of its exact size,
///   and the spare stays for the next read (the connection goes back to
///   the lent buffer, unless its protocol keeps data);
/// - more: the spare itself, its size set to what arrived: no copy and no
///   allocation. It returns to the loop when the protocol kept no
///   reference (a StreamReader copies into its own buffer; so do HTTP
///   parsers). A protocol that did keep it holds a 256 KiB allocation for
///   its data, once: from then on its transport reads as in `readExact`
///   (an object of the exact size) up to `read_copy_bytes`, and hands
///   over the spare only beyond that (at most twice the data in memory).
/// Not a fresh big object per read: glibc serves 256 KiB with mmap
/// (an mmap and a munmap per read), and a ~100 KiB object allocated and
/// freed per read makes glibc trim and regrow its heap around it (brk and
/// page faults: 0.7 brk and 26 faults per 100 KiB streams echo, measured
/// with strace and /proc; 0.3 brk and 9 faults with the spare).
const read_spare_bytes = 256 * 1024;
const read_copy_bytes = read_spare_bytes / 2;

fn readReady(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    if (in.buffered) return readBuffered(t);
    if (!in.big_reads and !in.keeps_data) return readLent(t);
    // The rest of a message the lent buffer split keeps the connection on
    // the spare, however short: messages of 16-32 KiB take one read each.
    const rest = in.split;
    in.split = false;
    if (in.big_reads and in.keeps_data) {
        if (try readExact(t)) return;
    }
    const l = py.cast(loop_mod.Loop, t.loop.?);
    const spare = takeBuffer(&l.read_spare, read_spare_bytes) orelse
        return fatalFromPending(t, names.msg_read);
    const buf: [*]u8 = @ptrCast(c.PyBytes_AsString(spare));
    const got = sockio.recv(in.sysFd(), buf[0..read_spare_bytes]);
    const rc: usize = switch (got) {
        .done => |n| n,
        else => 0,
    };
    if (!rest) in.big_reads = rc > read_exact_bytes;
    const copy_max: usize = if (in.keeps_data) read_copy_bytes else read_exact_bytes;
    if (rc <= copy_max) {
        const data = if (rc > 0) c.PyBytes_FromStringAndSize(buf, @intCast(rc)) else null;
        returnSpare(l, spare);
        switch (got) {
            .done => {},
            .would_block => return,
            .failed => |errno| return fatalErrno(t, errno, names.msg_read),
        }
        if (rc == 0) return readEof(t);
        return deliver(t, data orelse return fatalFromPending(t, names.msg_read));
    }
    sizeBytes(spare, rc);
    py.incref(spare); // keeps it alive through the call, to see if it came back
    const delivered = deliver(t, spare);
    // `in` outlives the call: dispatchReady holds the transport.
    if (c.Py_REFCNT(spare) > 1) in.keeps_data = true;
    returnSpare(l, spare);
    return delivered;
}

/// Reads of more than this are not worth copying out of the spare when the
/// kernel can tell their size first.
const read_exact_bytes = 16 * 1024;

/// The lent buffer's size: what one small read may bring.
const read_lent_bytes = read_exact_bytes;

/// A read on a connection whose reads are small and whose protocol has
/// kept nothing it was handed: into a `bytes` of `read_lent_bytes` the loop
/// keeps for this (`Loop.read_lent`), handed to data_received with its size
/// set to what arrived: no allocation and no copy (glibc's malloc and free
/// of a 1 KiB object, too big for its per-thread cache, and the copy: a
/// 1 KiB echo went from 3.20k to 2.43k instructions per request). It
/// returns to the loop when the protocol kept no reference, once the
/// writes data_received held for the end of this callback (`hold`) have
/// gone. A protocol that keeps it keeps one 16 KiB allocation, once: from
/// then on its connection gets exact-size copies (`keeps_data`). A read
/// that fills the buffer means more may be queued: the next read takes it
/// into the spare (`big_reads`, `split`).
fn readLent(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    const l = py.cast(loop_mod.Loop, t.loop.?);
    const lent = takeBuffer(&l.read_lent, read_lent_bytes) orelse
        return fatalFromPending(t, names.msg_read);
    const buf: [*]u8 = @ptrCast(c.PyBytes_AsString(lent));
    const rc = switch (sockio.recv(in.sysFd(), buf[0..read_lent_bytes])) {
        .done => |n| n,
        .would_block => return giveBack(l, &l.read_lent, lent, read_lent_bytes),
        .failed => |errno| {
            giveBack(l, &l.read_lent, lent, read_lent_bytes);
            return fatalErrno(t, errno, names.msg_read);
        },
    };
    if (rc == 0) {
        giveBack(l, &l.read_lent, lent, read_lent_bytes);
        return readEof(t);
    }
    in.big_reads = rc == read_lent_bytes;
    in.split = in.big_reads;
    sizeBytes(lent, rc);
    py.incref(lent); // keeps it alive through the call, to see if it came back
    const delivered = deliver(t, lent);
    // Held writes of it (an echo's) go now, as they would when this
    // callback returns: what still holds it after that is the protocol.
    const flushed = uncorkAfter(t, delivered);
    // `in` outlives the call: dispatchReady holds the transport.
    if (c.Py_REFCNT(lent) > 1) in.keeps_data = true;
    giveBack(l, &l.read_lent, lent, read_lent_bytes);
    try delivered;
    if (!flushed) try pendingToRun(t);
}

/// On a connection whose reads are large and whose protocol keeps what it
/// is handed, one ioctl(FIONREAD) (a fraction
/// of a microsecond) gives the size of what is queued, and a `bytes` of
/// exactly that size takes it with no copy (a copy of 100 KiB costs a few
/// microseconds). True when it read (or failed the transport); false to
/// read the usual way: little or nothing queued (EOF and errors are then
/// found by the read), or more than `read_copy_bytes` (the spare).
fn readExact(t: *Transport) core.RunError!bool {
    const in = t.inner.?;
    const n = sockio.bytesReadable(in.sysFd()) orelse return false;
    if (n <= read_exact_bytes or n > read_copy_bytes) return false;
    var data: ?*Obj = c.PyBytes_FromStringAndSize(null, @intCast(n)) orelse {
        try fatalFromPending(t, names.msg_read);
        return true;
    };
    const buf: [*]u8 = @ptrCast(c.PyBytes_AsString(data));
    const rc = switch (sockio.recv(in.sysFd(), buf[0..n])) {
        .done => |got| got,
        .would_block => {
            py.decref(data.?);
            return true;
        },
        .failed => |errno| {
            py.decref(data.?);
            try fatalErrno(t, errno, names.msg_read);
            return true;
        },
    };
    if (rc == 0) {
        // Data was queued a moment ago: only a shutdown in between gets here.
        py.decref(data.?);
        try readEof(t);
        return true;
    }
    if (rc < n and c._PyBytes_Resize(&data, @intCast(rc)) < 0) {
        try fatalFromPending(t, names.msg_read);
        return true;
    }
    try deliver(t, data.?);
    return true;
}

/// Takes the loop's read buffer out of `slot`, or makes one of `size` if
/// it is out: ours (one reference) until `giveBack`. Null with MemoryError.
fn takeBuffer(slot: *?*Obj, size: usize) ?*Obj {
    const buf = slot.* orelse return c.PyBytes_FromStringAndSize(null, @intCast(size));
    slot.* = null;
    return buf;
}

/// Gives the spare back to the loop (see `giveBack`).
fn returnSpare(l: *loop_mod.Loop, spare: *Obj) void {
    giveBack(l, &l.read_spare, spare, read_spare_bytes);
}

/// Puts a read buffer of `size` back in its `slot` if nobody else holds it
/// (and the slot is empty by now), else lets go of it; consumes one
/// reference.
fn giveBack(l: *loop_mod.Loop, slot: *?*Obj, buf: *Obj, size: usize) void {
    if (slot.* == null and c.Py_REFCNT(buf) == 1 and l.has_reactor) {
        sizeBytes(buf, size);
        slot.* = buf;
        return;
    }
    py.decref(buf);
}

/// Sets a `bytes` object's length within its allocation (at most
/// `read_spare_bytes`), as `_PyBytes_Resize` does in place: the NUL
/// terminator follows the data, and the cached hash is forgotten.
fn sizeBytes(b: *Obj, len: usize) void {
    std.debug.assert(len <= read_spare_bytes);
    py.setBytesSize(b, len);
}

/// `protocol.data_received(data)`, consuming `data`.
fn deliver(t: *Transport, data: *Obj) core.RunError!void {
    defer py.decref(data);
    const r = py.callMethod(t.protocol.?, common.data_received, .{data});
    if (r) |o| py.decref(o) else try fatalFromPending(t, names.msg_data);
}

/// `protocol.get_buffer(-1)` as a writable, non-empty view (released by
/// the caller); false once the failure went to `_fatal_error`.
fn getBuffer(t: *Transport, view: *c.Py_buffer) core.RunError!bool {
    const bo = if (t.inner.?.fixed_buffer) |fixed| py.newref(fixed) else bo: {
        const hint = c.PyLong_FromLong(-1) orelse {
            try pendingToRun(t);
            return false;
        };
        const buf_obj = py.callMethod(t.protocol.?, common.get_buffer, .{hint});
        py.decref(hint);
        break :bo buf_obj orelse {
            try fatalFromPending(t, names.msg_get_buffer);
            return false;
        };
    };
    defer py.decref(bo);
    // As asyncio's `_read_ready__get_buffer`: `len(buf)` belongs to the
    // get_buffer() step; a buffer recv_into() cannot write to (bytes, say)
    // is a read error with recv_into's TypeError.
    const len = c.PyObject_Length(bo);
    if (len <= 0) {
        if (len == 0) c.PyErr_SetString(c.PyExc_RuntimeError, "get_buffer() returned an empty buffer");
        try fatalFromPending(t, names.msg_get_buffer);
        return false;
    }
    if (c.PyObject_GetBuffer(bo, view, c.PyBUF_WRITABLE) < 0) {
        c.PyErr_Clear();
        _ = c.PyErr_Format(c.PyExc_TypeError, "recv_into() argument 1 must be read-write bytes-like object, not %.50s", c.Py_TYPE(bo).*.tp_name);
        try fatalFromPending(t, names.msg_read);
        return false;
    }
    if (view.len == 0) {
        c.PyBuffer_Release(view);
        c.PyErr_SetString(c.PyExc_RuntimeError, "get_buffer() returned an empty buffer");
        try fatalFromPending(t, names.msg_get_buffer);
        return false;
    }
    return true;
}

/// `protocol.buffer_updated(n)`.
fn bufferUpdated(t: *Transport, n: usize) core.RunError!void {
    const arg = c.PyLong_FromSize_t(n) orelse return pendingToRun(t);
    defer py.decref(arg);
    const r = py.callMethod(t.protocol.?, common.buffer_updated, .{arg});
    if (r) |o| py.decref(o) else try fatalFromPending(t, names.msg_buffer_updated);
}

fn readBuffered(t: *Transport) core.RunError!void {
    var view: c.Py_buffer = undefined;
    if (!try getBuffer(t, &view)) return;
    const buf: [*]u8 = @ptrCast(view.buf);
    const got = sockio.recv(t.inner.?.sysFd(), buf[0..@intCast(view.len)]);
    c.PyBuffer_Release(&view);
    const rc = switch (got) {
        .done => |n| n,
        .would_block => return,
        .failed => |errno| return fatalErrno(t, errno, names.msg_read),
    };
    if (rc == 0) return readEof(t);
    return bufferUpdated(t, rc);
}

/// The peer closed its side: stop reading; `eof_received()` returning a
/// true value keeps the transport half-open, anything else closes it.
fn readEof(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    in.read_eof = true;
    updateInterest(t);
    const r = py.callMethod(t.protocol.?, common.eof_received, .{}) orelse
        return fatalFromPending(t, names.msg_eof);
    const keep_open = c.PyObject_IsTrue(r);
    py.decref(r);
    if (keep_open < 0) return fatalFromPending(t, names.msg_eof);
    if (keep_open == 0 and !closeTransport(t)) try pendingToRun(t);
}

fn writeReady(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    if (in.pending() == 0) {
        if (in.sendfile_writer) |cb| return sendfileReady(t, cb);
        return updateInterest(t);
    }
    // One sendmsg per writable event, as asyncio's `_write_sendmsg`.
    var iov: [iov_max]sockio.iovec_const = undefined;
    const rc = switch (sockio.sendv(in.sysFd(), iov[0..in.wq.gather(&iov)])) {
        .done => |n| n,
        .would_block => return,
        .failed => |errno| {
            in.wq.releaseAll();
            updateInterest(t);
            return fatalErrno(t, errno, names.msg_write);
        },
    };
    in.wq.consume(rc);
    if (!maybeResume(t)) try pendingToRun(t);
    if (in.pending() > 0) return;
    updateInterest(t);
    if (in.closing) {
        if (in.conn_lost == 0) {
            in.conn_lost += 1;
            if (!scheduleConnectionLost(t, py.none())) try pendingToRun(t);
        }
    } else if (in.eof) {
        sockio.shutdownWrite(in.sysFd());
    }
}

/// The socket is writable and the buffer empty during loop.sendfile():
/// hand the event to its callback (it may end the sendfile, so hold it).
fn sendfileReady(t: *Transport, cb: *Obj) core.RunError!void {
    py.incref(cb);
    defer py.decref(cb);
    const r = c.PyObject_CallNoArgs(cb) orelse return pendingToRun(t);
    py.decref(r);
}

// --------------------------------------------------------------- methods

const innerOrRaise = object.innerOrRaise;

/// How the transport reads for its protocol: `_setup`'s and
/// `_set_protocol`'s last argument, False (data_received), True
/// (get_buffer and buffer_updated) or the buffer object the protocol's
/// get_buffer() returns every time (buffer_updated only).
const ReadMode = struct {
    buffered: bool,
    fixed_buffer: ?*Obj,

    fn parse(arg: *Obj) ?ReadMode {
        if (c.Py_TYPE(arg) == &c.PyBool_Type) return .{ .buffered = py.isTrue(arg), .fixed_buffer = null };
        if (c.PyObject_CheckBuffer(arg) == 0) {
            _ = py.raise(c.PyExc_TypeError, "reads must be True, False or a buffer");
            return null;
        }
        return .{ .buffered = true, .fixed_buffer = arg };
    }

    fn apply(mode: ReadMode, in: *Inner) void {
        in.buffered = mode.buffered;
        const old = in.fixed_buffer;
        in.fixed_buffer = if (mode.fixed_buffer) |b| py.newref(b) else null;
        py.xdecref(old);
    }
};

/// `_setup(loop, fd, protocol, reads, sock)`: registers the fd with the
/// loop's reactor (no interest yet) and takes the reactor's reference.
/// `sock` is the user's socket the fd came from (see `Inner.sock_owner`),
/// or None for the loop's own.
fn setup(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    if (nargs != 5) return py.raise(c.PyExc_TypeError, "_setup(loop, fd, protocol, reads, sock)");
    const to = object.target(t, args[0], args[1]) orelse return null;
    const reads = ReadMode.parse(args[3].?) orelse return null;
    const registered = loop_mod.claimFd(to.loop, to.fd) orelse return null;
    const sock: ?*Obj = if (py.isNone(args[4])) null else args[4].?;
    const in = object.newInner(t, to, registered, sock) orelse return null;
    const joined = object.join(t, in, to, args[2].?, sock) orelse return null;
    reads.apply(in); // after anything that fails: it takes references
    return joined;
}

/// `_detach()`: leave the reactor and drop its reference. Called once
/// connection_lost ran, before the socket is closed (the fd may be reused).
fn detach(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    leave(py.cast(Transport, self.?));
    return py.newref(py.none());
}

/// Drops what is queued and leaves the reactor (see `detach`).
fn leave(t: *Transport) void {
    const in = t.inner orelse return;
    in.wq.releaseAll();
    in.cork.release();
    releaseRx(in, object.loopOf(t));
    object.leaveReactor(t, in);
}

/// An evicted transport's failure (`shared.evictIfStale`): the EBADF its
/// next send would meet, through `_fatal_error`: connection_lost with
/// OSError(EBADF) next pass. False with the Python error set when it must
/// abort the caller.
pub fn failGone(t: *Transport) bool {
    fatalErrno(t, sockio.ebadf, names.msg_gone) catch return false;
    return true;
}

// ---------------------------------------------------- served connections

/// The Python classes a served connection is made of, handed over once by
/// `zloop._net` (`_zloop._install_net`).
pub const Classes = struct {
    /// `zloop._net._SocketTransport`, the class of every stream transport.
    transport: *Obj,
    /// `zloop._tls._SSLProtocol`: its transport reads into the one buffer
    /// it gives out (see `ReadMode`).
    ssl_protocol: *Obj,
    buffered_protocol: *Obj,
    /// `asyncio.trsock.TransportSocket` and `socket.socket`.
    transport_socket: *Obj,
    socket: *Obj,
};
pub var classes: ?Classes = null;

/// `_install_net(transport, ssl_protocol, buffered_protocol,
/// transport_socket, socket)`: see `Classes`.
pub fn installNet(_: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const usage = "_install_net(transport, ssl_protocol, buffered_protocol, transport_socket, socket)";
    if (nargs != 5) return py.raise(c.PyExc_TypeError, usage);
    if (c.PyType_Check(args[0]) == 0 or c.PyType_IsSubtype(@ptrCast(args[0]), object.type_obj.?) == 0) {
        return py.raise(c.PyExc_TypeError, "_install_net(): not a SocketTransportCore class");
    }
    if (classes) |old| inline for (.{ old.transport, old.ssl_protocol, old.buffered_protocol, old.transport_socket, old.socket }) |o| py.decref(o);
    classes = .{
        .transport = py.newref(args[0].?),
        .ssl_protocol = py.newref(args[1].?),
        .buffered_protocol = py.newref(args[2].?),
        .transport_socket = py.newref(args[3].?),
        .socket = py.newref(args[4].?),
    };
    return py.newref(py.none());
}

pub fn isTransport(o: *Obj) bool {
    return c.PyObject_TypeCheck(o, object.type_obj.?) != 0;
}

/// What a served connection takes from its listener (accept.zig).
pub const Listener = struct {
    /// `socket.socket(family, type, proto, fileno)` arguments of an
    /// accepted socket: the listener's own (`type` with SOCK_NONBLOCK, so
    /// that CPython sets the timeout to 0 without a syscall).
    family: u16,
    sock_type: i32,
    proto: i32,
    /// The listener's `sockname`, when its connections share it (see
    /// `sockaddr.sharedByAccepted`); else each asks `getsockname` once.
    sockname: ?*Obj,
    /// TCP: TCP_NODELAY on each connection, as asyncio's `_set_nodelay`.
    nodelay: bool,
};

/// Python 3.15 (gh-140947): a transport's callbacks run in its own
/// context (`Inner.context_fixed`).
const transport_owns_context = c.PY_VERSION_HEX >= 0x030F0000;

/// A served connection's transport, made natively: what
/// `_SocketTransport(loop, sock, protocol, extra={"peername": addr},
/// server=server)` does for asyncio's `_accept_connection2`, without a
/// socket object and without Python: `protocol.connection_made` looked up
/// (a factory that returned no protocol fails here, as in asyncio), the fd
/// registered with the reactor, the server's count, TCP_NODELAY, and
/// connection_made then reading queued as one step. `ctx` is the
/// connection's context, where its protocol factory ran: connection_made
/// runs in it, reading in a copy taken now (3.15: both in it, the
/// transport's own). Takes `fd` whatever happens: closed on failure.
/// Returns a new reference, or null with the Python error set.
pub fn serve(l: *loop_mod.Loop, fd: i32, protocol: *Obj, conns: ?*Obj, from: *const Listener, peer: sockaddr.Lazy, ctx: *Obj) ?*Obj {
    var peer_name = peer;
    const t = make(l, fd, protocol, from, ctx) orelse {
        peer_name.release();
        sockio.sys.close(fd);
        return null;
    };
    // The transport owns the fd from here.
    const in = t.inner.?;
    in.lazy.peer = peer_name;
    if (conns) |s| server.attach(s, t);
    if (from.nodelay) sockio.setTcpNodelay(fd);
    if (queueStep(t)) return py.obj(t);
    // Out of memory for the ready queue: the connection ends here.
    py.clear(&in.start_cb);
    py.clear(&in.start_ctx);
    const ok = letGo(t);
    std.debug.assert(ok or c.PyErr_Occurred() != null);
    py.decref(py.obj(t));
    return null;
}

/// `serve`'s transport, set up and holding `fd` (no server yet, nothing
/// queued), or null (the fd still the caller's).
fn make(l: *loop_mod.Loop, fd: i32, protocol: *Obj, from: *const Listener, ctx: *Obj) ?*Transport {
    const cls = classes orelse {
        _ = py.raise(c.PyExc_RuntimeError, "zloop._net is not installed");
        return null;
    };
    const made = c.PyObject_GetAttr(protocol, names.connection_made) orelse return null;
    var reads = readsFor(protocol) orelse {
        py.decref(made);
        return null;
    };
    defer reads.release();
    const read_ctx: ?*Obj = if (transport_owns_context) null else c.PyContext_Copy(ctx) orelse {
        py.decref(made);
        return null;
    };
    var local = localName(fd, from) orelse {
        py.decref(made);
        py.xdecref(read_ctx);
        return null;
    };
    const raw = py.allocInstance(@ptrCast(cls.transport)) orelse {
        py.decref(made);
        py.xdecref(read_ctx);
        local.release();
        return null;
    };
    const t = py.cast(Transport, raw);
    const registered = loop_mod.claimFd(l, fd) orelse return unmade(t, made, read_ctx, &local);
    const in = gpa.create(Inner) catch {
        _ = c.PyErr_NoMemory();
        return unmade(t, made, read_ctx, &local);
    };
    in.* = .{
        .owner = t,
        .w = .{ .fd = fd, .on_ready = shared.onReady, .registered = registered },
        .lazy = .{
            .local = local,
            .family = from.family,
            .sock_type = from.sock_type,
            .proto = from.proto,
            .sock = true,
            .peername = true,
            .sockname = true,
            .socket = true,
        },
        .start_cb = made,
        .start_ctx = py.newref(ctx),
        .context = read_ctx orelse py.newref(ctx),
        .context_fixed = transport_owns_context,
    };
    l.reactor.attach(&in.w) catch |err| {
        in.lazy.local = .none;
        in.start_cb = null;
        py.decref(in.start_ctx.?);
        py.decref(in.context.?);
        gpa.destroy(in);
        _ = loop_mod.attachFailed(err);
        return unmade(t, made, read_ctx, &local);
    };
    reads.mode.apply(in);
    in.attached = true;
    t.inner = in;
    t.loop = py.newref(py.obj(l));
    t.protocol = py.newref(protocol);
    t.protocol_connected = true;
    py.incref(py.obj(t)); // the reactor's reference, dropped by leave()
    return t;
}

fn unmade(t: *Transport, made: *Obj, read_ctx: ?*Obj, local: *sockaddr.Lazy) ?*Transport {
    py.decref(made);
    py.xdecref(read_ctx);
    local.release();
    py.decref(py.obj(t));
    return null;
}

/// The connection's `sockname`: its listener's, or what getsockname says.
fn localName(fd: i32, from: *const Listener) ?sockaddr.Lazy {
    if (from.sockname) |shared_name| return .{ .made = py.newref(shared_name) };
    // A failure: as asyncio's `sock.getsockname()` failing in the
    // constructor.
    const addr = sockio.sockName(fd) orelse return .none;
    return sockaddr.Lazy.of(&addr.storage, addr.len);
}

/// The read mode `_net._reads(protocol)` gives, with the reference to a
/// fixed buffer `release` lets go of.
const Reads = struct {
    mode: ReadMode,

    fn release(r: *Reads) void {
        if (r.mode.fixed_buffer) |b| py.decref(b);
    }
};

fn readsFor(protocol: *Obj) ?Reads {
    const cls = classes.?;
    if (py.obj(c.Py_TYPE(protocol)) == cls.ssl_protocol) {
        const hint = c.PyLong_FromLong(-1) orelse return null;
        defer py.decref(hint);
        const buf = py.callMethod(protocol, common.get_buffer, .{hint}) orelse return null;
        const mode = ReadMode.parse(buf) orelse {
            py.decref(buf);
            return null;
        };
        return .{ .mode = mode };
    }
    const buffered = c.PyObject_IsInstance(protocol, cls.buffered_protocol);
    if (buffered < 0) return null;
    return .{ .mode = .{ .buffered = buffered == 1, .fixed_buffer = null } };
}

/// Queues the transport's next step (`runStep`); false with MemoryError.
fn queueStep(t: *Transport) bool {
    const in = t.inner.?;
    object.loopOf(t).reactor.callSoon(&in.step) catch {
        _ = c.PyErr_NoMemory();
        return false;
    };
    py.incref(py.obj(t)); // the queue's reference
    return true;
}

/// The transport's step in the ready queue: its start (connection_made,
/// then reading), or its end (`_call_connection_lost`). The start is
/// queued first and only once, so while `start_cb` is set this entry is it.
fn runStep(cb: *core.Callback) core.RunError!void {
    const in: *Inner = @fieldParentPtr("step", cb);
    const t = in.owner;
    defer py.decref(py.obj(t)); // the queue's reference
    if (in.start_cb != null) return begin(t);
    return end(t);
}

fn dropStep(cb: *core.Callback) void {
    const in: *Inner = @fieldParentPtr("step", cb);
    if (in.start_cb != null) {
        py.clear(&in.start_cb);
        py.clear(&in.start_ctx);
    } else {
        py.clear(&in.lost_exc);
        py.clear(&in.lost_ctx);
    }
    py.decref(py.obj(in.owner));
}

/// asyncio's two handles `protocol.connection_made(transport)` and
/// `transport._add_reader(...)`, run back to back (nothing can come
/// between them in asyncio's queue either).
fn begin(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    const cb = in.start_cb.?;
    const ctx = in.start_ctx.?;
    in.start_cb = null;
    in.start_ctx = null;
    defer py.decref(cb);
    defer py.decref(ctx);
    const made = callIn(t, ctx, cb, py.obj(t));
    // Only once connection_made ran may data arrive; `in.context` is the
    // reading context already. Reading starts even when connection_made
    // raised KeyboardInterrupt or SystemExit out of the loop: asyncio's
    // reader is a second handle, which the next run still runs.
    in.started = true;
    updateInterest(t);
    return made;
}

/// asyncio's `_call_connection_lost(exc)` handle.
fn end(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    const exc = in.lost_exc.?;
    const ctx = in.lost_ctx.?;
    in.lost_exc = null;
    in.lost_ctx = null;
    defer py.decref(exc);
    defer py.decref(ctx);
    if (c.PyContext_Enter(ctx) < 0) return pendingToRun(t);
    const ok = callConnectionLost(t, exc);
    const failed = if (ok) null else py.fetchException();
    if (c.PyContext_Exit(ctx) < 0) {
        py.xdecref(failed);
        return pendingToRun(t);
    }
    const pending = failed orelse return;
    const m = c.PyObject_GetAttr(py.obj(t), common.call_connection_lost) orelse {
        py.decref(pending);
        return pendingToRun(t);
    };
    defer py.decref(m);
    return reportStep(t, ctx, m, exc, pending);
}

/// `cb(arg)` in `ctx`, as a Handle runs it (see `reportStep`).
fn callIn(t: *Transport, ctx: *Obj, cb: *Obj, arg: *Obj) core.RunError!void {
    if (c.PyContext_Enter(ctx) < 0) return pendingToRun(t);
    const r = c.PyObject_CallOneArg(cb, arg);
    const failed = if (r) |o| blk: {
        py.decref(o);
        break :blk null;
    } else py.fetchException();
    if (c.PyContext_Exit(ctx) < 0) {
        py.xdecref(failed);
        return pendingToRun(t);
    }
    return reportStep(t, ctx, cb, arg, failed orelse return);
}

/// The exception `failed` (consumed) of `cb(arg)` run in `ctx`, reported
/// as a Handle's run reports it, once out of the context: to the loop's
/// exception handler in a Handle's words (the Handle is made only now);
/// KeyboardInterrupt and SystemExit abort the loop.
fn reportStep(t: *Transport, ctx: *Obj, cb: *Obj, arg: *Obj, failed: *Obj) core.RunError!void {
    py.restoreException(failed);
    if (py.pendingIsFatal()) return error.Aborted;
    const exc = py.fetchException() orelse return;
    defer py.decref(exc);
    const h = handle.create(&handle.HandleType, .once, t.loop.?, cb, &.{arg}, ctx) orelse
        return pendingToRun(t);
    defer py.decref(py.obj(h));
    const r = py.callMethod(t.loop.?, state.get().str_report, .{ py.obj(h), exc });
    if (r) |o| py.decref(o) else try pendingToRun(t);
}

/// `_call_connection_lost(exc)`: connection_lost (while the protocol is
/// connected) and, whatever it does, the transport lets go of the reactor,
/// its socket, its protocol, its loop and the server's count, as asyncio's.
fn callConnectionLostMethod(self: ?*Obj, exc: ?*Obj) callconv(.c) ?*Obj {
    if (!callConnectionLost(py.cast(Transport, self.?), exc.?)) return null;
    return py.newref(py.none());
}

fn callConnectionLost(t: *Transport, exc: *Obj) bool {
    py.incref(py.obj(t));
    defer py.decref(py.obj(t));
    var ok = failSendfile(t, exc);
    if (ok and t.protocol_connected) {
        if (t.protocol) |p| ok = succeeded(py.callMethod(p, names.connection_lost, .{exc}));
    }
    const failed = if (ok) null else py.fetchException();
    const let_go = letGo(t);
    const pending = failed orelse return let_go;
    // connection_lost's error wins; one from the teardown is printed.
    if (!let_go) c.PyErr_WriteUnraisable(py.obj(t));
    py.restoreException(pending);
    return false;
}

/// The sendfile in progress fails with the connection (as asyncio's
/// empty waiter).
fn failSendfile(t: *Transport, exc: *Obj) bool {
    const fut = t.sendfile_fut orelse return true;
    return succeeded(py.callMethod(py.obj(t), names.sendfile_lost, .{ fut, exc }));
}

/// The teardown after connection_lost: the reactor, the socket (so the fd
/// number can be reused only after the reactor forgot it), the protocol,
/// the loop, the server's count. False with the first error set.
fn letGo(t: *Transport) bool {
    leave(t);
    var ok = closeSocket(t);
    const failed = if (ok) null else py.fetchException();
    if (t.inner) |in| (ReadMode{ .buffered = false, .fixed_buffer = null }).apply(in);
    py.clear(&t.protocol);
    t.protocol = py.newref(py.none());
    t.lost = true;
    ok = server.detach(t);
    const pending = failed orelse return ok;
    if (!ok) c.PyErr_WriteUnraisable(py.obj(t));
    py.restoreException(pending);
    return false;
}

/// Closes the socket: `sock.close()`, or the fd itself while no socket
/// object was made for it.
fn closeSocket(t: *Transport) bool {
    if (t.sock) |s| {
        t.sock = null;
        defer py.decref(s);
        return succeeded(py.callMethod(s, names.close, .{}));
    }
    const in = t.inner orelse return true;
    if (!in.lazy.sock) return true;
    in.lazy.sock = false;
    sockio.sys.close(in.w.fd);
    return true;
}

/// `_close_socket()`: the finalizer's close of an unclosed transport's
/// socket (see `finalize`).
fn closeSocketMethod(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    if (!closeSocket(py.cast(Transport, self.?))) return null;
    return py.newref(py.none());
}

/// The socket object, made now for a served connection (it then owns the
/// fd); null with an exception set.
fn socketObject(t: *Transport) ?*Obj {
    if (t.sock) |s| return py.newref(s);
    const in = t.inner orelse return py.newref(py.none());
    if (t.lost or !in.lazy.sock) return py.newref(py.none());
    const z = &in.lazy;
    const s = newSocket(z.family, z.sock_type, z.proto, in.w.fd) orelse return null;
    z.sock = false;
    t.sock = s;
    return py.newref(s);
}

/// `socket.socket(family, type, proto, fd)`; fd < 0: a socket of that
/// kind made and closed at once (what a lost connection's `socket` extra
/// shows on asyncio: `fd=-1`). Where `type` cannot carry SOCK_NONBLOCK
/// (`sys.sock_nonblock` is 0: macOS, the BSDs, the portable path),
/// `setblocking(False)` gives the socket object the timeout 0 the flag
/// gives it elsewhere (the fd itself is non-blocking already), as
/// accept.zig's `wrapSocket` does.
fn newSocket(family: u16, sock_type: i32, proto: i32, fd: i32) ?*Obj {
    const cls = classes.?;
    const family_obj = c.PyLong_FromLong(family) orelse return null;
    defer py.decref(family_obj);
    const type_obj = c.PyLong_FromLong(sock_type) orelse return null;
    defer py.decref(type_obj);
    const proto_obj = c.PyLong_FromLong(proto) orelse return null;
    defer py.decref(proto_obj);
    if (fd < 0) {
        const s = py.call(cls.socket, .{ family_obj, type_obj, proto_obj }) orelse return null;
        if (succeeded(py.callMethod(s, names.close, .{}))) return s;
        py.decref(s);
        return null;
    }
    const fd_obj = c.PyLong_FromLong(fd) orelse return null;
    defer py.decref(fd_obj);
    const s = py.call(cls.socket, .{ family_obj, type_obj, proto_obj, fd_obj }) orelse return null;
    if (sockio.sys.sock_nonblock != 0) return s;
    if (succeeded(py.callMethod(s, names.setblocking, .{py.boolean(false)}))) return s;
    // The socket object owns the fd now: detached first, so that the fd
    // stays the transport's.
    if (!succeeded(py.callMethod(s, names.detach, .{}))) c.PyErr_WriteUnraisable(s);
    py.decref(s);
    return null;
}

/// The `extra` entries a served connection makes on first use.
const Entry = enum { peername, sockname, socket };

/// A lazy `extra` entry, made.
fn lazyEntry(t: *Transport, which: Entry) ?*Obj {
    const z = &t.inner.?.lazy;
    switch (which) {
        .peername => return z.peer.object(),
        .sockname => return z.local.object(),
        .socket => {
            const s = if (t.lost and t.sock == null)
                newSocket(z.family, z.sock_type, z.proto, -1)
            else
                socketObject(t);
            const sock = s orelse return null;
            defer py.decref(sock);
            return py.call(classes.?.transport_socket, .{sock});
        },
    }
}

/// Makes the lazy `extra` entries `name` asks for (all of them for a name
/// that is a str subclass), into `t.extra`; false with an exception set.
fn makeExtra(t: *Transport, name: ?*Obj) bool {
    const z = &(t.inner orelse return true).lazy;
    if (!z.pending()) return true;
    const all = name == null or (c.PyUnicode_Check(name.?) != 0 and c.PyUnicode_CheckExact(name.?) == 0);
    // In asyncio's order: the server's peername, then the transport's own.
    inline for (.{ "peername", "socket", "sockname" }) |key| {
        const key_obj = @field(names, key);
        const wanted = all or (name.? == key_obj or
            (c.PyUnicode_CheckExact(name.?) != 0 and c.PyUnicode_Compare(name.?, key_obj) == 0));
        if (wanted and @field(z, key)) {
            const value = lazyEntry(t, @field(Entry, key)) orelse return false;
            defer py.decref(value);
            if (t.extra == null) t.extra = c.PyDict_New() orelse return false;
            if (c.PyObject_SetItem(t.extra.?, key_obj, value) < 0) return false;
            @field(z, key) = false;
        }
    }
    return true;
}

// ------------------------------------------------ attributes of asyncio's

/// `get_extra_info(name, default=None)`: asyncio's `self._extra.get(name,
/// default)`, a served connection's entries made on first use. The
/// socket goes out after what earlier write() calls held back (see
/// `Cork`): whoever sends on it directly comes after them.
fn getExtraInfo(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    var a: [2]?*Obj = undefined;
    if (kwnames == null and nargs >= 1 and nargs <= 2) {
        a = .{ args[0], if (nargs == 2) args[1] else null };
    } else if (!py.bindArgs("get_extra_info", &.{ names.name, names.default }, 1, args, nargs, kwnames, &a)) {
        return null;
    }
    const name = a[0].?;
    const default = a[1] orelse py.none();
    if (name == names.socket or (c.PyUnicode_Check(name) != 0 and c.PyUnicode_Compare(name, names.socket) == 0)) {
        if (!uncork(t)) return null;
    }
    if (c.PyUnicode_Check(name) != 0 and !makeExtra(t, name)) return null;
    const extra = t.extra orelse {
        // An empty dict's get(): an unhashable name still raises.
        if (c.PyObject_Hash(name) == -1) return null;
        return py.newref(default);
    };
    if (c.PyDict_CheckExact(extra) != 0) {
        const v = c.PyDict_GetItemWithError(extra, name) orelse {
            if (c.PyErr_Occurred() != null) return null;
            return py.newref(default);
        };
        return py.newref(v);
    }
    return py.callMethod(extra, names.get, .{ name, default });
}

/// `_extra`: every entry made (see `Lazy`); the dict made if none is.
fn getExtra(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    if (!makeExtra(t, null)) return null;
    if (t.extra == null) t.extra = c.PyDict_New() orelse return null;
    return py.newref(t.extra.?);
}

fn setExtra(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    const t = py.cast(Transport, self.?);
    const v = value orelse {
        _ = py.raise(c.PyExc_AttributeError, "cannot delete _extra");
        return -1;
    };
    const old = t.extra;
    t.extra = py.newref(v);
    py.xdecref(old);
    // Replaced: the entries not made yet are gone with the old dict.
    if (t.inner) |in| {
        in.lazy.peername = false;
        in.lazy.sockname = false;
        in.lazy.socket = false;
    }
    return 0;
}

/// `_sock`: the socket (made now for a served connection); None once the
/// connection is lost.
fn getSock(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return socketObject(py.cast(Transport, self.?));
}

fn setSock(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    return setOptional(&py.cast(Transport, self.?).sock, value);
}

/// A setter's `value` into `field`: None (or a delete) makes it null.
fn setOptional(field: *?*Obj, value: ?*Obj) c_int {
    const old = field.*;
    field.* = if (value == null or py.isNone(value)) null else py.newref(value.?);
    py.xdecref(old);
    return 0;
}

/// `_loop`: None once the connection is lost, as asyncio's.
fn getLoopAttr(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    if (t.lost) return py.newref(py.none());
    return py.newref(t.loop orelse py.none());
}

fn getSendfileFut(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.newref(py.cast(Transport, self.?).sendfile_fut orelse py.none());
}

fn setSendfileFut(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    return setOptional(&py.cast(Transport, self.?).sendfile_fut, value);
}

fn getProtocolConnected(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.boolean(py.cast(Transport, self.?).protocol_connected);
}

fn setProtocolConnected(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    const v = c.PyObject_IsTrue(value orelse py.none());
    if (v < 0) return -1;
    py.cast(Transport, self.?).protocol_connected = v == 1;
    return 0;
}

/// `_closed`: the connection is lost and the socket closed (what repr()
/// calls "closed", asyncio's `_sock is None`).
fn getClosed(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    return py.boolean(t.lost or (t.sock == null and !(if (t.inner) |in| in.lazy.sock else false)));
}

/// As `_SocketOwner.__del__` was: a transport collected with its socket
/// open warns (ResourceWarning, through `_warn_unclosed`) and closes it.
pub fn finalize(self: ?*Obj) callconv(.c) void {
    const t = py.cast(Transport, self.?);
    const lazy_open = if (t.inner) |in| in.lazy.sock else false;
    if (t.lost or (t.sock == null and !lazy_open)) return;
    const saved = py.fetchException();
    const r = py.callMethod(self.?, names.warn_unclosed, .{});
    if (r) |o| py.decref(o) else c.PyErr_WriteUnraisable(self.?);
    if (saved) |e| py.restoreException(e);
}

/// `_set_context(ctx)`: the context every read-side callback runs in from
/// now on, whoever resumes reading (3.15's transports keep their own).
fn setContext(self: ?*Obj, ctx: ?*Obj) callconv(.c) ?*Obj {
    const in = innerOrRaise(self) orelse return null;
    if (c.Py_TYPE(ctx.?) != &c.PyContext_Type) return py.raise(c.PyExc_TypeError, "_set_context(contextvars.Context)");
    py.xdecref(in.context);
    in.context = py.newref(ctx.?);
    in.context_fixed = true;
    return py.newref(py.none());
}

/// `_paused`: pause_reading() is in effect (the attribute asyncio's
/// selector transports carry, read by code that waits for a pause).
fn getPaused(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.boolean(if (py.cast(Transport, self.?).inner) |in| in.paused else false);
}

fn setProtocolNative(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    if (nargs != 2) return py.raise(c.PyExc_TypeError, "_set_protocol(protocol, reads)");
    const reads = ReadMode.parse(args[1].?) orelse return null;
    if (t.inner) |in| reads.apply(in);
    py.clear(&t.protocol);
    t.protocol = py.newref(args[0].?);
    updateInterest(t); // a buffered protocol reads the usual way
    return py.newref(py.none());
}

fn isBytesLike(o: *Obj) bool {
    return c.PyBytes_Check(o) != 0 or c.PyByteArray_Check(o) != 0 or c.PyMemoryView_Check(o) != 0;
}

/// write() once the connection is lost: dropped, and logged after a few
/// (asyncio's `LOG_THRESHOLD_FOR_CONNLOST_WRITES`), never raised.
fn writeAfterLost(t: *Transport) ?*Obj {
    const in = t.inner.?;
    if (in.conn_lost >= log_threshold_conn_lost and !callSelf(t, common.warn_lost)) return null;
    in.conn_lost += 1;
    return py.newref(py.none());
}

/// write() of a bytes-like object whose buffer cannot be taken whole (a
/// non-contiguous memoryview). asyncio's write() checks emptiness and a
/// lost connection first, then its `sock.send()` raises: a fatal write
/// error (exception handler, connection_lost(exc)), not an exception out
/// of write().
fn writeUnsendable(t: *Transport, d: *Obj) ?*Obj {
    if (c.PyErr_ExceptionMatches(c.PyExc_BufferError) == 0) return null;
    const exc = py.fetchException() orelse return null;
    const n = c.PyObject_Length(d);
    if (n <= 0 or t.inner.?.conn_lost > 0) {
        py.decref(exc);
        if (n < 0) return null;
        if (n == 0) return py.newref(py.none());
        return writeAfterLost(t);
    }
    fatal(t, exc, names.msg_write) catch return null;
    if (c.PyErr_Occurred() != null) return null;
    return py.newref(py.none());
}

/// `write(data)` and `writelines(list_of_data)` take their argument by
/// position (the hot path, as cheap as METH_O) or by keyword, as asyncio's
/// Python methods do.
fn writeMethod(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) callconv(.c) ?*Obj {
    if (kwnames == null and nargs == 1) return @call(.always_inline, write, .{ self, args[0] });
    var a: [1]?*Obj = undefined;
    if (!py.bindArgs("write", &.{common.data}, 1, args, nargs, kwnames, &a)) return null;
    return write(self, a[0]);
}

fn writelinesMethod(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) callconv(.c) ?*Obj {
    if (kwnames == null and nargs == 1) return writelines(self, args[0]);
    var a: [1]?*Obj = undefined;
    if (!py.bindArgs("writelines", &.{common.list_of_data}, 1, args, nargs, kwnames, &a)) return null;
    return writelines(self, a[0]);
}

/// write()'s TypeError for data that is not bytes-like, in the words of
/// the asyncio it is built for (3.14 names the three types it takes).
const write_type_error = if (c.PY_MINOR_VERSION >= 14)
    "data argument must be a bytes, bytearray, or memoryview object, not '%.100s'"
else
    "data argument must be a bytes-like object, not '%.100s'";

fn write(self: ?*Obj, data: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    const d = data.?;
    if (!isBytesLike(d)) {
        return c.PyErr_Format(c.PyExc_TypeError, write_type_error, c.Py_TYPE(d).*.tp_name);
    }
    const in = innerOrRaise(self) orelse return null;
    if (in.eof) return py.raise(c.PyExc_RuntimeError, "Cannot call write() after write_eof()");
    // As asyncio's selector transport while its sendfile waiter is set.
    if (in.sendfile_writer != null) {
        return py.raise(c.PyExc_RuntimeError, "unable to write; sendfile is in progress");
    }
    // An exact `bytes` (nearly every write) is read in place, as `bytesView`
    // does; anything else through the buffer protocol.
    const exact = c.PyBytes_CheckExact(d) != 0;
    var view: c.Py_buffer = undefined;
    if (exact) {
        view.buf = c.PyBytes_AS_STRING(d);
        view.len = c.PyBytes_GET_SIZE(d);
        view.obj = d;
    } else if (c.PyObject_GetBuffer(d, &view, c.PyBUF_SIMPLE) < 0) return writeUnsendable(t, d);
    defer if (!exact) c.PyBuffer_Release(&view);
    const all = viewBytes(&view);
    if (all.len == 0) return py.newref(py.none());
    if (in.conn_lost > 0) return writeAfterLost(t);
    if (hold(t, view.obj, all)) return py.newref(py.none());
    if (!uncork(t)) return null;
    if (in.conn_lost > 0) return writeAfterLost(t);
    var sent: usize = 0;
    if (in.pending() == 0) {
        switch (sockio.send(in.sysFd(), all)) {
            .done => |n| sent = n,
            .would_block => {},
            .failed => |errno| return writeFailed(t, errno),
        }
        if (sent == all.len) return py.newref(py.none());
    }
    queueData(in, view.obj, all[sent..]) catch return c.PyErr_NoMemory();
    return writeQueued(t);
}

/// Holds `data` (inside `exporter`) for the flush at the end of the running
/// callback, if it may be (see `Cork`): true when held.
fn hold(t: *Transport, exporter: ?*Obj, data: []const u8) bool {
    const in = t.inner.?;
    const k = &in.cork;
    // Closing: a write() that comes while close() waits for the buffer (a
    // resume_writing() callback's, from writeReady) must join that buffer,
    // which the connection's end waits for; held, it would be dropped.
    if (in.pending() != 0 or in.closing or k.n == cork_slots) return false;
    if (k.size + data.len > @min(cork_max_bytes, in.high)) return false;
    const o = exporter orelse return false;
    if (c.PyBytes_CheckExact(o) == 0) return false;
    const l = object.loopOf(t);
    if (!l.has_reactor or !l.reactor.in_callbacks) return false;
    if (!in.flush.queued) {
        l.reactor.deferFlush(&in.flush);
        py.incref(py.obj(t)); // the flush's reference
    }
    k.iov[k.n] = .{ .base = data.ptr, .len = data.len };
    k.held[k.n] = py.newref(o);
    k.n += 1;
    k.size += data.len;
    return true;
}

/// Sends what `hold` held, as the write() calls would have sent it; a rest
/// the socket does not take is buffered. false: a Python error is set.
fn uncork(t: *Transport) bool {
    const in = t.inner orelse return true;
    if (in.cork.n == 0) return true;
    var k = in.cork;
    in.cork = .{};
    defer k.release();
    // Lost meanwhile (a fatal error, _force_close): dropped as a buffer is.
    if (in.conn_lost > 0) return true;
    std.debug.assert(in.pending() == 0);
    const fd = in.sysFd();
    const got = if (k.n == 1)
        sockio.send(fd, k.iov[0].base[0..k.iov[0].len])
    else
        sockio.sendv(fd, k.iov[0..k.n]);
    var sent: usize = 0;
    switch (got) {
        .done => |n| sent = n,
        .would_block => {},
        .failed => |errno| return succeeded(writeFailed(t, errno)),
    }
    if (sent == k.size) return true;
    var skip = sent;
    for (k.iov[0..k.n], k.held[0..k.n]) |v, o| {
        const seg = v.base[0..v.len];
        if (skip >= seg.len) {
            skip -= seg.len;
            continue;
        }
        queueData(in, o, seg[skip..]) catch {
            _ = c.PyErr_NoMemory();
            return false;
        };
        skip = 0;
    }
    return succeeded(writeQueued(t));
}

/// The reactor's flush: the callback that held writes has returned.
fn flushCork(cb: *core.Callback) core.RunError!void {
    const f: *core.Flush = @fieldParentPtr("cb", cb);
    const in: *Inner = @fieldParentPtr("flush", f);
    const t = in.owner;
    defer py.decref(py.obj(t));
    // Also after a callback that raised KeyboardInterrupt or SystemExit
    // (the reactor flushes then too): its exception waits meanwhile.
    const aside = py.Aside.take();
    defer aside.restore();
    if (!uncork(t)) try pendingToRun(t);
}

/// `uncork` once the callback that held the writes returned `called`,
/// which may have raised KeyboardInterrupt or SystemExit out of the loop:
/// what it wrote goes out all the same (asyncio's writes had gone out
/// already), its exception set aside meanwhile (an error of the flush
/// itself is then printed: see `py.Aside`).
fn uncorkAfter(t: *Transport, called: core.RunError!void) bool {
    called catch {
        const aside = py.Aside.take();
        defer aside.restore();
        _ = uncork(t);
        return true;
    };
    return uncork(t);
}

/// The loop closes with the flush unrun (a pass aborted inside a flush).
fn dropCork(cb: *core.Callback) void {
    const f: *core.Flush = @fieldParentPtr("cb", cb);
    const in: *Inner = @fieldParentPtr("flush", f);
    in.cork.release();
    py.decref(py.obj(in.owner));
}

fn viewBytes(view: *const c.Py_buffer) []const u8 {
    const p: [*]const u8 = @ptrCast(view.buf);
    return p[0..@intCast(view.len)];
}

/// A send from write()/writelines() failed: a fatal write error (reported
/// through `_fatal_error`), not an exception out of the call, as asyncio.
fn writeFailed(t: *Transport, errno: u16) ?*Obj {
    fatalErrno(t, errno, names.msg_write) catch return null;
    if (c.PyErr_Occurred() != null) return null;
    return py.newref(py.none());
}

/// Something was queued: watch for writability, maybe pause the protocol.
fn writeQueued(t: *Transport) ?*Obj {
    updateInterest(t);
    if (!maybePause(t)) return null;
    return py.newref(py.none());
}

/// The `bytes` whose storage holds `data`, taken from the buffer exporter
/// `exporter`, if those bytes can never change: an exact `bytes`, or a
/// memoryview over one (`memoryview(b)[i:j]`). Anything else may be
/// mutated after write() returns (bytearray, a writable memoryview, a
/// subclass's `__buffer__`, mmap), so it is copied: what write() was given
/// is what is sent, as asyncio 3.11's copying buffer guarantees (3.12 and
/// 3.13 keep a bytearray by reference once buffered, so a later mutation
/// leaks into the stream; zloop keeps 3.11's safer behaviour).
fn immutableOwner(exporter: ?*Obj, data: []const u8) ?*Obj {
    const e = exporter orelse return null;
    const b = if (c.PyBytes_CheckExact(e) != 0)
        e
    else if (c.PyMemoryView_Check(e) != 0)
        c.PyMemoryView_GET_BASE(e) orelse return null
    else
        return null;
    if (c.PyBytes_CheckExact(b) == 0) return null;
    // The view must lie inside the bytes' own storage.
    const start: [*]const u8 = @ptrCast(c.PyBytes_AsString(b));
    const len: usize = @intCast(c.PyBytes_Size(b));
    const lo = @intFromPtr(start);
    const p = @intFromPtr(data.ptr);
    if (p < lo or p + data.len > lo + len) return null;
    return b;
}

/// Queues an unsent rest: by reference when long and immutable, else copied.
fn queueData(in: *Inner, exporter: ?*Obj, data: []const u8) error{OutOfMemory}!void {
    if (data.len >= ref_min_bytes) {
        if (immutableOwner(exporter, data)) |b| return in.wq.appendRef(b, data);
    }
    return in.wq.appendCopy(data);
}

/// Py_buffers of up to this many writelines() items live on the stack.
const views_on_stack = 64;

/// writelines(list_of_data): with nothing queued, the items go out in
/// gathering sendmsg calls, not joined first; the rest is queued as
/// write() queues it. Items are any bytes-like objects (asyncio 3.12+
/// takes `memoryview(item)` of each, 3.11 joins them), and every item's
/// buffer is taken before anything is sent, so a TypeError writes nothing.
/// The guards are asyncio 3.12's (a false argument writes nothing, from
/// 3.12 on); a lost connection counts the call as
/// write() does (3.12 queues such data and never sends it).
fn writelines(self: ?*Obj, arg: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    const in = innerOrRaise(self) orelse return null;
    if (in.eof) return py.raise(c.PyExc_RuntimeError, "Cannot call writelines() after write_eof()");
    if (in.sendfile_writer != null) {
        return py.raise(c.PyExc_RuntimeError, "unable to writelines; sendfile is in progress");
    }
    if (c.PY_MINOR_VERSION >= 12) {
        // asyncio 3.12+ returns at once for a false argument (None, []);
        // 3.11 joins it, a TypeError for None.
        switch (c.PyObject_IsTrue(arg)) {
            0 => return py.newref(py.none()),
            1 => {},
            else => return null,
        }
    }
    // asyncio 3.14+ drops (and counts) the call on a lost connection before
    // it looks at the items, so even all-empty or unsendable ones count.
    if (c.PY_MINOR_VERSION >= 14 and in.conn_lost > 0) return writeAfterLost(t);
    const seq = c.PySequence_Fast(arg, "writelines() argument must be iterable") orelse return null;
    defer py.decref(seq);
    const n: usize = @intCast(c.PySequence_Size(seq));
    if (n == 0) return py.newref(py.none());
    var stack: [views_on_stack]c.Py_buffer = undefined;
    const views = if (n <= views_on_stack)
        stack[0..n]
    else
        gpa.alloc(c.Py_buffer, n) catch return c.PyErr_NoMemory();
    defer if (n > views_on_stack) gpa.free(views);
    const got = takeViews(seq, views) orelse return null;
    defer releaseViews(views[0..got]);
    return writeViews(t, views[0..got]);
}

/// Item `i` of a list or tuple (borrowed), null past a list's end: a
/// Python `__buffer__` called for an earlier item may have shortened it.
/// Read in place (not through PyList_GetItem's call): with 64 small items,
/// the per-item calls cost more than joining them.
fn seqItem(seq: *Obj, i: usize) ?*Obj {
    if (c.PyList_Check(seq) != 0) {
        const list: *c.PyListObject = @ptrCast(@alignCast(seq));
        if (i >= @as(usize, @intCast(list.ob_base.ob_size))) return null;
        return list.ob_item[i];
    }
    const tuple: *c.PyTupleObject = @ptrCast(@alignCast(seq));
    const items: [*]?*Obj = @ptrCast(&tuple.ob_item);
    return items[i];
}

/// Takes each item's buffer; returns how many, or null (error set, none
/// held) when an item is not bytes-like.
fn takeViews(seq: *Obj, views: []c.Py_buffer) ?usize {
    for (views, 0..) |*v, i| {
        const item = seqItem(seq, i) orelse return i;
        if (c.PyBytes_CheckExact(item) != 0) {
            bytesView(item, v);
            continue;
        }
        py.incref(item); // the list may drop it while its __buffer__ runs
        defer py.decref(item);
        if (c.PyObject_GetBuffer(item, v, c.PyBUF_SIMPLE) < 0) {
            releaseViews(views[0..i]);
            return null;
        }
    }
    return views.len;
}

/// An exact `bytes` item's storage, without PyObject_GetBuffer's calls (as
/// `bytes.join` does): the reference in `obj` keeps it. Only `buf`, `obj`
/// and `len` are set; `releaseViews` drops it, never PyBuffer_Release.
fn bytesView(b: *Obj, v: *c.Py_buffer) void {
    v.buf = c.PyBytes_AS_STRING(b);
    v.obj = py.newref(b);
    v.len = c.PyBytes_GET_SIZE(b);
}

/// Releases what `takeViews` took. bytes has no releasebuffer hook, so an
/// exact bytes' view is released by dropping its reference.
fn releaseViews(views: []c.Py_buffer) void {
    for (views) |*v| {
        const o: *Obj = v.obj orelse continue;
        if (c.PyBytes_CheckExact(o) != 0) {
            v.obj = null;
            py.decref(o);
        } else {
            c.PyBuffer_Release(v);
        }
    }
}

/// A position in writelines()' items: the next unsent byte.
const Cursor = struct {
    item: usize = 0,
    offset: usize = 0,

    /// Moves past `sent` bytes (and the empty items after them).
    fn advance(at: *Cursor, views: []const c.Py_buffer, sent: usize) void {
        var left = sent;
        while (at.item < views.len) {
            const rest = viewBytes(&views[at.item]).len - at.offset;
            if (rest > left) {
                at.offset += left;
                return;
            }
            left -= rest;
            at.item += 1;
            at.offset = 0;
        }
        std.debug.assert(left == 0);
    }
};

fn writeViews(t: *Transport, views: []const c.Py_buffer) ?*Obj {
    const in = t.inner.?;
    var total: usize = 0;
    for (views) |*v| total += viewBytes(v).len;
    if (total == 0) return py.newref(py.none());
    if (in.conn_lost > 0) return writeAfterLost(t);
    if (!uncork(t)) return null;
    if (in.conn_lost > 0) return writeAfterLost(t);
    var at: Cursor = .{};
    if (in.pending() == 0) {
        const errno = sendViews(in.sysFd(), views, &at);
        if (errno != 0) return writeFailed(t, errno);
        if (at.item == views.len) return py.newref(py.none());
    }
    var offset = at.offset;
    for (views[at.item..]) |*v| {
        queueData(in, v.obj, viewBytes(v)[offset..]) catch {
            updateInterest(t);
            return c.PyErr_NoMemory();
        };
        offset = 0;
    }
    return writeQueued(t);
}

/// Runs of writelines() items shorter than this are copied together into
/// one iovec, longer ones get their own: a short copy costs less than an
/// iovec (measured on loopback: 64 items of 512 B went out faster joined,
/// 64 of 2 KiB faster gathered), and a long item is never copied.
const gather_min_bytes = 1024;
/// Where one sendmsg's short items are copied; 16 KiB of stack.
const scratch_bytes = 16 * 1024;

/// Sends `views` from `at` in sendmsg calls until all is sent or the
/// socket is full, advancing `at`. Returns the errno of a failed send,
/// else 0. What the socket did not take is still read from the items,
/// not from the scratch copy, so the copy may be thrown away.
fn sendViews(fd: i32, views: []const c.Py_buffer, at: *Cursor) u16 {
    var iov: [iov_max]sockio.iovec_const = undefined;
    var scratch: [scratch_bytes]u8 = undefined;
    while (at.item < views.len) {
        const batch = gatherViews(views, at.*, &iov, &scratch);
        if (batch.iovecs == 0) break; // only empty items were left
        const rc = switch (sockio.sendv(fd, iov[0..batch.iovecs])) {
            .done => |n| n,
            .would_block => return 0,
            .failed => |errno| return errno,
        };
        if (rc < batch.bytes) {
            at.advance(views, rc);
            return 0;
        }
        at.* = batch.end;
    }
    at.* = .{ .item = views.len };
    return 0;
}

const Batch = struct {
    iovecs: usize,
    bytes: usize,
    /// Where the next batch starts.
    end: Cursor,
};

/// Points `iov` at the items from `at` on, in order, until `iov` or
/// `scratch` is full: long items in place, runs of short ones copied into
/// `scratch` and sharing an iovec.
fn gatherViews(views: []const c.Py_buffer, at: Cursor, iov: []sockio.iovec_const, scratch: []u8) Batch {
    var n: usize = 0;
    var bytes: usize = 0;
    var used: usize = 0;
    var in_run = false; // iov[n - 1] is a run of copies ending at `used`
    var i = at.item;
    var offset = at.offset;
    while (i < views.len) : ({
        i += 1;
        offset = 0;
    }) {
        const b = viewBytes(&views[i])[offset..];
        if (b.len == 0) continue;
        const copy = b.len < gather_min_bytes;
        if (copy and used + b.len > scratch.len) break;
        if (!(copy and in_run)) {
            if (n == iov.len) break;
            iov[n] = .{ .base = if (copy) scratch.ptr + used else b.ptr, .len = 0 };
            n += 1;
        }
        if (copy) {
            @memcpy(scratch[used..][0..b.len], b);
            used += b.len;
        }
        iov[n - 1].len += b.len;
        in_run = copy;
        bytes += b.len;
    }
    return .{ .iovecs = n, .bytes = bytes, .end = .{ .item = i, .offset = offset } };
}

fn getWriteBufferSize(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    if (!uncork(t)) return null;
    const n: usize = if (t.inner) |in| in.pending() else 0;
    return c.PyLong_FromSize_t(n);
}

fn canWriteEof(_: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    return py.boolean(true);
}

fn writeEof(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const in = innerOrRaise(self) orelse return null;
    if (in.closing or in.eof) return py.newref(py.none());
    if (!uncork(py.cast(Transport, self.?))) return null;
    in.eof = true;
    if (in.pending() > 0) return py.newref(py.none());
    // A user's socket closed under the transport: asyncio's
    // `sock.shutdown()` raises EBADF out of write_eof().
    const fd = in.sysFd();
    if (fd < 0) return py.raiseErrno(sockio.ebadf);
    sockio.shutdownWrite(fd);
    return py.newref(py.none());
}

/// close(): stop reading; connection_lost(None) once the buffer drained.
fn closeTransport(t: *Transport) bool {
    const in = t.inner orelse return true;
    if (in.closing) return true;
    if (!uncork(t)) return false;
    in.closing = true;
    updateInterest(t);
    if (in.pending() > 0) return true;
    in.conn_lost += 1;
    return scheduleConnectionLost(t, py.none());
}

fn close(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    if (!closeTransport(py.cast(Transport, self.?))) return null;
    return py.newref(py.none());
}

/// `_force_close(exc)`: drop buffered data, connection_lost(exc) next pass.
const forceClose = object.forceClose;

/// abort(): what earlier write() calls handed over reaches the socket, as
/// on asyncio (see `Cork`); anything buffered is dropped.
fn abort(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    if (!uncork(py.cast(Transport, self.?))) return null;
    return forceClose(self, py.none());
}

/// `_sendfile_begin(callback)`: loop.sendfile() takes the socket over (see
/// `Inner.sendfile_writer`); the buffer is flushed first.
fn sendfileBegin(self: ?*Obj, cb: ?*Obj) callconv(.c) ?*Obj {
    const in = innerOrRaise(self) orelse return null;
    if (in.sendfile_writer != null) {
        return py.raise(c.PyExc_RuntimeError, "sendfile is already in progress");
    }
    if (c.PyCallable_Check(cb) == 0) return py.raise(c.PyExc_TypeError, "a callable is required");
    if (!uncork(py.cast(Transport, self.?))) return null;
    in.sendfile_writer = py.newref(cb.?);
    updateInterest(py.cast(Transport, self.?));
    return py.newref(py.none());
}

/// `_sendfile_end()`: write() works again; idempotent.
fn sendfileEnd(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    const in = t.inner orelse return py.newref(py.none());
    py.clear(&in.sendfile_writer);
    updateInterest(t);
    return py.newref(py.none());
}

/// is_closing(): StreamWriter.drain() asks it before anything else, so a
/// `write(); await drain()` that does not yield still sends at drain().
fn isClosing(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    if (!uncork(py.cast(Transport, self.?))) return null;
    return shared.isClosing(self, null);
}

/// `_uncork()`: send held writes now (before the socket is handed out).
fn uncorkMethod(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    if (!uncork(py.cast(Transport, self.?))) return null;
    return py.newref(py.none());
}

// ------------------------------------------------------------ the object

/// The object's own references besides `transport_object`'s, for the
/// collector.
pub fn visitObject(t: *Transport, visit: c.visitproc, arg: ?*anyopaque) c_int {
    inline for (.{ t.sock, t.conns, t.sendfile_fut }) |m| if (m) |o| {
        const rc = visit.?(o, arg);
        if (rc != 0) return rc;
    };
    return 0;
}

/// Its own references besides `transport_object`'s, for the collector.
pub fn visitInner(in: *Inner, visit: c.visitproc, arg: ?*anyopaque) c_int {
    const held = .{ in.sendfile_writer, in.fixed_buffer, in.start_cb, in.start_ctx, in.lost_exc, in.lost_ctx };
    inline for (held) |m| if (m) |o| {
        const rc = visit.?(o, arg);
        if (rc != 0) return rc;
    };
    inline for (.{ in.lazy.peer, in.lazy.local }) |name| if (name == .made) {
        const rc = visit.?(name.made, arg);
        if (rc != 0) return rc;
    };
    // The queued `bytes` cannot be part of a cycle (bytes are not tracked),
    // but visiting every owned reference keeps gc.get_referents() honest.
    for (in.wq.live()) |s| if (s.owner) |o| {
        const rc = visit.?(o, arg);
        if (rc != 0) return rc;
    };
    for (in.cork.held[0..in.cork.n]) |o| {
        const rc = visit.?(o, arg);
        if (rc != 0) return rc;
    }
    return 0;
}

/// tp_clear's part of the object's own fields. `sock` stays: it owns the
/// fd, which the finalizer (run before a collection clears anything) has
/// closed if it was open.
pub fn clearObject(t: *Transport) void {
    py.clear(&t.sendfile_fut);
    server.unlink(t);
}

/// tp_clear's part of `Inner`.
pub fn clearInner(in: *Inner) void {
    py.clear(&in.sendfile_writer);
    py.clear(&in.fixed_buffer);
    dropWrites(in);
    in.lazy.release();
}

/// Lets go of what `in` holds but `transport_object`'s fields, before it
/// is freed (dealloc, or a `_setup` that failed to register). Each queued
/// step holds a reference to the transport, so none is queued.
pub fn freeInner(t: *Transport, in: *Inner) void {
    // A served connection's fd with no socket object: the finalizer
    // closed it if it ran (a subclass's dealloc runs it); else here.
    if (in.lazy.sock and !t.lost) sockio.sys.close(in.w.fd);
    in.lazy.release();
    const owned = .{ "sendfile_writer", "fixed_buffer", "start_cb", "start_ctx", "lost_exc", "lost_ctx" };
    inline for (owned) |f| py.clear(&@field(in, f));
    in.wq.releaseAll();
    std.debug.assert(!in.flush.queued);
    in.cork.release();
    if (t.loop) |lo| releaseRx(in, py.cast(loop_mod.Loop, lo));
    in.rx.clear();
}

/// dealloc's part of the object's own fields (before `Inner` is freed).
pub fn freeObject(t: *Transport) void {
    server.unlink(t);
    py.clear(&t.sock);
    py.clear(&t.sendfile_fut);
}

/// Drops what waits to be sent (abort, `_force_close`, tp_clear).
pub fn dropWrites(in: *Inner) void {
    in.wq.releaseAll();
    in.cork.release();
}

pub var methods = object.methodTable("data_received", &.{
    py.methodFast("write", writeMethod, "write($self, data)\n--\n\nWrite bytes-like data; buffer what the socket does not take."),
    py.methodFast("writelines", writelinesMethod, "writelines($self, list_of_data)\n--\n\nWrite bytes-like objects, gathered, not joined."),
    py.methodNoArgs("get_write_buffer_size", getWriteBufferSize, "get_write_buffer_size($self, /)\n--\n\nBytes waiting to be sent."),
    py.methodNoArgs("is_closing", isClosing, "is_closing($self, /)\n--\n\nTrue once closing or closed."),
    py.methodNoArgs("can_write_eof", canWriteEof, "can_write_eof($self, /)\n--\n\nSockets can half-close: True."),
    py.methodNoArgs("write_eof", writeEof, "write_eof($self, /)\n--\n\nShut the write side down once flushed."),
    py.methodNoArgs("close", close, "close($self, /)\n--\n\nFlush, then close; connection_lost(None) follows."),
    py.methodNoArgs("abort", abort, "abort($self, /)\n--\n\nClose now, dropping buffered data."),
    py.methodFast("_setup", setup, null),
    py.methodFast("_set_protocol", setProtocolNative, null),
    py.methodO("_set_context", setContext, null),
    py.methodNoArgs("_detach", detach, null),
    py.methodFast("get_extra_info", getExtraInfo, "get_extra_info($self, name, default=None)\n--\n\nGet optional transport information."),
    py.methodO("_call_connection_lost", callConnectionLostMethod, null),
    py.methodNoArgs("_close_socket", closeSocketMethod, null),
    py.methodO("_sendfile_begin", sendfileBegin, null),
    py.methodNoArgs("_sendfile_end", sendfileEnd, null),
    py.methodNoArgs("_uncork", uncorkMethod, null),
});

/// Besides `_paused`, the attributes asyncio's transports keep in their
/// `__dict__`, native here (a served connection makes some on first use).
pub var getsets = object.getsetTable(&.{
    py.getset("_paused", getPaused, null),
    py.getset("_extra", getExtra, setExtra),
    py.getset("_sock", getSock, setSock),
    py.getset("_loop", getLoopAttr, null),
    py.getset("_sendfile_fut", getSendfileFut, setSendfileFut),
    py.getset("_protocol_connected", getProtocolConnected, setProtocolConnected),
    py.getset("_closed", getClosed, null),
});

pub fn initNames() void {
    names = .{
        .msg_read = py.intern("Fatal read error on socket transport"),
        .msg_write = py.intern("Fatal write error on socket transport"),
        .msg_data = py.intern("Fatal error: protocol.data_received() call failed."),
        .msg_eof = py.intern("Fatal error: protocol.eof_received() call failed."),
        .msg_get_buffer = py.intern("Fatal error: protocol.get_buffer() call failed."),
        .msg_buffer_updated = py.intern("Fatal error: protocol.buffer_updated() call failed."),
        .connection_made = py.intern("connection_made"),
        .connection_lost = py.intern("connection_lost"),
        .close = py.intern("close"),
        .get = py.intern("get"),
        .name = py.intern("name"),
        .default = py.intern("default"),
        .peername = py.intern("peername"),
        .sockname = py.intern("sockname"),
        .socket = py.intern("socket"),
        .sendfile_lost = py.intern("_sendfile_lost"),
        .warn_unclosed = py.intern("_warn_unclosed"),
        .setblocking = py.intern("setblocking"),
        .detach = py.intern("detach"),
        .msg_gone = py.intern("Fatal error on socket transport: its socket was closed"),
    };
}

/// Creates `SocketTransportCore`, derived from `asyncio.Transport`.
pub fn initTypes(module: *Obj) bool {
    return object.init(module, "Transport", "SocketTransportCore", "The native I/O engine of zloop's socket transports.");
}
