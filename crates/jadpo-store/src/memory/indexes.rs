//! The in-memory store's indexes over its rows: due deliveries by due
//! time, running ones by lease end, held ones by connection and the time
//! they were held from. A claim, a sweep and a release read these, never
//! every row.

use jadpo_core::{Delivery, DeliveryId, DeliveryState, Timestamp};
use std::collections::{BTreeMap, BTreeSet};

pub(super) type Index = BTreeSet<(Timestamp, DeliveryId)>;

#[derive(Debug, Default)]
pub(super) struct Indexes {
    pub(super) due: Index,
    /// Running deliveries by lease end.
    pub(super) running: Index,
    /// Held deliveries by connection, then by the time they were held from.
    pub(super) held: BTreeMap<String, Index>,
}

impl Indexes {
    /// `d` as a row now has it.
    pub(super) fn add(&mut self, d: &Delivery) {
        match d.state {
            DeliveryState::Due => {
                self.due.insert((d.due_at, d.id));
            }
            DeliveryState::Running => {
                self.running.insert((lease_end(d), d.id));
            }
            DeliveryState::Held => {
                let h = d.held.as_ref().expect("held has a connection");
                match self.held.get_mut(&h.connection) {
                    Some(set) => set.insert((h.since, d.id)),
                    None => self
                        .held
                        .entry(h.connection.clone())
                        .or_default()
                        .insert((h.since, d.id)),
                };
            }
            _ => {}
        }
    }

    /// `d` as a row had it before a change.
    pub(super) fn remove(&mut self, d: &Delivery) {
        match d.state {
            DeliveryState::Due => {
                self.due.remove(&(d.due_at, d.id));
            }
            DeliveryState::Running => {
                self.running.remove(&(lease_end(d), d.id));
            }
            DeliveryState::Held => {
                if let Some(h) = &d.held {
                    if let Some(set) = self.held.get_mut(&h.connection) {
                        set.remove(&(h.since, d.id));
                    }
                }
            }
            _ => {}
        }
    }
}

fn lease_end(d: &Delivery) -> Timestamp {
    d.lease.as_ref().map_or(Timestamp::MAX, |l| l.until)
}
