//! Connection slots: one place for what one connection of the async front allocates, laid out so
//! that a held request keeps a single page resident.
//!
//! A held request's connection owns a task (Hyper's connection state and the lab's service,
//! ≈ 1.0 KiB), the box Hyper keeps for the handler's future (≈ 0.8 KiB), a few small blocks,
//! and Hyper's two 8 KiB buffers: the read buffer, whose first bytes hold the request head, and
//! the response-head buffer, which a connection writes only when it answers. `malloc` scatters
//! these over two pages or more. A slot is 5 pages of address space, 20 KiB:
//!
//! ```text
//! page 0                    | page 1 | page 2          | page 3 | page 4 |
//! [header][small blocks ...][read buffer (8 KiB) ........][write buffer (8 KiB) ]
//!                           ^ 512 bytes before page 1
//! ```
//!
//! The small blocks and the first 512 bytes of the read buffer, where a request head lands,
//! share page 0. While the connection's first request is held, the rest of the read buffer and
//! the whole write buffer are unwritten, so not resident. A block that does not fit, or is made
//! outside a slot's scope, comes from `malloc` as before; so do the handler's own blocks
//! ([`Placed::outside`]), which outlive or leave their connection (ledger events, channel
//! blocks, threads its work starts) and would otherwise keep the slot alive.
//!
//! Slots are carved from one region of address space reserved when the first async front starts
//! (one slot per descriptor the process may open, as each connection needs one), and only when
//! the address space and private memory are unlimited: under `ulimit -v` or `ulimit -d` the lab
//! reserves nothing it might not use.
//! (`MAP_NORESERVE` asks for no commitment; under `vm.overcommit_memory = 2` the kernel charges
//! the region anyway, and a refusal there leaves every block to `malloc`.) A slot counts its
//! live blocks, plus one for each [`Slot`] handle and each scope inside it; at zero its pages
//! after the first go back to the system and the slot to a free list, for reuse.

use std::alloc::Layout;
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

use crate::limits::{Resource, Rlimit};

const PAGE: usize = 4096;
const SLOT: usize = 5 * PAGE;
/// The size of each of Hyper's buffers, and of the two places kept for them.
const BUFFER: usize = 8192;
/// Where the read buffer starts: its first 512 bytes, room for a request head, lie in page 0.
const READ_AT: usize = PAGE - 512;
/// Where the write buffer starts: on a page of its own, never written while a request is held.
const WRITE_AT: usize = 3 * PAGE;
/// Small blocks go after the header, up to the read buffer.
const SMALL_AT: usize = std::mem::size_of::<Header>().next_multiple_of(16);
/// The most slots reserved, whatever the descriptor limit.
const MOST: usize = 1 << 16;

/// At the start of each slot, in its page 0.
struct Header {
    /// Blocks alive in the slot, handles and scopes included.
    live: AtomicUsize,
    /// The end of the small blocks made so far; below [`SMALL_AT`] on a fresh slot.
    bump: AtomicU32,
    /// Which buffer places are taken: [`READ`], [`WRITE`].
    buffers: AtomicU8,
    /// The next free slot's index plus one, while this slot is on the free list.
    next_free: AtomicU32,
}

const READ: u8 = 1;
const WRITE: u8 = 2;

/// The region's first byte (0 until reserved, or if the reservation failed) and its slots.
static BASE: AtomicUsize = AtomicUsize::new(0);
static CAPACITY: AtomicUsize = AtomicUsize::new(0);
/// 0: not tried; 1: being reserved; 2: reserved, or given up.
static RESERVED: AtomicU8 = AtomicU8::new(0);
/// Slots handed out at least once.
static FRESH: AtomicUsize = AtomicUsize::new(0);
/// The free list's head: a slot index plus one in the low 32 bits (0: empty), and a count of
/// changes in the high 32, so a pop cannot be fooled by a slot taken and freed meanwhile.
static FREE: AtomicU64 = AtomicU64::new(0);

/// What an 8 KiB block made in a scope is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Made while a connection is built: Hyper's response-head buffer, written only when the
    /// connection answers.
    Unwritten,
    /// Made while a connection is served: Hyper's read buffer, the request head at its start.
    Written,
}

thread_local! {
    /// The slot this thread allocates in, as its index plus one (0: none), and the placement.
    static SCOPE: Cell<(u32, Placement)> = const { Cell::new((0, Placement::Written)) };
}

