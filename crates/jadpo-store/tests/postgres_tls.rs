//! TLS to PostgreSQL, against a server of the test's own with `ssl = on`
//! and a certificate from the test's own authority (for `localhost` only):
//! each `sslmode` connects or refuses as libpq's would, the pool and the
//! listener alike, and a refusal names its reason.

use jadpo_store::postgres::{Options, PgStore};
use jadpo_store::{NewEvent, Store, StoreError};
use jadpo_testing::pg_server::PgServer;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// An authority and the server's certificate and key it signed, as PEM.
struct Pki {
    ca: String,
    cert: String,
    key: String,
}

fn pki(authority_name: &str, server_names: &[&str]) -> Pki {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, authority_name);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let authority = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = server_names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params.distinguished_name.push(DnType::CommonName, "jadpo-test-db");
    let cert = params.signed_by(&key, &authority).unwrap();
    Pki {
        ca: authority.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

struct Tls {
    server: PgServer,
    /// The authority's certificate, where `sslrootcert` can name it.
    ca_file: PathBuf,
    /// Another authority's, which signed nothing the server has.
    stranger_file: PathBuf,
    _dir: tempfile::TempDir,
}

fn tls_server() -> Option<Tls> {
    let ours = pki("Jadpo test authority", &["localhost"]);
    let server = PgServer::start(
        &[
            "ssl = on",
            "ssl_cert_file = 'server.crt'",
            "ssl_key_file = 'server.key'",
        ],
        &[
            ("server.crt", ours.cert.as_bytes()),
            ("server.key", ours.key.as_bytes()),
        ],
    )?;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ours.ca).unwrap();
    let stranger_file = dir.path().join("stranger.pem");
    std::fs::write(&stranger_file, pki("Another authority", &["localhost"]).ca).unwrap();
    Some(Tls {
        server,
        ca_file,
        stranger_file,
        _dir: dir,
    })
}

impl Tls {
    /// The server's URL on `host` with `query`.
    fn url(&self, host: &str, query: &str) -> String {
        self.server.url(query).replacen("127.0.0.1", host, 1)
    }

    fn root(&self, file: &std::path::Path) -> String {
        format!("sslrootcert={}", file.display())
    }
}

fn options() -> Options {
    Options {
        connect_timeout: Duration::from_secs(10),
        ..Options::default()
    }
}

/// Whether the store's own connection to the server is encrypted.
async fn encrypted(store: &PgStore) -> bool {
    let conn = store.connection().await.unwrap();
    conn.query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn each_sslmode_connects_or_refuses_as_libpq_would() {
    let Some(t) = tls_server() else {
        return;
    };
    let ca = t.root(&t.ca_file);
    // Encrypted, the certificate unchecked (or checked, for verify-*).
    let connects = [
        t.url("127.0.0.1", ""),
        t.url("127.0.0.1", "sslmode=prefer"),
        t.url("127.0.0.1", "sslmode=require"),
        // The chain is checked, not the name: 127.0.0.1 is not `localhost`.
        t.url("127.0.0.1", &format!("sslmode=verify-ca&{ca}")),
        t.url("localhost", &format!("sslmode=verify-full&{ca}")),
    ];
    for url in &connects {
        let store = PgStore::connect(url, options())
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert!(encrypted(&store).await, "{url}: not encrypted");
    }
    let plain = PgStore::connect(&t.url("127.0.0.1", "sslmode=disable"), options())
        .await
        .unwrap();
    assert!(!encrypted(&plain).await, "sslmode=disable stays in the clear");

    // Refused, each with its reason.
    let refused = [
        (
            t.url("127.0.0.1", &format!("sslmode=verify-full&{ca}")),
            "certificate not valid for name \"127.0.0.1\"",
        ),
        (
            t.url(
                "localhost",
                &format!("sslmode=verify-full&{}", t.root(&t.stranger_file)),
            ),
            "UnknownIssuer",
        ),
        (
            t.url("127.0.0.1", &format!("sslmode=verify-ca&{}", t.root(&t.stranger_file))),
            "UnknownIssuer",
        ),
    ];
    for (url, why) in &refused {
        match PgStore::connect(url, options()).await {
            Err(StoreError::Unavailable(e)) => assert!(e.contains(why), "{url}: {e}"),
            other => panic!("{url}: expected a refusal for {why}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_root_file_that_cannot_be_read_is_an_error_in_the_url() {
    let url = "postgres://postgres@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem";
    match PgStore::connect(url, options()).await {
        Err(StoreError::InvalidUrl(e)) => assert!(e.contains("sslrootcert /nonexistent/ca.pem"), "{e}"),
        other => panic!("expected an invalid URL, got {other:?}"),
    }
    match PgStore::connect("postgres://u:hunter2@127.0.0.1:1/db?sslmode=verify", options()).await {
        Err(StoreError::InvalidUrl(e)) => {
            assert!(e.contains("sslmode=\"verify\""), "{e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        other => panic!("expected an invalid URL, got {other:?}"),
    }
}

/// The listener's connection is not the pool's: it is encrypted and
/// verified all the same, and hears another store's emit.
#[tokio::test]
async fn the_listener_connects_through_tls_and_hears_an_emit() {
    let Some(t) = tls_server() else {
        return;
    };
    let url = t.url("localhost", &format!("sslmode=verify-full&{}", t.root(&t.ca_file)));
    let listening = PgStore::connect(&url, options()).await.unwrap();
    let emitting = PgStore::connect(&url, options()).await.unwrap();
    let wake = Arc::new(tokio::sync::Notify::new());
    let listener = tokio::spawn({
        let wake = wake.clone();
        async move { listening.listen(wake).await }
    });
    // The listener wakes once when it starts listening; then the emit's.
    tokio::time::timeout(jadpo_testing::wait::CEILING, wake.notified())
        .await
        .expect("the listener listens over TLS");
    let event = NewEvent {
        name: "E".into(),
        payload: "{}".into(),
        subscribers: vec!["log".into()],
        idempotency_key: None,
        trace: None,
        keys: Default::default(),
    };
    emitting
        .emit(&[event], jadpo_core::Timestamp::from_millis(1_000))
        .await
        .unwrap();
    tokio::time::timeout(jadpo_testing::wait::CEILING, wake.notified())
        .await
        .expect("the emit's notification arrives over TLS");
    listener.abort();
}
