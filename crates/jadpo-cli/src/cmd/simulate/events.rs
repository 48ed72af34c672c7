//! The events of a scenario's traffic: when each batch arrives (an
//! emission), and each event's payload and subscribers. A pure function of
//! the scenario, so the helper thread may make them ahead.

use super::scenario::{Arrivals, Scenario, Traffic};
use jadpo_core::Timestamp;
use jadpo_lang::{App, Type};
use jadpo_runtime::Catalog;
use jadpo_sim::Emission;
use jadpo_store::NewEvent;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// What makes the events of each emission.
pub(crate) struct EventMaker {
    app: Arc<App>,
    catalog: Catalog,
    traffic: Vec<Traffic>,
    /// Per emission: its traffic, the number of its first event, and how
    /// many it has.
    plan: Vec<(usize, u64, usize)>,
}

impl EventMaker {
    /// The maker of `emissions`' events, `plan` saying which traffic each
    /// comes from and the number of its first event
    /// ([`emissions`]).
    pub(crate) fn new(
        app: Arc<App>,
        traffic: Vec<Traffic>,
        emissions: &[Emission],
        plan: Vec<(usize, u64)>,
    ) -> EventMaker {
        EventMaker {
            catalog: Catalog::from_app(&app),
            app,
            traffic,
            plan: plan
                .into_iter()
                .zip(emissions)
                .map(|((t, first), e)| (t, first, e.events))
                .collect(),
        }
    }

    /// How many emissions there are.
    pub(crate) fn len(&self) -> usize {
        self.plan.len()
    }

    /// The events of emission number `index`, each with its subscribers
    /// and keys.
    pub(crate) fn make(&self, index: usize) -> Vec<NewEvent> {
        let (t, first, count) = self.plan[index];
        let traffic = &self.traffic[t];
        let Some(event) = self.app.events.get(&traffic.event) else {
            return Vec::new();
        };
        let events = (0..count as u64)
            .map(|i| (traffic.event.clone(), payload(event, traffic, first + i)))
            .collect();
        self.catalog.emits(events, 0, None).events
    }
}

/// The emissions of a scenario's traffic, in time order, and for each its
/// traffic and the number of its first event. A rate arrives once a second
/// (the fraction carried over), or event by event when slower.
pub(crate) fn emissions(scenario: &Scenario) -> (Vec<Emission>, Vec<(usize, u64)>) {
    let mut all: Vec<(Duration, usize, u64)> = Vec::new();
    for (t, traffic) in scenario.traffic.iter().enumerate() {
        match &traffic.arrivals {
            Arrivals::Burst { count, at } => all.push((*at, t, *count)),
            Arrivals::Replay { counts, from } => {
                for (minute, n) in counts.iter().enumerate() {
                    // Spread over the minute, a second at a time.
                    let per_second = spread(*n, 60);
                    for (s, k) in per_second.into_iter().enumerate() {
                        if k > 0 {
                            let at = *from + Duration::from_secs(minute as u64 * 60 + s as u64);
                            all.push((at, t, k));
                        }
                    }
                }
            }
            Arrivals::Rate { n, per, from, length } => {
                let seconds = length.as_secs();
                let per_s = *n as f64 / per.as_secs_f64();
                if per_s >= 1.0 {
                    let mut carried = 0.0;
                    for s in 0..seconds {
                        carried += per_s;
                        let k = carried.floor();
                        carried -= k;
                        all.push((*from + Duration::from_secs(s), t, k as u64));
                    }
                } else {
                    let gap = Duration::from_secs_f64(1.0 / per_s);
                    let mut at = Duration::ZERO;
                    while at < *length {
                        all.push((*from + at, t, 1));
                        at += gap;
                    }
                }
            }
        }
    }
    all.sort_by_key(|(at, t, _)| (*at, *t));
    let mut numbers = vec![0u64; scenario.traffic.len()];
    let mut emissions = Vec::with_capacity(all.len());
    let mut plan = Vec::with_capacity(all.len());
    for (at, t, n) in all {
        emissions.push(Emission {
            at: Timestamp::EPOCH.plus(at),
            events: n as usize,
        });
        plan.push((t, numbers[t]));
        numbers[t] += n;
    }
    (emissions, plan)
}

/// `n` shared as evenly as can be over `parts`.
fn spread(n: u64, parts: u64) -> Vec<u64> {
    (0..parts).map(|i| n / parts + u64::from(i < n % parts)).collect()
}

/// Event number `n` of `traffic`: its fields as the scenario sets them,
/// the others made from `n` (wrapped at `keys`).
fn payload(event: &jadpo_lang::Event, traffic: &Traffic, n: u64) -> Value {
    let k = traffic.keys.map_or(n, |keys| n % keys);
    // Inserted one by one: collecting a map sorts a buffer first.
    let mut fields = serde_json::Map::new();
    for f in &event.fields {
        let value = match traffic.payload.get(&f.name) {
            Some(v) => v.clone(),
            None => match f.ty {
                Type::String => {
                    // Without `format!`: two fields of every event.
                    let mut text = String::with_capacity(f.name.len() + 21);
                    text.push_str(&f.name);
                    text.push('-');
                    text.push_str(itoa::Buffer::new().format(k));
                    Value::String(text)
                }
                Type::Int => Value::from(k),
                Type::Float => Value::from(k as f64),
                Type::Bool => Value::Bool(k.is_multiple_of(2)),
                Type::Object => Value::Object(Default::default()),
                Type::List => Value::Array(Vec::new()),
            },
        };
        fields.insert(f.name.clone(), value);
    }
    Value::Object(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_spread_evenly() {
        assert_eq!(spread(7, 3), [3, 2, 2]);
        assert_eq!(spread(2, 4), [1, 1, 0, 0]);
        assert_eq!(spread(0, 2), [0, 0]);
    }
}
