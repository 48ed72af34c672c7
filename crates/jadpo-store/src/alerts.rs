//! Alert messages as every store keeps them: raised by the sweep, resolved
//! by the finish that closes a breaker, raised by a failing schedule, and
//! sent by whichever process routes alerts (see `jadpo_core::alert`).
//!
//! The claim and the write of a send's end are decided here, once, over a
//! message's [`Sends`]; the stores only read and write rows. A claim counts
//! the send, so the count is also the fence: the end of a send is written
//! only while no later claim has taken the message over.

use crate::types::AlertRecord;
use jadpo_core::alert::{AlertMessage, SendDecision, Sends};
use jadpo_core::Timestamp;
use std::time::Duration;

/// The most messages one claim takes: a bound on what one sender holds.
pub const MAX_ALERT_CLAIM: usize = 100;

/// Takes a message for a send at `now`, until `now + lease`. Only when
/// [`Sends::claimable`].
pub fn claim(sends: &mut Sends, now: Timestamp, lease: Duration) {
    sends.attempts += 1;
    sends.due_at = Some(now.plus(lease));
}

/// Writes how the `attempt`-th send ended; false, and nothing changed, when
/// a later claim took the message over or it is sent or given up already.
pub fn finish(sends: &mut Sends, attempt: u32, decision: &SendDecision) -> bool {
    if sends.attempts != attempt || !sends.open() {
        return false;
    }
    match decision {
        SendDecision::Sent { at } => {
            sends.sent_at = Some(*at);
            sends.due_at = None;
        }
        SendDecision::Retry { at, code } => {
            sends.due_at = Some(*at);
            sends.last_error = Some(code.clone());
        }
        SendDecision::GiveUp { at, code } => {
            sends.failed_at = Some(*at);
            sends.due_at = None;
            sends.last_error = Some(code.clone());
        }
    }
    true
}

/// The memory store's alert messages, oldest first.
#[derive(Clone, Debug, Default)]
pub struct AlertBook {
    rows: Vec<AlertRecord>,
    /// The last id issued: pruned messages' ids are never issued again.
    last_id: i64,
}

impl AlertBook {
    /// Forgets messages raised before `before`, at most `batch`, oldest
    /// first.
    pub fn prune(&mut self, before: Timestamp, batch: usize) {
        let mut n = 0;
        self.rows.retain(|r| {
            let old = n < batch && r.message.raised_at < before;
            n += usize::from(old);
            !old
        });
    }

    /// Keeps a new message, unsent, under the next id.
    pub fn push(&mut self, message: AlertMessage) {
        self.last_id += 1;
        self.rows.push(AlertRecord {
            id: self.last_id,
            public_id: crate::types::new_public_id(),
            message,
            sends: Sends::default(),
        });
    }

    /// Newest first.
    pub fn list(&self, limit: usize) -> Vec<AlertRecord> {
        self.rows.iter().rev().take(limit).cloned().collect()
    }

    /// Claims up to `limit` messages whose send is due at `now` (at most
    /// [`MAX_ALERT_CLAIM`]), longest due first, each until `now + lease`:
    /// [`claim`] on each.
    pub fn claim(&mut self, now: Timestamp, limit: usize, lease: Duration) -> Vec<AlertRecord> {
        let mut due: Vec<&mut AlertRecord> = self
            .rows
            .iter_mut()
            .filter(|r| r.sends.claimable(r.message.raised_at, now))
            .collect();
        due.sort_by_key(|r| (r.sends.due_at.unwrap_or(r.message.raised_at), r.id));
        due.into_iter()
            .take(limit.min(MAX_ALERT_CLAIM))
            .map(|r| {
                claim(&mut r.sends, now, lease);
                r.clone()
            })
            .collect()
    }

    /// Writes how the `attempt`-th send of message `id` ended ([`finish`]);
    /// false, and nothing changed, when fenced out or no message has that id.
    pub fn finish(&mut self, id: i64, attempt: u32, decision: &SendDecision) -> bool {
        self.rows
            .iter_mut()
            .find(|r| r.id == id)
            .is_some_and(|r| finish(&mut r.sends, attempt, decision))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jadpo_core::alert::SendState;
    use jadpo_core::Alert;

    const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);
    const LEASE: Duration = Duration::from_secs(60);

    fn book() -> AlertBook {
        let mut book = AlertBook::default();
        let alert = Alert {
            connection: "pay".into(),
            since: T0,
            held: 3,
        };
        book.push(AlertMessage::raised(&alert, T0));
        book
    }

    #[test]
    fn a_claimed_send_is_fenced_by_its_attempt() {
        let mut book = book();
        let first = book.claim(T0, 10, LEASE);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].sends.attempts, 1);
        assert!(book.claim(T0, 10, LEASE).is_empty(), "claimed until its lease ends");
        // The first sender is lost; its lease ends and another claims it.
        let second = book.claim(T0.plus(LEASE), 10, LEASE);
        assert_eq!(second[0].sends.attempts, 2);
        let sent = SendDecision::Sent { at: T0.plus(LEASE) };
        assert!(!book.finish(1, 1, &sent), "the lost sender's end is refused");
        assert!(book.finish(1, 2, &sent));
        assert_eq!(book.list(1)[0].sends.state(), SendState::Sent);
        assert!(!book.finish(1, 2, &sent), "written once");
        assert!(book.claim(T0.plus(LEASE * 10), 10, LEASE).is_empty());
    }

    #[test]
    fn a_retry_waits_for_its_time_and_a_give_up_ends_it() {
        let mut book = book();
        book.claim(T0, 10, LEASE);
        let at = T0.plus(Duration::from_secs(7));
        let retry = SendDecision::Retry {
            at,
            code: "http.503".into(),
        };
        assert!(book.finish(1, 1, &retry));
        let r = &book.list(1)[0];
        assert_eq!(
            (r.sends.state(), r.sends.last_error.as_deref()),
            (SendState::Retrying, Some("http.503"))
        );
        assert!(book.claim(at.minus(Duration::from_millis(1)), 10, LEASE).is_empty());
        assert_eq!(book.claim(at, 10, LEASE).len(), 1);
        let give_up = SendDecision::GiveUp {
            at,
            code: "http.404".into(),
        };
        assert!(book.finish(1, 2, &give_up));
        assert_eq!(book.list(1)[0].sends.state(), SendState::Failed);
        assert!(book.claim(at.plus(LEASE * 10), 10, LEASE).is_empty());
    }

    #[test]
    fn a_message_never_tried_within_its_window_is_left_unsent() {
        let mut book = book();
        let late = T0.plus(jadpo_core::alert::SEND_WITHIN);
        assert!(book.claim(late, 10, LEASE).is_empty());
        assert_eq!(book.list(1)[0].sends.state(), SendState::Unsent);
    }
}
