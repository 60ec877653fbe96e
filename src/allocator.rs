//! The lab's global allocator: the C library's `malloc`, with two changes. The binary installs
//! it (`src/main.rs`), so every front's child has it too.
//!
//! - **Out of memory is one line.** Rust's default answer to a failed allocation prints a
//!   message and a backtrace and aborts; under an address-space limit (`ulimit -v`,
//!   `prlimit --as`) that is how any step can end. Here the process writes one line to stderr
//!   and exits 1, allocating nothing on the way; a front's parent reports that line.
//! - **A buffer nothing writes to can start on a page.** Inside [`on_pages`], an allocation of
//!   whole pages (8 KiB or more) is placed on a page boundary, so its unwritten pages never
//!   become resident. The async front makes each Hyper connection inside it: Hyper's 8 KiB
//!   response-head buffer is allocated there and stays unwritten while a request is held.
//!   `malloc` would otherwise put its own header and its neighbours' in that buffer's first and
//!   last pages. Placing every whole-page allocation on a page was measured too, and costs
//!   more than it saves (12.2 KiB per held request against 11.1): a buffer that is written, as
//!   Hyper's read buffer is, then takes a page of its own.
//!
//! It also keeps a [`census`] of the blocks alive by size, so that `hold` can say what a held
//! request allocates, not only what it keeps resident: two relaxed atomic additions per call.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering};

use serde::{Deserialize, Serialize};

/// The page size assumed for placement: Linux on x86-64 and most Arm configurations.
const PAGE: usize = 4096;
/// The strictest alignment `malloc` gives by itself (glibc, 64-bit).
const MALLOC_ALIGN: usize = 16;

thread_local! {
    static PLACE_ON_PAGES: Cell<bool> = const { Cell::new(false) };
}

/// Runs `make` with whole-page allocations of this thread placed on page boundaries.
pub fn on_pages<T>(make: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            PLACE_ON_PAGES.with(|flag| flag.set(self.0));
        }
    }
    let _reset = Reset(PLACE_ON_PAGES.with(|flag| flag.replace(true)));
    make()
}

/// See the module's documentation.
#[derive(Debug, Default)]
pub struct LabAllocator;

/// The size classes of the census, by their largest block; the last takes everything larger.
pub const CLASSES: [&str; 6] = [
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
pub fn census() -> HeapCensus {
    let read = |counters: &[AtomicI64; 6]| counters.each_ref().map(|c| c.load(Ordering::Relaxed));
    HeapCensus {
        blocks: read(&BLOCKS),
        bytes: read(&BYTES),
    }
}

/// The alignment to ask the C library for.
fn alignment(layout: Layout) -> usize {
    let size = layout.size();
    let whole_pages = size >= 2 * PAGE && size.is_multiple_of(PAGE);
    if whole_pages && PLACE_ON_PAGES.with(Cell::get) {
        layout.align().max(PAGE)
    } else {
        layout.align()
    }
}

/// Writes one line and exits 1, without allocating or unwinding.
fn out_of_memory(size: usize) -> ! {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = size;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let parts: [&[u8]; 3] = [
        b"isolation-lab: out of memory: an allocation of ",
        &digits[at..],
        b" bytes failed (under an address-space limit such as ulimit -v?)\n",
    ];
    for part in parts {
        // SAFETY: writing a valid buffer to stderr; a failed write leaves nothing else to do.
        unsafe { libc::write(libc::STDERR_FILENO, part.as_ptr().cast(), part.len()) };
    }
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

// SAFETY: every block comes from `malloc` or `posix_memalign` with at least the alignment
// asked and the size asked, and goes back with `free` or `realloc`, which take blocks of both.
unsafe impl GlobalAlloc for LabAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = allocate(layout.size(), alignment(layout));
        if ptr.is_null() {
            out_of_memory(layout.size());
        }
        count(layout.size(), 1);
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(layout.size(), -1);
        // SAFETY: `ptr` came from `malloc`, `posix_memalign` or `realloc`.
        unsafe { libc::free(ptr.cast()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let moved = if layout.align() <= MALLOC_ALIGN && layout.align() <= new_size {
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

    /// Whole pages move to a page boundary inside `on_pages` only, and only from 8 KiB up.
    #[test]
    fn whole_pages_start_on_a_page_inside_on_pages() {
        let asked = |size| Layout::from_size_align(size, 1).expect("a layout");
        assert_eq!(alignment(asked(8192)), 1);
        on_pages(|| {
            assert_eq!(alignment(asked(8192)), PAGE);
            assert_eq!(alignment(asked(16384)), PAGE);
            for size in [4096, 8191, 8200, 100] {
                assert_eq!(alignment(asked(size)), 1, "{size}");
            }
        });
        assert_eq!(alignment(asked(8192)), 1, "reset after on_pages");
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
        let page = on_pages(|| {
            // SAFETY: a non-zero layout.
            unsafe { allocator.alloc(Layout::from_size_align(8192, 1).expect("a layout")) }
        });
        assert_eq!(page as usize % PAGE, 0);
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
