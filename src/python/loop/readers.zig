//! The loop's fd watchers: `add_reader`/`add_writer` (and `_add_reader_for`
//! on behalf of a socket or file object) and the `sock_*` waits, one
//! `FdWatcher` per fd in the reactor's table beside the transports'. What
//! `zloop._zloop.LoopCore` runs for them; the loop's own half is loop.zig.
const std = @import("std");
const core = @import("core");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const state = @import("../capi/state.zig");
const handle = @import("handle.zig");
const sockops = @import("../sock/ready.zig");
const borrowed = @import("../transport/borrowed.zig");
// Native transports of every kind (stream, datagram...), by their watchers.
const transport = @import("watchers.zig");
const loop_mod = @import("loop.zig");
const Loop = loop_mod.Loop;
const Handle = handle.Handle;

const gpa = std.heap.c_allocator;

/// add_reader/add_writer and sock_* wait state for one fd.
///
/// A watcher whose handles are all `sock_*` waits registers one-shot (see
/// `core.Reactor.armOnce`): the wait that finishes leaves a disarmed kernel
/// entry and the watcher stays in the table without handles ("parked"), so
/// the next wait on that fd re-arms it instead of adding it anew, and no
/// wait pays a removal. Any plain add_reader/add_writer handle makes the
/// watcher level-triggered, as asyncio's selector is.
pub const FdWatcher = struct {
    w: core.IoWatcher,
    reader: ?*Handle = null,
    writer: ?*Handle = null,

    pub fn idle(fw: *const FdWatcher) bool {
        return fw.reader == null and fw.writer == null;
    }

    fn interest(fw: *const FdWatcher) core.Interest {
        return .{ .read = fw.reader != null, .write = fw.writer != null };
    }

    /// Every handle present is a sock_* wait (so one-shot fits).
    fn onlyWaits(fw: *const FdWatcher) bool {
        inline for (.{ fw.reader, fw.writer }) |slot| {
            if (slot) |h| if (h.kind != .sock) return false;
        }
        return true;
    }

    /// Tells the kernel what the handles now want.
    fn apply(fw: *FdWatcher, loop: *Loop) core.sys.Error!void {
        const want = fw.interest();
        if (fw.onlyWaits()) return loop.reactor.armOnce(&fw.w, want);
        return loop.reactor.setInterest(&fw.w, want);
    }
};

// ------------------------------------------------------------- fd watchers

fn onFdReady(w: *core.IoWatcher, ev: core.reactor.Event) core.RunError!void {
    const fw: *FdWatcher = @fieldParentPtr("w", w);
    // Parked: only a stale kernel entry (an fd closed while armed, whose
    // file lives on elsewhere) can still report, and nobody is waiting.
    if (fw.idle()) return;
    const loop = py.cast(Loop, watcherLoop(fw));
    if (ev.readable) if (fw.reader) |h| try queueIo(loop, fw, h, true);
    if (ev.writable) if (fw.writer) |h| try queueIo(loop, fw, h, false);
}

fn watcherLoop(fw: *FdWatcher) *Obj {
    const h = fw.reader orelse fw.writer.?;
    return h.loop.?;
}

/// As the selector loop's `_process_events`: a cancelled handle unregisters
/// its direction; a live one joins this pass's ready callbacks.
fn queueIo(loop: *Loop, fw: *FdWatcher, h: *Handle, read: bool) core.RunError!void {
    if (h.cancelled) {
        _ = removeIo(loop, fw.w.fd, read) catch {};
        return;
    }
    loop.reactor.callSoon(&h.node) catch return error.Aborted;
    py.incref(py.obj(h));
}

