//! A small scriptable HTTP provider on 127.0.0.1, for tests and demos.
//!
//! ```no_run
//! # async fn demo() {
//! use jadpo_runtime::provider::{Behaviour, TestProvider};
//! let provider = TestProvider::start().await;
//! let base_url = provider.url(); // http://127.0.0.1:PORT
//! provider.set(Behaviour::Down); // 503 from now on
//! provider.script([Behaviour::Status(500), Behaviour::Up]); // the next two calls
//! assert_eq!(provider.calls(), 0);
//! # }
//! ```
//!
//! Every answer carries `Connection: close`, so no connection outlives its
//! call and a change of behaviour applies to the very next call.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How the provider answers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Behaviour {
    /// `200 {"ok": true}`.
    Up,
    /// `503`.
    Down,
    /// `200` after this long.
    Slow(Duration),
    /// `429` with `Retry-After: retry_after_s`.
    RateLimited { retry_after_s: u64 },
    /// `503` with `Retry-After: retry_after_s`: down, saying when to come
    /// back.
    Unavailable { retry_after_s: u64 },
    /// This status (200 to 599).
    Status(u16),
    /// Stops listening: connecting is refused. Not for [`TestProvider::script`].
    Refuse,
    /// Accepts each connection and closes it without reading or answering.
    /// Not for [`TestProvider::script`].
    Hangup,
    /// Up for `period`, then down for `period`, and so on, from when set.
    Flapping { period: Duration },
    /// Each call waits, unanswered, until `calls` calls have arrived since
    /// it was set; then every one answers `200`, and so do later calls. For
    /// tests that need calls to be in flight at once (from several
    /// processes, say) instead of hoping the scheduler overlaps them.
    Together { calls: u64 },
}

/// A request as the provider received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The behaviour that answered it (the scripted one, if any).
    pub behaviour: Behaviour,
    /// The status answered.
    pub status: u16,
    /// When it arrived.
    pub at: Instant,
}

impl Recorded {
    /// The first value of a header, by name in any case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::from_slice(&self.body)
    }

    /// Checks the Standard Webhooks signature against `secret` (base64,
    /// padded or not, after an optional `whsec_`, as the official libraries
    /// read it): `webhook-id`, `webhook-timestamp` and one
    /// `v1,` entry of `webhook-signature` matching
    /// HMAC-SHA256(key, "{id}.{timestamp}.{body}"). The timestamp's age is
    /// not checked: it comes from the engine's clock.
    pub fn verify_signature(&self, secret: &str) -> Result<(), String> {
        let id = self.header("webhook-id").ok_or("no webhook-id")?;
        let timestamp = self.header("webhook-timestamp").ok_or("no webhook-timestamp")?;
        if timestamp.parse::<i64>().is_err() {
            return Err("webhook-timestamp is not unix seconds".into());
        }
        let signatures = self.header("webhook-signature").ok_or("no webhook-signature")?;
        let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
        let key = STANDARD
            .decode(encoded)
            .or_else(|_| STANDARD_NO_PAD.decode(encoded))
            .map_err(|_| "the secret is not base64")?;
        let mut signed = format!("{id}.{timestamp}.").into_bytes();
        signed.extend_from_slice(&self.body);
        let matches = signatures.split(' ').any(|entry| {
            let Some(given) = entry.strip_prefix("v1,").and_then(|b| STANDARD.decode(b).ok()) else {
                return false;
            };
            let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&key) else {
                return false;
            };
            mac.update(&signed);
            mac.verify_slice(&given).is_ok()
        });
        if matches {
            Ok(())
        } else {
            Err("no signature matches".into())
        }
    }
}

struct State_ {
    behaviour: Behaviour,
    since: Instant,
    script: VecDeque<Behaviour>,
    /// Answers for calls to one path, taken before `script`.
    by_path: HashMap<String, VecDeque<Behaviour>>,
    calls: u64,
    by_behaviour: Vec<(Behaviour, u64)>,
    requests: Vec<Recorded>,
    signing_secret: Option<String>,
    listener: Option<Bound>,
    accept_waker: Option<Waker>,
    /// Calls that arrived under `Together` since it was set.
    together: u64,
}

enum Bound {
    /// Bound by `set`, so the port listens the moment `set` returns; the
    /// accept loop takes it into the runtime.
    Std(std::net::TcpListener),
    Tokio(TcpListener),
}

impl State_ {
    fn count(&mut self, behaviour: &Behaviour) {
        self.calls += 1;
        match self.by_behaviour.iter_mut().find(|(b, _)| b == behaviour) {
            Some((_, n)) => *n += 1,
            None => self.by_behaviour.push((behaviour.clone(), 1)),
        }
    }
}

