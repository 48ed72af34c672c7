//! Spans out of `jadpo serve` and `jadpo dev`: OTLP over HTTP/protobuf to
//! the collector the standard `OTEL_*` variables name, and nothing when
//! none is set (docs/observability.md).
//!
//! The SDK's own batch processor drops spans when its queue is full but
//! only says so in a log at shutdown; ours drops the same way and counts
//! every span dropped, for `/metrics`. A span is handed over with a
//! `try_send`: a slow or dead collector costs a worker nothing, ever.

use crate::output::CliError;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter as _, SpanProcessor};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Spans the collector accepted, and spans dropped (queue full, or an
/// export that failed or timed out): `/metrics` reports both.
pub(crate) static EXPORTED: AtomicU64 = AtomicU64::new(0);
pub(crate) static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Spans exported and dropped so far.
pub(crate) fn counts() -> (u64, u64) {
    (EXPORTED.load(Ordering::Relaxed), DROPPED.load(Ordering::Relaxed))
}

/// The longest a stop waits for the spans still queued to go out.
const FLUSH_AT_STOP: Duration = Duration::from_secs(5);

/// The batch settings, from the standard `OTEL_BSP_*` variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Batching {
    queue: usize,
    batch: usize,
    delay: Duration,
    timeout: Duration,
}

impl Batching {
    fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Batching, CliError> {
        let number = |name: &'static str, default: u64| -> Result<u64, CliError> {
            match env(name).filter(|v| !v.is_empty()) {
                None => Ok(default),
                Some(v) => v.trim().parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    CliError::environment(
                        "otel.setting_invalid",
                        format!("{name}={v:?}: a positive whole number is expected"),
                    )
                }),
            }
        };
        let queue = number("OTEL_BSP_MAX_QUEUE_SIZE", 2048)? as usize;
        Ok(Batching {
            queue,
            batch: (number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)? as usize).min(queue),
            delay: Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY", 5000)?),
            timeout: Duration::from_millis(number("OTEL_BSP_EXPORT_TIMEOUT", 30_000)?),
        })
    }
}

/// Whether spans are to be exported: a collector named, and the SDK not
/// turned off.
fn wanted(env: &dyn Fn(&str) -> Option<String>) -> Result<bool, CliError> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    match set("OTEL_TRACES_EXPORTER").as_deref().map(str::trim) {
        None | Some("otlp") => {}
        Some("none") => return Ok(false),
        Some(other) => {
            return Err(CliError::environment(
                "otel.exporter_unsupported",
                format!("OTEL_TRACES_EXPORTER={other:?}: jadpo exports spans with `otlp` only (or `none`)"),
            ))
        }
    }
    if set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none() && set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none() {
        return Ok(false);
    }
    let protocol = set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"));
    match protocol.as_deref().map(str::trim) {
        None | Some("http/protobuf") => Ok(true),
        Some(other) => Err(CliError::environment(
            "otel.protocol_unsupported",
            format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={other:?}: jadpo exports OTLP over http/protobuf only; \
                 unset it, or set http/protobuf, and point the endpoint at the collector's HTTP port (4318)"
            ),
        )),
    }
}

/// The export under way: its tracer provider and its sending task.
pub(crate) struct Export {
    provider: SdkTracerProvider,
    flush: mpsc::Sender<oneshot::Sender<()>>,
}