/// add_reader/add_writer's watcher for `fd`. A socket transport's fd has
/// the transport's own watcher (one per fd): asyncio refuses add_reader on
/// it with RuntimeError, and so does this (`error.UsedByTransport`).
fn watcherFor(loop: *Loop, fd: i32, create: bool) (core.reactor.Error || error{UsedByTransport})!?*FdWatcher {
    if (loop.reactor.watcherFor(fd)) |w| {
        if (transport.isTransportWatcher(w)) return error.UsedByTransport;
        return @fieldParentPtr("w", w);
    }
    if (!create) return null;
    const fw = try gpa.create(FdWatcher);
    // Borrowed: user code may close the fd without removing it first.
    fw.* = .{ .w = .{ .fd = fd, .on_ready = onFdReady, .borrowed = true } };
    loop.reactor.attach(&fw.w) catch |err| {
        gpa.destroy(fw);
        return err;
    };
    return fw;
}

/// Frees a watcher left without handles, unless it parks: a disarmed
/// one-shot entry is kept, with its watcher, for the fd's next wait.
fn releaseWatcherIfIdle(loop: *Loop, fw: *FdWatcher) void {
    if (!fw.idle()) return;
    if (fw.w.registered and fw.w.interest.none()) return;
    loop.reactor.detach(&fw.w);
    gpa.destroy(fw);
}

/// For a native transport or server about to watch `fd`: evicts a stale
/// holder (`evictStale`), frees the parked watcher of `fd`, if that is
/// what holds it, and returns whether a disarmed kernel entry remains (the
/// newcomer's `IoWatcher.registered`, so its first registration is a
/// modification). Null with RuntimeError set when a live watcher holds
/// the fd (or with what an eviction raised).
pub fn claimFd(loop: *Loop, fd: i32) ?bool {
    if (!evictStale(loop, fd)) return null;
    const w = loop.reactor.watcherFor(fd) orelse return false;
    const parked = !transport.isTransportWatcher(w) and @as(*FdWatcher, @fieldParentPtr("w", w)).idle();
    if (!parked) {
        _ = c.PyErr_Format(c.PyExc_RuntimeError, "File descriptor %d is used by another watcher", fd);
        return null;
    }
    const registered = w.registered;
    loop.reactor.detach(w);
    gpa.destroy(@as(*FdWatcher, @fieldParentPtr("w", w)));
    return registered;
}

/// A newcomer wants `fd`. Whatever holds it on behalf of an object that
/// no longer stands for it (a socket or pipe closed or detached by user
/// code, its number perhaps the newcomer's own file now) is evicted first
/// and fails as its next system call on the number would (EBADF): a
/// transport gets connection_lost(OSError(EBADF)), a server stops
/// accepting on it, a `sock_*` wait's future gets OSError(EBADF). None of
/// it registers the number with the kernel again: that is the newcomer's
/// to do. False with the Python error set when the eviction raised.
fn evictStale(loop: *Loop, fd: i32) bool {
    const w = loop.reactor.watcherFor(fd) orelse return true;
    if (transport.isTransportWatcher(w)) return transport.evictIfStale(w);
    return evictStaleHandles(loop, @fieldParentPtr("w", w));
}

/// Whether `h` watches `fd` for an owner (`Handle.owner`) that no longer
/// stands for it.
fn staleHandle(h: *Handle, fd: i32) bool {
    const owner = h.owner orelse return false;
    return !borrowed.owns(owner, fd);
}

/// Takes off `fw` the handles whose owner went away (see `evictStale`),
/// cancelled, each calling its callback once more (`handle.callOnceMore`)
/// to find its object closed and fail as its system call would: a
/// `sock_*` wait rejects its future with OSError(EBADF), a pipe transport
/// loses its connection. What the kernel held for them was the old file's:
/// epoll forgot it when the file closed, so the watcher forgets it too,
/// with no system call, and the next registration adds whatever the
/// number stands for now. False with the Python error set.
fn evictStaleHandles(loop: *Loop, fw: *FdWatcher) bool {
    var evicted = false;
    var ok = true;
    inline for (.{ &fw.reader, &fw.writer }) |slot| {
        if (slot.*) |h| if (staleHandle(h, fw.w.fd)) {
            slot.* = null;
            evicted = true;
            if (ok) ok = handle.callOnceMore(h, &loop.reactor);
            if (!h.running) handle.releaseCallback(h);
            h.cancelled = true;
            py.decref(py.obj(h));
        };
    }
    if (evicted) loop.reactor.forgetFile(&fw.w);
    return ok;
}

