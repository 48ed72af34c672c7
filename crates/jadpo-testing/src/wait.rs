//! Waiting for something to happen: poll often, return as soon as it has,
//! fail only after [`CEILING`].
//!
//! The ceiling is far above any time a correct run needs, so a loaded
//! machine makes a test slower, never red. Nothing here shows that
//! something did *not* happen: for that, drive the system to where it
//! would have happened (a manual clock past the due time, a later event
//! that must come after) and look.

use std::time::{Duration, Instant};

/// How long any wait in the suite may take before it is a failure.
pub const CEILING: Duration = Duration::from_secs(60);

/// How often a wait looks again.
pub const POLL: Duration = Duration::from_millis(20);

/// Until `done`, on this thread; panics naming `what` after [`CEILING`].
pub fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < CEILING,
            "timed out after {CEILING:?} waiting for: {what}"
        );
        std::thread::sleep(POLL);
    }
}

/// Until `check` gives a value, on the tokio runtime; panics naming `what`
/// after [`CEILING`].
pub async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < CEILING,
            "timed out after {CEILING:?} waiting for: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Until `check` holds, on the tokio runtime; panics naming `what` after
/// [`CEILING`]. For checks written as closures that return a future.
pub async fn until_async<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < CEILING,
            "timed out after {CEILING:?} waiting for: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_returns_as_soon_as_done() {
        let mut n = 0;
        until("three looks", || {
            n += 1;
            n == 3
        });
        assert_eq!(n, 3);
    }
}
