//! Connection limits at the claim, decided once for every store: a
//! delivery that would run takes a token and a slot on each limited
//! connection its action may call, all of them or none; when one has no
//! room, it stays due until then, no attempt spent and no lease taken
//! (`ClaimDecision::Wait`). A finish gives its slots back and writes a
//! 429's pause. The rows are read with the claim's and written
//! conditionally on the version read, as breakers are.

use jadpo_core::limit::{LimitState, Limits, Take, WaitFor};
use jadpo_core::{DeliveryId, Timestamp};
use std::collections::BTreeMap;
use std::time::Duration;

/// A limit state's new value, to be written only if its row is still at
/// `read_version` (0 and absent for a connection that has no row yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitWrite {
    /// The limit state as the plan left it.
    pub state: LimitState,
    /// The version its row had when read; 0 when it had no row.
    pub read_version: i64,
}

/// The limit states a plan reads, by connection, and the limits each
/// connection has in the app. Tracks which states the plan changed.
#[derive(Clone, Debug, Default)]
pub struct LimitStates {
    limits: BTreeMap<String, Limits>,
    rows: BTreeMap<String, LimitState>,
    read_versions: BTreeMap<String, i64>,
    /// The last due time this plan gave to a delivery waiting again on each
    /// connection (a newcomer's turn is kept in the state instead): the
    /// next waiter's comes a token's refill later, so waiters are spread
    /// over the times tokens will be there, instead of every waiter coming
    /// back at once to find one token.
    tails: BTreeMap<String, Timestamp>,
}

impl LimitStates {
    /// The rows a store read, with the app's limits by connection
    /// ([`Routes::limits`](crate::Routes::limits)).
    pub fn new(limits: &BTreeMap<String, Limits>, rows: impl IntoIterator<Item = LimitState>) -> LimitStates {
        // Inserted one by one, as `Breakers::new`'s rows are.
        let mut states = LimitStates {
            limits: limits.clone(),
            ..LimitStates::default()
        };
        for s in rows {
            states.read_versions.insert(s.connection.clone(), s.version);
            states.rows.insert(s.connection.clone(), s);
        }
        states
    }

    fn limits_of(&self, connection: &str) -> Limits {
        self.limits.get(connection).copied().unwrap_or_default()
    }

    fn state(&mut self, connection: &str, now: Timestamp) -> &mut LimitState {
        // Looked up before an entry is made: an entry's key is an owned
        // name, allocated for every take otherwise.
        if !self.rows.contains_key(connection) {
            let limits = self.limits_of(connection);
            self.rows
                .insert(connection.to_owned(), LimitState::new(connection, &limits, now));
        }
        self.rows.get_mut(connection).expect("inserted above")
    }

    /// Whether a take through `connection` at `now` touches its state: it
    /// is limited, or paused by a 429.
    fn applies(&self, connection: &str, now: Timestamp) -> bool {
        !self.limits_of(connection).is_none()
            || self
                .rows
                .get(connection)
                .is_some_and(|s| s.paused_until.is_some_and(|t| t > now))
    }

    /// For a delivery about to run through `connections`: a token and a
    /// slot (leased until `lease_until`) on each that is limited or paused,
    /// or, when one has no room, nothing taken and the earliest time all
    /// may have room (the latest of their waits) with the connection that
    /// waits longest.
    ///
    /// `waited` is the connection the delivery last waited on and the turn
    /// it was given there (its due time), if any.
    /// While deliveries wait their turn for a token of a connection's
    /// `rate:`, every token until the last turn is theirs: one that has not
    /// waited takes none, and queues after the last turn. So a backlog
    /// drains in order, each waiting delivery claimed about once more, at
    /// its turn, instead of at every token. One that waited, on this
    /// connection or another of its action's, is not sent to the back
    /// again: with two limited connections, waiting on one must not cost
    /// its place on the other, or it could wait for ever.
    pub fn take_all(
        &mut self,
        connections: &[String],
        delivery: DeliveryId,
        waited: Option<(&str, Timestamp)>,
        now: Timestamp,
        lease_until: Timestamp,
    ) -> Result<(), (Timestamp, String, WaitFor)> {
        // The rows this may change, to put back if it has to wait: only
        // those of its connections that are limited or paused.
        let before: Vec<(&String, Option<LimitState>)> = connections
            .iter()
            .filter(|c| self.applies(c, now))
            .map(|c| (c, self.rows.get(c).cloned()))
            .collect();
        let mut wait: Option<(Timestamp, String, WaitFor)> = None;
        for (c, _) in &before {
            let c: &String = c;
            let limits = self.limits_of(c);
            let queued_ahead = self
                .queue_until(c, now)
                .filter(|_| limits.rate.is_some() && waited.is_none());
            let take = match (queued_ahead, waited) {
                (Some(last_turn), _) => Take::WaitUntil(last_turn, WaitFor::Token),
                (None, Some((_, turn))) => self
                    .state(c, now)
                    .take_at_turn(&limits, delivery, turn, now, lease_until),
                (None, None) => self.state(c, now).take(&limits, delivery, now, lease_until),
            };
            if let Take::WaitUntil(until, reason) = take {
                if wait.as_ref().is_none_or(|(t, _, _)| until > *t) {
                    wait = Some((until, c.clone(), reason));
                }
            }
        }
        match wait {
            None => Ok(()),
            Some((until, connection, reason)) => {
                for (c, row) in before {
                    match row {
                        Some(row) => self.rows.insert(c.clone(), row),
                        None => self.rows.remove(c),
                    };
                }
                Err((
                    self.spaced(&connection, until, now, waited.is_none()),
                    connection,
                    reason,
                ))
            }
        }
    }

