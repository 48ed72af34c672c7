//! Whether an engine is alive and its store ready, for a process's probes
//! (`GET /livez`, `GET /readyz` in `jadpo serve`), or an embedding
//! program's own.

use crate::Jadpo;
use jadpo_runtime::liveness::Liveness;
use jadpo_store::upgrade::Standing;
use jadpo_store::ScheduleStore;
use std::sync::Arc;

/// Why a store should take no work now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unready {
    /// `store.unavailable`, `store.schema_older` or `store.schema_newer`.
    pub code: &'static str,
    /// What is wrong, and the fix when there is one.
    pub message: String,
}

impl<S: ScheduleStore> Jadpo<S> {
    /// The beats of this engine's loops (the worker, the completer, the
    /// tick): [`Liveness::report`] says which are alive.
    pub fn liveness(&self) -> &Arc<Liveness> {
        self.engine.liveness()
    }

    /// Whether the store answers and its schema is this build's (or newer
    /// through expands only, a rolling deploy under way): one read of its
    /// migrations table.
    pub async fn readiness(&self) -> Result<Standing, Unready> {
        // The store's own error may name its host or file: the answer goes
        // to whoever asks, so it says only that there was none.
        let standing = self.store.schema_standing().await.map_err(|e| Unready {
            code: e.code(),
            message: "the store does not answer".to_owned(),
        })?;
        match standing.unready() {
            Some((code, message)) => Err(Unready { code, message }),
            None => Ok(standing),
        }
    }
}