/// `_add_reader(fd, callback, *args)` / `_add_writer`: fd is already an
/// int. `owner`: the object fd came from (`_add_reader_for`), or null.
fn addIo(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, read: bool, owner: ?*Obj) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (nargs < 2) return py.raise(c.PyExc_TypeError, "expected (fd, callback, *args)");
    if (!loop_mod.checkClosed(loop)) return null;
    const fd_long = c.PyLong_AsLong(args[0]);
    if (fd_long == -1 and c.PyErr_Occurred() != null) return null;
    if (fd_long < 0) return py.raise(c.PyExc_ValueError, "Invalid file descriptor");
    // What epoll's register raises for an fd beyond a C int.
    if (fd_long > std.math.maxInt(i32)) return py.raise(c.PyExc_OverflowError, "signed integer is greater than maximum");
    const fd: i32 = @intCast(fd_long);
    const h = handle.create(&handle.HandleType, .io, self.?, args[0 + 1].?, args[2..@intCast(nargs)], null) orelse return null;
    if (owner) |o| h.owner = py.newref(o);
    if (!installIo(loop, fd, read, h)) return null;
    return py.newref(py.obj(h));
}

/// `_add_reader_for(owner, fd, callback, *args)` / `_add_writer_for`:
/// `_add_reader` on behalf of `owner`, the socket or file object `fd`
/// came from (zloop's pipe transports, the Python accept loop). Once user
/// code closed `owner`, a newcomer on the number evicts the handle
/// (`evictStale`), which then calls its callback once more to find out.
fn addIoFor(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, read: bool) ?*Obj {
    if (nargs < 3) return py.raise(c.PyExc_TypeError, "expected (owner, fd, callback, *args)");
    return addIo(self, args + 1, nargs - 1, read, args[0].?);
}

/// Puts `h` (its creation reference, consumed) in fd's reader or writer
/// slot, cancelling the handle it replaces, and updates the kernel's
/// interest. False with the Python error set when that fails.
fn installIo(loop: *Loop, fd: i32, read: bool, h: *Handle) bool {
    if (!evictStale(loop, fd)) {
        py.decref(py.obj(h));
        return false;
    }
    const fw = (watcherFor(loop, fd, true) catch |err| {
        py.decref(py.obj(h));
        _ = usedByTransport(loop, fd, err);
        return false;
    }).?;
    const slot = if (read) &fw.reader else &fw.writer;
    const old = slot.*;
    slot.* = h; // the watcher owns the creation reference
    fw.apply(loop) catch {
        const errno = core.sys.last_errno;
        slot.* = old;
        py.decref(py.obj(h));
        fw.apply(loop) catch {};
        releaseWatcherIfIdle(loop, fw);
        _ = py.raiseErrno(errno);
        return false;
    };
    if (old) |o| {
        o.cancelled = true;
        handle.releaseCallback(o);
        py.decref(py.obj(o));
    }
    return true;
}

// ---------------------------------------------------------- sock_* waits