    /// The last turn promised on `connection`, while it is still to come.
    fn queue_until(&self, connection: &str, now: Timestamp) -> Option<Timestamp> {
        self.rows
            .get(connection)
            .and_then(|s| s.queue_until)
            .filter(|t| *t > now)
    }

    /// When a delivery told to wait on `connection` until `until` is due.
    /// A `newcomer` (it had not waited) to a `rate:`
    /// queues a token's refill after the last turn given, and its own turn
    /// becomes the last, kept with the connection's state for every claim
    /// after this one. Any other comes after the previous waiter of this
    /// plan by a token's refill.
    fn spaced(&mut self, connection: &str, until: Timestamp, now: Timestamp, newcomer: bool) -> Timestamp {
        let limits = self.limits_of(connection);
        let halved = self.rows.get(connection).is_some_and(|s| s.slowed(now));
        // Slots set the pace only while they are all taken; otherwise tokens do.
        let slots = self
            .rows
            .get(connection)
            .filter(|s| limits.concurrency.is_some_and(|n| s.slots_in_use(now) >= n as usize))
            .map_or(Duration::ZERO, |s| s.slot_spacing(&limits));
        let spacing = limits.rate.map_or(Duration::ZERO, |r| r.spacing(halved)).max(slots);
        if newcomer && limits.rate.is_some() {
            let due = match self.queue_until(connection, now) {
                Some(last_turn) => until.max(last_turn.plus(spacing)),
                None => until,
            };
            let state = self.state(connection, now);
            state.queue_until = Some(due);
            state.version += 1;
            return due;
        }
        let due = match self.tails.get(connection) {
            Some(tail) => until.max(tail.plus(spacing)),
            None => until,
        };
        self.tails.insert(connection.to_owned(), due);
        due
    }

    /// `delivery` no longer calls at `now` (it finished, or was given
    /// back): its slots come back.
    pub fn release(&mut self, delivery: DeliveryId, connections: &[String], now: Timestamp) {
        for c in connections {
            if let Some(s) = self.rows.get_mut(c) {
                s.release(delivery, now);
            }
        }
    }

    /// `connection` answered 429 at `now`, asking to wait `retry_after`.
    pub fn rate_limited(&mut self, connection: &str, retry_after: Option<Duration>, now: Timestamp) {
        self.state(connection, now).rate_limited(retry_after, now);
    }

    /// `connection`'s limit state as the plan has it now; `None` when it has no
    /// row.
    pub fn get(&self, connection: &str) -> Option<&LimitState> {
        self.rows.get(connection)
    }

    /// The states this plan changed, with the versions they were read at.
    pub fn writes(&self) -> Vec<LimitWrite> {
        self.rows
            .values()
            .filter_map(|s| {
                let read_version = self.read_versions.get(&s.connection).copied().unwrap_or(0);
                (s.version != read_version).then(|| LimitWrite {
                    state: s.clone(),
                    read_version,
                })
            })
            .collect()
    }
}

/// A delivery's slots to give back at a time: on the connections named,
/// or on every connection.
pub type Release<'a> = (DeliveryId, Option<&'a [String]>, Timestamp);

