//! The lab's global allocator: the C library's `malloc`, with two changes. The binary installs
//! it (`src/main.rs`), so every front's child has it too.
//!
//! - **Out of memory is one line.** Rust's default answer to a failed allocation prints a
//!   message and a backtrace and aborts; under an address-space limit (`ulimit -v`,
//!   `prlimit --as`) that is how any step can end. Here the process writes one line to stderr
//!   and exits 1, allocating nothing on the way; a front's parent reports that line.
//! - **A connection's blocks share a page.** Inside a [`slots::Slot`]'s scope, which the async
//!   front opens around each connection, blocks are placed in that connection's slot, so a held
//!   request keeps one page resident rather than two or more (see [`slots`]).
//!
//! It also keeps a [`census`] of the blocks alive by size, so that `hold` can say what a held
//! request allocates, not only what it keeps resident: two relaxed atomic additions per call.

use std::alloc::{GlobalAlloc, Layout};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use serde::{Deserialize, Serialize};

pub(crate) mod slots;

/// Under an address-space limit (`ulimit -v`, `prlimit --as`), keeps glibc's `malloc` to its
/// one main arena. A thread that finds that arena busy would otherwise make one of its own and
/// reserve 64 MiB of address space for it: room the held requests' thread stacks need, taken
/// by chance, so that how many a front could hold under the same limit changed from run to run
/// (the threaded front's child at rest: 8.9 MiB, or 72.9 MiB with an arena). Called first in
/// `main`, before a second thread exists; a no-op without a limit.
pub fn one_arena_under_an_address_space_limit() {
    use crate::limits::{Resource, Rlimit};
    let limited = Rlimit::get(Resource::AddressSpace).is_ok_and(|limit| limit.soft.is_some());
    #[cfg(target_env = "gnu")]
    if limited {
        // SAFETY: `mallopt` only sets a tunable of the C library's allocator.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = limited;
}

/// The strictest alignment `malloc` gives by itself (glibc, 64-bit).
const MALLOC_ALIGN: usize = 16;

/// See the module's documentation.
#[derive(Debug, Default)]
pub struct LabAllocator;

/// The size classes of the census, by their largest block; the last takes everything larger.
pub(crate) const CLASSES: [&str; 6] = [
    "up to 256 B",
    "257 B to 1 KiB",
    "1 to 4 KiB",
    "4 to 8 KiB",
    "8 KiB",
    "over 8 KiB",
];

static BLOCKS: [AtomicI64; 6] = [const { AtomicI64::new(0) }; 6];
static BYTES: [AtomicI64; 6] = [const { AtomicI64::new(0) }; 6];

fn class(size: usize) -> usize {
    match size {
        0..=256 => 0,
        257..=1024 => 1,
        1025..=4096 => 2,
        4097..=8191 => 3,
        8192 => 4,
        _ => 5,
    }
}

fn count(size: usize, sign: i64) {
    let class = class(size);
    BLOCKS[class].fetch_add(sign, Ordering::Relaxed);
    BYTES[class].fetch_add(
        sign * i64::try_from(size).unwrap_or(i64::MAX),
        Ordering::Relaxed,
    );
}

/// The blocks alive in this process, by size class (see [`CLASSES`]): all zero where
/// [`LabAllocator`] is not the global allocator (in a test binary).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapCensus {
    /// Blocks alive, per class.
    pub blocks: [i64; 6],
    /// Their bytes, as asked for, per class.
    pub bytes: [i64; 6],
}

/// The census now: each class read on its own, not one atomic snapshot.
pub(crate) fn census() -> HeapCensus {
    let read = |counters: &[AtomicI64; 6]| counters.each_ref().map(|c| c.load(Ordering::Relaxed));
    HeapCensus {
        blocks: read(&BLOCKS),
        bytes: read(&BYTES),
    }
}

/// Set by the first thread to run out of memory: the process says so once.
static RAN_OUT: AtomicBool = AtomicBool::new(false);

/// Writes one line and exits 1, without allocating or unwinding. A thread that runs out while
/// another is already on its way out waits for that exit rather than write a second line.
fn out_of_memory(size: usize) -> ! {
    if RAN_OUT.swap(true, Ordering::Relaxed) {
        loop {
            // SAFETY: `pause` only waits for a signal; the first thread's `_exit` ends us.
            unsafe { libc::pause() };
        }
    }
    // Formatted into a buffer on the stack: `Write` for a byte slice allocates nothing.
    let mut line = [0u8; 160];
    let mut rest = &mut line[..];
    let _ = writeln!(
        rest,
        "isolation-lab: out of memory: an allocation of {size} bytes failed (under a memory \
         limit such as ulimit -v or -d?)"
    );
    let unused = rest.len();
    let length = line.len() - unused;
    // One write of the whole line, which a pipe keeps in one piece.
    // SAFETY: writing a valid buffer to stderr; a failed write leaves nothing else to do.
    unsafe { libc::write(libc::STDERR_FILENO, line.as_ptr().cast(), length) };
    // SAFETY: `_exit` ends the process at once; nothing runs after it.
    unsafe { libc::_exit(1) }
}

/// `malloc`, or `posix_memalign` for an alignment beyond `malloc`'s; null if it failed.
fn allocate(size: usize, align: usize) -> *mut u8 {
    if align <= MALLOC_ALIGN && align <= size {
        // SAFETY: `size` is non-zero (a `GlobalAlloc` caller never asks for zero bytes).
        unsafe { libc::malloc(size).cast() }
    } else {
        let mut out = std::ptr::null_mut();
        // posix_memalign wants at least the size of a pointer.
        let align = align.max(std::mem::size_of::<usize>());
        // SAFETY: `out` is writable; `align` is a power of two, a multiple of a pointer's size.
        match unsafe { libc::posix_memalign(&mut out, align, size) } {
            0 => out.cast(),
            _ => std::ptr::null_mut(),
        }
    }
}