/// `_sock_wait(fd, write, ready, sock, *args)` -> a new future. Installs
/// `ready(fut, fd, sock, *args)` as fd's reader (writer if `write`),
/// one-shot: it runs on each readiness until it returns True (it finished
/// `fut`, or found it done), then leaves the watcher with no syscall. As
/// asyncio's add_reader in `sock_recv`, it replaces a reader already
/// there. `sock` is the object `fd` came from: `ready` makes its syscall
/// only while `sock` still stands for `fd`, and a newcomer on `fd` ends the
/// wait with OSError(EBADF) once it no longer does (`evictStale`).
pub fn sockWait(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (nargs < 4 or nargs > 1 + handle.inline_args) {
        return py.raise(c.PyExc_TypeError, "_sock_wait(fd, write, ready, sock, *args): wrong arguments");
    }
    if (!loop_mod.checkClosed(loop)) return null;
    const fd = parseFd(args[0]) orelse return null;
    const write = c.PyObject_IsTrue(args[1]);
    if (write < 0) return null;
    const fut = loop_mod.createFuture(self, null) orelse return null;
    var argv: [handle.inline_args]?*Obj = undefined;
    argv[0] = fut;
    argv[1] = args[0];
    const extra: usize = @intCast(nargs - 3);
    for (0..extra) |i| argv[2 + i] = args[3 + i];
    const h = handle.create(&handle.HandleType, .sock, self.?, args[2].?, argv[0 .. 2 + extra], null) orelse {
        py.decref(fut);
        return null;
    };
    h.owner = py.newref(args[3].?);
    if (!installIo(loop, fd, write == 0, h)) {
        py.decref(fut);
        return null;
    }
    return fut;
}

/// `_sock_cancel(fd, fut)`: the wait for `fut` on fd (cancelled, or its
/// coroutine closed) stops watching now, as asyncio's done-callback does.
/// Nothing happens if it already finished or was replaced.
pub fn sockCancel(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (nargs != 2) return py.raise(c.PyExc_TypeError, "_sock_cancel(fd, fut)");
    if (loop.closed or !loop.has_reactor) return py.newref(py.none());
    const fd = parseFd(args[0]) orelse return null;
    const fw = (watcherFor(loop, fd, false) catch null) orelse return py.newref(py.none());
    inline for (.{ &fw.reader, &fw.writer }) |slot| {
        if (slot.*) |h| if (h.kind == .sock and h.argv[1] == args[1]) {
            dropIo(loop, fw, slot);
            return py.newref(py.none());
        };
    }
    return py.newref(py.none());
}

/// After a sock_* wait's callback ran: a finished wait leaves its slot
/// (its one-shot entry already disarmed: no syscall); an unfinished one
/// (spurious wake-up) is armed again.
pub fn sockWaitRan(loop: *Loop, h: *Handle, finished: bool) void {
    if (h.cancelled or !loop.has_reactor) return; // replaced or removed meanwhile
    const fd = parseFd(h.argv[2]) orelse {
        c.PyErr_Clear();
        return;
    };
    const fw = (watcherFor(loop, fd, false) catch null) orelse return;
    const slot = if (fw.reader == h) &fw.reader else if (fw.writer == h) &fw.writer else return;
    if (finished) return dropIo(loop, fw, slot);
    fw.apply(loop) catch {
        // Re-arming failed (the fd went away): end the wait with the error
        // rather than leave it pending forever.
        const errno = core.sys.last_errno;
        failWait(h.argv[1].?, errno);
        dropIo(loop, fw, slot);
    };
}

/// `fut.set_exception(OSError(errno))` unless fut is done (sockops'
/// own rejection); errors from that are reported as unraisable.
fn failWait(fut: *Obj, errno: u16) void {
    const done = sockops.futureDone(fut) orelse return c.PyErr_WriteUnraisable(fut);
    if (done) return;
    const r = sockops.reject(fut, errno) orelse return c.PyErr_WriteUnraisable(fut);
    py.decref(r);
}

pub fn parseFd(o: ?*Obj) ?i32 {
    const v = c.PyLong_AsLong(o);
    if (v == -1 and c.PyErr_Occurred() != null) return null;
    if (v < 0 or v > std.math.maxInt(i32)) {
        c.PyErr_SetString(c.PyExc_ValueError, "Invalid file descriptor");
        return null;
    }
    return @intCast(v);
}

