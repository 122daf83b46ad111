//! Linux completion backend: io_uring carrying the readiness contract.
//!
//! Each fd with interest has one one-shot IORING_OP_POLL_ADD in flight. Its
//! completion becomes an `Event`, and the poll is re-armed with the fd's
//! current interest: the re-arm is only listed (`Slot.listed`), and its SQE
//! is queued by the next `poll`, after the reactor has run the callbacks.
//! An fd still ready then completes again at once, so readiness is
//! level-triggered, as epoll's is here and as asyncio's selector loop
//! requires (a reader that leaves data behind is called again on the next
//! pass). Not queued at once: the removals below enter the kernel from
//! inside the callbacks, and would take a queued re-arm along while the
//! event it follows is still to be handled. Armed with that fd's data still
//! unread, the poll would complete at once, and report the fd ready on the
//! next pass after the callback had drained it: a reader called with
//! nothing to read (its recv() raising BlockingIOError) where epoll, which
//! reports readiness as it is when it polls, does not call it.
//!
//! Why not multishot polls: a multishot poll posts one completion per
//! wake-up of the file, i.e. it is edge-triggered (the test "a multishot poll
//! is edge-triggered" below shows it on this kernel), so a partially drained
//! socket would never be reported again. One-shot polls cost no extra
//! syscalls: re-arms ride in the `io_uring_enter` that waits.
//!
//! The hot path is one `io_uring_enter` per pass that submits and waits (and
//! none at all for a non-blocking pass with nothing to submit and no
//! completion pending). Changing the interest of an armed fd queues a
//! POLL_REMOVE and a new POLL_ADD; dropping all interest is a POLL_REMOVE
//! submitted at once, because an armed poll holds a reference to the file and a socket
//! closed right after `remove_reader` must really close.
//!
//! user_data names (kind, generation, fd). Dropping interest bumps the fd's
//! generation, so a completion of an old poll (cancelled, or fired before the
//! remove reached the kernel, or for a file whose fd number was reused) is
//! recognised as stale and dropped.
//!
//! Native receives (`api.Arm.recv`). An fd registered with `recv` has its
//! read interest served by one multishot IORING_OP_RECV instead of a poll:
//! the kernel receives into a buffer it picks from a ring of buffers the
//! caller provided (`provideRecvBuffer`) and posts a completion per
//! arrival, which becomes an `Event` with `recv` set. A connection that
//! receives then costs no `recv` syscall and no re-arm: the only syscall
//! per pass is the wait. Its write interest stays a poll. Dropping read
//! interest (pause_reading) cancels the receive but keeps its generation:
//! what it received before the cancellation took effect is still reported,
//! in order, and read interest passes to a poll (or a new receive) only
//! once its last completion is in (`RecvState.cancelling`), so two readers
//! never race for the same bytes. Dropping all interest (the fd is about to
//! close) cancels it at once and makes its completions stale; a stale
//! completion's buffer goes straight back to the ring.
//!
//! Borrowed fds (`api.Arm.borrowed`: add_reader, sock_*) are not polled
//! through the ring. A poll request holds a reference to its file, so a
//! socket that user code closes while the loop still watches it would stay
//! open (its peer never sees the close) and its poll would later report
//! for the fd number, by then perhaps another socket's. Such fds go to an
//! epoll instance the backend keeps (`ep`), which forgets a closed file as
//! the epoll backend does, and the ring waits on the epoll fd itself with
//! IORING_OP_EPOLL_WAIT (Linux 6.15), whose completion carries the ready
//! borrowed fds: a wait on them costs the syscalls epoll's would. Before
//! 6.15 the ring polls the epoll fd instead, and a pass where a borrowed
//! fd is ready makes one `epoll_wait(0)` more.
//!
//! Multishot receives need Linux 6.0 and provided-buffer rings 5.19: on an
//! older kernel the ring registration fails (no native receives at all) or
//! the first receive completes with EINVAL (the backend falls back to polls
//! for reads and reports readability as before).
//!
//! Optional ring features (`Feature`) are each detected at setup and each
//! has a fallback; `ZLOOP_URING_OFF` turns any of them off, so that tests
//! run every fallback on a kernel that has them all. The ring is set up
//! single-issuer (`Feature.single_issuer`) for the thread that creates it:
//! the loop is single-threaded by contract, but a loop created in one
//! thread may run in another, and another thread may close it. The first
//! time another thread uses the backend, it moves to a new ring that any
//! thread may enter (`moveRing`), once: what the old ring held is re-armed
//! there, and what it had completed is carried over.
const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;
const IoUring = linux.IoUring;
const sys = @import("../sys.zig");
const api = @import("api.zig");
const epoll = @import("epoll.zig");

pub const name = "io_uring";

/// Why the backend could not be set up; the caller falls back to epoll.
pub const InitError = sys.Error || error{Unsupported};

/// The ring's optional features, each detected at setup, each with a
/// fallback (what the backend does without it).
pub const Feature = enum {
    /// IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN (Linux 6.1): completions'
    /// task work waits for the loop's next wait on the ring and runs there
    /// in one batch, instead of interrupting the thread as each comes.
    /// Without: COOP_TASKRUN (below). Given up, by moving to a new ring,
    /// when another thread uses the backend (see the file's header).
    single_issuer,
    /// IORING_SETUP_COOP_TASKRUN (5.19, see `Backend.init`). Without: the
    /// kernel interrupts the thread for each completion's task work.
    coop_taskrun,
    /// Native receives into provided buffers (5.19, multishot receives
    /// 6.0). Without: reads are polled.
    recv,
    /// IORING_OP_EPOLL_WAIT (6.15) for borrowed fds. Without: a poll of
    /// the epoll fd and an `epoll_wait(0)` after it.
    epoll_wait,
};

pub const Features = std.EnumSet(Feature);

/// The variable naming the features to leave off, comma-separated (for
/// tests: each fallback runs on a kernel that has the feature). Read when
/// a ring is set up; a name that is no feature fails the setup (EINVAL).
pub const features_off_env = "ZLOOP_URING_OFF";

/// The features `ZLOOP_URING_OFF` turns off. A build without libc (the
/// core's unit tests) sees none off.
fn featuresOff() sys.Error!Features {
    var off: Features = .empty;
    if (!builtin.link_libc) return off;
    const raw = std.c.getenv(features_off_env) orelse return off;
    var names = std.mem.tokenizeAny(u8, std.mem.span(raw), ", ");
    while (names.next()) |n| {
        const f = std.meta.stringToEnum(Feature, n) orelse return failedWith(.INVAL);
        off.insert(f);
    }
    return off;
}