// SAFETY: every block comes from a connection slot (placed at the alignment asked, within the
// slot, apart from every other live block: `slots::alloc`) or from `malloc` or `posix_memalign`
// with at least the alignment and size asked; a slot's block goes back to its slot (known by
// its address), any other to `free` or `realloc`, which take blocks of both.
unsafe impl GlobalAlloc for LabAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = slots::alloc(layout).unwrap_or_else(|| allocate(layout.size(), layout.align()));
        if ptr.is_null() {
            out_of_memory(layout.size());
        }
        count(layout.size(), 1);
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(layout.size(), -1);
        if slots::owns(ptr) {
            slots::free(ptr);
        } else {
            // SAFETY: `ptr` came from `malloc`, `posix_memalign` or `realloc`.
            unsafe { libc::free(ptr.cast()) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let moved = if slots::owns(ptr) {
            // SAFETY: the new layout is valid: `GlobalAlloc::realloc`'s contract.
            let grown = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            let moved = slots::alloc(grown).unwrap_or_else(|| allocate(new_size, layout.align()));
            if !moved.is_null() {
                // SAFETY: both blocks hold at least the bytes copied, and do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size)) };
                slots::free(ptr);
            }
            moved
        } else if layout.align() <= MALLOC_ALIGN && layout.align() <= new_size {
            // SAFETY: `ptr` is a live block of this allocator; `malloc`'s alignment suffices.
            unsafe { libc::realloc(ptr.cast(), new_size).cast() }
        } else {
            let moved = allocate(new_size, layout.align());
            if !moved.is_null() {
                // SAFETY: both blocks hold at least the bytes copied, and do not overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                    libc::free(ptr.cast());
                }
            }
            moved
        };
        if moved.is_null() {
            out_of_memory(new_size);
        }
        count(layout.size(), -1);
        count(new_size, 1);
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a slot, the read buffer's first bytes share a page with the small blocks, and the
    /// write buffer has whole pages of its own; outside, every block comes from `malloc`.
    #[test]
    fn a_connections_blocks_share_one_page_in_its_slot() {
        let allocator = LabAllocator;
        let layout = |size| Layout::from_size_align(size, 8).expect("a layout");
        slots::reserve();
        if !slots::reserved() {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "skipped a_connections_blocks_share_one_page_in_its_slot: no region under a memory limit"
            );
            return;
        }
        let slot = slots::Slot::take();
        // SAFETY: non-zero layouts; each block is freed once, with its layout.
        unsafe {
            let write = slot.enter(slots::Placement::Unwritten, || {
                allocator.alloc(layout(8192))
            });
            let (read, small) = slot.enter(slots::Placement::Written, || {
                (allocator.alloc(layout(8192)), allocator.alloc(layout(1900)))
            });
            let outside = allocator.alloc(layout(8192));
            assert!(slots::owns(write) && slots::owns(read) && slots::owns(small));
            assert!(!slots::owns(outside));
            assert_eq!(write as usize % 4096, 0, "the write buffer starts a page");
            assert_eq!(read as usize / 4096, small as usize / 4096, "one page");
            assert!(small as usize + 1900 <= read as usize, "no overlap");
            assert_eq!(write as usize - read as usize, 8192 + 512, "in one slot");
            read.write_bytes(3, 8192);
            let grown = allocator.realloc(read, layout(8192), 20_000);
            assert!(!slots::owns(grown), "grown out of the slot");
            assert!((0..8192).all(|i| *grown.add(i) == 3));
            for (ptr, size) in [
                (write, 8192),
                (grown, 20_000),
                (small, 1900),
                (outside, 8192),
            ] {
                allocator.dealloc(ptr, layout(size));
            }
        }
    }

    /// Sizes fall in their classes, Hyper's 8 KiB buffers in a class of their own.
    #[test]
    fn sizes_fall_in_their_classes() {
        let classes: Vec<usize> = [1, 256, 257, 1024, 1025, 4096, 4097, 8191, 8192, 8193]
            .into_iter()
            .map(class)
            .collect();
        assert_eq!(classes, [0, 0, 1, 1, 2, 2, 3, 3, 4, 5]);
        assert_eq!(CLASSES.len(), BLOCKS.len());
    }

    /// Blocks made, grown and freed through the allocator keep their bytes and alignment.
    #[test]
    fn blocks_keep_their_bytes_and_alignment() {
        let allocator = LabAllocator;
        // SAFETY: a non-zero layout.
        let page = unsafe { allocator.alloc(Layout::from_size_align(8192, 1).expect("a layout")) };
        let aligned = Layout::from_size_align(64, 64).expect("a layout");
        // SAFETY: each pointer is used within its size and freed once.
        unsafe {
            page.write_bytes(7, 8192);
            let grown = allocator.realloc(
                page,
                Layout::from_size_align(8192, 1).expect("a layout"),
                20_000,
            );
            assert!((0..8192).all(|i| *grown.add(i) == 7));
            allocator.dealloc(grown, Layout::from_size_align(20_000, 1).expect("a layout"));
            let ptr = allocator.alloc(aligned);
            assert_eq!(ptr as usize % 64, 0);
            ptr.write_bytes(1, 64);
            let moved = allocator.realloc(ptr, aligned, 200);
            assert_eq!(moved as usize % 64, 0);
            assert!((0..64).all(|i| *moved.add(i) == 1));
            allocator.dealloc(moved, aligned);
        }
    }
}
