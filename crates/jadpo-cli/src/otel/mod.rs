//! Spans out of `jadpo serve` and `jadpo dev`: OTLP over HTTP/protobuf to
//! the collector the standard `OTEL_*` variables name, and nothing when
//! none is set (docs/observability.md).
//!
//! The SDK's own batch processor drops spans when its queue is full but
//! only says so in a log at shutdown; ours drops the same way and counts
//! every span dropped, for `/metrics`. A span is handed over with a
//! `try_send`: a slow or dead collector costs a worker nothing, ever.
//! The request is written by `encode.rs`, and sent here with the
//! `reqwest` the engine already uses.

mod encode;

use crate::output::CliError;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanProcessor};
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
        let resource = resource(&env);
        let exporter = Exporter {
            client,
            endpoint: endpoint(&env)?,
            headers: headers(&env)?,
            resource: resource.clone(),
        };
        compression(&env)?;
        let queue = Queue::new(batching);
        let (flush, flushes) = mpsc::channel(1);
        tokio::spawn(send_loop(exporter, queue.clone(), flushes, batching));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(queue)
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

/// Where spans go: the traces endpoint as given, or `/v1/traces` under
/// the base endpoint.
fn endpoint(env: &dyn Fn(&str) -> Option<String>) -> Result<reqwest::Url, CliError> {
    let set = |name: &str| env(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let (name, url) = match set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        Some(url) => ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url),
        None => {
            let base = set("OTEL_EXPORTER_OTLP_ENDPOINT").unwrap_or_default();
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("{}/v1/traces", base.trim_end_matches('/')),
            )
        }
    };
    reqwest::Url::parse(&url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| {
            CliError::environment(
                "otel.exporter_invalid",
                format!("{name}: {url:?} is not an http:// or https:// URL of the collector"),
            )
        })
}

/// The headers of every export: `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, or
/// else `OTEL_EXPORTER_OTLP_HEADERS`: `key=value` pairs separated by
/// commas, values percent-decoded. Their values are never shown: they
/// are most often a hosted collector's key.
fn headers(env: &dyn Fn(&str) -> Option<String>) -> Result<reqwest::header::HeaderMap, CliError> {
    let (name, list) = match env("OTEL_EXPORTER_OTLP_TRACES_HEADERS").filter(|v| !v.trim().is_empty()) {
        Some(v) => ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", v),
        None => (
            "OTEL_EXPORTER_OTLP_HEADERS",
            env("OTEL_EXPORTER_OTLP_HEADERS").unwrap_or_default(),
        ),
    };
    let mut map = reqwest::header::HeaderMap::new();
    for pair in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let invalid = |what: &str| {
            CliError::environment(
                "otel.setting_invalid",
                format!("{name}: {what}; the form is key=value,key2=value2 (values percent-encoded)"),
            )
        };
        let (key, value) = pair.split_once('=').ok_or_else(|| invalid("a pair without `=`"))?;
        let key = reqwest::header::HeaderName::from_bytes(key.trim().as_bytes())
            .map_err(|_| invalid(&format!("{:?} is not a header name", key.trim())))?;
        let value = percent_decode(value.trim())
            .and_then(|v| reqwest::header::HeaderValue::from_str(&v).ok())
            .ok_or_else(|| invalid(&format!("the value of {key} is not a header value")))?;
        map.insert(key, value);
    }
    Ok(map)
}

fn percent_decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

/// Spans go out uncompressed: a compression asked for is refused at
/// start rather than ignored.
fn compression(env: &dyn Fn(&str) -> Option<String>) -> Result<(), CliError> {
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
    ] {
        match env(name).as_deref().map(str::trim) {
            None | Some("" | "none") => {}
            Some(other) => {
                return Err(CliError::environment(
                    "otel.exporter_invalid",
                    format!("{name}={other:?}: jadpo sends spans uncompressed; unset it or set `none`"),
                ))
            }
        }
    }
    Ok(())
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
///
/// A span goes in under a short lock, and the sending task is woken only
/// when a batch is full (or by its timer): a channel would wake it for
/// every span, a switch between threads per span, which cost the engine
/// more than the spans themselves (docs/decisions.md, "What tracing
/// costs").
#[derive(Clone, Debug)]
struct Queue(std::sync::Arc<Shared>);

#[derive(Debug)]
struct Shared {
    spans: std::sync::Mutex<Vec<SpanData>>,
    capacity: usize,
    batch: usize,
    full: tokio::sync::Notify,
}

impl Queue {
    fn new(b: Batching) -> Queue {
        Queue(std::sync::Arc::new(Shared {
            spans: std::sync::Mutex::new(Vec::with_capacity(b.queue)),
            capacity: b.queue,
            batch: b.batch,
            full: tokio::sync::Notify::new(),
        }))
    }