/// This thread's thread pointer, which tells threads apart at the cost of
/// a register read (0 where not known: every thread then looks the same,
/// and the kernel's EEXIST is the only sign of another thread).
pub inline fn threadPointer() usize {
    return switch (builtin.cpu.arch) {
        .x86_64 => asm volatile ("movq %%fs:0, %[ret]"
            : [ret] "=r" (-> usize),
        ),
        .aarch64 => asm volatile ("mrs %[ret], tpidr_el0"
            : [ret] "=r" (-> usize),
        ),
        else => 0,
    };
}

/// What a completion answers, in the top byte of its user_data.
const Kind = enum(u8) {
    /// A readiness poll of `fd` armed under generation `gen`.
    poll = 1,
    /// The answer to a POLL_REMOVE; always ignored (a failure only means
    /// the poll had completed already).
    control = 2,
    /// A multishot receive of `fd` armed under receive generation `gen`.
    recv = 3,
    /// The poll of `Backend.ep`'s fd: some borrowed fd is ready.
    epoll = 4,
    _,
};

/// Public for the tests (`io_uring_test.zig`).
pub const UserData = packed struct(u64) {
    fd: u32,
    gen: u24,
    kind: Kind,

    pub fn of(u: UserData) u64 {
        return @bitCast(u);
    }
};

/// The backend's view of one fd.
const Slot = struct {
    gen: u24 = 0,
    interest: api.Interest = .{},
    /// A POLL_ADD of (fd, gen) is queued or in the kernel, its completion
    /// not yet seen.
    armed: bool = false,
    /// The fd is in `Backend.to_arm`: its poll is armed by the next `poll`
    /// if the slot still wants one then. Kept when the rest of the slot is
    /// reset (`disarm`), so that an fd is listed once at most.
    listed: bool = false,
    /// Registered one-shot (`api.Arm.oneshot`): its completion drops the
    /// interest instead of re-arming the poll.
    oneshot: bool = false,
    /// The mask of the armed poll (while `armed`).
    poll_mask: u32 = 0,
    /// Read interest is to be served by a native receive (`api.Arm.recv`).
    recv: bool = false,
    recv_state: RecvState = .idle,
    /// The receive's generation: bumped only when all interest is dropped,
    /// not by a pause, whose cancelled receive still reports its data.
    recv_gen: u24 = 0,

    /// Whether reads belong to a receive, asked for or still in flight:
    /// the poll then leaves POLLIN out.
    fn recvOwnsRead(slot: *const Slot) bool {
        return slot.recv or slot.recvBusy();
    }

    /// A receive is in the kernel (armed, or being cancelled).
    fn recvBusy(slot: *const Slot) bool {
        return slot.recv_state == .armed or slot.recv_state == .cancelling;
    }

    fn recvWanted(slot: *const Slot) bool {
        return slot.recv and slot.interest.read;
    }

    fn pollMask(slot: *const Slot) u32 {
        var i = slot.interest;
        if (slot.recvOwnsRead()) i.read = false;
        return mask(i);
    }
};

const RecvState = enum {
    idle,
    /// A multishot receive is queued or in the kernel.
    armed,
    /// Its cancellation is queued or in the kernel; its completions (data
    /// received before it took effect) still count.
    cancelling,
    /// It ended on end of file or an error, which was reported: not
    /// received again until read interest is dropped and asked for anew.
    done,
};

