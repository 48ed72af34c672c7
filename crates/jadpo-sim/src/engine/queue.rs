//! The simulation's events in time order, ties in the order they were
//! pushed.
//!
//! Three lanes, merged at each pop:
//! - what the config sets (every emission of a week's traffic is 600,000
//!   of them, crashes, the operator's actions), known before the run
//!   starts and never changed: a sorted list read from the front;
//! - what the run pushes for the moment it is at (a poll after a finish, a
//!   wake-up: more than half of all events): a list in push order;
//! - what it pushes for later (starts, finishes, turns, ticks): a heap, as
//!   small as what is in flight.
//!
//! One ordered map of everything made every push and pop walk a tree of
//! the whole week's traffic, and a heap of the run's events sifted each
//! poll through it. Every event is numbered as it is pushed, and within
//! each lane (time, number) only grows from the front, so comparing the
//! three fronts by (time, number) gives the one order a single map would.

use jadpo_core::Timestamp;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

#[derive(Debug)]
pub(super) struct EventQueue<E> {
    seq: u64,
    /// Pushed before the run started, sorted once it did.
    scripted: VecDeque<Entry<E>>,
    sorted: bool,
    /// Pushed by the run for the time of the last pop.
    now: VecDeque<Entry<E>>,
    /// The time of the last pop: the run's present.
    at: Timestamp,
    /// Pushed by the run for later.
    later: BinaryHeap<Reverse<Entry<E>>>,
}

#[derive(Debug)]
struct Entry<E> {
    at: Timestamp,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            seq: 0,
            scripted: VecDeque::new(),
            sorted: false,
            now: VecDeque::new(),
            at: Timestamp::EPOCH,
            later: BinaryHeap::new(),
        }
    }
}

impl<E> EventQueue<E> {
    /// `event` happens at `at`, after everything pushed for `at` before it.
    /// During the run, never before the time of the last pop.
    pub(super) fn push(&mut self, at: Timestamp, event: E) {
        self.seq += 1;
        let entry = Entry {
            at,
            seq: self.seq,
            event,
        };
        if !self.sorted {
            self.scripted.push_back(entry);
        } else if at == self.at {
            self.now.push_back(entry);
        } else {
            debug_assert!(at > self.at, "time never goes back");
            self.later.push(Reverse(entry));
        }
    }

    /// The first event, taken out. The first pop starts the run: what is
    /// pushed from then on goes into the run's lanes.
    pub(super) fn pop(&mut self) -> Option<(Timestamp, E)> {
        if !self.sorted {
            self.scripted.make_contiguous().sort_unstable();
            self.sorted = true;
        }
        let fronts = [
            self.scripted.front(),
            self.now.front(),
            self.later.peek().map(|Reverse(e)| e),
        ];
        let (lane, _) = fronts
            .iter()
            .enumerate()
            .filter_map(|(lane, front)| front.map(|e| (lane, e)))
            .min_by_key(|(_, e)| (e.at, e.seq))?;
        let entry = match lane {
            0 => self.scripted.pop_front(),
            1 => self.now.pop_front(),
            _ => self.later.pop().map(|Reverse(e)| e),
        }
        .expect("its front was just read");
        // The present moves on only once nothing is left for it.
        debug_assert!(entry.at >= self.at && (entry.at == self.at || self.now.is_empty()));
        self.at = entry.at;
        Some((entry.at, entry.event))
    }

    /// How many events were ever pushed.
    pub(super) fn pushed(&self) -> u64 {
        self.seq
    }

    pub(super) fn len(&self) -> usize {
        self.scripted.len() + self.now.len() + self.later.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn at(s: u64) -> Timestamp {
        Timestamp::EPOCH.plus(Duration::from_secs(s))
    }

    /// Events pushed before the run and during it come out by time, and at
    /// one time in the order they were pushed, whichever side they are on.
    #[test]
    fn ties_go_to_what_was_pushed_first_across_both_sides() {
        let mut q = EventQueue::default();
        q.push(at(5), "scripted at 5");
        q.push(at(1), "scripted at 1");
        q.push(at(5), "scripted again at 5");
        assert_eq!(q.pop(), Some((at(1), "scripted at 1")));
        q.push(at(5), "run at 5");
        q.push(at(3), "run at 3");
        assert_eq!(q.len(), 4);
        let rest: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, e)| e).collect();
        assert_eq!(rest, ["run at 3", "scripted at 5", "scripted again at 5", "run at 5"]);
        assert_eq!(q.len(), 0);
    }

    proptest! {
        /// The same order as one map keyed by (time, push number), for any
        /// pushes before the run and any pops and pushes during it.
        #[test]
        fn pops_in_the_order_of_one_ordered_map(
            before in prop::collection::vec(0u64..20, 0..30),
            during in prop::collection::vec(prop::option::of(0u64..10), 0..60),
        ) {
            let mut q = EventQueue::default();
            let mut map = BTreeMap::new();
            let mut n = 0u64;
            for t in before {
                n += 1;
                q.push(at(t), n);
                map.insert((at(t), n), n);
            }
            let mut now = at(0);
            for step in during {
                match step {
                    // A push never goes back in time, as the run's never do.
                    Some(ahead) => {
                        n += 1;
                        let t = now.plus(Duration::from_secs(ahead));
                        q.push(t, n);
                        map.insert((t, n), n);
                    }
                    None => {
                        let want = map.pop_first().map(|((t, _), e)| (t, e));
                        let got = q.pop();
                        prop_assert_eq!(got, want);
                        if let Some((t, _)) = got {
                            now = t;
                        }
                    }
                }
                prop_assert_eq!(q.len(), map.len());
            }
            let want: Vec<_> = std::iter::from_fn(|| map.pop_first()).map(|((t, _), e)| (t, e)).collect();
            let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
            prop_assert_eq!(got, want);
        }
    }
}
