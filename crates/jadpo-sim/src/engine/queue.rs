//! The simulation's events in time order, ties in the order they were
//! pushed.
//!
//! What the config sets (every emission of a week's traffic is 600,000 of
//! them, crashes, the operator's actions) is known before the run starts
//! and never changes: it waits in a sorted list, read from the front. Only
//! what the run itself pushes (polls, starts, finishes, ticks) goes into a
//! heap, which so stays as small as what is in flight. One ordered map of
//! both made every push and pop of a week's run walk a tree of the whole
//! week's traffic.
//!
//! Every event is numbered as it is pushed, and everything set before the
//! run was pushed before anything of the run: comparing (time, number)
//! across the two gives the one order a single map would.

use jadpo_core::Timestamp;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

#[derive(Debug)]
pub(super) struct EventQueue<E> {
    seq: u64,
    /// Pushed before the run started, sorted once it did.
    scripted: VecDeque<Entry<E>>,
    sorted: bool,
    running: BinaryHeap<Reverse<Entry<E>>>,
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
            running: BinaryHeap::new(),
        }
    }
}

impl<E> EventQueue<E> {
    /// `event` happens at `at`, after everything pushed for `at` before it.
    pub(super) fn push(&mut self, at: Timestamp, event: E) {
        self.seq += 1;
        let entry = Entry {
            at,
            seq: self.seq,
            event,
        };
        if self.sorted {
            self.running.push(Reverse(entry));
        } else {
            self.scripted.push_back(entry);
        }
    }

    /// The first event, taken out. The first pop starts the run: what is
    /// pushed from then on goes into the heap.
    pub(super) fn pop(&mut self) -> Option<(Timestamp, E)> {
        if !self.sorted {
            self.scripted.make_contiguous().sort_unstable();
            self.sorted = true;
        }
        let scripted_first = match (self.scripted.front(), self.running.peek()) {
            (Some(s), Some(Reverse(r))) => s < r,
            (Some(_), None) => true,
            (None, _) => false,
        };
        let entry = if scripted_first {
            self.scripted.pop_front()
        } else {
            self.running.pop().map(|Reverse(e)| e)
        }?;
        Some((entry.at, entry.event))
    }

    /// How many events were ever pushed.
    pub(super) fn pushed(&self) -> u64 {
        self.seq
    }

    pub(super) fn len(&self) -> usize {
        self.scripted.len() + self.running.len()
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
