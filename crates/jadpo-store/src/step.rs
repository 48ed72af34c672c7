//! A claimed delivery's step around its run, the same in the worker and in
//! the simulation: the breaker check just before the run, then the core's
//! decision on how it ended and the finish that writes it down.
//!
//! Only the run is the caller's (an action under its time limit, or a
//! scripted provider on a virtual clock), so the simulation exercises the
//! code a process runs, as TigerBeetle's simulator runs the real replica,
//! and the two cannot drift apart. Nothing here waits or allocates beyond
//! the finish itself: it is on the worker's path for every delivery.

use crate::{Claimed, Emits, Finish, Routes};
use jadpo_core::{attempt, AttemptEnd, Breaker, CallVerdict, DeliveryId, Timestamp};
use rand::Rng;
use std::time::Duration;

/// Just before a run: the first of `connections` whose breaker, as
/// `breaker` finds it, no longer lets delivery `id` run at `now`. A breaker
/// may open between the claim and the run; the delivery is then held on
/// that connection, its attempt given back, rather than sent to a provider
/// known to be down. A connection `breaker` does not know is closed.
pub fn holding<'b>(
    connections: &[String],
    id: DeliveryId,
    now: Timestamp,
    breaker: impl Fn(&str) -> Option<&'b Breaker>,
) -> Option<String> {
    connections
        .iter()
        .find(|c| breaker(c).is_some_and(|b| !b.lets_run(id, now)))
        .cloned()
}

/// How a run went, as its caller saw it.
#[derive(Debug)]
pub struct Ran<'a> {
    /// How the attempt ended: succeeded, or failed and how.
    pub end: &'a AttemptEnd,
    /// When the run started.
    pub started_at: Timestamp,
    /// When it ended: the time of the finish and of whatever its verdicts
    /// release.
    pub ended_at: Timestamp,
    /// For each connection called through its real driver, how its last
    /// call ended.
    pub calls: Vec<(String, CallVerdict)>,
    /// The connections that answered 429, with their `Retry-After`.
    pub rate_limited: Vec<(String, Option<Duration>)>,
}

/// After a run: the finish that writes the core's outcome (`outcome`),
/// fenced on the claim's lease, giving back the slots the claim took. `emits` is
/// asked for only when the run succeeded: what a failed run emitted is
/// dropped with it, and building it would be wasted.
pub fn finish(
    claimed: &Claimed,
    routes: &Routes,
    ran: Ran<'_>,
    emits: impl FnOnce() -> Emits,
    rng: &mut impl Rng,
) -> Finish {
    let outcome = attempt::decide(&claimed.delivery, claimed.budget, ran.end, ran.ended_at, rng);
    let emits = match ran.end {
        AttemptEnd::Succeeded => emits(),
        AttemptEnd::Failed(_) => Emits::default(),
    };
    Finish {
        calls: ran.calls,
        slots: routes.slots_of(&claimed.connections),
        rate_limited: ran.rate_limited,
        emits,
        ..claimed.finish(outcome, ran.started_at, ran.ended_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Route;
    use jadpo_core::limit::Limits;
    use jadpo_core::{BreakerPolicy, Budget, Delivery, EventId, Failure, Lease, LeaseToken, Outcome};
    use rand::SeedableRng;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn claimed(connections: &[&str]) -> Claimed {
        let mut delivery = Delivery::new(DeliveryId(7), EventId(1), "sub", at(0));
        delivery.state = jadpo_core::DeliveryState::Running;
        delivery.attempts = 1;
        delivery.lease = Some(Lease {
            owner: "w".into(),
            token: LeaseToken(3),
            until: at(60_000),
        });
        Claimed {
            delivery,
            budget: Budget::default(),
            connections: connections.iter().map(|c| c.to_string()).collect(),
            probe_for: vec![],
            event_name: "E".into(),
            payload: "{}".into(),
            event_public_id: "p".into(),
            event_depth: 0,
            event_trace: None,
            released: false,
        }
    }

    fn open(connection: &str) -> Breaker {
        let mut b = Breaker::new(connection);
        let policy = BreakerPolicy::DEFAULT;
        for i in 0..policy.threshold {
            b.record(CallVerdict::Unavailable, DeliveryId(100 + i as i64), at(0), &policy);
        }
        b
    }

    #[test]
    fn the_first_open_breaker_holds_and_unknown_connections_are_closed() {
        let down = open("mailer");
        let find = |c: &str| (c == "mailer").then_some(&down);
        let conns = ["crm".to_string(), "mailer".to_string()];
        assert_eq!(holding(&conns, DeliveryId(7), at(1), find), Some("mailer".into()));
        assert_eq!(holding(&conns[..1], DeliveryId(7), at(1), find), None);
    }

    #[test]
    fn a_failed_run_drops_its_emits_and_every_finish_gives_its_slots_back() {
        let mut routes = Routes::new();
        routes.insert(
            "sub",
            Route {
                budget: Budget::default(),
                connections: vec!["crm".into(), "mailer".into()],
            },
        );
        routes.limit(
            "mailer",
            Limits {
                rate: None,
                concurrency: Some(2),
            },
        );
        let c = claimed(&["crm", "mailer"]);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let failed = AttemptEnd::Failed(Failure::deadline_exceeded());
        let ran = Ran {
            end: &failed,
            started_at: at(1),
            ended_at: at(2),
            calls: vec![("crm".into(), CallVerdict::Unavailable)],
            rate_limited: vec![],
        };
        let f = finish(
            &c,
            &routes,
            ran,
            || panic!("a failed run's emits are never built"),
            &mut rng,
        );
        assert!(matches!(f.outcome, Outcome::Retry { .. }));
        assert_eq!((f.started_at, f.ended_at), (at(1), at(2)));
        assert_eq!(f.slots, vec!["mailer".to_string()]);
        assert_eq!(f.calls, vec![("crm".to_string(), CallVerdict::Unavailable)]);
        assert_eq!(f.claimed.as_ref(), Some(&c.delivery));

        let ran = Ran {
            end: &AttemptEnd::Succeeded,
            started_at: at(1),
            ended_at: at(2),
            calls: vec![],
            rate_limited: vec![],
        };
        let emitted = || Emits {
            depth: 1,
            events: vec![],
        };
        let f = finish(&c, &routes, ran, emitted, &mut rng);
        assert_eq!(f.outcome, Outcome::Succeeded);
        assert_eq!(f.emits.depth, 1);
    }
}
