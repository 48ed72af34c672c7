//! Work the store refused, said in the log with the store's own reason
//! (`store.unavailable`), at most once per [`EVERY`] for each reason, each
//! line counting the ones held back since the last: a disk that is full
//! under a thousand emits a second is a line every ten seconds, not a
//! thousand a second, and not silence.

use jadpo_store::StoreError;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The least time between two lines of one reason.
pub(crate) const EVERY: Duration = Duration::from_secs(10);

/// The most reasons remembered at once: past it, the one logged longest
/// ago is forgotten (its next line comes out at once). Store errors name
/// their kind and file or host, not the request, so a store has few.
const MAX_REASONS: usize = 16;

/// One engine's (so one store's) refusals, by reason.
#[derive(Default)]
pub(crate) struct Refusals {
    reasons: Mutex<Vec<Reason>>,
}

struct Reason {
    text: String,
    logged: Instant,
    held_back: u64,
}

impl Refusals {
    /// Logs that the store refused `work` with `e`, unless a line of the
    /// same reason went out less than [`EVERY`] ago. Only faults of the
    /// store itself: a conflict or a lost lease is the caller's answer,
    /// and its text may carry the caller's values.
    pub(crate) fn refused(&self, work: &'static str, e: &StoreError) {
        if !matches!(e, StoreError::Unavailable(_)) {
            return;
        }
        let reason = e.to_string();
        if let Some(suppressed) = self.admit(&reason, Instant::now()) {
            tracing::warn!(work, error = %reason, suppressed, "store.unavailable");
        }
    }

    /// Whether a line of `reason` goes out at `now`: with how many were
    /// held back since the last one, or `None` to hold this one back.
    fn admit(&self, reason: &str, now: Instant) -> Option<u64> {
        let mut reasons = self.reasons.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = reasons.iter_mut().find(|r| r.text == reason) {
            if now.saturating_duration_since(r.logged) < EVERY {
                r.held_back += 1;
                return None;
            }
            let held_back = std::mem::take(&mut r.held_back);
            r.logged = now;
            return Some(held_back);
        }
        if reasons.len() >= MAX_REASONS {
            let oldest = (0..reasons.len()).min_by_key(|&i| reasons[i].logged).unwrap_or(0);
            reasons.swap_remove(oldest);
        }
        reasons.push(Reason {
            text: reason.to_owned(),
            logged: now,
            held_back: 0,
        });
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_reason_per_interval_counting_those_held_back() {
        let r = Refusals::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let full = "the store is unavailable: sqlite /data/jadpo.db: database or disk is full";
        assert_eq!(r.admit(full, at(0)), Some(0));
        for ms in (1..1_460).map(|i| i * 5) {
            assert_eq!(r.admit(full, at(ms)), None, "{ms} ms in");
        }
        // Another reason has its own allowance.
        assert_eq!(r.admit("the store is unavailable: locked", at(100)), Some(0));
        assert_eq!(r.admit(full, at(9_999)), None);
        assert_eq!(r.admit(full, at(10_000)), Some(1_460));
        assert_eq!(r.admit(full, at(10_001)), None);
        assert_eq!(r.admit(full, at(25_000)), Some(1));
    }

    #[test]
    fn past_its_bound_the_reason_logged_longest_ago_is_forgotten() {
        let r = Refusals::default();
        let t0 = Instant::now();
        for i in 0..MAX_REASONS as u64 {
            assert_eq!(r.admit(&format!("reason {i}"), t0 + Duration::from_millis(i)), Some(0));
        }
        assert_eq!(r.admit("one more", t0 + Duration::from_millis(100)), Some(0));
        assert_eq!(r.reasons.lock().unwrap().len(), MAX_REASONS);
        // "reason 0" was forgotten: it comes out at once.
        assert_eq!(r.admit("reason 0", t0 + Duration::from_millis(101)), Some(0));
        assert_eq!(r.admit("reason 5", t0 + Duration::from_millis(102)), None);
    }
}
