//! A connection's traffic limits, as pure data and decisions: a sustained
//! rate (a token bucket) and a concurrency (leased slots), and the pause or
//! slow-down a provider's 429 asks for.
//!
//! The store keeps one [`LimitState`] per limited connection and changes it
//! with one statement conditional on its `version`, as a breaker; every
//! process takes its tokens and slots from it, so the limits hold across
//! processes. A slot is leased like a delivery: a process killed mid-call
//! loses its slots when their leases end.
//!
//! Tokens are counted in thousandths, so a rate of 1/h and one of 10,000/s
//! both refill exactly in integer arithmetic.

use crate::ids::DeliveryId;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Thousandths of a token in one token.
const MILLI: i64 = 1_000;

/// How long a 429 without `Retry-After` halves the rate.
pub const SLOW_FOR: Duration = Duration::from_secs(60);

/// The longest a delivery waiting for a slot waits before looking again: a
/// slot is usually freed by a finish, long before the lease that bounds it
/// ends. Once the connection's slots have been held a while, waiters look
/// again after the typical hold divided among the slots, sooner than this.
pub const SLOT_RECHECK: Duration = Duration::from_millis(250);

/// The shortest wait for a slot.
const SLOT_RECHECK_MIN: Duration = Duration::from_millis(5);

/// A sustained rate: `n` calls every `per`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub n: u32,
    pub per: Duration,
}

/// Why a rate was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateError(pub String);

impl Rate {
    /// The most calls one second may hold: 10,000.
    pub const MAX_PER_SECOND: u64 = 10_000;

    /// `n` every `per`, at least 1 per hour and at most
    /// [`Rate::MAX_PER_SECOND`].
    pub fn new(n: u32, per: Duration) -> Result<Rate, RateError> {
        if n == 0 || per.is_zero() {
            return Err(RateError("a rate is at least 1 call per unit".into()));
        }
        let rate = Rate { n, per };
        if rate.milli_per_ms_scaled() > u128::from(Rate::MAX_PER_SECOND) * 1_000 {
            return Err(RateError(format!("at most {} calls a second", Rate::MAX_PER_SECOND)));
        }
        if per > Duration::from_secs(3600) * n.max(1) {
            return Err(RateError("at least 1 call an hour".into()));
        }
        Ok(rate)
    }

    fn per_ms(&self) -> u128 {
        self.per.as_millis().max(1)
    }

    /// Calls per second × 1,000 (thousandths), floored.
    fn milli_per_ms_scaled(&self) -> u128 {
        u128::from(self.n) * 1_000_000 / self.per_ms()
    }

    /// The bucket's size in tokens: a tenth of the per-second rate, at
    /// least one. So no one-second window holds more than the rate and a
    /// tenth (the burst, then the refill).
    pub fn burst(&self) -> u32 {
        let per_second = self.milli_per_ms_scaled() / 1_000;
        u32::try_from((per_second / 10).max(1)).unwrap_or(u32::MAX)
    }

    /// Thousandths of a token refilled over `elapsed`, at `halved` speed or
    /// full.
    fn refill(&self, elapsed: Duration, halved: bool) -> i64 {
        let milli = u128::from(self.n) * MILLI as u128 * elapsed.as_millis() / self.per_ms();
        let milli = if halved { milli / 2 } else { milli };
        i64::try_from(milli).unwrap_or(i64::MAX)
    }

    /// The time one token takes to refill: how far apart waiting calls are
    /// spread.
    pub fn spacing(&self, halved: bool) -> Duration {
        self.time_for(MILLI, halved)
    }

    /// How long until `missing` thousandths of a token have refilled.
    fn time_for(&self, missing: i64, halved: bool) -> Duration {
        let missing = missing.max(0) as u128 * if halved { 2 } else { 1 };
        let per_milli = self.per_ms() * missing;
        let denominator = u128::from(self.n) * MILLI as u128;
        // Rounded up: taking a token a millisecond early would overshoot.
        let ms = per_milli.div_ceil(denominator);
        Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    }
}

/// A connection's limits, from its `rate:` and `concurrency:`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub rate: Option<Rate>,
    /// The most calls in flight at once.
    pub concurrency: Option<u32>,
}

impl Limits {
    pub fn is_none(&self) -> bool {
        self.rate.is_none() && self.concurrency.is_none()
    }
}

