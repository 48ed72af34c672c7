//! The scenarios every store must pass, unchanged: memory, SQLite and
//! PostgreSQL. Each takes a fresh, migrated store. Run them all for a store
//! with [`conformance_tests!`](crate::conformance_tests):
//!
//! ```ignore
//! jadpo_store::conformance_tests!(async { my_fresh_store().await });
//! ```
//!
//! They cover every rule of docs/retries.md that touches a store: the claim,
//! fencing, lease expiry, the handled record, the budget given up at the
//! claim, the hold, the probe, the release, one alert per outage, and the
//! operator's retry with a fresh budget.

use crate::types::*;
use crate::Store;
use jadpo_core::breaker::{BreakerState, CallVerdict};
use jadpo_core::{Budget, DeliveryId, FailureKind, FailureRecord, Outcome, Timestamp};
use std::time::Duration;

/// The lease every scenario's claims take.
pub const LEASE: Duration = Duration::from_secs(60);

/// The instant `s` seconds after the epoch: the scenarios' clock.
pub fn at(s: i64) -> Timestamp {
    Timestamp::from_millis(s * 1000)
}

/// `pay` calls `payments` with the default budget; `brief` calls it too,
/// with three attempts within two minutes; `log` calls nothing and has two
/// attempts within an hour.
pub fn routes() -> Routes {
    let mut routes = Routes::new();
    routes.insert(
        "pay",
        Route {
            budget: Budget::DEFAULT,
            connections: vec!["payments".into()],
        },
    );
    routes.insert(
        "brief",
        Route {
            budget: Budget::new(3, Duration::from_secs(120)).unwrap(),
            connections: vec!["payments".into()],
        },
    );
    routes.insert(
        "log",
        Route {
            budget: Budget::new(2, Duration::from_secs(3600)).unwrap(),
            connections: vec![],
        },
    );
    routes
}