/// A 429 a finish reports: the connection, its `Retry-After`, and when.
pub type Answer = (String, Option<Duration>, Timestamp);

/// What one finish settles: its slots to give back, and its 429s.
pub fn of_finish(f: &crate::types::Finish) -> (Vec<Release<'_>>, Vec<Answer>) {
    let releases = if f.slots.is_empty() {
        Vec::new()
    } else {
        vec![(f.id, Some(f.slots.as_slice()), f.ended_at)]
    };
    let answers = f
        .rate_limited
        .iter()
        .map(|(c, r)| (c.clone(), *r, f.ended_at))
        .collect();
    (releases, answers)
}

/// What finishes (and set-asides) write to the limit rows read: slots given
/// back, and each 429's pause or minute at half rate. One read, one write
/// per row changed.
pub fn settle(rows: Vec<LimitState>, releases: &[Release<'_>], answers: &[Answer]) -> Vec<LimitWrite> {
    let mut states = LimitStates::new(&BTreeMap::new(), rows);
    for (delivery, only, at) in releases {
        for s in states.rows.values_mut() {
            if only.is_none_or(|o| o.contains(&s.connection)) {
                s.release(*delivery, *at);
            }
        }
    }
    for (connection, retry_after, at) in answers {
        states.rate_limited(connection, *retry_after, *at);
    }
    states.writes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jadpo_core::limit::Rate;

    const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);
    const LEASE: Duration = Duration::from_secs(60);

    fn limits() -> BTreeMap<String, Limits> {
        let mut l = BTreeMap::new();
        l.insert(
            "pay".to_string(),
            Limits {
                rate: Some(Rate::new(10, Duration::from_secs(1)).unwrap()),
                concurrency: None,
            },
        );
        l.insert(
            "mail".to_string(),
            Limits {
                rate: None,
                concurrency: Some(1),
            },
        );
        l
    }

    fn conns(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_delivery_takes_from_every_limited_connection_or_from_none() {
        let mut s = LimitStates::new(&limits(), []);
        let both = conns(&["pay", "mail", "free"]);
        assert_eq!(s.take_all(&both, DeliveryId(1), None, T0, T0.plus(LEASE)), Ok(()));
        assert!(s.get("free").is_none(), "an unlimited connection keeps no state");
        // Mail's one slot is taken: the second waits for it, and takes no
        // token from pay meanwhile.
        let tokens_before = s.get("pay").unwrap().tokens_milli;
        assert_eq!(
            s.take_all(&both, DeliveryId(2), None, T0, T0.plus(LEASE)),
            Err((
                T0.plus(jadpo_core::limit::SLOT_RECHECK),
                "mail".to_string(),
                WaitFor::Slot
            ))
        );
        assert_eq!(s.get("pay").unwrap().tokens_milli, tokens_before);
        s.release(DeliveryId(1), &both, T0);
        assert_eq!(
            s.take_all(&both, DeliveryId(2), None, T0, T0.plus(LEASE)),
            Err((T0.plus(Duration::from_millis(100)), "pay".to_string(), WaitFor::Token)),
            "pay's one token went to the first"
        );
        let later = T0.plus(Duration::from_millis(100));
        assert_eq!(s.take_all(&both, DeliveryId(2), None, later, later.plus(LEASE)), Ok(()));
        let writes = s.writes();
        assert_eq!(writes.len(), 2);
        assert!(writes.iter().all(|w| w.read_version == 0));
    }

    #[test]
    fn waiters_are_spread_a_token_apart() {
        let mut s = LimitStates::new(&limits(), []);
        let pay = conns(&["pay"]);
        assert_eq!(s.take_all(&pay, DeliveryId(1), None, T0, T0.plus(LEASE)), Ok(()));
        let waits: Vec<Timestamp> = (2..5)
            .map(|i| s.take_all(&pay, DeliveryId(i), None, T0, T0.plus(LEASE)).unwrap_err().0)
            .collect();
        let ms = |n| T0.plus(Duration::from_millis(n));
        assert_eq!(waits, vec![ms(100), ms(200), ms(300)], "10/s: one every 100 ms");
    }

    /// The next claim reads the states this one wrote.
    fn next_claim(s: &LimitStates) -> LimitStates {
        LimitStates::new(&limits(), s.writes().into_iter().map(|w| w.state))
    }

    #[test]
    fn a_newcomer_queues_after_the_last_turn_and_a_turn_holder_takes_its_token() {
        let ms = |n| T0.plus(Duration::from_millis(n));
        let pay = conns(&["pay"]);
        let mut first = LimitStates::new(&limits(), []);
        assert_eq!(first.take_all(&pay, DeliveryId(1), None, T0, T0.plus(LEASE)), Ok(()));
        for i in 2..5 {
            first
                .take_all(&pay, DeliveryId(i), None, T0, T0.plus(LEASE))
                .unwrap_err();
        }
        assert_eq!(first.get("pay").unwrap().queue_until, Some(ms(300)));
        // At 150 ms the token of 100 ms is still in the bucket, but it is
        // delivery 2's: a newcomer takes nothing and queues after 300 ms.
        let mut second = next_claim(&first);
        assert_eq!(
            second.take_all(&pay, DeliveryId(5), None, ms(150), ms(150).plus(LEASE)),
            Err((ms(400), "pay".to_string(), WaitFor::Token))
        );
        assert_eq!(
            second.take_all(
                &pay,
                DeliveryId(2),
                Some(("pay", ms(100))),
                ms(150),
                ms(150).plus(LEASE)
            ),
            Ok(())
        );
        // A second turn holder of 100 ms finds no token (the first took it,
        // counted at 100 ms) and waits for the next one, at 200 ms, not at
        // the back of the queue.
        assert_eq!(
            second.take_all(
                &pay,
                DeliveryId(3),
                Some(("pay", ms(100))),
                ms(150),
                ms(150).plus(LEASE)
            ),
            Err((ms(200), "pay".to_string(), WaitFor::Token))
        );
        assert_eq!(second.get("pay").unwrap().queue_until, Some(ms(400)));
        // Once the last turn has passed, a newcomer takes a token at once.
        let mut later = next_claim(&second);
        assert_eq!(
            later.take_all(&pay, DeliveryId(6), None, ms(500), ms(500).plus(LEASE)),
            Ok(())
        );
    }

    /// A delivery that waited for mail's one slot is not sent behind pay's
    /// queue when its turn comes: waiting on one connection keeps its place
    /// on the other.
    #[test]
    fn waiting_on_one_connection_keeps_a_place_on_the_other() {
        let ms = |n| T0.plus(Duration::from_millis(n));
        let (pay, both) = (conns(&["pay"]), conns(&["pay", "mail"]));
        let mut s = LimitStates::new(&limits(), []);
        assert_eq!(s.take_all(&both, DeliveryId(1), None, T0, T0.plus(LEASE)), Ok(()));
        // Pay's queue runs to 300 ms; mail's slot is held by delivery 1.
        for i in 2..5 {
            s.take_all(&pay, DeliveryId(i), None, T0, T0.plus(LEASE)).unwrap_err();
        }
        s.release(DeliveryId(1), &both, ms(50));
        assert_eq!(
            s.take_all(
                &both,
                DeliveryId(9),
                Some(("mail", ms(40))),
                ms(150),
                ms(150).plus(LEASE)
            ),
            Ok(()),
            "its wait for mail's slot counts as its turn: it takes pay's token"
        );
    }

    #[test]
    fn a_connection_without_a_rate_keeps_no_queue() {
        let mail = conns(&["mail"]);
        let mut s = LimitStates::new(&limits(), []);
        assert_eq!(s.take_all(&mail, DeliveryId(1), None, T0, T0.plus(LEASE)), Ok(()));
        s.take_all(&mail, DeliveryId(2), None, T0, T0.plus(LEASE)).unwrap_err();
        assert_eq!(s.get("mail").unwrap().queue_until, None);
    }

    #[test]
    fn a_429_pauses_even_a_connection_without_limits() {
        let mut s = LimitStates::new(&BTreeMap::new(), []);
        let free = conns(&["free"]);
        s.rate_limited("free", Some(Duration::from_secs(30)), T0);
        assert_eq!(
            s.take_all(&free, DeliveryId(1), None, T0, T0.plus(LEASE)),
            Err((T0.plus(Duration::from_secs(30)), "free".to_string(), WaitFor::Pause))
        );
        let after = T0.plus(Duration::from_secs(30));
        assert_eq!(s.take_all(&free, DeliveryId(1), None, after, after.plus(LEASE)), Ok(()));
    }
}
