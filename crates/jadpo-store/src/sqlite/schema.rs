//! The system tables and their versioned migrations
//! (`docs/system-tables.md` explains each column and index).

use super::pool::Abort;
use crate::types::StoreError;
use crate::upgrade::{self, Applied, Migration, Plan};
use rusqlite::{params, Connection};

/// Migration `N` is `MIGRATIONS[N - 1]`, an expand or a contract
/// (`crate::upgrade`). Append only: a migration that has shipped is never
/// edited, since files out there already ran it. A contract ships a version
/// after the expand that replaced what it removes.
pub const MIGRATIONS: &[Migration] = &[
    Migration::expand(1, V1),
    Migration::expand(2, V2),
    Migration::expand(3, V3),
    Migration::expand(4, V4),
    // Drops jadpo_handled, which builds before 5 write.
    Migration::contract(5, 5, V5),
    Migration::expand(6, V6),
    Migration::expand(7, V7),
    // Alerts' connection and held may be NULL, which builds before 8 read
    // as required.
    Migration::contract(8, 8, V8),
    Migration::expand(9, V9),
    Migration::expand(10, V10),
    Migration::expand(11, V11),
    Migration::expand(12, V12),
    Migration::expand(13, V13),
    Migration::expand(14, V14),
    Migration::expand(15, V15),
    Migration::expand(16, V16),
    Migration::expand(17, V17),
    Migration::expand(18, V18),
];

/// The newest schema this build knows.
pub const LATEST: i64 = MIGRATIONS[MIGRATIONS.len() - 1].version as i64;

// Ids are `INTEGER PRIMARY KEY` (SQLite's rowid, spelled so it is one) with
// AUTOINCREMENT on events and deliveries: pruning the newest finished row
// must not let a new delivery reuse its id, which logs and operators quote.
// Partial indexes keep the hot queries to the rows they want, so a claim costs
// the same with ten million finished deliveries behind it.
/// Retention also prunes events that no delivery refers to (an event with no
/// subscriber), oldest first.
const V2: &str = "CREATE INDEX jadpo_events_emitted ON jadpo_events (emitted_at, id);";

/// The retention index's condition was `state IN ('succeeded', 'failed',
/// 'parked')`. SQLite evaluates a partial index's condition for the old and
/// the new row of every UPDATE that sets `state`, and an IN list of more than
/// two values builds a temporary b-tree each time: measured, it made each
/// claim's and finish's per-row UPDATE five times slower (35 us against
/// 7 us). `finished_at IS NOT NULL` holds the same rows (`finished_at` is set
/// exactly when a delivery finishes) and costs a NULL test. Retention still
/// filters on the state, so the index only has to contain its rows.
const V3: &str = "
DROP INDEX jadpo_deliveries_finished;
CREATE INDEX jadpo_deliveries_finished ON jadpo_deliveries (finished_at) WHERE finished_at IS NOT NULL;
";

/// The deliveries' CHECK on `state` was an IN list of six values, which
/// SQLite, like the condition V3 replaced, evaluates through a temporary
/// b-tree on every UPDATE that sets `state`: about half the cost of each
/// claim's and finish's row update. The same check as a chain of equalities
/// costs six string comparisons. SQLite cannot alter a CHECK, so the table is
/// rebuilt the documented way (new table, copy, drop, rename, indexes), in
/// the migration's transaction. The AUTOINCREMENT high-water mark is carried
/// over, so ids pruned from the top are still never reused.
const V4: &str = "
CREATE TABLE jadpo_deliveries_v4 (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id           BIGINT  NOT NULL REFERENCES jadpo_events (id),
    subscriber         TEXT    NOT NULL,
    state              TEXT    NOT NULL
        CHECK (state = 'due' OR state = 'running' OR state = 'held'
               OR state = 'succeeded' OR state = 'failed' OR state = 'parked'),
    attempts           INT     NOT NULL,
    due_at             BIGINT  NOT NULL,
    budget_from        BIGINT  NOT NULL,
    held_for_ms        BIGINT  NOT NULL,
    lease_owner        TEXT,
    lease_token        BIGINT  NOT NULL DEFAULT 0,
    lease_until        BIGINT,
    last_failure_code  TEXT,
    last_failure_kind  TEXT,
    held_connection    TEXT,
    held_since         BIGINT,
    created_at         BIGINT  NOT NULL,
    updated_at         BIGINT  NOT NULL,
    finished_at        BIGINT
);
INSERT INTO jadpo_deliveries_v4 SELECT * FROM jadpo_deliveries;
DELETE FROM sqlite_sequence WHERE name = 'jadpo_deliveries_v4';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'jadpo_deliveries_v4', seq FROM sqlite_sequence WHERE name = 'jadpo_deliveries';
DROP TABLE jadpo_deliveries;
ALTER TABLE jadpo_deliveries_v4 RENAME TO jadpo_deliveries;
CREATE INDEX jadpo_deliveries_due ON jadpo_deliveries (due_at, id)
    WHERE state = 'due';