/// Reserves the region, once per process: nothing if the address space or private memory is
/// limited, or the system refuses. Called when an async front starts.
pub(crate) fn reserve() {
    if RESERVED
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    // Soft limits, `None` where unlimited.
    let soft = |resource| Rlimit::get(resource).map(|limit| limit.soft);
    let slots = soft(Resource::Nofile)
        .map(|n| n.map_or(MOST, |n| usize::try_from(n).unwrap_or(MOST).min(MOST)));
    // The region is writable, so it counts against RLIMIT_DATA as well as RLIMIT_AS whether
    // or not its pages are ever written: under either limit it would take the room the
    // connections need.
    let unlimited = |resource| matches!(soft(resource), Ok(None));
    if let Ok(slots) = slots
        && unlimited(Resource::AddressSpace)
        && unlimited(Resource::Data)
    {
        // SAFETY: a fresh anonymous private mapping; nothing else refers to it. NORESERVE: its
        // pages cost nothing until written.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                slots * SLOT,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base != libc::MAP_FAILED {
            BASE.store(base as usize, Ordering::Relaxed);
            // Published last: whoever sees a capacity sees the base.
            CAPACITY.store(slots, Ordering::Release);
        }
    }
    RESERVED.store(2, Ordering::Release);
}

/// Whether the region is reserved (not under an address-space or private-memory limit).
#[cfg(test)]
pub(super) fn reserved() -> bool {
    CAPACITY.load(Ordering::Acquire) != 0
}

fn header(index: u32) -> &'static Header {
    let at = BASE.load(Ordering::Relaxed) + index as usize * SLOT;
    // SAFETY: `index` names a slot of the reserved region, which is never unmapped; its header
    // is zeroed memory at first, a valid `Header` of atomics.
    unsafe { &*(at as *const Header) }
}

/// One connection's slot: a counted handle. Made outside any slot's scope.
#[derive(Debug)]
pub(crate) struct Slot(Option<u32>);

impl Slot {
    /// A free slot, or none (every block then comes from `malloc`).
    pub(crate) fn take() -> Slot {
        let index = pop().or_else(|| {
            let capacity = CAPACITY.load(Ordering::Acquire);
            let fresh = FRESH.fetch_add(1, Ordering::Relaxed);
            (fresh < capacity).then_some(fresh as u32)
        });
        if let Some(index) = index {
            header(index).live.fetch_add(1, Ordering::Relaxed);
        }
        Slot(index)
    }

    /// Runs `make` with this thread's blocks placed in this slot, 8 KiB ones as `placement`;
    /// without a slot, outside any (from `malloc`).
    pub(crate) fn enter<T>(&self, placement: Placement, make: impl FnOnce() -> T) -> T {
        struct Leave((u32, Placement), Option<u32>);
        impl Drop for Leave {
            fn drop(&mut self) {
                SCOPE.with(|scope| scope.set(self.0));
                if let Some(index) = self.1 {
                    release(index);
                }
            }
        }
        if let Some(index) = self.0 {
            header(index).live.fetch_add(1, Ordering::Relaxed);
        }
        let scope = self.0.map_or(0, |index| index + 1);
        let _leave = Leave(SCOPE.with(|s| s.replace((scope, placement))), self.0);
        make()
    }
}

impl Clone for Slot {
    fn clone(&self) -> Self {
        if let Some(index) = self.0 {
            header(index).live.fetch_add(1, Ordering::Relaxed);
        }
        Slot(self.0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(index) = self.0 {
            release(index);
        }
    }
}

/// A future polled inside a slot, or outside any: what it allocates while it runs lands there.
#[derive(Debug)]
pub(crate) struct Placed<F> {
    slot: Slot,
    inner: F,
}

impl<F> Placed<F> {
    /// `inner`, polled in `slot`.
    pub(crate) fn in_slot(slot: Slot, inner: F) -> Self {
        Placed { slot, inner }
    }

    /// `inner`, polled outside any slot: for work whose blocks outlive its connection or are
    /// shared beyond it (a ledger's events, a channel's blocks, a thread it starts).
    pub(crate) fn outside(inner: F) -> Self {
        Placed {
            slot: Slot(None),
            inner,
        }
    }
}

impl<F: Future> Future for Placed<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        // SAFETY: `inner` is never moved out of the pinned `Placed`; `slot` is not pinned.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: as above, `inner` stays where it is for as long as `Placed` lives.
        let inner = unsafe { std::pin::Pin::new_unchecked(&mut this.inner) };
        this.slot.enter(Placement::Written, || inner.poll(cx))
    }
}

