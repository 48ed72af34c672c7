//! The tick's sweep: probes woken, closed breakers' deliveries released,
//! each outage's alert raised once.

use super::rows::{self, breaker_columns};
use super::Abort;
use crate::plan::{self, Breakers, HeldSummary};
use crate::types::*;
use deadpool_postgres::Transaction;
use jadpo_core::alert::AlertMessage;
use jadpo_core::{DeliveryId, Timestamp};
use std::collections::BTreeMap;
use std::time::Duration;

const ALL_BREAKERS: &str = concat!("SELECT ", breaker_columns!(), " FROM jadpo_circuit_breakers");

/// For each connection holding deliveries: how many, and the one held
/// longest (the next probe), both from `jadpo_deliveries_held`.
const HELD_SUMMARY: &str = "
SELECT c.held_connection, c.n, l.id
FROM (SELECT held_connection, count(*) AS n FROM jadpo_deliveries
      WHERE state = 'held' GROUP BY held_connection) AS c
CROSS JOIN LATERAL (
    SELECT id FROM jadpo_deliveries
    WHERE state = 'held' AND held_connection = c.held_connection
    ORDER BY held_since, id LIMIT 1) AS l";

pub(crate) async fn sweep(tx: &Transaction<'_>, now: Timestamp, wake_lease: Duration) -> Result<SweepReport, Abort> {
    let (all, summary) = tokio::try_join!(tx.prepare_cached(ALL_BREAKERS), tx.prepare_cached(HELD_SUMMARY))?;
    let (read, summary) = tokio::try_join!(tx.query(&all, &[]), tx.query(&summary, &[]))?;
    let mut held = BTreeMap::new();
    for r in &summary {
        let count: i64 = r.try_get(1)?;
        held.insert(
            r.try_get::<_, String>(0)?,
            HeldSummary {
                count: count as u64,
                longest: Some(DeliveryId(r.try_get(2)?)),
            },
        );
    }
    let mut breakers = Breakers::new(rows::breakers(&read)?);
    let plan = plan::sweep(&mut breakers, &held, now, wake_lease);
    // Breakers first: a conflict aborts before any delivery is touched, and
    // every transaction takes breaker rows before held rows.
    super::writes::write_breakers(tx, &plan.breakers).await?;
    if !plan.wake.is_empty() {
        // A probe is released as any held delivery is (`Delivery::release`):
        // due now, its hold added to the time held.
        let ids: Vec<i64> = plan.wake.iter().map(|id| id.0).collect();
        let mut locked = super::finish::lock(tx, &ids).await?;
        let mut woken = Vec::with_capacity(ids.len());
        for id in &plan.wake {
            match locked.remove(id) {
                Some((mut d, token)) if d.state == jadpo_core::DeliveryState::Held => {
                    d.release(now);
                    woken.push((d, token));
                }
                // The longest held was released or woken by another
                // process since the summary was read.
                _ => return Err(Abort::Conflict),
            }
        }
        super::writes::write_released(tx, &woken).await?;
    }
    let release: Vec<(&str, Timestamp)> = plan.release.iter().map(|c| (c.as_str(), now)).collect();
    let released = super::writes::release(tx, &release).await?.iter().map(|(_, n)| n).sum();
    let messages: Vec<AlertMessage> = plan.alerts.iter().map(|a| AlertMessage::raised(a, now)).collect();
    super::alerts::insert(tx, &messages).await?;
    Ok(SweepReport {
        woken: plan.wake,
        released,
        alerts: plan.alerts,
    })
}
