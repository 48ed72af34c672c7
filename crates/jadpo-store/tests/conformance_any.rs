//! The conformance suites (deliveries and schedules) through [`AnyStore`],
//! on each kind of store it holds: SQLite (a fresh file per test) and
//! PostgreSQL (a schema of its own per test; skipped loudly when the server
//! is unreachable, failed under CI).

use jadpo_store::AnyStore;

mod sqlite {
    use jadpo_store::{AnyStore, Store};
    use std::path::PathBuf;
    use std::sync::Arc;
    use tokio::sync::Notify;

    async fn fresh() -> AnyStore {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("conformance_any");
        AnyStore::from(jadpo_store::sqlite::testing::fresh_store(&dir).await)
    }

    jadpo_store::conformance_tests!(async { fresh().await });

    mod schedules {
        jadpo_store::schedule_conformance_tests!(async { super::fresh().await });
    }

    #[tokio::test]
    async fn kind_is_sqlite_and_listen_returns_at_once() {
        let store = fresh().await;
        assert_eq!(store.kind(), "sqlite");
        // Nothing to listen to: the default's immediate return, not a hang.
        tokio::time::timeout(std::time::Duration::from_secs(5), store.listen(Arc::new(Notify::new())))
            .await
            .expect("SQLite's listen returns at once");
    }
}

mod postgres {
    use jadpo_store::{AnyStore, Store};
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::sync::Notify;

    jadpo_store::conformance_tests!({
        let Some(store) = jadpo_store::postgres::testing::fresh_store().await else {
            return;
        };
        std::future::ready(AnyStore::from(store))
    });

    mod schedules {
        use jadpo_store::AnyStore;

        jadpo_store::schedule_conformance_tests!({
            let Some(store) = jadpo_store::postgres::testing::fresh_store().await else {
                return;
            };
            std::future::ready(AnyStore::from(store))
        });
    }

    /// `listen` is PostgreSQL's own, not the trait's default: it keeps
    /// running and wakes once on connecting.
    #[tokio::test]
    async fn kind_is_postgres_and_listen_is_its_own() {
        let Some(store) = jadpo_store::postgres::testing::fresh_store().await else {
            return;
        };
        let store = AnyStore::from(store);
        assert_eq!(store.kind(), "postgres");
        let wake = Arc::new(Notify::new());
        let listening = tokio::spawn({
            let (store, wake) = (store.clone(), wake.clone());
            async move { store.listen(wake).await }
        });
        tokio::time::timeout(Duration::from_secs(10), wake.notified())
            .await
            .expect("the listener wakes once on connecting");
        assert!(!listening.is_finished(), "PostgreSQL's listen runs until dropped");
        listening.abort();
    }
}

/// `AnyStore` is what an engine generic over the traits can hold.
#[test]
fn any_store_is_a_schedule_store() {
    fn is_store<S: jadpo_store::ScheduleStore + Clone + std::fmt::Debug>() {}
    is_store::<AnyStore>();
}