    /// Everything queued, leaving the queue empty.
    fn take(&self) -> Vec<SpanData> {
        let mut spans = self.0.spans.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::replace(&mut *spans, Vec::with_capacity(self.0.capacity))
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        let queued = {
            let mut spans = self.0.spans.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if spans.len() >= self.0.capacity {
                None
            } else {
                spans.push(span);
                Some(spans.len())
            }
        };
        match queued {
            None => {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
            Some(n) if n == self.0.batch => self.0.full.notify_one(),
            Some(_) => {}
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Sends a batch as one OTLP request.
struct Exporter {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    headers: reqwest::header::HeaderMap,
    resource: Resource,
}

impl Exporter {
    async fn export(&self, spans: &[SpanData]) -> Result<(), String> {
        let body = encode::request(&self.resource, spans);
        let answer = self
            .client
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("the collector did not answer: {}", e.without_url()))?;
        if answer.status().is_success() {
            Ok(())
        } else {
            Err(format!("the collector answered {}", answer.status()))
        }
    }
}

/// Sends what is queued when a batch is full, at each tick of the
/// schedule delay, and when asked to flush; ends, after a last send, when
/// the export is dropped.
async fn send_loop(exporter: Exporter, queue: Queue, mut flushes: mpsc::Receiver<oneshot::Sender<()>>, b: Batching) {
    let mut every = tokio::time::interval(b.delay);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures = Failures::default();
    loop {
        let done = tokio::select! {
            () = queue.0.full.notified() => None,
            _ = every.tick() => None,
            flush = flushes.recv() => Some(flush),
        };
        for batch in queue.take().chunks(b.batch) {
            send(&exporter, batch, b.timeout, &mut failures).await;
        }
        match done {
            None => {}
            Some(Some(done)) => {
                let _ = done.send(());
            }
            Some(None) => return,
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

async fn send(exporter: &Exporter, batch: &[SpanData], timeout: Duration, failures: &mut Failures) {
    if batch.is_empty() {
        return;
    }
    let n = batch.len() as u64;
    let sent = tokio::time::timeout(timeout, exporter.export(batch)).await;
    let error = match sent {
        Ok(Ok(())) => {
            EXPORTED.fetch_add(n, Ordering::Relaxed);
            return;
        }
        Ok(Err(e)) => e,
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
        let queue = Queue::new(Batching {
            queue: 1,
            batch: 1,
            delay: Duration::from_secs(5),
            timeout: Duration::from_secs(30),
        });
        let provider = SdkTracerProvider::builder().with_span_processor(queue.clone()).build();
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
    fn spans_go_to_v1_traces_under_the_base_endpoint_or_to_the_traces_endpoint_as_given() {
        let at = |pairs: &[(&'static str, &'static str)]| {
            let pairs = pairs.to_vec();
            endpoint(&move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned()))
        };
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert_eq!(at(&[base]).unwrap().as_str(), "http://c:4318/v1/traces");
        let slash = ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c.example/otlp/");
        assert_eq!(at(&[slash]).unwrap().as_str(), "https://c.example/otlp/v1/traces");
        let traces = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/custom");
        assert_eq!(at(&[base, traces]).unwrap().as_str(), "http://t:4318/custom");
        let bad = ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318");
        let e = at(&[bad]).unwrap_err();
        assert_eq!(e.code, "otel.exporter_invalid");
        assert!(e.message.contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{}", e.message);
    }

    #[test]
    fn headers_come_from_the_traces_variable_or_else_the_general_one_percent_decoded() {
        let general = ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s%3Dcret, x-team = pay ");
        let h = headers(&env([general])).unwrap();
        assert_eq!(h["api-key"], "s=cret");
        assert_eq!(h["x-team"], "pay");
        let traces = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "only=this");
        let h = headers(&env([general, traces])).unwrap();
        assert_eq!(
            (h.len(), &h["only"]),
            (1, &reqwest::header::HeaderValue::from_static("this"))
        );
        assert!(headers(&env([])).unwrap().is_empty());
        for bad in ["novalue", "bad key=v", "k=%zz"] {
            let e = headers(&env([("OTEL_EXPORTER_OTLP_HEADERS", bad)])).unwrap_err();
            assert_eq!(e.code, "otel.setting_invalid", "{bad}");
            assert!(
                !e.message.contains("%zz"),
                "a header's value is never shown: {}",
                e.message
            );
        }
    }

    #[test]
    fn a_compression_asked_for_is_refused_not_ignored() {
        assert!(compression(&env([])).is_ok());
        assert!(compression(&env([("OTEL_EXPORTER_OTLP_COMPRESSION", "none")])).is_ok());
        let gzip = [("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")];
        assert_eq!(compression(&env(gzip)).unwrap_err().code, "otel.exporter_invalid");
    }

    /// The sending task is woken once a batch is full, not for each span.
    #[tokio::test]
    async fn the_sender_is_woken_by_a_full_batch_not_by_each_span() {
        use opentelemetry::trace::{Tracer as _, TracerProvider as _};
        let queue = Queue::new(Batching {
            queue: 10,
            batch: 4,
            delay: Duration::from_secs(5),
            timeout: Duration::from_secs(30),
        });
        let provider = SdkTracerProvider::builder().with_span_processor(queue.clone()).build();
        let tracer = provider.tracer("test");
        let woken = || async {
            tokio::select! {
                biased;
                () = queue.0.full.notified() => true,
                () = std::future::ready(()) => false,
            }
        };
        for _ in 0..3 {
            drop(tracer.start("process Paid"));
        }
        assert!(!woken().await, "three spans of a batch of four wake nothing");
        drop(tracer.start("process Paid"));
        assert!(woken().await, "the fourth fills the batch");
        assert_eq!(queue.take().len(), 4);
        assert!(queue.take().is_empty());
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