/// One slot in use: the delivery holding it, until its lease ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    pub delivery: DeliveryId,
    pub until: Timestamp,
    /// When it was taken, to learn how long the connection's calls hold one.
    #[serde(default)]
    pub since: Option<Timestamp>,
}

/// What a delivery that wants to call the connection may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// A token taken and a slot held: send.
    Go,
    /// Not before this time (a token's refill, a pause's end, the earliest
    /// slot's lease end; a slot freed by a finish may come sooner), and
    /// what it waits for.
    WaitUntil(Timestamp, WaitFor),
}

/// What a delivery that may not start yet waits for on a connection; what
/// `jadpo deliveries` shows beside its due time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitFor {
    /// Its `rate:` bucket is empty until the next token.
    Token,
    /// Every slot of its `concurrency:` is in use.
    Slot,
    /// A 429's `Retry-After` paused it.
    Pause,
}

impl WaitFor {
    pub const ALL: [WaitFor; 3] = [WaitFor::Token, WaitFor::Slot, WaitFor::Pause];

    pub const fn as_str(self) -> &'static str {
        match self {
            WaitFor::Token => "token",
            WaitFor::Slot => "slot",
            WaitFor::Pause => "pause",
        }
    }

    pub fn parse(s: &str) -> Option<WaitFor> {
        WaitFor::ALL.into_iter().find(|w| w.as_str() == s)
    }
}

/// A connection's limit state (`jadpo_connection_limits`). The stores keep
/// it as one JSON column: its fields' names, and [`Slot`]'s, are that
/// column's format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitState {
    pub connection: String,
    /// Thousandths of a token in the bucket as of `refilled_at`.
    pub tokens_milli: i64,
    pub refilled_at: Timestamp,
    pub slots: Vec<Slot>,
    /// A 429's `Retry-After`: nothing is sent before this.
    pub paused_until: Option<Timestamp>,
    /// A 429 without `Retry-After`: the rate is halved until this.
    pub slowed_until: Option<Timestamp>,
    /// How long a slot is typically held, in ms (a moving average of the
    /// slots given back); 0 before the first.
    #[serde(default)]
    pub hold_ms: u64,
    /// The last turn given to a delivery waiting for a token of `rate:`:
    /// until then every token is promised, and a delivery that has not
    /// waited yet queues after it (docs/decisions.md, "Connection
    /// limits").
    #[serde(default)]
    pub queue_until: Option<Timestamp>,
    pub version: i64,
}

impl LimitState {
    /// A connection seen first at `now`: a full bucket, no slot in use.
    pub fn new(connection: impl Into<String>, limits: &Limits, now: Timestamp) -> LimitState {
        LimitState {
            connection: connection.into(),
            tokens_milli: limits.rate.map_or(0, |r| i64::from(r.burst()) * MILLI),
            refilled_at: now,
            slots: Vec::new(),
            paused_until: None,
            slowed_until: None,
            hold_ms: 0,
            queue_until: None,
            version: 0,
        }
    }

    /// How long after one another waiting deliveries should look for a
    /// slot: the typical hold shared among the slots, at most
    /// [`SLOT_RECHECK`].
    pub fn slot_spacing(&self, limits: &Limits) -> Duration {
        match limits.concurrency {
            None => Duration::ZERO,
            Some(_) if self.hold_ms == 0 => SLOT_RECHECK,
            Some(n) => Duration::from_millis(self.hold_ms / u64::from(n.max(1))).clamp(SLOT_RECHECK_MIN, SLOT_RECHECK),
        }
    }

    /// Tokens refilled up to `now`; a clock that went back adds nothing
    /// and moves nothing.
    fn refill(&mut self, rate: &Rate, now: Timestamp) {
        if now <= self.refilled_at {
            return;
        }
        let halved = self.slowed_until.is_some_and(|t| t > self.refilled_at);
        let full = i64::from(rate.burst()) * MILLI;
        let added = rate.refill(now.since(self.refilled_at), halved);
        self.tokens_milli = self.tokens_milli.saturating_add(added).min(full);
        self.refilled_at = now;
    }

    /// Slots whose lease ended at `now` come back.
    fn expire(&mut self, now: Timestamp) {
        self.slots.retain(|s| s.until > now);
    }