CREATE INDEX jadpo_deliveries_lost ON jadpo_deliveries (lease_until, id)
    WHERE state = 'running';
CREATE INDEX jadpo_deliveries_held ON jadpo_deliveries (held_connection, held_since, id)
    WHERE state = 'held';
CREATE INDEX jadpo_deliveries_event ON jadpo_deliveries (event_id);
CREATE INDEX jadpo_deliveries_subscriber ON jadpo_deliveries (subscriber, id);
CREATE INDEX jadpo_deliveries_finished ON jadpo_deliveries (finished_at) WHERE finished_at IS NOT NULL;
";

const V1: &str = "
CREATE TABLE jadpo_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    emitted_at  BIGINT  NOT NULL
);

CREATE TABLE jadpo_deliveries (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id           BIGINT  NOT NULL REFERENCES jadpo_events (id),
    subscriber         TEXT    NOT NULL,
    state              TEXT    NOT NULL
        CHECK (state IN ('due', 'running', 'held', 'succeeded', 'failed', 'parked')),
    attempts           INT     NOT NULL,
    due_at             BIGINT  NOT NULL,
    budget_from        BIGINT  NOT NULL,
    held_for_ms        BIGINT  NOT NULL,
    lease_owner        TEXT,
    lease_token        BIGINT  NOT NULL DEFAULT 0,
    lease_until        BIGINT,
    last_failure_code  TEXT,
    last_failure_kind  TEXT,
    held_connection    TEXT,
    held_since         BIGINT,
    created_at         BIGINT  NOT NULL,
    updated_at         BIGINT  NOT NULL,
    finished_at        BIGINT
);

CREATE INDEX jadpo_deliveries_due ON jadpo_deliveries (due_at, id)
    WHERE state = 'due';
CREATE INDEX jadpo_deliveries_lost ON jadpo_deliveries (lease_until, id)
    WHERE state = 'running';
CREATE INDEX jadpo_deliveries_held ON jadpo_deliveries (held_connection, held_since, id)
    WHERE state = 'held';
CREATE INDEX jadpo_deliveries_event ON jadpo_deliveries (event_id);
CREATE INDEX jadpo_deliveries_subscriber ON jadpo_deliveries (subscriber, id);
CREATE INDEX jadpo_deliveries_finished ON jadpo_deliveries (finished_at)
    WHERE state IN ('succeeded', 'failed', 'parked');

CREATE TABLE jadpo_handled (
    subscriber  TEXT    NOT NULL,
    event_id    BIGINT  NOT NULL,
    handled_at  BIGINT  NOT NULL,
    PRIMARY KEY (subscriber, event_id)
) WITHOUT ROWID;

CREATE TABLE jadpo_attempts (
    id            INTEGER PRIMARY KEY,
    delivery_id   BIGINT  NOT NULL,
    attempt       INT     NOT NULL,
    started_at    BIGINT  NOT NULL,
    ended_at      BIGINT  NOT NULL,
    state         TEXT    NOT NULL,
    failure_code  TEXT,
    failure_kind  TEXT
);
CREATE INDEX jadpo_attempts_delivery ON jadpo_attempts (delivery_id, id);

CREATE TABLE jadpo_circuit_breakers (
    connection               TEXT    PRIMARY KEY,
    state                    TEXT    NOT NULL CHECK (state IN ('closed', 'open', 'probing')),
    consecutive_unavailable  INT     NOT NULL,
    opened_at                BIGINT,
    outage_since             BIGINT,
    pause_ms                 BIGINT  NOT NULL,
    probe_delivery           BIGINT,
    probe_until              BIGINT,
    alert_raised             BOOLEAN NOT NULL,
    version                  BIGINT  NOT NULL
);