impl Export {
    /// Starts exporting if the environment asks for it; on the current
    /// tokio runtime. A setting that can't be used is refused before
    /// anything starts.
    pub(crate) fn from_env() -> Result<Option<Export>, CliError> {
        let env = |k: &str| std::env::var(k).ok();
        if !wanted(&env)? {
            return Ok(None);
        }
        let batching = Batching::from_env(&env)?;
        let timeout = env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
            .or_else(|| env("OTEL_EXPORTER_OTLP_TIMEOUT"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(10), Duration::from_millis);
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(timeout)
            .build()
            .map_err(|e| CliError::environment("otel.exporter_invalid", format!("the OTLP client: {e}")))?;
        // Endpoint, headers and compression: the exporter reads the
        // standard variables itself.
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(Client(client))
            .with_timeout(timeout)
            .build()
            .map_err(|e| CliError::environment("otel.exporter_invalid", format!("the OTLP exporter: {e}")))?;
        let resource = resource(&env);
        exporter.set_resource(&resource);
        let (tx, rx) = mpsc::channel(batching.queue);
        let (flush, flushes) = mpsc::channel(1);
        tokio::spawn(send_loop(exporter, rx, flushes, batching));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Queue(tx))
            .with_resource(resource)
            .build();
        Ok(Some(Export { provider, flush }))
    }

    /// The spans an engine records into this export.
    pub(crate) fn spans(&self) -> jadpo::Spans {
        let tracer = self.provider.tracer("jadpo");
        jadpo::Spans::to(opentelemetry::global::BoxedTracer::new(Box::new(tracer)))
    }

    /// Sends what is queued, waiting at most [`FLUSH_AT_STOP`].
    pub(crate) async fn stop(self) {
        let (done, sent) = oneshot::channel();
        if self.flush.send(done).await.is_ok() {
            let _ = tokio::time::timeout(FLUSH_AT_STOP, sent).await;
        }
    }
}

/// `service.name` is `jadpo` unless the environment names it.
fn resource(env: &dyn Fn(&str) -> Option<String>) -> Resource {
    let named = env("OTEL_SERVICE_NAME").is_some_and(|v| !v.is_empty())
        || env("OTEL_RESOURCE_ATTRIBUTES")
            .is_some_and(|v| v.split(',').any(|kv| kv.trim().starts_with("service.name=")));
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name("jadpo").build()
    }
}

/// The processor: every ended, sampled span into a bounded queue, or
/// counted as dropped.
#[derive(Debug)]
struct Queue(mpsc::Sender<SpanData>);

impl SpanProcessor for Queue {
    fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.0.try_send(span).is_err() {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
        Ok(())
    }
}

async fn send_loop(
    exporter: opentelemetry_otlp::SpanExporter,
    mut spans: mpsc::Receiver<SpanData>,
    mut flushes: mpsc::Receiver<oneshot::Sender<()>>,
    b: Batching,
) {
    let mut batch = Vec::with_capacity(b.batch);
    let mut every = tokio::time::interval(b.delay);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures = Failures::default();
    loop {
        tokio::select! {
            span = spans.recv() => match span {
                Some(span) => {
                    batch.push(span);
                    if batch.len() >= b.batch {
                        send(&exporter, &mut batch, b.timeout, &mut failures).await;
                    }
                }
                None => {
                    send(&exporter, &mut batch, b.timeout, &mut failures).await;
                    return;
                }
            },
            _ = every.tick() => send(&exporter, &mut batch, b.timeout, &mut failures).await,
            Some(done) = flushes.recv() => {
                while let Ok(span) = spans.try_recv() {
                    batch.push(span);
                    if batch.len() >= b.batch {
                        send(&exporter, &mut batch, b.timeout, &mut failures).await;
                    }
                }
                send(&exporter, &mut batch, b.timeout, &mut failures).await;
                let _ = done.send(());
            }
        }
    }
}

/// A failed export is logged at most once a minute, with how many spans
/// were dropped since the last line.
#[derive(Default)]
struct Failures {
    last: Option<std::time::Instant>,
    dropped: u64,
}

