//! The worker's local queue: deliveries claimed ahead of its free slots, so
//! a slot that frees starts the next run at once instead of waiting for a
//! claim's round trip to the store.
//!
//! A claimed delivery must start well inside its lease: its run (up to its
//! subscriber's time limit) and the write of its outcome must fit before the
//! lease ends, or another worker could take it over while it runs. So each
//! queued delivery carries the last moment it may start, and one still
//! queued then is given back (due again, its attempt not spent), never
//! started late and never left to expire.
//!
//! How far ahead to claim follows how long slots stay busy: with runs of
//! `d` on `c` slots, the `k`-th queued delivery starts after about
//! `k * d / c`, so the queue holds what starts within [`HORIZON`] (or half
//! the start window, if shorter). The queue is there to hide a claim's round
//! trip, not to hoard: a delivery waiting in one busy process's queue is one
//! an idle process cannot take, so a process holds nothing ahead until its
//! runs have shown they are short. Everything here is plain data and a time
//! passed in: the worker feeds it.

use jadpo_core::Timestamp;
use jadpo_store::Claimed;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// A claimed delivery waiting for a slot.
#[derive(Debug)]
pub(crate) struct Queued {
    pub claimed: Claimed,
    /// The last engine time it may start and still finish inside its lease.
    pub start_by: Timestamp,
}

/// The most payload bytes the queue holds: a bound on memory whatever the
/// events' size (a payload may be up to 256 KiB).
pub(crate) const MAX_QUEUED_BYTES: usize = 32 << 20;

#[derive(Debug, Default)]
pub(crate) struct LocalQueue {
    items: VecDeque<Queued>,
    bytes: usize,
    /// How many queued deliveries have each `start_by`: the earliest is
    /// read after every run, so it is kept rather than scanned for.
    starts: BTreeMap<Timestamp, usize>,
}

impl LocalQueue {
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// The queue holds enough bytes that claiming more would pass its bound.
    pub(crate) fn full_of_bytes(&self) -> bool {
        self.bytes >= MAX_QUEUED_BYTES
    }

    pub(crate) fn push(&mut self, claimed: Claimed, start_by: Timestamp) {
        self.bytes += claimed.payload.len();
        *self.starts.entry(start_by).or_default() += 1;
        self.items.push_back(Queued { claimed, start_by });
    }

    /// The earliest `start_by` queued.
    fn earliest(&self) -> Option<Timestamp> {
        self.starts.keys().next().copied()
    }

    fn forget_start(&mut self, start_by: Timestamp) {
        if let Some(n) = self.starts.get_mut(&start_by) {
            *n -= 1;
            if *n == 0 {
                self.starts.remove(&start_by);
            }
        }
    }

    /// The next delivery that may still start at `now`, in claim order.
    /// Those whose start window has passed are left for [`Self::take_late`].
    pub(crate) fn pop(&mut self, now: Timestamp) -> Option<Queued> {
        let i = self.items.iter().position(|q| now <= q.start_by)?;
        let q = self.items.remove(i).expect("position is in range");
        self.bytes -= q.claimed.payload.len();
        self.forget_start(q.start_by);
        Some(q)
    }

    /// Every queued delivery that can no longer start in time at `now`.
    pub(crate) fn take_late(&mut self, now: Timestamp) -> Vec<Queued> {
        // Called after every run: the common case, nothing late, moves
        // nothing.
        if self.earliest().is_none_or(|earliest| now <= earliest) {
            return Vec::new();
        }
        let (late, keep): (Vec<Queued>, Vec<Queued>) = self.items.drain(..).partition(|q| now > q.start_by);
        self.items = keep.into();
        self.bytes -= late.iter().map(|q| q.claimed.payload.len()).sum::<usize>();
        for q in &late {
            self.forget_start(q.start_by);
        }
        late
    }

    /// When the next queued delivery's start window closes.
    pub(crate) fn next_deadline(&self) -> Option<Timestamp> {
        self.earliest()
    }