CREATE TABLE jadpo_alerts (
    id          INTEGER PRIMARY KEY,
    alert       TEXT    NOT NULL,
    connection  TEXT    NOT NULL,
    since       BIGINT  NOT NULL,
    held        BIGINT  NOT NULL,
    raised_at   BIGINT  NOT NULL
);

CREATE TABLE jadpo_schedules (
    name                  TEXT    PRIMARY KEY,
    next_due              BIGINT  NOT NULL,
    lease_owner           TEXT,
    lease_token           BIGINT  NOT NULL DEFAULT 0,
    lease_until           BIGINT,
    consecutive_failures  INT     NOT NULL DEFAULT 0,
    last_failure_code     TEXT,
    last_failure_kind     TEXT,
    alert_raised          BOOLEAN NOT NULL DEFAULT 0,
    version               BIGINT  NOT NULL DEFAULT 0
);
";

/// The handled record becomes a column of the delivery it belongs to (one
/// delivery per subscriber and event): the successful finish's own update
/// writes it, instead of a row in a table of its own, and the claim reads it
/// from the row it reads anyway, instead of looking it up.
const V5: &str = "
ALTER TABLE jadpo_deliveries ADD COLUMN handled_at BIGINT;
UPDATE jadpo_deliveries SET handled_at = (
    SELECT h.handled_at FROM jadpo_handled h
    WHERE h.subscriber = jadpo_deliveries.subscriber AND h.event_id = jadpo_deliveries.event_id)
WHERE EXISTS (
    SELECT 1 FROM jadpo_handled h
    WHERE h.subscriber = jadpo_deliveries.subscriber AND h.event_id = jadpo_deliveries.event_id);
DROP TABLE jadpo_handled;
";

/// Every event gets a public id, unique across stores (a UUIDv7 for new
/// events; events from before get a random one): what signed calls'
/// `webhook-id` derive from. Unique, so no two events can share one.
const V6: &str = "
ALTER TABLE jadpo_events ADD COLUMN public_id TEXT;
UPDATE jadpo_events SET public_id = lower(hex(randomblob(16))) WHERE public_id IS NULL;
CREATE UNIQUE INDEX jadpo_events_public_id ON jadpo_events (public_id);
";