async fn send(
    exporter: &opentelemetry_otlp::SpanExporter,
    batch: &mut Vec<SpanData>,
    timeout: Duration,
    failures: &mut Failures,
) {
    if batch.is_empty() {
        return;
    }
    let spans = std::mem::replace(batch, Vec::with_capacity(batch.capacity()));
    let n = spans.len() as u64;
    let error = match tokio::time::timeout(timeout, exporter.export(spans)).await {
        Ok(Ok(())) => {
            EXPORTED.fetch_add(n, Ordering::Relaxed);
            return;
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {timeout:?}"),
    };
    DROPPED.fetch_add(n, Ordering::Relaxed);
    failures.dropped += n;
    if failures.last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
        tracing::warn!(error = %error, dropped = failures.dropped, "trace.export_failed");
        failures.last = Some(std::time::Instant::now());
        failures.dropped = 0;
    }
}

/// The exporter's HTTP client: the `reqwest` the engine uses already.
#[derive(Debug)]
struct Client(reqwest::Client);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Client {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<opentelemetry_http::Response<opentelemetry_http::Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let answer = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .send()
            .await?;
        let mut response = opentelemetry_http::Response::builder().status(answer.status());
        if let Some(headers) = response.headers_mut() {
            *headers = answer.headers().clone();
        }
        Ok(response.body(answer.bytes().await?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<const N: usize>(pairs: [(&'static str, &'static str); N]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn spans_go_out_only_when_a_collector_is_named_and_the_sdk_is_on() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert!(!wanted(&env([])).unwrap());
        assert!(wanted(&env([endpoint])).unwrap());
        assert!(wanted(&env([(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://c:4318/v1/traces"
        )]))
        .unwrap());
        assert!(!wanted(&env([("OTEL_EXPORTER_OTLP_ENDPOINT", "")])).unwrap());
        assert!(!wanted(&env([endpoint, ("OTEL_SDK_DISABLED", "true")])).unwrap());
        assert!(!wanted(&env([endpoint, ("OTEL_TRACES_EXPORTER", "none")])).unwrap());
    }

    #[test]
    fn a_protocol_or_exporter_jadpo_lacks_is_refused_by_name() {
        let grpc = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ];
        assert_eq!(wanted(&env(grpc)).unwrap_err().code, "otel.protocol_unsupported");
        let json = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
        ];
        assert_eq!(wanted(&env(json)).unwrap_err().code, "otel.protocol_unsupported");
        let zipkin = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_EXPORTER", "zipkin"),
        ];
        assert_eq!(wanted(&env(zipkin)).unwrap_err().code, "otel.exporter_unsupported");
    }

    /// A span ended while the queue is full is dropped and counted at
    /// once: with nothing taking spans out, a thousand ends return.
    #[test]
    fn a_full_queue_drops_and_counts_and_never_waits() {
        use opentelemetry::trace::{Tracer as _, TracerProvider as _};
        let (tx, _stalled) = mpsc::channel(1);
        let provider = SdkTracerProvider::builder().with_span_processor(Queue(tx)).build();
        let tracer = provider.tracer("test");
        let before = DROPPED.load(Ordering::Relaxed);
        for _ in 0..1000 {
            drop(tracer.start("process Paid"));
        }
        assert_eq!(
            DROPPED.load(Ordering::Relaxed) - before,
            999,
            "all but the one the queue holds"
        );
    }

    #[test]
    fn the_batch_settings_are_the_standard_variables_with_their_defaults() {
        assert_eq!(
            Batching::from_env(&env([])).unwrap(),
            Batching {
                queue: 2048,
                batch: 512,
                delay: Duration::from_secs(5),
                timeout: Duration::from_secs(30)
            }
        );
        let set = [("OTEL_BSP_MAX_QUEUE_SIZE", "100"), ("OTEL_BSP_SCHEDULE_DELAY", "200")];
        let b = Batching::from_env(&env(set)).unwrap();
        assert_eq!((b.queue, b.batch, b.delay), (100, 100, Duration::from_millis(200)));
        let bad = [("OTEL_BSP_MAX_QUEUE_SIZE", "lots")];
        assert_eq!(Batching::from_env(&env(bad)).unwrap_err().code, "otel.setting_invalid");
    }
}