    /// Everything queued, for a worker that stops.
    pub(crate) fn drain(&mut self) -> Vec<Queued> {
        self.bytes = 0;
        self.starts.clear();
        self.items.drain(..).collect()
    }
}

/// The most work, in real time, the queue holds ahead: many claims' round
/// trips, so the slots never run dry, and short enough that deliveries do
/// not wait in one process while another has idle slots.
pub(crate) const HORIZON: Duration = Duration::from_secs(1);

/// How many deliveries to hold ahead of the free slots, from how long runs
/// keep a slot. Before the first run has ended it holds none.
#[derive(Clone, Debug)]
pub(crate) struct Ahead {
    concurrency: usize,
    most: usize,
    /// Real time a queued delivery may wait: [`HORIZON`], or half its
    /// start window if shorter.
    wait: Duration,
    /// Average time a run keeps its slot, once one has ended.
    busy: Option<Duration>,
}

impl Ahead {
    pub(crate) fn new(concurrency: usize, most: usize, window: Duration) -> Ahead {
        Ahead {
            concurrency,
            most,
            wait: (window / 2).min(HORIZON),
            busy: None,
        }
    }

    /// A run kept its slot for `took`.
    pub(crate) fn ended(&mut self, took: Duration) {
        // A moving average over about the last 64 runs: quick to follow a
        // provider that slows down, steady under jitter.
        self.busy = Some(match self.busy {
            None => took,
            Some(avg) => avg.mul_f64(63.0 / 64.0) + took.mul_f64(1.0 / 64.0),
        });
    }