/// A block for `layout` in this thread's current slot, if there is one and it has room.
pub(super) fn alloc(layout: Layout) -> Option<*mut u8> {
    let (scope, placement) = SCOPE.with(Cell::get);
    let index = scope.checked_sub(1)?;
    let header = header(index);
    let base = BASE.load(Ordering::Relaxed) + index as usize * SLOT;
    let at = if layout.size() == BUFFER && layout.align() <= 16 {
        let (taken, at) = match placement {
            Placement::Written => (READ, READ_AT),
            Placement::Unwritten => (WRITE, WRITE_AT),
        };
        // Acquire: the block's last owner, freeing it on any thread, is done with it.
        if header.buffers.fetch_or(taken, Ordering::Acquire) & taken != 0 {
            return None;
        }
        at
    } else {
        if layout.align() > 256 {
            return None;
        }
        let mut bump = header.bump.load(Ordering::Relaxed);
        loop {
            let start = (bump as usize)
                .max(SMALL_AT)
                .next_multiple_of(layout.align());
            let end = start.checked_add(layout.size()).filter(|&e| e <= READ_AT)?;
            // Checked above: `end` is within a slot, far below u32::MAX.
            let end = end as u32;
            match header
                .bump
                .compare_exchange_weak(bump, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break start,
                Err(now) => bump = now,
            }
        }
    };
    header.live.fetch_add(1, Ordering::Relaxed);
    Some((base + at) as *mut u8)
}

/// Whether `ptr` is a block of some slot.
pub(super) fn owns(ptr: *mut u8) -> bool {
    let capacity = CAPACITY.load(Ordering::Acquire);
    let base = BASE.load(Ordering::Relaxed);
    let at = ptr as usize;
    capacity != 0 && at >= base && at < base + capacity * SLOT
}

/// Frees `ptr`, a block of some slot (see [`owns`]).
pub(super) fn free(ptr: *mut u8) {
    let offset = ptr as usize - BASE.load(Ordering::Relaxed);
    let index = (offset / SLOT) as u32;
    let header = header(index);
    // Release: this thread is done with the block before the place is taken again.
    match offset % SLOT {
        READ_AT => header.buffers.fetch_and(!READ, Ordering::Release),
        WRITE_AT => header.buffers.fetch_and(!WRITE, Ordering::Release),
        _ => 0,
    };
    release(index);
}

/// One fewer live block, handle or scope; at none, the slot is reset and freed.
fn release(index: u32) {
    let header = header(index);
    if header.live.fetch_sub(1, Ordering::Release) != 1 {
        return;
    }
    fence(Ordering::Acquire);
    // The pages after page 0 (the header's) go back to the system, so a reused slot keeps no
    // page its last connection wrote: a response head in the write buffer, a long request.
    let pages = BASE.load(Ordering::Relaxed) + index as usize * SLOT + PAGE;
    // SAFETY: whole pages of the reserved region, which no block uses any more; a private
    // anonymous mapping reads back as zeros after MADV_DONTNEED. A failure leaves them resident.
    unsafe { libc::madvise(pages as *mut libc::c_void, SLOT - PAGE, libc::MADV_DONTNEED) };
    header.bump.store(0, Ordering::Relaxed);
    header.buffers.store(0, Ordering::Relaxed);
    let mut head = FREE.load(Ordering::Relaxed);
    loop {
        header.next_free.store(head as u32, Ordering::Relaxed);
        let new = ((head >> 32) + 1) << 32 | u64::from(index + 1);
        match FREE.compare_exchange_weak(head, new, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => head = now,
        }
    }
}

fn pop() -> Option<u32> {
    let mut head = FREE.load(Ordering::Acquire);
    loop {
        let index = (head as u32).checked_sub(1)?;
        let next = header(index).next_free.load(Ordering::Relaxed);
        let new = ((head >> 32) + 1) << 32 | u64::from(next);
        match FREE.compare_exchange_weak(head, new, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => return Some(index),
            Err(now) => head = now,
        }
    }
}
