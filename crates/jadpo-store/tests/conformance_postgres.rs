//! The conformance suite against PostgreSQL, each scenario in a schema of
//! its own. Skipped loudly when the server is unreachable, failed under CI.

jadpo_store::conformance_tests!({
    let Some(store) = jadpo_store::postgres::testing::fresh_store().await else {
        return;
    };
    std::future::ready(store)
});

mod schedules {
    jadpo_store::schedule_conformance_tests!({
        let Some(store) = jadpo_store::postgres::testing::fresh_store().await else {
            return;
        };
        std::future::ready(store)
    });
}