pub const Backend = struct {
    /// Every poll here is one-shot already; a one-shot registration is simply
    /// not re-armed when its completion arrives.
    pub const has_oneshot = true;

    /// As epoll: woken through a watched fd, children through pidfds.
    pub const wakes_itself = false;
    pub const watches_children = false;

    ring: IoUring,
    /// Indexed by fd. Grows by doubling when a larger fd registers: the
    /// only allocation, never per pass. `api` gives `init` no allocator, so
    /// it comes from the page allocator.
    slots: std.ArrayList(Slot) = .empty,
    /// IOSQE_CQE_SKIP_SUCCESS is known (5.17+): successful control
    /// requests post nothing.
    skip_success: bool,
    /// The provided-buffer ring native receives pick from, or null: the
    /// kernel has none (before 5.19) or multishot receives failed (before
    /// 6.0); reads are then polled.
    buf_ring: ?*align(std.heap.page_size_min) linux.io_uring_buf_ring = null,
    /// Each provided buffer by id, to hand back the buffer of a stale
    /// completion without asking its owner.
    buffers: [][]u8 = &.{},
    /// A receive has brought data: an EINVAL is then that receive's error,
    /// not the kernel refusing multishot receives.
    recv_proven: bool = false,
    /// Fds whose poll the next `poll` arms (`Slot.listed`). Each is listed
    /// once at most, and the capacity follows the slots', so listing one
    /// never allocates.
    to_arm: std.ArrayList(sys.fd_t) = .empty,
    /// Where borrowed fds are watched (see the file's header).
    ep: epoll.Backend,
    /// Some borrowed fd was registered with `ep`: its fd is polled.
    ep_used: bool = false,
    /// The wait on `ep` is queued or in the kernel.
    ep_armed: bool = false,
    /// `ep` is waited on by IORING_OP_EPOLL_WAIT, into `ep.buf`; false
    /// once the kernel refused it (before 6.15): a POLL_ADD of its fd then,
    /// and an `epoll_wait(0)` after it.
    ep_wait_op: bool = true,
    /// Events an EPOLL_WAIT brought that the pass's output had no room
    /// for: `ep.buf[ep_held..ep_held_end]`, given out first by the next
    /// poll (no new wait on `ep` is armed meanwhile, so the kernel does not
    /// write over them).
    ep_held: usize = 0,
    ep_held_end: usize = 0,
    /// The features `ZLOOP_URING_OFF` turned off.
    off: Features,
    /// The thread pointer of the one thread the ring lets in, while it is
    /// single-issuer (`Feature.single_issuer`); null once it is not.
    issuer: ?usize = null,
    /// Per provided buffer id: in the kernel's buffer ring (provided, not
    /// yet handed out by a completion). What a moved ring provides anew.
    in_ring: []bool = &.{},
    /// Receives' completions an abandoned ring posted (`moveRing`),
    /// turned into events first by the next poll.
    carried: std.ArrayList(linux.io_uring_cqe) = .empty,

    const max_events = 256;
    const ring_entries = 512;
    /// The most receive buffers a caller may provide (ids 0..this).
    pub const recv_buffers_max = 1024;
    const recv_group: u16 = 0;
    const slot_gpa = std.heap.page_allocator;
    /// EXT_ARG (5.11) carries the wait's timeout; NODROP (5.5) keeps
    /// overflowed CQEs.
    const required_features = linux.IORING_FEAT_EXT_ARG | linux.IORING_FEAT_NODROP;
    /// A poll's completion is posted by task work of the thread that armed
    /// it. By default the kernel interrupts that thread for it wherever it
    /// is, an inter-processor kick and a kernel round trip per completion
    /// while the loop runs Python: under uvicorn with 64 connections that
    /// doubled the CPU per request against epoll (39 against 21 µs).
    /// COOP_TASKRUN leaves the work for the thread's next kernel entry (a
    /// sleeping thread is still woken for it, so a loop moved to another
    /// thread, or an fd removed by another thread, completes promptly: the
    /// two cross-thread tests below). What it gives up: a poll armed by a
    /// thread that has since handed the loop to another and now computes
    /// without entering the kernel completes at that thread's next syscall;
    /// only the first event of each such fd, as its re-arm is submitted by
    /// the thread that runs the loop. TASKRUN_FLAG raises IORING_SQ_TASKRUN
    /// while such work waits, which the syscall-free non-blocking pass
    /// checks (`kernelHasWork`).
    const coop_flags = linux.IORING_SETUP_COOP_TASKRUN | linux.IORING_SETUP_TASKRUN_FLAG;
    /// DEFER_TASKRUN goes further: the task work waits for the issuer's
    /// next wait on the ring (a GETEVENTS enter, which every pass's wait
    /// is), and is run there in one batch; a sleeping issuer is woken for
    /// it. Only the issuer may then enter the ring (EEXIST for any other
    /// thread), hence `moveRing`. TASKRUN_FLAG still raises
    /// IORING_SQ_TASKRUN while such work waits.
    const single_flags = linux.IORING_SETUP_SINGLE_ISSUER | linux.IORING_SETUP_DEFER_TASKRUN |
        linux.IORING_SETUP_TASKRUN_FLAG;

    pub fn init() InitError!Backend {
        return initWithout(try featuresOff());
    }

    /// A backend with the features in `off` left off.
    pub fn initWithout(off: Features) InitError!Backend {
        var ring = try openRing(off);
        errdefer ring.deinit();
        if (ring.features & required_features != required_features) return error.Unsupported;
        var ep = try epoll.Backend.init();
        errdefer ep.deinit();
        var b: Backend = .{
            .ring = ring,
            .ep = ep,
            .skip_success = ring.features & linux.IORING_FEAT_CQE_SKIP != 0,
            .off = off,
            .ep_wait_op = !off.contains(.epoll_wait),
        };
        if (ring.flags & linux.IORING_SETUP_SINGLE_ISSUER != 0) b.issuer = threadPointer();
        if (!off.contains(.recv)) b.setupRecv();
        return b;
    }

    /// A ring with the setup features `off` leaves on and the kernel
    /// knows: each a kernel refuses (EINVAL) is dropped, the newest first.
    fn openRing(off: Features) InitError!IoUring {
        var flags: u32 = 0;
        if (!off.contains(.coop_taskrun)) flags |= coop_flags;
        if (!off.contains(.single_issuer)) flags |= single_flags;
        while (true) {
            return IoUring.init(ring_entries, flags) catch |err| {
                if (err == error.ArgumentsInvalid and flags != 0) {
                    // SINGLE_ISSUER|DEFER_TASKRUN are 6.1+, COOP_TASKRUN
                    // and TASKRUN_FLAG 5.19+: an older kernel gets the
                    // default kick.
                    const single = flags & linux.IORING_SETUP_DEFER_TASKRUN != 0;
                    flags = if (single and !off.contains(.coop_taskrun)) coop_flags else 0;
                    continue;
                }
                return switch (err) {
                    // Raised as OSError from `last_errno`, which IoUring
                    // leaves alone.
                    error.ProcessFdQuotaExceeded => failedWith(.MFILE),
                    error.SystemFdQuotaExceeded => failedWith(.NFILE),
                    error.SystemResources => failedWith(.NOMEM),
                    // No io_uring (old kernel, io_uring_disabled sysctl,
                    // seccomp: ENOSYS, EPERM).
                    else => error.Unsupported,
                };
            };
        }
    }

    /// The features in use now.
    pub fn features(b: *const Backend) Features {
        var f: Features = .empty;
        f.setPresent(.single_issuer, b.issuer != null);
        f.setPresent(.coop_taskrun, b.ring.flags & linux.IORING_SETUP_COOP_TASKRUN != 0);
        f.setPresent(.recv, b.nativeRecv());
        f.setPresent(.epoll_wait, b.ep_wait_op);
        return f;
    }

    /// Registers the provided-buffer ring (16 KiB of entries, no buffers
    /// yet); without it the backend simply polls reads.
    fn setupRecv(b: *Backend) void {
        const buffers = slot_gpa.alloc([]u8, recv_buffers_max) catch return;
        const in_ring = slot_gpa.alloc(bool, recv_buffers_max) catch {
            slot_gpa.free(buffers);
            return;
        };
        const br = IoUring.setup_buf_ring(b.ring.fd, recv_buffers_max, recv_group, .{ .inc = false }) catch {
            slot_gpa.free(in_ring);
            slot_gpa.free(buffers);
            return;
        };
        IoUring.buf_ring_init(br);
        @memset(buffers, &.{});
        @memset(in_ring, false);
        b.buf_ring = br;
        b.buffers = buffers;
        b.in_ring = in_ring;
    }

    fn teardownRecv(b: *Backend) void {
        const br = b.buf_ring orelse return;
        // Unregistered first: no receive picks a buffer after this returns,
        // so the caller may free them once `deinit` is over.
        IoUring.free_buf_ring(b.ring.fd, br, recv_buffers_max, recv_group);
        slot_gpa.free(b.buffers);
        slot_gpa.free(b.in_ring);
        b.buf_ring = null;
        b.buffers = &.{};
        b.in_ring = &.{};
    }

    /// Closes the ring; the kernel cancels every poll and receive still
    /// armed. Provided buffers are free to go once this returns.
    pub fn deinit(b: *Backend) void {
        b.teardownRecv();
        b.freeAll();
    }

    /// `deinit` in a process that did not make the ring (a fork child).
    /// The ring, its memory (mapped shared) and its buffer ring are the
    /// parent's as much as this process's: nothing is entered, submitted,
    /// unregistered or written there. This process only unmaps its views
    /// and closes its descriptors, which drops its references and leaves
    /// the parent's ring as it was, every poll and receive still armed.
    pub fn abandon(b: *Backend) void {
        if (b.buf_ring) |br| {
            const bytes: [*]align(std.heap.page_size_min) u8 = @ptrCast(br);
            std.posix.munmap(bytes[0 .. @as(usize, recv_buffers_max) * @sizeOf(linux.io_uring_buf)]);
            slot_gpa.free(b.buffers);
            slot_gpa.free(b.in_ring);
            b.buf_ring = null;
            b.buffers = &.{};
            b.in_ring = &.{};
        }
        b.freeAll();
    }

    /// The ring's views and descriptor, `ep`, and the backend's own memory.
    fn freeAll(b: *Backend) void {
        b.ring.deinit();
        b.ep.deinit();
        b.slots.deinit(slot_gpa);
        b.to_arm.deinit(slot_gpa);
        b.carried.deinit(slot_gpa);
    }

    /// Whether `api.Arm.recv` is served here (otherwise reads are polled).
    pub fn nativeRecv(b: *const Backend) bool {
        return b.buf_ring != null;
    }

    /// Puts buffer `id` (< `recv_buffers_max`) in the ring native receives
    /// pick from: a new one, or one a `recv` event handed out, once its
    /// owner is done with it. The memory must stay valid until the id is
    /// handed out again, or until `deinit`.
    pub fn provideRecvBuffer(b: *Backend, id: u16, buf: []u8) void {
        const br = b.buf_ring orelse return;
        b.buffers[id] = buf;
        b.in_ring[id] = true;
        IoUring.buf_ring_add(br, buf, id, IoUring.buf_ring_mask(recv_buffers_max), 0);
        IoUring.buf_ring_advance(br, 1);
    }

    /// Hands back the buffer of a `recv` event nobody will read (its
    /// watcher is gone): the same memory, under the same id.
    pub fn recycleRecvBuffer(b: *Backend, id: u16) void {
        b.provideRecvBuffer(id, b.buffers[id]);
    }

    /// Moves `fd` from interest `old` to interest `new`. A new registration
    /// is checked at once, so a bad fd fails here as epoll's CTL_ADD does.
    pub fn setInterest(
        b: *Backend,
        fd: sys.fd_t,
        old: api.Interest,
        new: api.Interest,
        how: api.Arm,
    ) sys.Error!void {
        std.debug.assert(fd >= 0);
        try b.own();
        if (how.borrowed) {
            try b.ep.setInterest(fd, old, new, how);
            b.ep_used = true;
            return;
        }
        if (new.none()) {
            const slot = b.slotOf(fd) orelse return;
            if (how.forget or !slot.recvBusy()) return b.disarm(fd, slot);
            // A paused receive: cancelled, still reporting what it took.
            slot.interest = .{};
            try b.syncRecv(fd, slot);
            return b.syncPoll(fd, slot);
        }
        // A re-arm after a one-shot completion was checked when first
        // registered; a closed fd then completes with EBADF, as epoll's
        // CTL_MOD of a closed fd fails. An fd asked to be received from
        // natively is a stream socket the loop holds (a transport's): not
        // checked (a statx a connection, and on each resume_reading).
        if (old.none() and !how.registered and !how.recv) try pollable(fd);
        const slot = try b.slotFor(fd);
        slot.interest = new;
        slot.oneshot = how.oneshot;
        slot.recv = how.recv and b.nativeRecv();
        std.debug.assert(!(slot.recv and slot.oneshot));
        try b.syncRecv(fd, slot);
        return b.syncPoll(fd, slot);
    }

    /// Arms or replaces the poll to match the slot's interest. Replacing
    /// removes the armed poll, and the next `poll` arms a new generation.
    /// Not POLL_UPDATE: on 6.18 an update to a mask that is ready at once
    /// posts no completion at all, and a writer added to a writable
    /// socket's reader would never be called.
    fn syncPoll(b: *Backend, fd: sys.fd_t, slot: *Slot) sys.Error!void {
        const want = slot.pollMask();
        if (slot.armed) {
            if (slot.poll_mask == want) return;
            const sqe = try b.getSqe();
            const ud: UserData = .{ .fd = @intCast(fd), .gen = slot.gen, .kind = .poll };
            sqe.prep_poll_remove(ud.of());
            b.control(sqe, fd, slot.gen);
            slot.gen +%= 1;
            slot.armed = false;
        }
        if (want != 0 and !slot.listed) {
            slot.listed = true;
            b.to_arm.appendAssumeCapacity(fd);
        }
    }

    /// Queues the polls of the listed fds that still want one (see the
    /// file's header), each with the fd's interest as it is now. What a
    /// failure leaves unarmed stays listed for the next try.
    fn armListed(b: *Backend) sys.Error!void {
        if (b.to_arm.items.len == 0) return;
        var done: usize = 0;
        defer {
            const rest = b.to_arm.items[done..];
            std.mem.copyForwards(sys.fd_t, b.to_arm.items[0..rest.len], rest);
            b.to_arm.shrinkRetainingCapacity(rest.len);
        }
        for (b.to_arm.items) |fd| {
            const slot = &b.slots.items[@intCast(fd)];
            std.debug.assert(slot.listed);
            const want = slot.pollMask();
            if (!slot.armed and want != 0) try b.arm(fd, slot, want);
            slot.listed = false;
            done += 1;
        }
    }

    /// Arms or cancels the native receive to match the slot. A receive
    /// being cancelled is left to finish: its last completion calls this
    /// again.
    fn syncRecv(b: *Backend, fd: sys.fd_t, slot: *Slot) sys.Error!void {
        const want = slot.recvWanted();
        switch (slot.recv_state) {
            .idle => if (want) {
                const sqe = try b.getSqe();
                const ud: UserData = .{ .fd = @intCast(fd), .gen = slot.recv_gen, .kind = .recv };
                sqe.prep_rw(.RECV, fd, 0, 0, 0);
                sqe.flags |= linux.IOSQE_BUFFER_SELECT;
                sqe.buf_index = recv_group;
                sqe.ioprio |= linux.IORING_RECV_MULTISHOT;
                sqe.user_data = ud.of();
                slot.recv_state = .armed;
            },
            .armed => if (!want) {
                try b.cancelRecv(fd, slot.recv_gen);
                slot.recv_state = .cancelling;
            },
            .cancelling => {},
            .done => if (!want) {
                slot.recv_state = .idle;
            },
        }
    }

    fn cancelRecv(b: *Backend, fd: sys.fd_t, gen: u24) sys.Error!void {
        const sqe = try b.getSqe();
        const ud: UserData = .{ .fd = @intCast(fd), .gen = gen, .kind = .recv };
        sqe.prep_cancel(ud.of(), 0);
        b.control(sqe, fd, gen);
    }

    /// Waits up to `timeout_ms` (-1: forever) and returns the ready events.
    pub fn poll(b: *Backend, timeout_ms: i32, out: []api.Event) sys.Error!usize {
        try b.own();
        const want = @min(out.len, max_events);
        // Borrowed fds' events held over from the last pass come first,
        // and the pass does not block while any are left; so do the events
        // a moved ring carried over.
        var n: usize = 0;
        if (b.carried.items.len != 0) n = b.giveCarried(out[0..want]);
        if (b.ep_held_end != 0) n += b.giveHeld(out[n..want]);
        try b.armListed();
        try b.armEpoll();
        const block = n == 0 and b.ep_held_end == 0 and b.carried.items.len == 0;
        const waited = b.enter(if (block) timeout_ms else 0) catch |err| switch (err) {
            // Moved by `enter` (see there): what this pass listed and
            // queued went with the old ring, and is done again.
            error.Moved => return n + try b.poll(0, out[n..want]),
            else => |e| return e,
        };
        // Completions are read where they lie in the ring, not copied out
        // first, and the ring's head moves once for the batch (also when
        // one of them fails the pass, as a copy would have consumed them).
        // An overflow was flushed by `enter` (see `kernelHasWork`).
        const got = @min(b.ring.cq_ready(), want - n);
        const cq = &b.ring.cq;
        const head = cq.head.*;
        defer b.ring.cq_advance(got);
        for (0..got) |i| {
            const cqe = cq.cqes[(head +% @as(u32, @intCast(i))) & cq.mask];
            const ud: UserData = @bitCast(cqe.user_data);
            if (ud.kind == .epoll) {
                // The borrowed fds' events go where `ep`'s completion
                // came, in the order the kernel saw readiness (a
                // connection whose data came first is served first, as
                // epoll would), leaving room for the completions after
                // it. What does not fit waits: in `ep` when polled (its
                // re-armed poll completes at once on the next pass), held
                // when EPOLL_WAIT took it.
                n += try b.epollCompleted(cqe.res, out[n .. want - (got - i - 1)]);
            } else if (try b.complete(cqe, &out[n])) {
                n += 1;
            }
        }
        // A wait that submitted SQEs returns their count even when a signal
        // cut it short, so an empty wake-up is reported as an interruption:
        // the reactor then runs the signal handlers (a no-op if none).
        if (waited and got == 0) return error.Interrupted;
        return n;
    }

    /// Queues the wait on `ep`, if borrowed fds use it, none is armed
    /// and none of its events is held: one-shot, re-armed after each
    /// completion as the polls are. An EPOLL_WAIT into `ep.buf`, or (see
    /// `ep_wait_op`) a poll of its fd.
    fn armEpoll(b: *Backend) sys.Error!void {
        if (!b.ep_used or b.ep_armed or b.ep_held_end != 0) return;
        const sqe = try b.getSqe();
        if (b.ep_wait_op) {
            sqe.prep_rw(op_epoll_wait, b.ep.epfd, @intFromPtr(&b.ep.buf), b.ep.buf.len, 0);
        } else {
            sqe.prep_poll_add(b.ep.epfd, linux.POLL.IN);
        }
        sqe.user_data = UserData.of(.{ .fd = @intCast(b.ep.epfd), .gen = 0, .kind = .epoll });
        b.ep_armed = true;
    }

    /// IORING_OP_EPOLL_WAIT (Linux 6.15), after IORING_OP_RECV_ZC, which
    /// Zig's enum names last.
    const op_epoll_wait: linux.IORING_OP = @fromBackingInt(@intCast(@backingInt(linux.IORING_OP.RECV_ZC) + 1));

    /// The completion (result `res`) of the wait on `ep`: the borrowed
    /// fds' events it brings, as many as fit in `out`, the rest held.
    /// Off the hot path (`noinline`): only passes where a borrowed fd is
    /// ready come here.
    noinline fn epollCompleted(b: *Backend, res: i32, out: []api.Event) sys.Error!usize {
        b.ep_armed = false;
        if (b.ep_wait_op) {
            if (res > 0) {
                b.ep_held = 0;
                b.ep_held_end = @intCast(res);
                return b.giveHeld(out);
            }
            if (res == 0) return 0;
            switch (@as(linux.E, @fromBackingInt(@intCast(-res)))) {
                // The op is unknown (before 6.15): poll `ep`'s fd from
                // now on, and now.
                .INVAL, .OPNOTSUPP => b.ep_wait_op = false,
                // Interrupted or cancelled: re-armed by the next poll.
                else => return 0,
            }
        }
        if (out.len == 0) return 0;
        return b.ep.poll(0, out);
    }

    /// Gives out the held events of `ep` that fit in `out`.
    noinline fn giveHeld(b: *Backend, out: []api.Event) usize {
        const k = @min(out.len, b.ep_held_end - b.ep_held);
        if (k == 0) return 0;
        epoll.Backend.toEvents(b.ep.buf[b.ep_held..][0..k], out[0..k]);
        b.ep_held += k;
        if (b.ep_held == b.ep_held_end) {
            b.ep_held = 0;
            b.ep_held_end = 0;
        }
        return k;
    }

    /// Submits the queued SQEs and waits. Returns whether it blocked.
    fn enter(b: *Backend, timeout_ms: i32) (sys.Error || error{Moved})!bool {
        const to_submit = b.ring.flush_sq();
        const block = timeout_ms != 0 and b.ring.cq_ready() == 0;
        if (!block and to_submit == 0 and !b.kernelHasWork()) return false;
        // A timeout goes in EXT_ARG's argument; a wait without one (until
        // an event, or none at all) passes nothing.
        const rc = if (block and timeout_ms > 0)
            b.enterTimed(to_submit, timeout_ms)
        else
            b.enterRaw(to_submit, @intFromBool(block), linux.IORING_ENTER_GETEVENTS, null);
        switch (linux.errno(rc)) {
            .SUCCESS => return block and rc > 0,
            // A thread the single-issuer ring does not let in, which `own`
            // took for its issuer: a forked child, or a thread that took
            // over an exited issuer's thread pointer.
            .EXIST => if (b.issuer != null) {
                try b.moveRing();
                return error.Moved;
            } else {
                sys.last_errno = @backingInt(linux.E.EXIST);
                return error.Unexpected;
            },
            // Nothing was submitted and a signal arrived while waiting.
            .INTR => return error.Interrupted,
            // The timeout expired with no completion.
            .TIME => return false,
            // Too many completions outstanding (CQ overcommitted): reap
            // what is there; the unsubmitted SQEs go with the next enter.
            .AGAIN, .BUSY => return false,
            else => |e| {
                sys.last_errno = @backingInt(e);
                return error.Unexpected;
            },
        }
    }

    /// Whether the kernel holds completions the ring does not show: task
    /// work not yet run (IORING_SQ_TASKRUN, see `coop_flags`) or a CQ
    /// overflow. Otherwise a non-blocking pass with nothing to submit reads
    /// the ring and makes no syscall (epoll pays an epoll_wait(0) there).
    fn kernelHasWork(b: *Backend) bool {
        const sq_flags = @atomicLoad(u32, b.ring.sq.flags, .acquire);
        return sq_flags & (linux.IORING_SQ_CQ_OVERFLOW | linux.IORING_SQ_TASKRUN) != 0;
    }

    /// A wait for one completion, `timeout_ms` (> 0) at most.
    noinline fn enterTimed(b: *Backend, to_submit: u32, timeout_ms: i32) usize {
        var ts: linux.kernel_timespec = .{
            .sec = @divTrunc(timeout_ms, 1000),
            .nsec = @as(i64, @rem(timeout_ms, 1000)) * std.time.ns_per_ms,
        };
        const arg: linux.io_uring_getevents_arg = .{
            .sigmask = 0,
            .sigmask_sz = linux.NSIG / 8,
            .pad = 0,
            .ts = @intFromPtr(&ts),
        };
        const flags = linux.IORING_ENTER_GETEVENTS | linux.IORING_ENTER_EXT_ARG;
        return b.enterRaw(to_submit, 1, flags, &arg);
    }

    /// io_uring_enter on this ring, with `arg` (EXT_ARG) or none.
    fn enterRaw(
        b: *Backend,
        to_submit: u32,
        min_complete: u32,
        flags: u32,
        arg: ?*const linux.io_uring_getevents_arg,
    ) usize {
        const fd: u32 = @bitCast(b.ring.fd);
        const arg_size: usize = if (arg != null) @sizeOf(linux.io_uring_getevents_arg) else 0;
        return linux.syscall6(.io_uring_enter, fd, to_submit, min_complete, flags, @intFromPtr(arg), arg_size);
    }

    /// Moves a single-issuer ring on the first use by another thread than
    /// its issuer (see the file's header).
    inline fn own(b: *Backend) sys.Error!void {
        const issuer = b.issuer orelse return;
        if (issuer != threadPointer()) try b.moveRing();
    }

    /// Replaces the single-issuer ring, which only its issuer may enter,
    /// by one any thread may (once: the new ring is not single-issuer).
    /// Nothing is entered in the old ring, as this thread may not: its
    /// unread completions are carried over (a receive's data, the borrowed
    /// fds' events), and it is closed, which cancels its polls and
    /// receives (data not yet received stays in the socket) and drops
    /// what it queued. Every poll and receive is then armed anew in the
    /// new ring: readiness is level-triggered, so nothing is lost.
    noinline fn moveRing(b: *Backend) sys.Error!void {
        std.debug.assert(b.issuer != null);
        var off = b.off;
        off.insert(.single_issuer);
        var ring = openRing(off) catch |err| return switch (err) {
            // The kernel set up a ring a moment ago: out of resources.
            error.Unsupported => failedWith(.NOMEM),
            else => |e| e,
        };
        var swapped = false;
        errdefer if (!swapped) ring.deinit();
        const old_n = b.ring.cq_ready();
        const old = slot_gpa.alloc(linux.io_uring_cqe, old_n) catch return error.NoMemory;
        defer slot_gpa.free(old);
        b.carried.ensureUnusedCapacity(slot_gpa, old_n) catch return error.NoMemory;
        for (old, 0..) |*cqe, i| cqe.* = b.ring.cq.cqes[(b.ring.cq.head.* +% @as(u32, @intCast(i))) & b.ring.cq.mask];
        const had_recv = b.buf_ring != null;
        // Not unregistered (this thread may not): closing the ring lets
        // go of it, and the kernel pinned its pages.
        if (b.buf_ring) |br| {
            const bytes: [*]align(std.heap.page_size_min) u8 = @ptrCast(br);
            std.posix.munmap(bytes[0 .. @as(usize, recv_buffers_max) * @sizeOf(linux.io_uring_buf)]);
        }
        b.buf_ring = null;
        b.ring.deinit();
        b.ring = ring;
        swapped = true;
        b.issuer = null;
        if (had_recv) b.buf_ring = IoUring.setup_buf_ring(ring.fd, recv_buffers_max, recv_group, .{ .inc = false }) catch null;
        // What the old ring armed is gone with it; its completions are
        // stale for polls, and a receive's end is the one it reported.
        for (b.slots.items) |*slot| {
            if (slot.armed) {
                slot.armed = false;
                slot.gen +%= 1;
            }
            if (slot.recvBusy()) slot.recv_state = .idle;
        }
        b.ep_armed = false;
        for (old) |cqe| b.carry(cqe);
        if (b.buf_ring) |br| {
            IoUring.buf_ring_init(br);
            var k: u16 = 0;
            for (b.in_ring, 0..) |in, id| if (in) {
                IoUring.buf_ring_add(br, b.buffers[id], @intCast(id), IoUring.buf_ring_mask(recv_buffers_max), k);
                k += 1;
            };
            IoUring.buf_ring_advance(br, k);
        } else if (had_recv) {
            // No buffer ring in the new ring: reads are polled.
            slot_gpa.free(b.buffers);
            slot_gpa.free(b.in_ring);
            b.buffers = &.{};
            b.in_ring = &.{};
        }
        for (b.slots.items, 0..) |*slot, i| {
            const fd: sys.fd_t = @intCast(i);
            if (!b.nativeRecv()) slot.recv = false;
            try b.syncRecv(fd, slot);
            try b.syncPoll(fd, slot);
        }
    }

    /// One unread completion of an abandoned ring (`moveRing`): the
    /// borrowed fds' events it brought are held, a receive's result is
    /// carried for the next poll; polls are re-armed instead.
    fn carry(b: *Backend, cqe: linux.io_uring_cqe) void {
        const ud: UserData = @bitCast(cqe.user_data);
        switch (ud.kind) {
            .epoll => if (b.ep_wait_op and cqe.res > 0) {
                std.debug.assert(b.ep_held_end == 0);
                b.ep_held = 0;
                b.ep_held_end = @intCast(cqe.res);
            },
            .recv => {
                const has_buffer = cqe.flags & linux.IORING_CQE_F_BUFFER != 0;
                const id: u16 = @intCast(cqe.flags >> linux.IORING_CQE_BUFFER_SHIFT);
                const slot = b.slotOf(@intCast(ud.fd)) orelse unreachable;
                // A stale receive's buffer goes back into the (new) ring.
                const current = slot.recv_gen == ud.gen;
                if (has_buffer and b.in_ring.len != 0) b.in_ring[id] = !current;
                if (!current or cqe.res == -@as(i32, @backingInt(linux.E.CANCELED))) return;
                b.carried.appendAssumeCapacity(cqe);
                // End of file or an error is reported once: not received
                // again until read interest is asked for anew.
                const ended = cqe.res == 0 or
                    (cqe.res < 0 and cqe.res != -@as(i32, @backingInt(linux.E.NOBUFS)));
                if (ended and slot.recvWanted()) slot.recv_state = .done;
            },
            else => {},
        }
    }

    /// Turns the carried completions into events, as many as fit in
    /// `out`, in order; those of an fd dropped since are stale, and their
    /// buffers go back to the ring.
    noinline fn giveCarried(b: *Backend, out: []api.Event) usize {
        var n: usize = 0;
        var used: usize = 0;
        for (b.carried.items) |cqe| {
            if (n == out.len) break;
            used += 1;
            const ud: UserData = @bitCast(cqe.user_data);
            const id: u16 = @intCast(cqe.flags >> linux.IORING_CQE_BUFFER_SHIFT);
            const slot = b.slotOf(@intCast(ud.fd)) orelse unreachable;
            if (slot.recv_gen != ud.gen) {
                if (cqe.flags & linux.IORING_CQE_F_BUFFER != 0) b.recycleRecvBuffer(id);
                continue;
            }
            out[n] = .{ .fd = @intCast(ud.fd), .readable = true, .writable = false, .recv = .{ .res = cqe.res, .buffer = id } };
            n += 1;
        }
        const rest = b.carried.items.len - used;
        std.mem.copyForwards(linux.io_uring_cqe, b.carried.items[0..rest], b.carried.items[used..]);
        b.carried.shrinkRetainingCapacity(rest);
        return n;
    }

    /// Turns one completion into an event, written to `out`; false for
    /// none (stale, control, error).
    inline fn complete(b: *Backend, cqe: linux.io_uring_cqe, out: *api.Event) sys.Error!bool {
        const ud: UserData = @bitCast(cqe.user_data);
        switch (ud.kind) {
            .poll => {},
            .control => return false,
            .recv => {
                // The common case, a receive that brought data and goes
                // on, inline; anything else in `received`.
                const slot = b.slotOf(@intCast(ud.fd)) orelse unreachable; // armed through slotFor
                const more = cqe.flags & linux.IORING_CQE_F_MORE != 0;
                if (cqe.res > 0 and more and slot.recv_gen == ud.gen) {
                    std.debug.assert(cqe.flags & linux.IORING_CQE_F_BUFFER != 0);
                    const id: u16 = @intCast(cqe.flags >> linux.IORING_CQE_BUFFER_SHIFT);
                    if (b.in_ring.len != 0) b.in_ring[id] = false;
                    b.recv_proven = true;
                    out.* = .{ .fd = @intCast(ud.fd), .readable = true, .writable = false, .recv = .{ .res = cqe.res, .buffer = id } };
                    return true;
                }
                const ev = try b.received(ud, cqe) orelse return false;
                out.* = ev;
                return true;
            },
            .epoll => unreachable, // `poll` takes it first
            _ => unreachable,
        }
        const fd: sys.fd_t = @intCast(ud.fd);
        const slot = b.slotOf(fd) orelse return false;
        if (slot.gen != ud.gen or !slot.armed) return false;
        slot.armed = false;
        const revents: u32 = if (cqe.res >= 0) @intCast(cqe.res) else switch (@as(linux.E, @fromBackingInt(@intCast(-cqe.res)))) {
            // Closed after its registration was checked: as epoll forgets a
            // closed fd, report nothing and do not re-arm.
            .BADF => return false,
            // Anything else wakes the callback to discover the error.
            else => linux.POLL.ERR,
        };
        const ev = try b.ready(fd, slot, revents) orelse return false;
        out.* = ev;
        return true;
    }

    /// Returns the slot's event for `revents`, if any, and re-arms it
    /// (a one-shot slot only when there was no event: the reactor expects
    /// a one-shot registration to stay armed until it reports something).
    fn ready(b: *Backend, fd: sys.fd_t, slot: *Slot, revents: u32) sys.Error!?api.Event {
        std.debug.assert(!slot.armed);
        if (slot.interest.none()) return null;
        // An error or hang-up wakes both directions, as epoll reports them,
        // except reads a receive serves: it reports the error itself.
        const failed = revents & (linux.POLL.ERR | linux.POLL.HUP) != 0;
        const polled_read = !slot.recvOwnsRead();
        // The mask may have narrowed since the poll was armed.
        const readable = polled_read and (failed or (slot.interest.read and revents & linux.POLL.IN != 0));
        const writable = failed or (slot.interest.write and revents & linux.POLL.OUT != 0);
        const fired = readable or writable;
        if (slot.oneshot and fired) {
            slot.interest = .{};
        } else {
            try b.syncPoll(fd, slot);
        }
        if (!fired) return null;
        return .{ .fd = fd, .readable = readable, .writable = writable };
    }

    fn arm(b: *Backend, fd: sys.fd_t, slot: *Slot, poll_mask: u32) sys.Error!void {
        std.debug.assert(!slot.armed and poll_mask != 0);
        const sqe = try b.getSqe();
        const ud: UserData = .{ .fd = @intCast(fd), .gen = slot.gen, .kind = .poll };
        sqe.prep_poll_add(fd, poll_mask);
        sqe.user_data = ud.of();
        slot.armed = true;
        slot.poll_mask = poll_mask;
    }

    /// Turns a receive's completion into an event, or null (stale,
    /// cancelled); its last completion re-arms or hands reads on.
    noinline fn received(b: *Backend, ud: UserData, cqe: linux.io_uring_cqe) sys.Error!?api.Event {
        const fd: sys.fd_t = @intCast(ud.fd);
        const has_buffer = cqe.flags & linux.IORING_CQE_F_BUFFER != 0;
        const id: u16 = @intCast(cqe.flags >> linux.IORING_CQE_BUFFER_SHIFT);
        if (has_buffer and b.in_ring.len != 0) b.in_ring[id] = false;
        const slot = b.slotOf(fd) orelse unreachable; // armed through slotFor
        if (slot.recv_gen != ud.gen) {
            if (has_buffer) b.recycleRecvBuffer(id);
            return null;
        }
        std.debug.assert(slot.recv_state == .armed or slot.recv_state == .cancelling);
        var ev: ?api.Event = .{ .fd = fd, .readable = true, .writable = false, .recv = .{ .res = cqe.res, .buffer = id } };
        var finished = false;
        if (cqe.res > 0) {
            std.debug.assert(has_buffer);
        } else if (cqe.res == 0) {
            finished = true; // end of file
        } else switch (@as(linux.E, @fromBackingInt(@intCast(-cqe.res)))) {
            .CANCELED => ev = null,
            .NOBUFS => {},
            .INVAL => if (!b.recv_proven) {
                // Multishot receives are 6.0+: poll reads from now on.
                b.teardownRecv();
                ev = null;
            } else {
                finished = true;
            },
            else => finished = true,
        }
        if (cqe.res > 0) b.recv_proven = true;
        if (cqe.flags & linux.IORING_CQE_F_MORE == 0) {
            slot.recv_state = if (finished and slot.recvWanted()) .done else .idle;
            if (!b.nativeRecv()) slot.recv = false;
            try b.syncRecv(fd, slot);
            try b.syncPoll(fd, slot);
        }
        return ev;
    }

    /// Drops all interest in `fd`, submitting the removals at once.
    fn disarm(b: *Backend, fd: sys.fd_t, slot: *Slot) sys.Error!void {
        const was_armed = slot.armed;
        const gen = slot.gen;
        const receiving = slot.recv_state;
        const recv_gen = slot.recv_gen;
        const listed = slot.listed;
        // Whatever the old poll and receive still post is stale from here on.
        // A listed fd stays listed (and is skipped: it wants nothing now).
        slot.* = .{ .gen = gen +% 1, .recv_gen = recv_gen +% 1, .listed = listed };
        if (receiving == .armed) try b.cancelRecv(fd, recv_gen);
        // A receive being cancelled has its cancellation queued already.
        const receive_held = receiving == .armed or receiving == .cancelling;
        if (!was_armed and !receive_held) return;
        if (was_armed) {
            const sqe = try b.getSqe();
            const ud: UserData = .{ .fd = @intCast(fd), .gen = gen, .kind = .poll };
            sqe.prep_poll_remove(ud.of());
            b.control(sqe, fd, gen);
        }
        // GETEVENTS runs the cancellations' task work now, which drops the
        // requests' references to the file.
        const rc = b.enterRaw(b.ring.flush_sq(), 0, linux.IORING_ENTER_GETEVENTS, null);
        switch (linux.errno(rc)) {
            .SUCCESS, .AGAIN, .BUSY, .INTR => {},
            // Refused (see `enter`): moving closes the old ring, and the
            // kernel cancels all it held.
            .EXIST => if (b.issuer != null) try b.moveRing(),
            else => |e| {
                sys.last_errno = @backingInt(e);
                return error.Unexpected;
            },
        }
    }

    fn control(b: *Backend, sqe: *linux.io_uring_sqe, fd: sys.fd_t, gen: u24) void {
        sqe.user_data = UserData.of(.{ .fd = @intCast(fd), .gen = gen, .kind = .control });
        if (b.skip_success) sqe.flags |= linux.IOSQE_CQE_SKIP_SUCCESS;
    }

    /// A free SQE; when the ring is full, submits what is queued first.
    fn getSqe(b: *Backend) sys.Error!*linux.io_uring_sqe {
        return b.ring.get_sqe() catch {
            _ = b.ring.submit() catch return error.NoMemory;
            return b.ring.get_sqe() catch error.NoMemory;
        };
    }

    fn slotOf(b: *Backend, fd: sys.fd_t) ?*Slot {
        const i: usize = @intCast(fd);
        return if (i < b.slots.items.len) &b.slots.items[i] else null;
    }

    fn slotFor(b: *Backend, fd: sys.fd_t) sys.Error!*Slot {
        const i: usize = @intCast(fd);
        if (i >= b.slots.items.len) {
            const old_len = b.slots.items.len;
            const new_len = @max(i + 1, old_len * 2, 64);
            b.to_arm.ensureTotalCapacityPrecise(slot_gpa, new_len) catch return error.NoMemory;
            b.slots.resize(slot_gpa, new_len) catch return error.NoMemory;
            @memset(b.slots.items[old_len..], .{});
        }
        return &b.slots.items[i];
    }
};

