//! Slows down guessing the API token (docs/security.md, "Guessing the
//! token"): after [`FREE_FAILURES`] failed sign-ins or bearer checks from one
//! address, that address is refused with `429 auth.throttled` for a wait
//! that doubles with each further failure, up to [`MAX_WAIT`], without the
//! token being checked at all. A success clears the address's count, and an
//! address with no failure for [`FORGET_AFTER`] is forgotten.
//!
//! The map is per process and bounded ([`MAX_ADDRESSES`]): a flood of
//! addresses evicts the quietest, never grows memory. An IPv6 client is
//! counted by its /64, which one machine usually holds whole. Behind a
//! proxy every client shares the proxy's address; see docs/security.md.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures an address may make before it has to wait.
pub(crate) const FREE_FAILURES: u32 = 5;
/// The first wait; each failure after doubles it.
pub(crate) const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(60);
/// An address with no failure for this long starts again from nothing.
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);
/// Addresses remembered at once.
pub(crate) const MAX_ADDRESSES: usize = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Failures {
    count: u32,
    last: Instant,
}

/// How long an address that failed `count` times in a row must wait after
/// its last failure: none for the first [`FREE_FAILURES`], then `first`
/// doubling to [`MAX_WAIT`] (or `first`, if longer).
pub(crate) fn wait_after(count: u32, first: Duration) -> Duration {
    if count < FREE_FAILURES {
        return Duration::ZERO;
    }
    let doublings = (count - FREE_FAILURES).min(16);
    first.saturating_mul(1 << doublings).min(MAX_WAIT.max(first))
}

/// The address a client is counted under: its IPv4 address (an IPv4
/// address mapped into IPv6 included), or its IPv6 /64.
pub(crate) fn counted_as(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

/// The failures of each address, for one process.
#[derive(Debug)]
pub(crate) struct Throttle {
    by_address: Mutex<HashMap<IpAddr, Failures>>,
    first_wait: Duration,
}

impl Default for Throttle {
    fn default() -> Throttle {
        Throttle::new(FIRST_WAIT)
    }
}

impl Throttle {
    /// A throttle whose first wait is `first_wait` ([`FIRST_WAIT`] but in
    /// tests, which cannot wait on a real clock for a second to pass).
    pub(crate) fn new(first_wait: Duration) -> Throttle {
        Throttle {
            by_address: Mutex::new(HashMap::new()),
            first_wait,
        }
    }

    /// `Some(wait)` while `addr` must wait before its token is checked
    /// again.
    pub(crate) fn refused(&self, addr: IpAddr, now: Instant) -> Option<Duration> {
        let addr = counted_as(addr);
        let map = self.by_address.lock().unwrap_or_else(|p| p.into_inner());
        let f = map.get(&addr)?;
        let until = f.last + wait_after(f.count, self.first_wait);
        (until > now).then(|| until - now)
    }

    pub(crate) fn failed(&self, addr: IpAddr, now: Instant) {
        let addr = counted_as(addr);
        let mut map = self.by_address.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_ADDRESSES && !map.contains_key(&addr) {
            map.retain(|_, f| now.saturating_duration_since(f.last) < FORGET_AFTER);
            if map.len() >= MAX_ADDRESSES {
                // Still full of recent failures: drop the quietest.
                if let Some(quietest) = map.iter().min_by_key(|(_, f)| f.last).map(|(a, _)| *a) {
                    map.remove(&quietest);
                }
            }
        }
        let entry = map.entry(addr).or_insert(Failures { count: 0, last: now });
        if now.saturating_duration_since(entry.last) >= FORGET_AFTER {
            entry.count = 0;
        }
        entry.count = entry.count.saturating_add(1);
        entry.last = now;
    }

    pub(crate) fn succeeded(&self, addr: IpAddr) {
        self.by_address
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&counted_as(addr));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_after_the_free_failures_up_to_a_minute() {
        let table = [
            (0, 0),
            (4, 0),
            (5, 1),
            (6, 2),
            (7, 4),
            (10, 32),
            (11, 60),
            (40, 60),
            (u32::MAX, 60),
        ];
        for (count, secs) in table {
            assert_eq!(wait_after(count, FIRST_WAIT), Duration::from_secs(secs), "{count}");
        }
    }

    #[test]
    fn an_address_waits_after_its_failures_and_a_success_clears_it() {
        let t = Throttle::default();
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        let start = Instant::now();
        for i in 0..FREE_FAILURES {
            assert_eq!(t.refused(a, start), None, "failure {i} is free");
            t.failed(a, start);
        }
        assert_eq!(t.refused(a, start), Some(Duration::from_secs(1)));
        assert_eq!(t.refused(b, start), None, "another address is not slowed");
        let later = start + Duration::from_secs(1);
        assert_eq!(t.refused(a, later), None, "after its wait, one more try");
        t.failed(a, later);
        assert_eq!(t.refused(a, later), Some(Duration::from_secs(2)), "then twice as long");
        t.succeeded(a);
        assert_eq!(t.refused(a, later), None);
        for _ in 0..FREE_FAILURES {
            t.failed(a, later);
        }
        let quiet = later + FORGET_AFTER;
        t.failed(a, quiet);
        assert_eq!(
            t.refused(a, quiet),
            None,
            "a quarter of an hour quiet forgets the count"
        );
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(counted_as(a), counted_as(b));
        assert_ne!(counted_as(a), counted_as(other));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(counted_as(mapped), "192.0.2.7".parse::<IpAddr>().unwrap());
        let t = Throttle::default();
        let now = Instant::now();
        for _ in 0..FREE_FAILURES {
            t.failed(a, now);
        }
        assert!(t.refused(b, now).is_some(), "the same /64");
        assert!(t.refused(other, now).is_none());
    }

    #[test]
    fn the_map_stays_bounded() {
        let t = Throttle::default();
        let now = Instant::now();
        for i in 0..(MAX_ADDRESSES as u32 + 50) {
            t.failed(IpAddr::from(i.to_be_bytes()), now);
        }
        assert!(t.by_address.lock().unwrap().len() <= MAX_ADDRESSES);
    }
}
