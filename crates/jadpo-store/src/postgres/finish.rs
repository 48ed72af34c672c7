//! Writes after a claim, each fenced on the lease token: the finish of
//! attempts (one or a batch), a hold just before the run, a give-back.

use super::rows::{self, breaker_columns, delivery_columns};
use super::writes::DeliveryWrites;
use super::Abort;
use crate::codec::at_ms;
use crate::plan::{self, Breakers};
use crate::types::*;
use deadpool_postgres::Transaction;
use jadpo_core::alert::AlertMessage;
use jadpo_core::{BreakerPolicy, Delivery, DeliveryId, LeaseToken, Timestamp};
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

/// Locks the rows to be written (a hold or give-back just before a run, an
/// operator's retry), in id order so two transactions locking overlapping
/// sets cannot deadlock. It never skips a locked row: a claim taking its
/// lease over holds it, and once that commits the lease check sees the new
/// token.
const LOCK_BY_ID: &str = concat!(
    "SELECT ",
    delivery_columns!(),
    " FROM jadpo_deliveries WHERE id = ANY($1) ORDER BY id FOR UPDATE"
);

const BREAKERS_BY_CONNECTION: &str = concat!(
    "SELECT ",
    breaker_columns!(),
    " FROM jadpo_circuit_breakers WHERE connection = ANY($1)"
);

const BREAKERS_BY_PROBE: &str = concat!(
    "SELECT ",
    breaker_columns!(),
    " FROM jadpo_circuit_breakers WHERE probe_delivery = $1"
);

/// The rows of a finish batch, read without a lock: each is written back
/// fenced on the lease it ran under (`DeliveryWrites::push_finished`). While a
/// row runs under a token, only that token's holder changes it, so a row
/// whose fence holds at the write is the row planned from; one whose lease
/// was taken over meanwhile fails the fence and the batch is redone. This
/// saves each row's lock (a WAL record and a write to its page) and keeps
/// the plan in `plan.rs` from the rows as read.
const READ_BY_ID: &str = concat!(
    "SELECT ",
    delivery_columns!(),
    " FROM jadpo_deliveries WHERE id = ANY($1)"
);

/// Rows by id, each with its stored lease token: locked (`LOCK_BY_ID`) or
/// only read (`READ_BY_ID`).
async fn rows_by_id(
    tx: &Transaction<'_>,
    sql: &str,
    ids: &[i64],
) -> Result<HashMap<DeliveryId, (Delivery, i64)>, Abort> {
    let stmt = tx.prepare_cached(sql).await?;
    let found = tx.query(&stmt, &[&ids]).await?;
    found
        .iter()
        .map(|r| rows::delivery(r).map(|(d, t)| (d.id, (d, t))))
        .collect()
}

/// Locked rows by id, each with its stored lease token.
pub(crate) async fn lock(tx: &Transaction<'_>, ids: &[i64]) -> Result<HashMap<DeliveryId, (Delivery, i64)>, Abort> {
    rows_by_id(tx, LOCK_BY_ID, ids).await
}

/// The run committed before its finish: the handled record alone, on the
/// row locked and still running under `token` (one kept already is kept).
pub(crate) async fn commit_handled(
    tx: &Transaction<'_>,
    id: DeliveryId,
    token: LeaseToken,
    now: Timestamp,
) -> Result<(), Abort> {
    let stored = lock(tx, &[id.0]).await?.remove(&id);
    plan::check_lease(stored.as_ref().map(|(d, _)| d), id, token)?;
    tx.execute(
        "UPDATE jadpo_deliveries SET handled_at = coalesce(handled_at, $2) WHERE id = $1",
        &[&id.0, &at_ms(now)],
    )
    .await?;
    Ok(())
}

/// Finishes a batch in order, as the in-memory store would one by one: each
/// fenced on its own lease, breakers updated finish after finish. With
/// `trust_claimed`, a finish that carries its claim's row is planned from
/// it and its row is not read (the first try; a redo reads every row).
pub(crate) async fn finish_batch(
    tx: &Transaction<'_>,
    batch: &[Finish],
    policy: &BreakerPolicy,
    trust_claimed: bool,
) -> Result<Vec<Result<FinishReport, StoreError>>, Abort> {
    let (read_rows, read_breakers) = read_batch(tx, batch, trust_claimed).await?;
    let mut planned = plan_batch(
        batch,
        &read_rows,
        Breakers::new(rows::breakers(&read_breakers)?),
        policy,
    );
    // The slots the ends free are handed on in the same round trip as the
    // ends are written: should a fenced write find its lease moved, the
    // whole transaction is abandoned, the hand-on with it.
    let freed = std::mem::take(&mut planned.freed);
    let hand_on = async {
        match batch.iter().map(|f| f.ended_at).max() {
            Some(now) => Ok::<_, Abort>(super::keys::free(tx, &freed, now).await?),
            None => Ok(0),
        }
    };
    tokio::try_join!(write_deliveries(tx, &read_rows, &mut planned), hand_on)?;
    let Planned {
        breakers,
        mut results,
        closed,
        resolved,
        emits,
        ..
    } = planned;
    // After the fenced writes went through: a finish whose lease moved
    // aborts the whole method before any of its emits is written.
    for (i, f) in emits {
        let emitted = emit_at_depth(tx, &f.emits, f.ended_at).await?;
        if let Ok(report) = &mut results[i] {
            report.emitted = emitted;
        }
    }
    // Slots come back only with a finish its lease let through: a late one
    // must not free the slot a later claim of the same delivery took.
    let (mut slots, mut answers) = (Vec::new(), Vec::new());
    for (f, _) in batch.iter().zip(&results).filter(|(_, r)| r.is_ok()) {
        let (r, a) = crate::limits::of_finish(f);
        slots.extend(r);
        answers.extend(a);
    }
    super::limits::settle(tx, &slots, &answers).await?;
    super::writes::write_breakers(tx, &breakers.writes()).await?;
    release_and_resolve(tx, &closed, &resolved, &mut results).await?;
    Ok(results)
}

