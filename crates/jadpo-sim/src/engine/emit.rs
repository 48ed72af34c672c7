//! Events entering the simulation: an app's, or the built-in subscribers'
//! made-up ones, each new delivery checked and counted.

use super::Sim;
use jadpo_store::NewEvent;

impl Sim {
    pub(super) fn emit(&mut self, i: usize) -> Result<(), String> {
        let events = match &mut self.app {
            Some(app) => app.events(i, &self.cfg.emissions[i]),
            None => self.scripted_events(i),
        };
        for e in self
            .store
            .emit(&events, self.now)
            .expect("the simulation uses no idempotency keys")
        {
            self.emitted(&e);
        }
        self.wake_idle_workers();
        Ok(())
    }

    /// An event's deliveries, new: checked and counted.
    pub(super) fn emitted(&mut self, e: &jadpo_store::Emitted) {
        self.checker.emitted(e);
        self.checker.keys.emitted(&self.store, &e.deliveries);
        self.stats.created += e.deliveries.len() as u64;
        self.stats.queued += e
            .deliveries
            .iter()
            .filter(|id| {
                self.store
                    .delivery(**id)
                    .is_some_and(|d| d.state == jadpo_core::DeliveryState::Queued)
            })
            .count() as u64;
    }

    /// The built-in subscribers' events: `{}` to every subscriber.
    pub(super) fn scripted_events(&mut self, i: usize) -> Vec<NewEvent> {
        let subscribers: Vec<String> = self.cfg.subscribers.iter().map(|s| s.name.clone()).collect();
        (0..self.cfg.emissions[i].events)
            .map(|_| NewEvent {
                name: "Simulated".into(),
                payload: "{}".into(),
                subscribers: subscribers.clone(),
                idempotency_key: None,
                trace: None,
                keys: crate::keys::keys_of_event(&self.cfg, &mut self.key_rng),
            })
            .collect()
    }
}
