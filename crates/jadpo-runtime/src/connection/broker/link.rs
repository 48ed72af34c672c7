//! One long-lived client per broker connection per process.
//!
//! The first publish connects; every later one shares the client (each
//! driver's client multiplexes publishes over one connection). A publish
//! that finds the connection broken marks it, and the next publish
//! connects again. Connecting is one attempt at a time: publishes that
//! waited on an attempt that failed fail with it, as never sent, rather
//! than each trying again. While the broker stays down the breaker spaces
//! the attempts: after it opens, only its probes publish.

use jadpo_core::publish::PublishEnd;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::Mutex;

pub(crate) struct Link<C> {
    /// The client and the number of the connect that made it: read by
    /// every publish, so a read lock, held for a clone only.
    current: std::sync::RwLock<Option<(u64, C)>>,
    /// Held while connecting, so one connect runs at a time.
    slot: Mutex<()>,
    /// Connects made so far: the number of the next client.
    made: AtomicU64,
    /// Connects that failed so far.
    failed: AtomicU64,
}

impl<C: Clone> Link<C> {
    pub(crate) fn new() -> Link<C> {
        Link {
            current: std::sync::RwLock::new(None),
            slot: Mutex::new(()),
            made: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// The client, and its number for [`Link::broken`]; connecting with
    /// `connect` when there is none. A connect that fails ends the
    /// publish as its driver says (`NeverLeft` mostly, `Unauthorized` for
    /// refused credentials).
    pub(crate) async fn client<F, Fut>(&self, connect: F) -> Result<(u64, C), PublishEnd>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<C, PublishEnd>>,
    {
        if let Some(found) = self.read() {
            return Ok(found);
        }
        let failed_before = self.failed.load(Ordering::Acquire);
        let _connecting = self.slot.lock().await;
        if let Some(found) = self.read() {
            return Ok(found);
        }
        if self.failed.load(Ordering::Acquire) != failed_before {
            // An attempt failed while this publish waited for it: this
            // publish fails with it.
            return Err(PublishEnd::NeverLeft);
        }
        match connect().await {
            Ok(client) => {
                let n = self.made.fetch_add(1, Ordering::AcqRel) + 1;
                *self.write() = Some((n, client.clone()));
                Ok((n, client))
            }
            Err(end) => {
                self.failed.fetch_add(1, Ordering::AcqRel);
                Err(end)
            }
        }
    }

    /// The client numbered `n` is broken: the next publish connects again.
    /// A later client, made since, is kept.
    pub(crate) async fn broken(&self, n: u64) {
        let mut current = self.write();
        if current.as_ref().is_some_and(|(made, _)| *made == n) {
            *current = None;
        }
    }

    fn read(&self) -> Option<(u64, C)> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Option<(u64, C)>> {
        self.current.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;

    #[tokio::test]
    async fn one_client_is_shared_until_it_breaks() {
        let link: Link<u32> = Link::new();
        let made = AtomicU32::new(0);
        let connect = || async { Ok(made.fetch_add(1, Ordering::SeqCst) + 100) };
        let (n1, c1) = link.client(connect).await.unwrap();
        let (n2, c2) = link.client(connect).await.unwrap();
        assert_eq!((n1, c1), (n2, c2), "shared");
        link.broken(n1).await;
        let (n3, c3) = link.client(connect).await.unwrap();
        assert_ne!(n3, n1);
        assert_eq!(c3, 101, "connected again");
        link.broken(n1).await;
        assert_eq!(
            link.client(connect).await.unwrap(),
            (n3, c3),
            "an old number breaks nothing"
        );
        assert_eq!(made.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn publishes_waiting_on_a_failed_connect_fail_with_it() {
        let link: Arc<Link<u32>> = Arc::new(Link::new());
        let tries = Arc::new(AtomicU32::new(0));
        let (release, wait) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let (link, tries) = (link.clone(), tries.clone());
            tokio::spawn(async move {
                link.client(|| async move {
                    tries.fetch_add(1, Ordering::SeqCst);
                    let _ = wait.await;
                    Err(PublishEnd::NeverLeft)
                })
                .await
            })
        };
        while tries.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let second = {
            let (link, tries) = (link.clone(), tries.clone());
            tokio::spawn(async move {
                link.client(|| async move {
                    tries.fetch_add(1, Ordering::SeqCst);
                    Ok(7)
                })
                .await
            })
        };
        tokio::task::yield_now().await;
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap(), Err(PublishEnd::NeverLeft));
        assert_eq!(
            second.await.unwrap(),
            Err(PublishEnd::NeverLeft),
            "failed with the attempt it waited on"
        );
        assert_eq!(tries.load(Ordering::SeqCst), 1, "one attempt");
        let third = link.client(|| async { Ok(9) }).await.unwrap();
        assert_eq!(third.1, 9, "the next publish tries again");
    }
}
