//! An axum service on an sqlx PostgreSQL pool, with Jadpo embedded:
//!
//! - `POST /orders` inserts an order and emits its `OrderPlaced` in ONE
//!   transaction of the service's own pool (the transactional outbox): the
//!   event exists if and only if the order does, and the commit wakes the
//!   workers;
//! - the event is a type of the service's own, and so are the arguments of
//!   the Rust action `reserve_stock`, which runs for each order in the same
//!   process and marks the order's stock reserved through the same pool;
//!   both are checked against the app when Jadpo is built;
//! - `GET /orders/{id}` shows an order and whether its stock is reserved.
//!
//! Run it against the local PostgreSQL: `cargo run -p jadpo --example
//! axum_sqlx` places one order through the service and exits once its
//! stock is reserved; `-- --serve` keeps the service on 127.0.0.1:3000:
//!
//! ```text
//! curl -X POST localhost:3000/orders -H 'content-type: application/json' \
//!      -d '{"order_id": "o-1", "total_cents": 4200}'
//! curl localhost:3000/orders/o-1
//! ```
//!
//! `DATABASE_URL` names the database (default
//! `postgres://postgres@127.0.0.1:5432/test`); the service's table and
//! Jadpo's go in the schema `jadpo_example`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use jadpo::store::postgres::{Options, PgStore};
use jadpo::Jadpo;
use jadpo_core::{Failure, FailureKind};
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use std::future::IntoFuture;
use std::time::Duration;

const APP: &str = r#"
event OrderPlaced { order_id: string  total_cents: int }

// Supplied by Rust code below (no body), which calls no connection (no `uses`).
action reserve_stock(order_id: string, total_cents: int)

subscriber stock { on: OrderPlaced  run: reserve_stock(event.order_id, event.total_cents) }
"#;

/// The event, as a type of the service's own.
#[derive(serde::Serialize, serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
    total_cents: i64,
}

impl jadpo::Event for OrderPlaced {
    const NAME: &'static str = "OrderPlaced";
}

/// The arguments `reserve_stock` declares.
#[derive(serde::Deserialize)]
struct Reserve {
    order_id: String,
    total_cents: i64,
}

#[derive(Clone)]
struct Service {
    pool: PgPool,
    jadpo: Jadpo<PgStore>,
}

type Refusal = (StatusCode, String);

/// The order and its event, in one transaction of the service's pool.
async fn place_order(
    State(s): State<Service>,
    Json(order): Json<OrderPlaced>,
) -> Result<(StatusCode, Json<Value>), Refusal> {
    let mut tx = s.pool.begin().await.map_err(unavailable)?;
    let inserted = sqlx::query("INSERT INTO orders (id, total_cents) VALUES ($1, $2) ON CONFLICT DO NOTHING")
        .bind(&order.order_id)
        .bind(order.total_cents)
        .execute(&mut *tx)
        .await
        .map_err(unavailable)?;
    if inserted.rows_affected() == 0 {
        return Err((StatusCode::CONFLICT, format!("order {} exists", order.order_id)));
    }
    let emitted = s.jadpo.emit_event_in(&mut tx, &order).await.map_err(|e| {
        let status = match e.code() {
            "store.unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::UNPROCESSABLE_ENTITY,
        };
        (status, format!("{}: {e}", e.code()))
    })?;
    tx.commit().await.map_err(unavailable)?;
    let placed = json!({"order_id": order.order_id, "event": emitted.public_id});
    Ok((StatusCode::CREATED, Json(placed)))
}

async fn show_order(State(s): State<Service>, Path(id): Path<String>) -> Result<Json<Value>, Refusal> {
    let row: Option<(i64, bool)> = sqlx::query_as("SELECT total_cents, reserved FROM orders WHERE id = $1")
        .bind(&id)
        .fetch_optional(&s.pool)
        .await
        .map_err(unavailable)?;
    let (total_cents, reserved) = row.ok_or((StatusCode::NOT_FOUND, format!("no order {id}")))?;
    Ok(Json(
        json!({"order_id": id, "total_cents": total_cents, "reserved": reserved}),
    ))
}

