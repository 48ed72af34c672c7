//! The tick: the sweep that raises alerts, wakes probes and releases held
//! deliveries, run only at the ticks that would find something to do.

use super::{Event, Sim};
use jadpo_core::Timestamp;

impl Sim {
    /// The next tick at which the sweep has something to do. The real tick
    /// runs every second; skipping the ones that would find nothing to do
    /// changes nothing but the simulation's speed.
    pub(super) fn next_sweep_at(&self) -> Option<Timestamp> {
        let now = self.now;
        let mut next: Option<Timestamp> = None;
        for b in self.store.breakers() {
            let held = self.store.held_count(&b.connection) > 0;
            let wanted = if b.is_closed() {
                held.then_some(now)
            } else if !b.alert_raised {
                Some(now)
            } else if held {
                let probe_free = b.probe.map_or(Timestamp::EPOCH, |p| p.until);
                b.probe_due_at().map(|t| t.max(probe_free))
            } else {
                None
            };
            next = match (next, wanted) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        // Ticks fall on whole multiples of the tick, strictly after now.
        let tick = i64::try_from(self.cfg.tick.as_millis()).unwrap_or(1000).max(1);
        next.map(|t| {
            let t = t.as_millis().max(now.as_millis() + 1);
            Timestamp::from_millis((t + tick - 1) / tick * tick)
        })
    }

    pub(super) fn schedule_tick(&mut self) {
        let Some(at) = self.next_sweep_at() else {
            return;
        };
        if self.tick_at.is_some_and(|t| t <= at) {
            return;
        }
        self.tick_at = Some(at);
        self.push(at, Event::Tick);
    }

    pub(super) fn tick(&mut self) -> Result<(), String> {
        if self.tick_at != Some(self.now) {
            return Ok(()); // superseded by an earlier tick
        }
        self.tick_at = None;
        let report = self.store.sweep(self.now, self.cfg.lease());
        // Only a sweep that released or woke any: the checker's look is over
        // every held delivery.
        if report.released > 0 || !report.woken.is_empty() {
            self.checker.released(&self.store, self.now)?;
        }
        for alert in &report.alerts {
            self.checker.alert(alert)?;
            self.stats.alerts.push((self.now, alert.clone()));
        }
        if !report.woken.is_empty() || report.released > 0 {
            self.wake_idle_workers();
        }
        Ok(())
    }
}