struct Shared {
    addr: SocketAddr,
    state: Mutex<State_>,
    /// Woken when `Together`'s count is reached.
    together: tokio::sync::Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State_> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The provider. Stops when dropped.
pub struct TestProvider {
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl TestProvider {
    /// Listens on 127.0.0.1 on a free port, [`Behaviour::Up`].
    pub async fn start() -> TestProvider {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port on 127.0.0.1");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the listener's address");
        let shared = Arc::new(Shared {
            addr,
            state: Mutex::new(State_ {
                behaviour: Behaviour::Up,
                since: Instant::now(),
                script: VecDeque::new(),
                by_path: HashMap::new(),
                calls: 0,
                by_behaviour: Vec::new(),
                requests: Vec::new(),
                signing_secret: None,
                listener: Some(Bound::Std(listener)),
                accept_waker: None,
                together: 0,
            }),
            together: tokio::sync::Notify::new(),
        });
        let app = Router::new().fallback(answer).with_state(shared.clone());
        let listening = Switch { shared: shared.clone() };
        let server = tokio::spawn(async move {
            let _ = axum::serve(listening, app).await;
        });
        TestProvider { shared, server }
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// Changes how every later call is answered. `Refuse` closes the port at
    /// once; any other behaviour opens it again on the same port.
    ///
    /// # Panics
    /// When the port can't be bound again (another process took it).
    pub fn set(&self, behaviour: Behaviour) {
        let mut state = self.shared.lock();
        if behaviour == Behaviour::Refuse {
            state.listener = None;
        } else if state.listener.is_none() {
            let listener = std::net::TcpListener::bind(self.shared.addr).expect("bind the provider's port again");
            listener.set_nonblocking(true).expect("a non-blocking listener");
            state.listener = Some(Bound::Std(listener));
        }
        state.behaviour = behaviour;
        state.since = Instant::now();
        state.together = 0;
        if let Some(waker) = state.accept_waker.take() {
            waker.wake();
        }
    }

    /// The behaviour set last.
    pub fn behaviour(&self) -> Behaviour {
        self.shared.lock().behaviour.clone()
    }

    /// The next calls get these answers, one each, in order; later calls
    /// get the behaviour set. Calls adds to what is already scripted.
    ///
    /// # Panics
    /// On `Refuse` or `Hangup`, which act on connections, not on calls.
    pub fn script(&self, answers: impl IntoIterator<Item = Behaviour>) {
        let mut state = self.shared.lock();
        for answer in answers {
            assert_scriptable(&answer);
            state.script.push_back(answer);
        }
    }

    /// The next calls to `path` (exactly, without its query) get these
    /// answers, one each, in order, before anything `script` holds; a
    /// test places a failure on one delivery's call, whatever order calls
    /// arrive in.
    ///
    /// # Panics
    /// On `Refuse` or `Hangup`, as `script`.
    pub fn script_path(&self, path: &str, answers: impl IntoIterator<Item = Behaviour>) {
        let mut state = self.shared.lock();
        let queue = state.by_path.entry(path.to_owned()).or_default();
        for answer in answers {
            assert_scriptable(&answer);
            queue.push_back(answer);
        }
    }

    /// From now on, answer `401` to a call whose Standard Webhooks signature
    /// doesn't verify with `secret` (`None`: stop checking).
    pub fn expect_signature(&self, secret: Option<&str>) {
        self.shared.lock().signing_secret = secret.map(str::to_owned);
    }

    /// Calls received: requests answered, plus connections hung up on.
    pub fn calls(&self) -> u64 {
        self.shared.lock().calls
    }

    /// Calls received while `behaviour` was the one answering.
    pub fn calls_while(&self, behaviour: &Behaviour) -> u64 {
        let state = self.shared.lock();
        state
            .by_behaviour
            .iter()
            .find(|(b, _)| b == behaviour)
            .map_or(0, |(_, n)| *n)
    }

    /// Every request received, in order of arrival.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    /// Forgets the counts, the requests and the script; keeps the behaviour.
    pub fn clear(&self) {
        let mut state = self.shared.lock();
        state.calls = 0;
        state.by_behaviour.clear();
        state.requests.clear();
        state.script.clear();
        state.by_path.clear();
    }
}

/// `Refuse` and `Hangup` act on connections, not on calls.
fn assert_scriptable(answer: &Behaviour) {
    assert!(
        !matches!(answer, Behaviour::Refuse | Behaviour::Hangup),
        "{answer:?} can't be scripted: set it instead"
    );
}

impl Drop for TestProvider {
    fn drop(&mut self) {
        self.server.abort();
        self.shared.lock().listener = None;
    }
}

/// The listening socket, which `set` can close and open again.
struct Switch {
    shared: Arc<Shared>,
}

impl axum::serve::Listener for Switch {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        poll_fn(|cx| {
            let mut state = self.shared.lock();
            loop {
                let listener = match state.listener.take() {
                    None => {
                        state.accept_waker = Some(cx.waker().clone());
                        return Poll::Pending;
                    }
                    Some(Bound::Std(std)) => match TcpListener::from_std(std) {
                        Ok(listener) => listener,
                        Err(_) => {
                            state.accept_waker = Some(cx.waker().clone());
                            return Poll::Pending;
                        }
                    },
                    Some(Bound::Tokio(listener)) => listener,
                };
                let accepted = listener.poll_accept(cx);
                state.listener = Some(Bound::Tokio(listener));
                match accepted {
                    Poll::Ready(Ok((stream, peer))) => {
                        if state.behaviour == Behaviour::Hangup {
                            state.count(&Behaviour::Hangup);
                            drop(stream);
                            continue;
                        }
                        return Poll::Ready((stream, peer));
                    }
                    Poll::Ready(Err(_)) => {
                        // Out of descriptors or the like: try again soon.
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    Poll::Pending => {
                        state.accept_waker = Some(cx.waker().clone());
                        return Poll::Pending;
                    }
                }
            }
        })
        .await
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.shared.addr)
    }
}

async fn answer(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = Instant::now();
    let mut recorded = record(&method, &uri, &headers, &body, now);
    let reply = {
        let mut state = shared.lock();
        let for_path = state.by_path.get_mut(uri.path()).and_then(VecDeque::pop_front);
        let behaviour = match for_path.or_else(|| state.script.pop_front()) {
            Some(scripted) => scripted,
            None => state.behaviour.clone(),
        };
        state.count(&behaviour);
        let mut reply = reply_for(&behaviour, &mut state, &shared, now);
        if let Some(secret) = &state.signing_secret {
            if recorded.verify_signature(secret).is_err() {
                // A bad signature is refused at once, whatever the behaviour;
                // a call waiting for the others still waits.
                reply = Reply {
                    status: 401,
                    delay: None,
                    retry_after: None,
                    ..reply
                };
            }
        }
        recorded.behaviour = behaviour;
        recorded.status = reply.status;
        state.requests.push(recorded);
        reply
    };
    if let Some(calls) = reply.wait_for {
        wait_for_together(&shared, calls).await;
    }
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    response(reply.status, reply.retry_after)
}

/// The request as the test sees it afterwards; its behaviour and status are
/// filled in once they are chosen.
fn record(method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes, at: Instant) -> Recorded {
    Recorded {
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
        behaviour: Behaviour::Up,
        status: 200,
        at,
    }
}

/// How one call is answered, chosen under the lock and carried out after it.
#[derive(Clone, Copy)]
struct Reply {
    status: u16,
    delay: Option<Duration>,
    retry_after: Option<u64>,
    /// `Together`: the calls to wait for before answering.
    wait_for: Option<u64>,
}

fn reply_for(behaviour: &Behaviour, state: &mut State_, shared: &Shared, now: Instant) -> Reply {
    let mut reply = Reply {
        status: 200,
        delay: None,
        retry_after: None,
        wait_for: None,
    };
    reply.status = match behaviour {
        Behaviour::Up | Behaviour::Refuse | Behaviour::Hangup => 200,
        Behaviour::Down => 503,
        Behaviour::Slow(d) => {
            reply.delay = Some(*d);
            200
        }
        Behaviour::RateLimited { retry_after_s } => {
            reply.retry_after = Some(*retry_after_s);
            429
        }
        Behaviour::Unavailable { retry_after_s } => {
            reply.retry_after = Some(*retry_after_s);
            503
        }
        Behaviour::Status(s) => *s,
        Behaviour::Flapping { period } => {
            let phase = now.duration_since(state.since).as_nanos() / period.as_nanos().max(1);
            if phase.is_multiple_of(2) {
                200
            } else {
                503
            }
        }
        Behaviour::Together { calls } => {
            state.together += 1;
            if state.together >= *calls {
                shared.together.notify_waiters();
            } else {
                reply.wait_for = Some(*calls);
            }
            200
        }
    };
    reply
}

/// Holds a `Together` call until `calls` of them arrived. Registering for
/// the notice before reading the count means the last arrival's notice
/// cannot fall between the two.
async fn wait_for_together(shared: &Shared, calls: u64) {
    loop {
        let reached = shared.together.notified();
        tokio::pin!(reached);
        reached.as_mut().enable();
        if shared.lock().together >= calls {
            break;
        }
        reached.await;
    }
}

fn response(status: u16, retry_after: Option<u64>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    // These statuses may not carry a body.
    let mut response = if code.is_informational() || code == StatusCode::NO_CONTENT || code == StatusCode::NOT_MODIFIED
    {
        code.into_response()
    } else {
        let body = serde_json::json!({ "ok": code.is_success(), "status": status });
        (code, axum::Json(body)).into_response()
    };
    let headers = response.headers_mut();
    headers.insert("connection", HeaderValue::from_static("close"));
    if let Some(seconds) = retry_after {
        headers.insert("retry-after", HeaderValue::from(seconds));
    }
    response
}