/// Raises what `core.Reactor.attach`'s `err` means: MemoryError, or the
/// OSError of an fd found closed (as the selector's register raises it).
pub fn attachFailed(err: anyerror) ?*Obj {
    if (err == error.OutOfMemory) return c.PyErr_NoMemory();
    return py.raiseErrno(core.sys.last_errno);
}

fn usedByTransport(loop: *Loop, fd: i32, err: anyerror) ?*Obj {
    if (err != error.UsedByTransport) return attachFailed(err);
    const w = loop.reactor.watcherFor(fd).?;
    return c.PyErr_Format(c.PyExc_RuntimeError, "File descriptor %d is used by transport %R", fd, transport.ownerOfWatcher(w));
}

fn removeIo(loop: *Loop, fd: i32, read: bool) error{Failed}!bool {
    const fw = (watcherFor(loop, fd, false) catch |err| {
        _ = usedByTransport(loop, fd, err);
        return error.Failed;
    }) orelse return false;
    const slot = if (read) &fw.reader else &fw.writer;
    if (slot.* == null) return false;
    dropIo(loop, fw, slot);
    return true;
}

/// Empties one of fw's slots: the handle is cancelled and released, the
/// kernel told (nothing to tell for a fired one-shot entry), and the
/// watcher freed or parked if that was its last handle.
fn dropIo(loop: *Loop, fw: *FdWatcher, slot: *?*Handle) void {
    const old = slot.*.?;
    slot.* = null;
    fw.apply(loop) catch {};
    if (!old.running) handle.releaseCallback(old);
    old.cancelled = true;
    py.decref(py.obj(old));
    releaseWatcherIfIdle(loop, fw);
}

fn removeIoM(self: ?*Obj, fd_obj: ?*Obj, read: bool) ?*Obj {
    const loop = py.cast(Loop, self.?);
    if (loop.closed) return py.boolean(false);
    const fd_long = c.PyLong_AsLong(fd_obj);
    if (fd_long == -1 and c.PyErr_Occurred() != null) {
        // Too big for a C long: never registered, as asyncio's lookup finds.
        if (c.PyErr_ExceptionMatches(c.PyExc_OverflowError) == 0) return null;
        c.PyErr_Clear();
        return py.boolean(false);
    }
    if (fd_long < 0 or fd_long > std.math.maxInt(i32)) return py.boolean(false);
    const removed = removeIo(loop, @intCast(fd_long), read) catch return null;
    return py.boolean(removed);
}

pub fn addReader(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    return addIo(self, args, nargs, true, null);
}

pub fn addWriter(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    return addIo(self, args, nargs, false, null);
}

pub fn addReaderFor(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    return addIoFor(self, args, nargs, true);
}

pub fn addWriterFor(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    return addIoFor(self, args, nargs, false);
}

pub fn removeReader(self: ?*Obj, fd: ?*Obj) callconv(.c) ?*Obj {
    return removeIoM(self, fd, true);
}

pub fn removeWriter(self: ?*Obj, fd: ?*Obj) callconv(.c) ?*Obj {
    return removeIoM(self, fd, false);
}

/// `_io_handles(fd)` -> (reader, writer): for `_ensure_fd_no_transport`
/// style checks and tests.
pub fn ioHandles(self: ?*Obj, fd_obj: ?*Obj) callconv(.c) ?*Obj {
    const loop = py.cast(Loop, self.?);
    const fd_long = c.PyLong_AsLong(fd_obj);
    if (fd_long == -1 and c.PyErr_Occurred() != null) return null;
    var r: *Obj = py.none();
    var w: *Obj = py.none();
    if (loop.has_reactor and fd_long >= 0 and fd_long <= std.math.maxInt(i32)) {
        if (watcherFor(loop, @intCast(fd_long), false) catch null) |fw| {
            if (fw.reader) |h| r = py.obj(h);
            if (fw.writer) |h| w = py.obj(h);
        }
    }
    return c.Py_BuildValue("(OO)", r, w);
}
