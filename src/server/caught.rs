//! Panics a front expects, catches and reports itself. Tokio panics, rather than failing, when
//! the system will not start a thread for it: building a multi-thread runtime starts its
//! workers, and `spawn_blocking` starts a blocking thread when the pool has none to spare; both
//! happen under a memory limit (`ulimit -d` counts each thread's stack). The fronts catch those
//! panics and say them in the run's one failure line, so the panic hook's own lines (a message
//! and a note on backtraces, on stderr before that line) would only say it again, less plainly.
//! [`quietly`] keeps them off stderr; every other panic is printed as before.

use std::any::Any;
use std::cell::Cell;
use std::sync::Once;

thread_local! {
    /// Whether this thread is inside [`quietly`].
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with a panic on this thread kept off stderr: for a call whose panic the caller (or
/// the task or thread it unwinds to) catches and reports. The panic still unwinds as before.
pub(crate) fn quietly<T>(f: impl FnOnce() -> T) -> T {
    /// Puts the thread's flag back, on return and on unwinding alike.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            QUIET.set(self.0);
        }
    }
    hook_once();
    let _restore = Restore(QUIET.replace(true));
    f()
}

/// Wraps the panic hook in force, once per process, so that it is skipped inside [`quietly`].
fn hook_once() {
    static HOOKED: Once = Once::new();
    HOOKED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // A panic while the thread's locals are torn down finds none: not quiet.
            if !QUIET.try_with(Cell::get).unwrap_or(false) {
                previous(info);
            }
        }));
    });
}

/// What a caught panic said: its message, when it carried one.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    let text = panic.downcast_ref::<&str>().copied();
    let text = text.or_else(|| panic.downcast_ref::<String>().map(String::as_str));
    text.unwrap_or("(not a message)").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quiet only inside, on this thread alone, and no longer once a panic has unwound out.
    #[test]
    fn quiet_inside_only_and_after_a_panic_no_longer() {
        assert!(!QUIET.get());
        let unwound = std::panic::catch_unwind(|| {
            quietly(|| {
                let elsewhere = std::thread::spawn(|| QUIET.get()).join();
                assert!(QUIET.get() && elsewhere.is_ok_and(|quiet| !quiet));
                panic!("no thread could start");
            })
        });
        let panic = unwound.expect_err("the panic unwinds out of `quietly`");
        assert_eq!(panic_message(panic.as_ref()), "no thread could start");
        assert!(!QUIET.get());
    }
}