/// Emits `n` events named `E` at `now` seconds, each with one delivery to
/// `subscriber`; returns their delivery ids.
pub async fn emit<S: Store>(s: &S, subscriber: &str, n: usize, now: i64) -> Vec<DeliveryId> {
    let events: Vec<NewEvent> = (0..n)
        .map(|i| NewEvent {
            name: "E".into(),
            payload: format!("{{\"n\":{i}}}"),
            subscribers: vec![subscriber.into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect();
    s.emit(&events, at(now))
        .await
        .unwrap()
        .into_iter()
        .flat_map(|e| e.deliveries)
        .collect()
}

/// Claims up to `limit` deliveries at `now` seconds as worker `w1`, with
/// [`routes`].
pub async fn claim<S: Store>(s: &S, now: i64, limit: usize) -> ClaimReport {
    claim_as(s, "w1", now, limit).await
}

/// [`claim`] as `worker`.
pub async fn claim_as<S: Store>(s: &S, worker: &str, now: i64, limit: usize) -> ClaimReport {
    let routes = routes();
    s.claim(&ClaimRequest {
        worker,
        routes: &routes,
        now: at(now),
        limit,
        lease: LEASE,
    })
    .await
    .unwrap()
}

/// Finishes `c` at `now` seconds with `outcome` and the given calls' verdicts,
/// fenced on its lease.
pub async fn finish<S: Store>(
    s: &S,
    c: &Claimed,
    outcome: Outcome,
    calls: &[(&str, CallVerdict)],
    now: i64,
) -> Result<FinishReport, StoreError> {
    s.finish(&Finish {
        calls: calls.iter().map(|(c, v)| (c.to_string(), *v)).collect(),
        ..c.finish(outcome, at(now), at(now))
    })
    .await
}

/// A retry at `now` seconds after an unavailable failure coded `code`.
pub fn retry_at(code: &str, now: i64) -> Outcome {
    Outcome::Retry {
        at: at(now),
        failure: FailureRecord::new(code, FailureKind::Unavailable),
    }
}

pub(crate) async fn get<S: Store>(s: &S, id: DeliveryId) -> jadpo_core::Delivery {
    s.delivery(id).await.unwrap().expect("delivery exists")
}

pub(crate) async fn breaker<S: Store>(s: &S, connection: &str) -> BreakerView {
    s.breakers()
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.breaker.connection == connection)
        .expect("breaker row")
}

/// Five unavailable attempts open the breaker of `payments` at `now`.
pub async fn open_breaker<S: Store>(s: &S, now: i64) {
    emit(s, "pay", 5, now).await;
    let r = claim(s, now, 5).await;
    assert_eq!(r.claimed.len(), 5);
    for c in &r.claimed {
        finish(
            s,
            c,
            retry_at("http.503", now + 30),
            &[("payments", CallVerdict::Unavailable)],
            now,
        )
        .await
        .unwrap();
    }
    assert_eq!(breaker(s, "payments").await.breaker.state, BreakerState::Open);
}

mod alerts;
mod breakers;
mod deliveries;
mod emits;
mod gauges;
mod intake;
mod keys;
mod limits;
mod schedules;
mod wake;

pub use alerts::*;
pub use breakers::*;
pub use deliveries::*;
pub use emits::*;
pub use gauges::*;
pub use intake::*;
pub use keys::*;
pub use limits::*;
pub use schedules::*;
pub use wake::*;

/// One `#[tokio::test]` per scenario, each with a fresh store from `$make`
/// (an expression giving a future of a migrated store).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@each $make;
            emit_writes_events_and_due_deliveries,
            claim_takes_due_deliveries_oldest_first_up_to_the_limit,
            a_claim_takes_lost_leases_and_due_deliveries_together_by_time,
            a_late_worker_whose_lease_was_taken_over_changes_nothing,
            a_spent_budget_fails_at_the_claim_without_counting_an_attempt,
            never_tried_in_time_fails_as_deadline_exceeded,
            attempts_are_recorded_with_code_and_kind,
            a_batch_that_finishes_one_delivery_twice_writes_the_first,
            a_handled_record_makes_a_lost_run_succeeded_without_running_again,
            a_lost_run_without_a_handled_record_runs_again,
            held_while_open_then_probe_then_release,
            the_first_claimed_after_the_pause_is_the_probe,
            a_probe_that_finds_it_unavailable_reopens_for_twice_the_pause,
            a_probe_that_no_longer_calls_the_provider_gives_the_probe_back,
            a_lost_probe_loses_its_place_when_its_lease_ends,
            late_finishes_after_a_takeover_move_no_breaker,
            a_delivery_released_after_its_raw_within_still_runs,
            a_breaker_opening_after_the_claim_holds_before_the_run,
            a_run_under_way_when_it_opened_closes_it_with_its_answer,
            one_alert_per_outage_with_the_held_count,
            closing_an_alerted_breaker_writes_its_resolved_message,
            a_breaker_closed_before_its_alert_writes_no_resolved_message,
            alert_sends_are_claimed_once_fenced_and_retried,
            alert_sends_are_given_up_and_old_ones_left_unsent,
            prune_forgets_alert_messages_older_than_the_retention,
            give_back_makes_a_claimed_delivery_due_without_spending,
            operator_retry_gives_a_fresh_budget,
            a_subscriber_gone_from_the_app_fails_as_a_defect,
            list_filters_and_orders_newest_first,
            prune_deletes_old_finished_deliveries_in_batches_and_nothing_else,
            prune_deletes_old_events_no_delivery_refers_to,
            finish_batch_fences_each_delivery_on_its_own,
            counts_give_deliveries_by_state,
            gauges_find_each_subscribers_oldest_due_delivery,
            gauges_count_held_and_waiting_up_to_the_cap,
            next_due_is_the_first_due_time_or_lease_end,
            the_per_minute_summary_adds_up_and_forgets_old_minutes,
            a_limited_connection_lets_through_only_what_it_has_room_for,
            a_delivery_emitted_behind_waiting_ones_waits_after_their_turns,
            a_slot_comes_back_when_its_lease_ends,
            a_late_finish_after_a_takeover_gives_back_no_slot_and_pauses_nothing,
            limits_leave_other_connections_alone,
            a_429_pauses_the_connection_for_every_claimer,
            the_same_key_twice_makes_one_event_and_another_payload_is_refused,
            a_key_is_pruned_with_its_event,
            an_event_keeps_the_trace_it_was_emitted_in,
            a_delivery_keeps_its_key_and_is_found_by_it,
            fifo_runs_a_keys_deliveries_one_at_a_time_in_emit_order,
            a_cap_lets_that_many_of_a_key_run_at_once,
            strict_blocks_a_key_behind_a_failure_until_an_operator_retries,
            an_operator_retry_waits_for_its_key_first_in_line,
            a_lost_lease_keeps_the_key,
            a_promoted_delivery_is_never_due_before_its_own_time,
            a_claim_that_ends_a_delivery_hands_its_key_on,
            a_pruned_strict_failure_frees_its_key,
            a_skip_moves_a_strict_key_on_and_is_recorded,
            a_hold_keeps_its_keys_place_and_the_release_its_order,
            a_bulk_retry_keeps_its_keys_order,
            a_runs_emits_are_written_with_its_success_and_carry_its_depth,
            a_failed_run_emits_nothing,
            a_lost_runs_emits_are_written_once_by_its_rerun,
            the_first_clock_anchor_kept_is_the_only_one,
            a_console_session_lives_until_it_expires_or_ends,
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let store = $make.await;
                $crate::conformance::$name(&store).await;
            }
        )*
    };
}

/// The schedule scenarios, for stores that keep schedules.
#[macro_export]
macro_rules! schedule_conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@each $make;
            schedules_are_claimed_once_when_due_and_fenced,
            a_schedule_run_lost_with_its_worker_ends_as_lease_expired,
            a_schedule_failing_three_runs_in_a_row_raises_one_alert,
        );
    };
}
