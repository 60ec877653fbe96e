//! A bounded semaphore for the threaded front, in the manner of Python's
//! `threading.BoundedSemaphore`: permits are taken without waiting, and a release beyond capacity is
//! refused rather than silently growing the pool.

use std::sync::{Arc, Mutex};

use super::lock;

/// A fixed number of permits guarded by a std `Mutex`.
#[derive(Debug)]
pub(crate) struct BoundedSemaphore {
    capacity: usize,
    available: Mutex<usize>,
}

/// A release was refused: every permit was already back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OverRelease {
    pub capacity: usize,
}

impl BoundedSemaphore {
    /// A full semaphore of `capacity` permits.
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(BoundedSemaphore {
            capacity,
            available: Mutex::new(capacity),
        })
    }

    /// A permit if one is free, without waiting. It is released when dropped.
    pub(crate) fn try_acquire(self: &Arc<Self>) -> Option<BoundedPermit> {
        let mut available = lock(&self.available);
        *available = available.checked_sub(1)?;
        Some(BoundedPermit {
            semaphore: self.clone(),
        })
    }

    /// Gives a permit back, or refuses if that would exceed the capacity. Private: only a
    /// permit's drop releases, once per permit taken, so from outside an over-release cannot
    /// even be attempted; the refusal guards the count itself.
    fn release(&self) -> Result<(), OverRelease> {
        let mut available = lock(&self.available);
        if *available == self.capacity {
            return Err(OverRelease {
                capacity: self.capacity,
            });
        }
        *available += 1;
        Ok(())
    }

    /// Permits free right now.
    pub(crate) fn available(&self) -> usize {
        *lock(&self.available)
    }
}

/// A permit taken from a [`BoundedSemaphore`].
#[derive(Debug)]
pub(crate) struct BoundedPermit {
    semaphore: Arc<BoundedSemaphore>,
}

impl Drop for BoundedPermit {
    fn drop(&mut self) {
        // Each permit was taken once and is dropped once, and nothing else can release, so
        // this release is always within capacity.
        let _ = self.semaphore.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_taken_without_waiting_and_come_back_on_drop() {
        let semaphore = BoundedSemaphore::new(2);
        let first = semaphore.try_acquire().expect("one of two");
        let second = semaphore.try_acquire().expect("two of two");
        assert!(
            semaphore.try_acquire().is_none(),
            "a full pool refuses at once"
        );
        assert_eq!(semaphore.available(), 0);
        drop(first);
        assert_eq!(semaphore.available(), 1);
        drop(second);
        assert_eq!(semaphore.available(), 2);
    }

    /// Releasing a permit that was never taken is refused, as a bounded semaphore does.
    #[test]
    fn a_release_beyond_capacity_is_refused() {
        let semaphore = BoundedSemaphore::new(1);
        assert_eq!(semaphore.release(), Err(OverRelease { capacity: 1 }));
        let permit = semaphore.try_acquire().expect("free");
        drop(permit);
        assert_eq!(semaphore.release(), Err(OverRelease { capacity: 1 }));
        assert_eq!(semaphore.available(), 1, "the pool never grew");
    }
}
