//! The conformance suite against the in-memory store.

use jadpo_core::BreakerPolicy;
use jadpo_store::SharedMemoryStore;

jadpo_store::conformance_tests!(async { SharedMemoryStore::new(BreakerPolicy::DEFAULT) });
jadpo_store::schedule_conformance_tests!(async { SharedMemoryStore::new(BreakerPolicy::DEFAULT) });