    /// Takes a token and a slot for `delivery`, its slot leased until
    /// `lease_until`, or says when to look again. Changes the state only
    /// when it says [`Take::Go`] (its `version` then moves on).
    pub fn take(&mut self, limits: &Limits, delivery: DeliveryId, now: Timestamp, lease_until: Timestamp) -> Take {
        let before = self.clone();
        if let Some(until) = self.paused_until.filter(|t| *t > now) {
            return Take::WaitUntil(until, WaitFor::Pause);
        }
        self.expire(now);
        if let Some(max) = limits.concurrency {
            let held = self.slots.iter().any(|s| s.delivery == delivery);
            if !held && self.slots.len() >= max as usize {
                let first_free = self.slots.iter().map(|s| s.until).min().unwrap_or(now);
                let recheck = self.slot_spacing(limits);
                *self = before;
                return Take::WaitUntil(first_free.min(now.plus(recheck)), WaitFor::Slot);
            }
        }
        if let Some(rate) = &limits.rate {
            self.refill(rate, now);
            if self.tokens_milli < MILLI {
                let halved = self.slowed_until.is_some_and(|t| t > now);
                let at = now.plus(rate.time_for(MILLI - self.tokens_milli, halved));
                *self = before;
                return Take::WaitUntil(at, WaitFor::Token);
            }
            self.tokens_milli -= MILLI;
        }
        if limits.concurrency.is_some() {
            self.slots.retain(|s| s.delivery != delivery);
            self.slots.push(Slot {
                delivery,
                until: lease_until,
                since: Some(now),
            });
        }
        self.version += 1;
        Take::Go
    }

    /// As [`LimitState::take`], for a delivery given a turn for a token at
    /// `turn` and claimed at `now`, a little later: the bucket is first
    /// brought to its turn, so the token the turn was given for is still
    /// there, not lost to the bucket's cap while the claim was on its way.
    /// Without this, at a rate whose bucket holds one token every claim a
    /// millisecond late misses its turn's token. The call is counted at
    /// its turn, which is never before its token.
    pub fn take_at_turn(
        &mut self,
        limits: &Limits,
        delivery: DeliveryId,
        turn: Timestamp,
        now: Timestamp,
        lease_until: Timestamp,
    ) -> Take {
        if let Some(rate) = &limits.rate {
            if self.refilled_at < turn && turn < now {
                let before = self.clone();
                self.refill(rate, turn);
                if self.take(limits, delivery, turn, lease_until) == Take::Go {
                    self.refill(rate, now);
                    return Take::Go;
                }
                *self = before;
            }
        }
        self.take(limits, delivery, now, lease_until)
    }

    /// `delivery`'s call ended at `now` (or it will not be made): its slot
    /// comes back, and how long it was held moves the typical hold. False
    /// when it held none.
    pub fn release(&mut self, delivery: DeliveryId, now: Timestamp) -> bool {
        let Some(at) = self.slots.iter().position(|s| s.delivery == delivery) else {
            return false;
        };
        let slot = self.slots.remove(at);
        if let Some(since) = slot.since {
            let held = u64::try_from(now.since(since).as_millis()).unwrap_or(u64::MAX);
            self.hold_ms = if self.hold_ms == 0 {
                held
            } else {
                (self.hold_ms.saturating_mul(7).saturating_add(held)) / 8
            };
        }
        self.version += 1;
        true
    }

    /// The provider answered 429 at `now`: with `Retry-After`, nothing is
    /// sent to it before then; without, its rate is halved for a minute.
    pub fn rate_limited(&mut self, retry_after: Option<Duration>, now: Timestamp) {
        match retry_after {
            Some(wait) => {
                let until = now.plus(wait);
                if self.paused_until.is_none_or(|t| t < until) {
                    self.paused_until = Some(until);
                    self.version += 1;
                }
            }
            None => {
                self.slowed_until = Some(now.plus(SLOW_FOR));
                self.version += 1;
            }
        }
    }

    /// Tokens in the bucket at `now`, whole, for the operator's view.
    pub fn tokens_at(&self, limits: &Limits, now: Timestamp) -> u32 {
        let mut s = self.clone();
        if let Some(rate) = &limits.rate {
            s.refill(rate, now);
        }
        u32::try_from(s.tokens_milli / MILLI).unwrap_or(0)
    }

    /// Whether its rate runs at half speed at `now` (a 429 without
    /// `Retry-After`).
    pub fn slowed(&self, now: Timestamp) -> bool {
        self.slowed_until.is_some_and(|t| t > now)
    }

    /// Slots in use at `now`.
    pub fn slots_in_use(&self, now: Timestamp) -> usize {
        self.slots.iter().filter(|s| s.until > now).count()
    }
}

#[cfg(test)]
#[path = "limit_tests.rs"]
mod tests;