fn unavailable(e: sqlx::Error) -> Refusal {
    (StatusCode::SERVICE_UNAVAILABLE, format!("database: {e}"))
}

/// The service's pool, its table, and Jadpo with `reserve_stock`, all in
/// `schema` of the database at `url`.
async fn service(url: &str, schema: &str) -> Result<Service, Box<dyn std::error::Error>> {
    let options: PgConnectOptions = url.parse()?;
    let pool = PgPoolOptions::new()
        .connect_with(options.options([("search_path", schema)]))
        .await?;
    // `schema` is this program's constant (or a test's), never a request's.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA IF NOT EXISTS {schema}")))
        .execute(&pool)
        .await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total_cents BIGINT NOT NULL, reserved BOOLEAN NOT NULL DEFAULT false)")
        .execute(&pool)
        .await?;
    let store = PgStore::connect(
        url,
        Options {
            schema: Some(schema.to_owned()),
            ..Default::default()
        },
    )
    .await?;
    let stock = pool.clone();
    let jadpo = jadpo::builder()
        .app_source("app.jadpo", APP)?
        .event::<OrderPlaced>()
        .typed_action("reserve_stock", move |args: Reserve, _connections| {
            let pool = stock.clone();
            async move {
                if args.total_cents <= 0 {
                    // A declared failure: the same input fails the same way.
                    return Err(Failure::new("order.empty", FailureKind::Rejected));
                }
                sqlx::query("UPDATE orders SET reserved = true WHERE id = $1")
                    .bind(&args.order_id)
                    .execute(&pool)
                    .await
                    // Retried later, with backoff, within the budget.
                    .map_err(|_| Failure::new("stock.database_unavailable", FailureKind::Unavailable))?;
                Ok(())
            }
        })
        .build(store)
        .await?;
    Ok(Service { pool, jadpo })
}

fn router(service: Service) -> Router {
    Router::new()
        .route("/orders", post(place_order))
        .route("/orders/{id}", get(show_order))
        .with_state(service)
}

/// Places one order through the service over HTTP and waits until its
/// stock is reserved.
async fn place_one(url: &str, schema: &str) -> Result<Value, Box<dyn std::error::Error>> {
    let service = service(url, schema).await?;
    let running = service.jadpo.start();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let server = tokio::spawn(axum::serve(listener, router(service.clone())).into_future());

    let order_id = format!("o-{}", std::process::id());
    let http = reqwest::Client::new();
    let placed = http
        .post(format!("{base}/orders"))
        .json(&json!({"order_id": order_id, "total_cents": 4200}))
        .send()
        .await?;
    if placed.status() != StatusCode::CREATED {
        return Err(format!("POST /orders: {} {}", placed.status(), placed.text().await?).into());
    }
    println!("placed:   {}", placed.json::<Value>().await?);
    let mut shown = Value::Null;
    for _ in 0..300 {
        shown = http
            .get(format!("{base}/orders/{order_id}"))
            .send()
            .await?
            .json()
            .await?;
        if shown["reserved"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("reserved: {shown}");
    server.abort();
    running.stop().await;
    Ok(shown)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    if std::env::args().any(|a| a == "--serve") {
        let service = service(&url, "jadpo_example").await?;
        let running = service.jadpo.start();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
        println!("listening on http://127.0.0.1:3000 (Ctrl-C stops)");
        axum::serve(listener, router(service))
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        running.stop().await;
        return Ok(());
    }
    let shown = place_one(&url, "jadpo_example").await?;
    if shown["reserved"] != true {
        return Err("the order's stock was not reserved within 30 s".into());
    }
    Ok(())
}

/// `cargo test` runs the example (`test = true` in Cargo.toml) in a fresh
/// schema of the test server, so it is kept working.
#[tokio::test]
async fn the_example_runs() {
    let Some(schema) = jadpo_store::postgres::testing::TestSchema::create().await else {
        return;
    };
    let shown = place_one(schema.url(), schema.name()).await.unwrap();
    assert_eq!(shown["reserved"], true, "{shown}");
}