/// An event may carry its caller's idempotency key, unique per event name
/// while the event is kept (it goes with the event at retention).
const V7: &str = "
ALTER TABLE jadpo_events ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX jadpo_events_idempotency ON jadpo_events (name, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
";

/// Alert messages: a breaker's `resolved` message and a schedule's alert
/// beside the raised outage alerts, each with a public id and its sends to
/// the app's alert route. SQLite cannot drop a NOT NULL, so the table is
/// made again and its rows copied; alerts raised before this are left
/// unsent. `jadpo_alerts_open` holds only messages still to be sent.
const V8: &str = "
CREATE TABLE jadpo_alerts_v8 (
    id                 INTEGER PRIMARY KEY,
    public_id          TEXT    NOT NULL,
    alert              TEXT    NOT NULL,
    kind               TEXT    NOT NULL CHECK (kind IN ('raised', 'resolved')),
    connection         TEXT,
    schedule           TEXT,
    since              BIGINT  NOT NULL,
    held               BIGINT,
    failures           INT,
    last_failure_code  TEXT,
    last_failure_kind  TEXT,
    raised_at          BIGINT  NOT NULL,
    ended_at           BIGINT,
    released           BIGINT,
    send_attempts      INT     NOT NULL DEFAULT 0,
    send_due_at        BIGINT,
    sent_at            BIGINT,
    send_failed_at     BIGINT,
    send_error         TEXT
);
INSERT INTO jadpo_alerts_v8 (id, public_id, alert, kind, connection, since, held, raised_at)
    SELECT a.id,
           (SELECT lower(substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-4' || substr(h, 14, 3) || '-'
                         || substr(h, 17, 4) || '-' || substr(h, 21, 12))
            FROM (SELECT hex(randomblob(16)) || substr(a.id, 1, 0) AS h)),
           a.alert, 'raised', a.connection, a.since, a.held, a.raised_at
    FROM jadpo_alerts AS a;
DROP TABLE jadpo_alerts;
ALTER TABLE jadpo_alerts_v8 RENAME TO jadpo_alerts;
CREATE INDEX jadpo_alerts_open ON jadpo_alerts (coalesce(send_due_at, raised_at), id)
    WHERE sent_at IS NULL AND send_failed_at IS NULL;
";

/// The per-minute summary the console's charts read: counts by minute and
/// series, added to by every process, a day of them kept. And the
/// deliveries an operator looks for, failed and parked, found (listed,
/// counted) without reading the succeeded ones: one index each, since
/// SQLite uses a partial index only when the query names its condition.
/// And limited connections' tokens and slots, one row per connection with
/// its state as JSON (`jadpo_core::limit::LimitState`).
const V9: &str = "
CREATE TABLE jadpo_minutes (
    minute  BIGINT  NOT NULL,
    series  TEXT    NOT NULL,
    n       BIGINT  NOT NULL,
    PRIMARY KEY (minute, series)
);
CREATE INDEX jadpo_deliveries_failed ON jadpo_deliveries (id) WHERE state = 'failed';
CREATE INDEX jadpo_deliveries_parked ON jadpo_deliveries (id) WHERE state = 'parked';
CREATE TABLE jadpo_connection_limits (
    connection  TEXT    PRIMARY KEY,
    state       TEXT    NOT NULL,
    version     BIGINT  NOT NULL
);
";

/// Why a due delivery did not start at its last claim: the limited
/// connection with no room and what it waits for (`token`, `slot`,
/// `pause`), for `jadpo deliveries`. Both NULL otherwise, so the index of
/// waiting deliveries (the queue behind each connection, for `jadpo
/// breakers`) holds only those. And each event's emit depth: 0 for an
/// event from outside, one more for each action that emitted it from
/// another's delivery (bounded, see `jadpo_runtime::run::MAX_EMIT_DEPTH`).
const V10: &str = "
ALTER TABLE jadpo_deliveries ADD COLUMN waiting_on TEXT;
ALTER TABLE jadpo_deliveries ADD COLUMN waiting_for TEXT;
CREATE INDEX jadpo_deliveries_waiting ON jadpo_deliveries (waiting_on) WHERE waiting_on IS NOT NULL;
ALTER TABLE jadpo_events ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
";

/// The store's scaled clock: one row at most, written by the first process
/// that started on the store with a time scale and never moved after
/// (`jadpo_core::clock`).
const V11: &str = "
CREATE TABLE jadpo_clock (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    scale          INTEGER NOT NULL CHECK (scale >= 2),
    anchor_real    BIGINT  NOT NULL,
    anchor_engine  BIGINT  NOT NULL
);
";

/// Console sign-ins, one row each, by an HMAC of the session's secret,
/// until they expire or are signed out (docs/security.md).
const V12: &str = "
CREATE TABLE jadpo_console_sessions (
    hash        TEXT    PRIMARY KEY,
    created_at  BIGINT  NOT NULL,
    expires_at  BIGINT  NOT NULL
);
CREATE INDEX jadpo_console_sessions_expiry ON jadpo_console_sessions (expires_at);
";

/// The attempt that succeeded is kept on its delivery's row, its start in
/// `success_started_at` (its end is `finished_at`, its number `attempts`),
/// instead of as a row of `jadpo_attempts`: a success writes one row, not
/// two and an index entry. Successes before this keep their rows.
const V13: &str = "ALTER TABLE jadpo_deliveries ADD COLUMN success_started_at BIGINT;";

/// The trace each event was emitted in (W3C Trace Context), NULL when it
/// came without one: an attempt joins that trace.
const V14: &str = "
ALTER TABLE jadpo_events ADD COLUMN traceparent TEXT;
ALTER TABLE jadpo_events ADD COLUMN tracestate TEXT;
";

/// Each subscriber's oldest due delivery, for `/metrics`: one probe per
/// subscriber reads the front of its part of this index, where the claim's
/// `jadpo_deliveries_due` (by `due_at` alone) would walk every due row of
/// the other subscribers first.
const V15: &str = "
CREATE INDEX jadpo_deliveries_due_subscriber ON jadpo_deliveries (subscriber, due_at)
    WHERE state = 'due';
";

/// A delivery's key (its subscriber's `key:` over its event), and the
/// deliveries of one key newest first, for `jadpo deliveries --key`. The
/// index holds keyed rows only, so an unkeyed emit does not pay for it.
const V16: &str = "
ALTER TABLE jadpo_deliveries ADD COLUMN delivery_key TEXT;
CREATE INDEX jadpo_deliveries_key ON jadpo_deliveries (delivery_key, id) WHERE delivery_key IS NOT NULL;
";

/// Per-key order and caps (docs/decisions.md, "Per-key order"): the
/// state `queued`, `key_rule`, `jadpo_keys` and `jadpo_deliveries_queued`,
/// as PostgreSQL's migration 14 says. SQLite cannot alter a CHECK, so the
/// table is rebuilt as migration 4 did (new table, copy, drop, rename,
/// every index again), keeping the AUTOINCREMENT high-water mark.
const V17: &str = "
CREATE TABLE jadpo_deliveries_v17 (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id           BIGINT  NOT NULL REFERENCES jadpo_events (id),
    subscriber         TEXT    NOT NULL,
    state              TEXT    NOT NULL
        CHECK (state = 'due' OR state = 'running' OR state = 'held' OR state = 'queued'
               OR state = 'succeeded' OR state = 'failed' OR state = 'parked'),
    attempts           INT     NOT NULL,
    due_at             BIGINT  NOT NULL,
    budget_from        BIGINT  NOT NULL,
    held_for_ms        BIGINT  NOT NULL,
    lease_owner        TEXT,
    lease_token        BIGINT  NOT NULL DEFAULT 0,
    lease_until        BIGINT,
    last_failure_code  TEXT,
    last_failure_kind  TEXT,
    held_connection    TEXT,
    held_since         BIGINT,
    created_at         BIGINT  NOT NULL,
    updated_at         BIGINT  NOT NULL,
    finished_at        BIGINT,
    handled_at         BIGINT,
    waiting_on         TEXT,
    waiting_for        TEXT,
    success_started_at BIGINT,
    delivery_key       TEXT,
    key_rule           TEXT
);
INSERT INTO jadpo_deliveries_v17 (id, event_id, subscriber, state, attempts, due_at, budget_from,
    held_for_ms, lease_owner, lease_token, lease_until, last_failure_code, last_failure_kind,
    held_connection, held_since, created_at, updated_at, finished_at, handled_at, waiting_on,
    waiting_for, success_started_at, delivery_key)
SELECT id, event_id, subscriber, state, attempts, due_at, budget_from,
    held_for_ms, lease_owner, lease_token, lease_until, last_failure_code, last_failure_kind,
    held_connection, held_since, created_at, updated_at, finished_at, handled_at, waiting_on,
    waiting_for, success_started_at, delivery_key
FROM jadpo_deliveries;
DELETE FROM sqlite_sequence WHERE name = 'jadpo_deliveries_v17';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'jadpo_deliveries_v17', seq FROM sqlite_sequence WHERE name = 'jadpo_deliveries';
DROP TABLE jadpo_deliveries;
ALTER TABLE jadpo_deliveries_v17 RENAME TO jadpo_deliveries;
CREATE INDEX jadpo_deliveries_due ON jadpo_deliveries (due_at, id)
    WHERE state = 'due';
CREATE INDEX jadpo_deliveries_lost ON jadpo_deliveries (lease_until, id)
    WHERE state = 'running';
CREATE INDEX jadpo_deliveries_held ON jadpo_deliveries (held_connection, held_since, id)
    WHERE state = 'held';
CREATE INDEX jadpo_deliveries_event ON jadpo_deliveries (event_id);
CREATE INDEX jadpo_deliveries_subscriber ON jadpo_deliveries (subscriber, id);
CREATE INDEX jadpo_deliveries_finished ON jadpo_deliveries (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jadpo_deliveries_failed ON jadpo_deliveries (id) WHERE state = 'failed';
CREATE INDEX jadpo_deliveries_parked ON jadpo_deliveries (id) WHERE state = 'parked';
CREATE INDEX jadpo_deliveries_waiting ON jadpo_deliveries (waiting_on) WHERE waiting_on IS NOT NULL;
CREATE INDEX jadpo_deliveries_due_subscriber ON jadpo_deliveries (subscriber, due_at)
    WHERE state = 'due';
CREATE INDEX jadpo_deliveries_key ON jadpo_deliveries (delivery_key, id) WHERE delivery_key IS NOT NULL;
CREATE INDEX jadpo_deliveries_queued ON jadpo_deliveries (subscriber, delivery_key, id)
    WHERE state = 'queued';
CREATE TABLE jadpo_keys (
    subscriber   TEXT    NOT NULL,
    delivery_key TEXT    NOT NULL,
    taken        INTEGER NOT NULL CHECK (taken >= 0),
    holder       BIGINT,
    PRIMARY KEY (subscriber, delivery_key)
) WITHOUT ROWID;
";

/// An operator's skip: who and when, as PostgreSQL's migration 15 says.
const V18: &str = "
ALTER TABLE jadpo_deliveries ADD COLUMN skipped_by TEXT;
ALTER TABLE jadpo_deliveries ADD COLUMN skipped_at BIGINT;
";

/// Applies what [`upgrade::plan`] says, inside the caller's `BEGIN
/// IMMEDIATE` transaction: two processes migrating at once are serialised
/// by the write lock, and the second finds nothing to do.
pub(crate) fn migrate(tx: &Connection, force: bool) -> Result<(), Abort> {
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS jadpo_migrations (
            version     INTEGER PRIMARY KEY,
            applied_at  BIGINT  NOT NULL
        )",
    )?;
    // A column builds before it never read (they read MAX(version) only),
    // so adding it stops none of them. SQLite has no ADD COLUMN IF NOT
    // EXISTS.
    let has_reader: bool = tx.query_row(
        "SELECT count(*) > 0 FROM pragma_table_info('jadpo_migrations') WHERE name = 'oldest_reader'",
        [],
        |r| r.get(0),
    )?;
    if !has_reader {
        tx.execute_batch("ALTER TABLE jadpo_migrations ADD COLUMN oldest_reader INTEGER")?;
    }
    let plan = upgrade::plan(MIGRATIONS, &applied(tx)?, force).map_err(|r| Abort::Store(StoreError::Schema(r)))?;
    if let Plan::Apply(steps) = plan {
        for (version, oldest_reader) in steps {
            let sql = MIGRATIONS
                .iter()
                .find(|m| m.version == version)
                .map(|m| m.sql)
                .expect("a plan applies only migrations this build knows");
            tx.execute_batch(sql)?;
            tx.execute(
                "INSERT INTO jadpo_migrations (version, applied_at, oldest_reader) VALUES (?1, ?2, ?3)",
                params![version, wall_clock_ms(), oldest_reader],
            )?;
        }
    }
    Ok(())
}

/// The file's migrations table, as `crate::upgrade` reads it.
pub(crate) fn applied(c: &Connection) -> rusqlite::Result<Vec<Applied>> {
    let mut stmt = c.prepare("SELECT version, oldest_reader FROM jadpo_migrations")?;
    let rows = stmt.query_map([], |r| {
        Ok(Applied {
            version: r.get(0)?,
            oldest_reader: r.get(1)?,
        })
    })?;
    rows.collect()
}

/// `applied_at` is bookkeeping for a person reading the table, not a time
/// any rule reads, so it is the only column written from the system clock.
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Migration 8 keeps the alerts raised before it, each with a public
    /// id of its own, left unsent.
    #[test]
    fn migration_8_keeps_earlier_alerts_unsent() {
        let c = Connection::open_in_memory().unwrap();
        for m in &MIGRATIONS[..7] {
            c.execute_batch(m.sql).unwrap();
        }
        c.execute_batch(
            "CREATE TABLE jadpo_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL);
             INSERT INTO jadpo_migrations (version, applied_at)
                 VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), (7, 0);
             INSERT INTO jadpo_alerts (alert, connection, since, held, raised_at)
                 VALUES ('connection_unavailable', 'payments', 1000, 4, 2000),
                        ('connection_unavailable', 'mail', 3000, 1, 4000);",
        )
        .unwrap();
        // Migration 8 is a contract: what `jadpo migrate --force` applies.
        migrate(&c, true).unwrap();
        let kept = super::super::alerts::list(&c, 10).unwrap();
        assert_eq!(kept.len(), 2);
        let a = &kept[1];
        assert_eq!(
            (
                a.message.connection.as_deref(),
                a.message.held,
                a.message.since.as_millis(),
                a.message.raised_at.as_millis()
            ),
            (Some("payments"), Some(4), 1000, 2000)
        );
        assert_eq!(a.sends.state(), jadpo_core::alert::SendState::Unsent);
        for k in &kept {
            assert_eq!(k.public_id.len(), 36, "{}", k.public_id);
        }
        assert_ne!(kept[0].public_id, kept[1].public_id);
    }
}
