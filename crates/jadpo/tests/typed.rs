//! Typed events and actions end to end on a real SQLite file: a Rust
//! struct emitted as an event and received as an action's arguments, and
//! each disagreement with the app file refused at `build()`, field named.

mod common;
use common::{builder, store};

use jadpo::store::Store;
use jadpo::StartError;
use jadpo_core::{DeliveryState, Failure, FailureKind};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

#[derive(Serialize, Deserialize)]
struct OrderPlaced {
    order_id: String,
    total_cents: i64,
}

impl jadpo::Event for OrderPlaced {
    const NAME: &'static str = "OrderPlaced";
}

#[derive(Debug, PartialEq, Deserialize)]
struct ScoreArgs {
    order_id: String,
    total_cents: i64,
}

#[tokio::test]
async fn a_typed_event_reaches_a_typed_action_as_its_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let jadpo = builder()
        .event::<OrderPlaced>()
        .typed_action("score", move |args: ScoreArgs, _connections| {
            let record = record.clone();
            async move {
                let too_large = args.total_cents > 100;
                record.lock().unwrap().push(args);
                if too_large {
                    return Err(Failure::new("fraud.too_large", FailureKind::Rejected));
                }
                Ok(())
            }
        })
        .build(store(&dir).await)
        .await
        .unwrap();
    let small = jadpo
        .emit_event(&OrderPlaced {
            order_id: "o-1".into(),
            total_cents: 50,
        })
        .await
        .unwrap();
    let large = jadpo
        .emit_event(&OrderPlaced {
            order_id: "o-2".into(),
            total_cents: 5_000,
        })
        .await
        .unwrap();
    let running = jadpo.start();
    let ids = [small.deliveries[0], large.deliveries[0]];
    let store = jadpo.store().clone();
    let states = jadpo_testing::wait::eventually("both deliveries finish", async || {
        let mut states = Vec::new();
        for id in ids {
            states.push(store.delivery(id).await.unwrap().unwrap().state);
        }
        states.iter().all(|s| s.is_finished()).then_some(states)
    })
    .await;
    running.stop().await;
    assert_eq!(states, [DeliveryState::Succeeded, DeliveryState::Failed]);
    let mut seen = std::mem::take(&mut *seen.lock().unwrap());
    seen.sort_by_key(|a| a.total_cents);
    assert_eq!(
        seen,
        [
            ScoreArgs {
                order_id: "o-1".into(),
                total_cents: 50
            },
            ScoreArgs {
                order_id: "o-2".into(),
                total_cents: 5_000
            },
        ]
    );
}

#[derive(Serialize, Deserialize)]
struct Misspelt {
    order_id: String,
    total_cent: i64,
}

impl jadpo::Event for Misspelt {
    const NAME: &'static str = "OrderPlaced";
}

#[derive(Serialize, Deserialize)]
struct TotalAsText {
    order_id: String,
    total_cents: String,
}

impl jadpo::Event for TotalAsText {
    const NAME: &'static str = "OrderPlaced";
}

#[derive(Serialize, Deserialize)]
struct Undeclared {
    id: String,
}

impl jadpo::Event for Undeclared {
    const NAME: &'static str = "OrderShipped";
}

/// `build()`'s error for `builder`, with a fresh store in `dir`.
async fn refused(builder: jadpo::Builder, dir: &tempfile::TempDir) -> StartError {
    builder.build(store(dir).await).await.err().expect("build refuses it")
}

/// An action that does nothing.
fn ok_action(
    _: ScoreArgs,
    _: jadpo::runtime::interpreter::ConnectionHandle,
) -> std::future::Ready<Result<(), Failure>> {
    std::future::ready(Ok(()))
}

#[tokio::test]
async fn a_typed_event_that_disagrees_with_the_app_fails_build_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let with = |b: jadpo::Builder| b.typed_action("score", ok_action);
    for (e, field, says) in [
        (
            refused(with(builder()).event::<Misspelt>(), &dir).await,
            Some("total_cent"),
            "does not declare",
        ),
        (
            refused(with(builder()).event::<TotalAsText>(), &dir).await,
            Some("total_cents"),
            "`String` is not int",
        ),
        (
            refused(with(builder()).event::<Undeclared>(), &dir).await,
            None,
            "does not declare; declared: OrderPlaced",
        ),
    ] {
        assert_eq!(e.code(), "event.type_mismatch", "{e}");
        assert_eq!(e.field(), field, "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct WrongArgs {
    order_id: String,
    total_cents: bool,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ExtraArgs {
    order_id: String,
    currency: String,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct FewerArgs {
    order_id: String,
}

#[tokio::test]
async fn a_typed_actions_arguments_that_disagree_fail_build_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let e = refused(
        builder().typed_action("score", |_: WrongArgs, _| std::future::ready(Ok(()))),
        &dir,
    )
    .await;
    assert_eq!(
        (e.code(), e.field()),
        ("action.args_mismatch", Some("total_cents")),
        "{e}"
    );
    assert!(e.to_string().contains("`bool` is not int"), "{e}");
    let e = refused(
        builder().typed_action("score", |_: ExtraArgs, _| std::future::ready(Ok(()))),
        &dir,
    )
    .await;
    assert_eq!((e.code(), e.field()), ("action.args_mismatch", Some("currency")), "{e}");
    // An action may read fewer arguments than it is given.
    let other = tempfile::tempdir().unwrap();
    builder()
        .typed_action("score", |_: FewerArgs, _| std::future::ready(Ok(())))
        .build(store(&other).await)
        .await
        .unwrap();
}
