//! Whether this build still runs on the store's schema. A newer build's
//! contract migration (`jadpo_store::upgrade`) can remove what this build
//! uses while it runs; from then on each of its claims would fail. The tick
//! asks the store every second, and a failed claim asks at once; while the
//! store refuses this build, the worker claims nothing and one error line
//! says why, with both versions. Runs already under way finish; emits are
//! left to the store, which refuses what it can no longer take.

use jadpo_store::upgrade::Refusal;
use jadpo_store::{Store, StoreError};
use tokio::sync::watch;

pub(crate) struct SchemaGate {
    refusal: watch::Sender<Option<Refusal>>,
}

impl Default for SchemaGate {
    fn default() -> Self {
        SchemaGate {
            refusal: watch::Sender::new(None),
        }
    }
}

impl SchemaGate {
    /// Wakes whoever waits on [`SchemaGate::refused`] when it changes.
    pub(crate) fn watch(&self) -> watch::Receiver<Option<Refusal>> {
        self.refusal.subscribe()
    }

    /// Asks the store, and closes or opens the gate by its answer. A store
    /// that cannot answer leaves the gate as it was: that is a fault the
    /// claim's backoff handles, not a schema's verdict. Returns whether the
    /// gate is closed.
    pub(crate) async fn check<S: Store>(&self, store: &S) -> bool {
        match store.check_schema().await {
            Ok(()) => self.set(None),
            Err(StoreError::Schema(refusal)) => self.set(Some(refusal)),
            Err(e) => tracing::debug!(error = %e, "store.schema_unchecked"),
        }
        self.refusal.borrow().is_some()
    }

    fn set(&self, now: Option<Refusal>) {
        self.refusal.send_if_modified(|was| {
            if *was == now {
                return false;
            }
            match &now {
                Some(r @ Refusal::SchemaNewer { store, needs, build }) => tracing::error!(
                    code = r.code(),
                    store,
                    needs,
                    build,
                    reason = %r,
                    "store.schema_newer"
                ),
                Some(r) => tracing::error!(code = r.code(), reason = %r, "store.schema_refused"),
                None => tracing::info!("store.schema_runs"),
            }
            *was = now;
            true
        });
    }
}
