//! A local OTLP/HTTP receiver for measuring what tracing costs
//! (docs/performance.md): `cargo run --release --example otlp_sink
//! [ADDR]` (default 127.0.0.1:4318) takes every `POST /v1/traces` and
//! answers an empty success at once, decoding nothing, so the measure is
//! of the engine's spans and their export, not of a collector's work.

use std::sync::atomic::{AtomicU64, Ordering};

static REQUESTS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:4318".into());
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("the address is free");
    eprintln!("otlp_sink: listening on http://{addr}");
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(|body: axum::body::Bytes| async move {
            REQUESTS.fetch_add(1, Ordering::Relaxed);
            BYTES.fetch_add(body.len() as u64, Ordering::Relaxed);
            // An empty ExportTraceServiceResponse: full success.
            ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
        }),
    );
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
        eprintln!(
            "otlp_sink: {} requests, {} bytes",
            REQUESTS.load(Ordering::Relaxed),
            BYTES.load(Ordering::Relaxed)
        );
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
        .expect("serves");
}