/// `error.NoMemory` with `e` for the caller's OSError.
fn failedWith(e: linux.E) sys.Error {
    sys.last_errno = @backingInt(e);
    return error.NoMemory;
}

fn mask(i: api.Interest) u32 {
    var m: u32 = 0;
    if (i.read) m |= linux.POLL.IN;
    if (i.write) m |= linux.POLL.OUT;
    return m;
}

/// Refuses what epoll refuses, with its errno: a closed fd (EBADF) and
/// regular files and directories (EPERM), which io_uring would otherwise
/// poll as always ready, unlike asyncio's selector loop.
fn pollable(fd: sys.fd_t) sys.Error!void {
    var st: linux.Statx = undefined;
    const rc = linux.statx(fd, "", linux.AT.EMPTY_PATH, .{ .TYPE = true }, &st);
    switch (linux.errno(rc)) {
        .SUCCESS => {},
        .BADF => {
            sys.last_errno = @backingInt(linux.E.BADF);
            return error.BadFd;
        },
        .NOMEM => return error.NoMemory,
        // statx unavailable or refused: let the poll itself decide.
        else => return,
    }
    if (linux.S.ISREG(st.mode) or linux.S.ISDIR(st.mode)) {
        sys.last_errno = @backingInt(linux.E.PERM);
        return error.Unexpected;
    }
}

test {
    _ = @import("io_uring_test.zig");
}