    /// How many to hold ahead of the free slots now.
    pub(crate) fn target(&self) -> usize {
        match self.busy {
            None => 0,
            Some(busy) => {
                let per_slot = self.wait.as_secs_f64() / busy.as_secs_f64().max(1e-6);
                let n = (per_slot * self.concurrency as f64).floor();
                if n >= self.most as f64 {
                    self.most
                } else {
                    n as usize
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jadpo_core::{Budget, Delivery, DeliveryId, DeliveryState, EventId, Lease, LeaseToken};

    fn claimed(id: i64, payload: &str) -> Claimed {
        let mut delivery = Delivery::new(DeliveryId(id), EventId(id), "s", Timestamp::from_millis(0));
        delivery.state = DeliveryState::Running;
        delivery.lease = Some(Lease {
            owner: "w".into(),
            token: LeaseToken(1),
            until: Timestamp::from_millis(60_000),
        });
        Claimed {
            delivery,
            budget: Budget::DEFAULT,
            connections: vec![],
            probe_for: vec![],
            event_name: "E".into(),
            payload: payload.into(),
            event_public_id: format!("event-{id}"),
            event_depth: 0,
            event_trace: None,
            released: false,
        }
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    proptest::proptest! {
        /// Whatever is pushed, popped, taken late or drained, in any
        /// order, the kept earliest start is the queue's true minimum, and
        /// `take_late` takes exactly the late ones.
        #[test]
        fn the_earliest_start_is_always_the_queues_minimum(
            ops in proptest::collection::vec((0u8..4, 0i64..50), 1..200)
        ) {
            let mut q = LocalQueue::default();
            let mut id = 0;
            for (op, t) in ops {
                let now = Timestamp::from_millis(t);
                match op {
                    0 | 1 => {
                        id += 1;
                        q.push(claimed(id, "x"), Timestamp::from_millis((t * 7 + id) % 50));
                    }
                    2 => {
                        let popped = q.pop(now);
                        proptest::prop_assert!(popped.is_none_or(|p| now <= p.start_by));
                    }
                    _ => {
                        let late_before = q.items.iter().filter(|i| now > i.start_by).count();
                        let late = q.take_late(now);
                        proptest::prop_assert_eq!(late.len(), late_before);
                        proptest::prop_assert!(late.iter().all(|i| now > i.start_by));
                        proptest::prop_assert!(q.items.iter().all(|i| now <= i.start_by));
                    }
                }
                let min = q.items.iter().map(|i| i.start_by).min();
                proptest::prop_assert_eq!(q.next_deadline(), min);
                proptest::prop_assert_eq!(q.starts.values().sum::<usize>(), q.len());
            }
            q.drain();
            proptest::prop_assert_eq!(q.next_deadline(), None);
        }
    }

    #[test]
    fn pops_in_claim_order_and_never_a_late_one() {
        let mut q = LocalQueue::default();
        q.push(claimed(1, "{}"), at(100));
        q.push(claimed(2, "{}"), at(50));
        q.push(claimed(3, "{}"), at(200));
        assert_eq!(q.next_deadline(), Some(at(50)));
        assert_eq!(q.pop(at(10)).unwrap().claimed.delivery.id, DeliveryId(1));
        // At 60, 2 may no longer start: 3 goes first, 2 waits to be given back.
        assert_eq!(q.pop(at(60)).unwrap().claimed.delivery.id, DeliveryId(3));
        assert!(q.pop(at(60)).is_none());
        let late = q.take_late(at(60));
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].claimed.delivery.id, DeliveryId(2));
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_start_exactly_at_the_deadline_is_in_time() {
        let mut q = LocalQueue::default();
        q.push(claimed(1, "{}"), at(100));
        assert!(q.take_late(at(100)).is_empty());
        assert!(q.pop(at(100)).is_some());
    }

    #[test]
    fn counts_payload_bytes_in_and_out() {
        let mut q = LocalQueue::default();
        let big = "x".repeat(MAX_QUEUED_BYTES / 2);
        q.push(claimed(1, &big), at(100));
        assert!(!q.full_of_bytes());
        q.push(claimed(2, &big), at(10));
        assert!(q.full_of_bytes());
        q.take_late(at(50));
        assert!(!q.full_of_bytes());
        q.pop(at(50));
        assert_eq!(q.bytes, 0);
        q.push(claimed(3, &big), at(100));
        q.drain();
        assert_eq!(q.bytes, 0);
    }

    #[test]
    fn holds_nothing_ahead_before_a_run_ended() {
        assert_eq!(Ahead::new(24, 1000, Duration::from_secs(15)).target(), 0);
    }

    #[test]
    fn fast_runs_fill_the_queue_to_its_bound() {
        let mut a = Ahead::new(24, 1000, Duration::from_secs(15));
        a.ended(Duration::from_micros(20));
        assert_eq!(a.target(), 1000);
        // Instant runs, as a no-op action's can be, do not divide by zero.
        a.ended(Duration::ZERO);
        assert_eq!(a.target(), 1000);
    }

    #[test]
    fn holds_what_starts_within_the_horizon() {
        let mut a = Ahead::new(24, 1000, Duration::from_secs(60));
        a.ended(Duration::from_millis(100));
        // 1 s of waiting at 100 ms per run on 24 slots.
        assert_eq!(a.target(), 240);
        // Runs longer than the horizon: nothing ahead, only free slots.
        a.ended(Duration::from_secs(30));
        let mut slow = Ahead::new(24, 1000, Duration::from_secs(60));
        slow.ended(Duration::from_secs(30));
        assert_eq!(slow.target(), 0);
    }

    #[test]
    fn a_short_start_window_holds_less_than_the_horizon() {
        let mut a = Ahead::new(10, 1000, Duration::from_millis(400));
        a.ended(Duration::from_millis(10));
        // 200 ms of waiting at 10 ms per run on 10 slots.
        assert_eq!(a.target(), 200);
    }

    #[test]
    fn the_average_follows_a_provider_that_slows_down() {
        let mut a = Ahead::new(10, 1000, Duration::from_secs(20));
        a.ended(Duration::from_millis(1));
        assert_eq!(a.target(), 1000);
        for _ in 0..2000 {
            a.ended(Duration::from_millis(100));
        }
        // 1 s of waiting at 100 ms per run on 10 slots.
        assert!((99..=100).contains(&a.target()), "{}", a.target());
    }
}