/// Each row of a batch as read, with its stored lease token: borrowed from
/// its finish when it carries its claim's row, copied only when read.
type ReadRows<'a> = HashMap<DeliveryId, (Cow<'a, Delivery>, i64)>;

/// The batch's rows (those its finishes do not carry, with `trust_claimed`)
/// and the breakers of every connection it called or probed, read at once.
async fn read_batch<'a>(
    tx: &Transaction<'_>,
    batch: &'a [Finish],
    trust_claimed: bool,
) -> Result<(ReadRows<'a>, Vec<tokio_postgres::Row>), Abort> {
    let mut carried: ReadRows<'a> = HashMap::new();
    if trust_claimed {
        for f in batch {
            if let Some(d) = f.claimed_row() {
                carried.entry(f.id).or_insert((Cow::Borrowed(d), f.token.0));
            }
        }
    }
    let ids: Vec<i64> = batch
        .iter()
        .filter(|f| !carried.contains_key(&f.id))
        .map(|f| f.id.0)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let connections: Vec<&str> = batch
        .iter()
        .flat_map(|f| {
            f.calls
                .iter()
                .map(|(c, _)| c.as_str())
                .chain(f.probe_for.iter().map(String::as_str))
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let read_rows = async {
        if ids.is_empty() {
            Ok(HashMap::new())
        } else {
            rows_by_id(tx, READ_BY_ID, &ids).await
        }
    };
    let (found, read) = if connections.is_empty() {
        (read_rows.await?, Vec::new())
    } else {
        let stmt = tx.prepare_cached(BREAKERS_BY_CONNECTION).await?;
        tokio::try_join!(read_rows, async {
            Ok::<_, Abort>(tx.query(&stmt, &[&connections]).await?)
        })?
    };
    carried.extend(found.into_iter().map(|(id, (d, token))| (id, (Cow::Owned(d), token))));
    Ok((carried, read))
}

/// What a batch's finishes make of its rows and breakers, before a write.
struct Planned<'a> {
    /// Each row as planned so far: a batch may finish one delivery twice (a
    /// late duplicate is refused by the lease check).
    current: HashMap<DeliveryId, Delivery>,
    breakers: Breakers,
    results: Vec<Result<FinishReport, StoreError>>,
    attempts: Vec<AttemptRecord>,
    /// The moment each run committed: its handled record.
    handled: HashMap<DeliveryId, Timestamp>,
    changed: BTreeSet<DeliveryId>,
    /// Which finish closed each connection, and when: it reports the release.
    closed: Vec<(String, Timestamp, usize)>,
    /// Closed outages whose alert was raised: since when, and closed when.
    resolved: Vec<(String, Timestamp, Timestamp)>,
    /// The finishes whose runs committed with emits, by index.
    emits: Vec<(usize, &'a Finish)>,
    /// The ordered keys whose slot an end freed, by (subscriber, key), a
    /// key once per slot.
    freed: Vec<(String, String)>,
}

/// Plans each finish in order with the core's rules (`plan::finish`).
fn plan_batch<'a>(
    batch: &'a [Finish],
    read_rows: &ReadRows<'_>,
    breakers: Breakers,
    policy: &BreakerPolicy,
) -> Planned<'a> {
    let mut p = Planned {
        current: read_rows.iter().map(|(id, (d, _))| (*id, d.as_ref().clone())).collect(),
        breakers,
        results: Vec::with_capacity(batch.len()),
        attempts: Vec::new(),
        handled: HashMap::new(),
        changed: BTreeSet::new(),
        closed: Vec::new(),
        resolved: Vec::new(),
        emits: Vec::new(),
        freed: Vec::new(),
    };
    for (i, f) in batch.iter().enumerate() {
        let d = match plan::check_lease(p.current.get(&f.id), f.id, f.token) {
            Ok(d) => d,
            Err(e) => {
                p.results.push(Err(e));
                continue;
            }
        };
        let one = plan::finish(d, &mut p.breakers, f, policy);
        if one.handled {
            p.handled.entry(f.id).or_insert(f.ended_at);
            if !f.emits.events.is_empty() {
                p.emits.push((i, f));
            }
        }
        for c in one.release {
            if !p.closed.iter().any(|(seen, _, _)| *seen == c) {
                p.closed.push((c, f.ended_at, i));
            }
        }
        p.resolved
            .extend(one.resolved.into_iter().map(|(c, since)| (c, since, f.ended_at)));
        let freed_slot = one.delivery.gave_slot_up(d);
        if let Some(key) = d.key.as_ref().filter(|_| freed_slot) {
            p.freed.push((d.subscriber.clone(), key.as_str().to_owned()));
        }
        p.attempts.push(one.attempt);
        p.changed.insert(f.id);
        *p.current.get_mut(&f.id).expect("checked above") = one.delivery;
        p.results.push(Ok(FinishReport {
            transitions: one.transitions,
            released: 0,
            breakers: one.breakers.into_iter().map(|w| w.breaker).collect(),
            emitted: Vec::new(),
            freed_slot,
        }));
    }
    p
}

