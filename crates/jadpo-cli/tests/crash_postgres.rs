//! The crash test (`support/crash_pg.rs`) on a schema of the shared
//! PostgreSQL server: three `jadpo dev` processes, one through a TCP proxy,
//! deliver 3,000 events through kills, stalls and a cut store connection.
//! `JADPO_CRASH_SEED=N` replays a plan.

#[path = "support/crash.rs"]
mod crash;
#[path = "support/crash_pg.rs"]
mod crash_pg;

use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::postgres::{Options, PgStore};

#[test]
fn three_processes_deliver_everything_through_kills_stalls_and_a_cut_store_connection() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    let options = Options {
        schema: Some(schema.name().to_owned()),
        ..Options::default()
    };
    let rows = PgStore::lazy(schema.url(), options).unwrap();
    crash_pg::run(&rt, &schema.url_with_search_path(), &rows);
}