/// Writes every changed row, fenced on the lease it was read under, and
/// the attempts a row does not carry itself.
async fn write_deliveries(tx: &Transaction<'_>, read_rows: &ReadRows<'_>, p: &mut Planned<'_>) -> Result<(), Abort> {
    let mut writes = DeliveryWrites::default();
    // One attempt per delivery changed: a second finish of it was refused.
    let started: HashMap<DeliveryId, Timestamp> = p.attempts.iter().map(|a| (a.delivery, a.started_at)).collect();
    let mut on_row = BTreeSet::new();
    for id in &p.changed {
        let (before, token) = &read_rows[id];
        if writes.push_finished(before, &p.current[id], *token, p.handled.get(id).copied(), started[id]) {
            on_row.insert(*id);
        }
    }
    p.attempts.retain(|a| !on_row.contains(&a.delivery));
    tokio::try_join!(writes.write(tx), super::writes::insert_attempts(tx, &p.attempts))?;
    Ok(())
}

/// Releases what each closed breaker held, reports it on the finish that
/// closed it, and writes the resolved message of each outage that alerted.
async fn release_and_resolve(
    tx: &Transaction<'_>,
    closed: &[(String, Timestamp, usize)],
    resolved: &[(String, Timestamp, Timestamp)],
    results: &mut [Result<FinishReport, StoreError>],
) -> Result<(), Abort> {
    let release: Vec<(&str, Timestamp)> = closed.iter().map(|(c, t, _)| (c.as_str(), *t)).collect();
    let released = super::writes::release(tx, &release).await?;
    for (connection, n) in &released {
        if let Some((_, _, i)) = closed.iter().find(|(c, _, _)| c == connection) {
            if let Ok(report) = &mut results[*i] {
                report.released += n;
            }
        }
    }
    if !resolved.is_empty() {
        let messages: Vec<AlertMessage> = resolved
            .iter()
            .map(|(c, since, at)| {
                let n = released.iter().find(|(r, _)| r == c).map_or(0, |(_, n)| *n);
                AlertMessage::resolved(c, *since, *at, n as u64)
            })
            .collect();
        super::alerts::insert(tx, &messages).await?;
    }
    Ok(())
}

/// A run's emits, in its finish's transaction, marked with their depth.
async fn emit_at_depth(tx: &Transaction<'_>, emits: &Emits, now: Timestamp) -> Result<Vec<Emitted>, Abort> {
    let emitted = super::emit::emit(tx, &emits.events, now).await?;
    let ids: Vec<i64> = emitted.iter().filter(|e| !e.duplicate).map(|e| e.event_id.0).collect();
    let depth = i32::try_from(emits.depth).unwrap_or(i32::MAX);
    let stmt = tx
        .prepare_cached("UPDATE jadpo_events SET depth = $2 WHERE id = ANY($1)")
        .await?;
    tx.execute(&stmt, &[&ids, &depth]).await?;
    Ok(emitted)
}

/// A claimed delivery that will not run after all (held just before its
/// run, or given back at shutdown): fenced on its lease, changed by
/// `apply`, and any probe place it held given back.
pub(crate) async fn set_aside(
    tx: &Transaction<'_>,
    id: DeliveryId,
    token: LeaseToken,
    now: Timestamp,
    apply: impl FnOnce(&mut Delivery),
) -> Result<(), Abort> {
    let stmt = tx.prepare_cached(BREAKERS_BY_PROBE).await?;
    let ids = [id.0];
    let (mut locked, read) = tokio::try_join!(lock(tx, &ids), async {
        Ok::<_, Abort>(tx.query(&stmt, &[&id.0]).await?)
    })?;
    let stored = locked.remove(&id);
    let mut d = plan::check_lease(stored.as_ref().map(|(d, _)| d), id, token)?.clone();
    let stored_token = stored.map_or(0, |(_, t)| t);
    apply(&mut d);
    let mut breakers = Breakers::new(rows::breakers(&read)?);
    let breaker_writes = plan::unprobe(&mut breakers, id);
    let mut writes = DeliveryWrites::default();
    writes.push(&d, stored_token);
    writes.write(tx).await?;
    super::writes::write_breakers(tx, &breaker_writes).await?;
    // It will not call: its slots come back.
    super::limits::settle(tx, &[(id, None, now)], &[]).await?;
    Ok(())
}
