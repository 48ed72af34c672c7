//! TLS to PostgreSQL, as libpq's `sslmode` and `sslrootcert` ask for it
//! (docs/cli.md, "Store URLs"). The driver knows three modes and no root
//! certificate, so both are taken out of the URL here, and the rest is left
//! for the driver to parse.
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | - |
//! | `allow`, `prefer` (the default) | when the server offers it | not checked |
//! | `require` | always | not checked |
//! | `verify-ca` | always | signed by a root |
//! | `verify-full` | always | signed by a root, for the host connected to |
//!
//! The roots are `sslrootcert`'s file (PEM), or the platform's when it is
//! absent or `system`. Unlike libpq, a file at `~/.postgresql/root.crt` is
//! not read unless named: what a URL does is all in the URL.

use crate::types::StoreError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::PathBuf;
use std::sync::Arc;
use tokio_postgres::config::SslMode as DriverMode;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Roots {
    /// The platform's trusted roots.
    System,
    /// A PEM file of one or more certificates.
    File(PathBuf),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tls {
    pub mode: SslMode,
    pub roots: Roots,
}

impl Tls {
    /// What the driver is told: it negotiates TLS, the verifier decides.
    pub(super) fn driver_mode(&self) -> DriverMode {
        match self.mode {
            SslMode::Disable => DriverMode::Disable,
            SslMode::Prefer => DriverMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => DriverMode::Require,
        }
    }
}

/// Takes `sslmode` and `sslrootcert` out of a `postgres://` URL: the URL
/// without them, for the driver, and the TLS they ask for. The query is
/// found where the driver finds it (after the first `@`, then the first
/// `?`), so both read the same parameters. Errors name the parameter and
/// never quote the URL.
pub(crate) fn split(url: &str) -> Result<(String, Tls), String> {
    let mut tls = Tls {
        mode: SslMode::Prefer,
        roots: Roots::System,
    };
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return Ok((url.to_owned(), tls));
    };
    let after_credentials = url[scheme_end..].find('@').map_or(scheme_end, |i| scheme_end + i + 1);
    let Some(query_start) = url[after_credentials..].find('?').map(|i| after_credentials + i) else {
        return Ok((url.to_owned(), tls));
    };
    let mut kept: Vec<&str> = Vec::new();
    for pair in url[query_start + 1..].split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
        match key {
            "sslmode" => {
                tls.mode = match &*value {
                    "disable" => SslMode::Disable,
                    "allow" | "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    other => {
                        return Err(format!(
                            "sslmode={other:?}: one of disable, allow, prefer, require, verify-ca, verify-full"
                        ))
                    }
                }
            }
            "sslrootcert" => {
                tls.roots = match &*value {
                    "" => return Err("sslrootcert is empty: a PEM file's path, or system".to_owned()),
                    "system" => Roots::System,
                    path => Roots::File(PathBuf::from(path)),
                }
            }
            _ => kept.push(pair),
        }
    }
    let mut rest = url[..query_start].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok((rest, tls))
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls configuration `tls` asks for. Reads the root file, or the
/// platform's roots, only for the modes that check the certificate.
pub(crate) fn client_config(tls: &Tls) -> Result<ClientConfig, StoreError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Unavailable(format!("TLS: {e}")))?
        .dangerous();
    let verifier: Arc<dyn ServerCertVerifier> = match tls.mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => Arc::new(Unchecked(provider)),
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let roots = Arc::new(roots(&tls.roots)?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| StoreError::Unavailable(format!("TLS roots: {e}")))?;
            if tls.mode == SslMode::VerifyCa {
                Arc::new(AnyName(webpki))
            } else {
                webpki
            }
        }
    };
    Ok(builder.with_custom_certificate_verifier(verifier).with_no_client_auth())
}

fn roots(roots: &Roots) -> Result<RootCertStore, StoreError> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File(path) => {
            let shown = path.display();
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| StoreError::InvalidUrl(format!("sslrootcert {shown}: {e}")))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| StoreError::InvalidUrl(format!("sslrootcert {shown}: {e}")))?;
            if certs.is_empty() {
                return Err(StoreError::InvalidUrl(format!(
                    "sslrootcert {shown}: no certificate in it (PEM, -----BEGIN CERTIFICATE-----)"
                )));
            }
            for cert in certs {
                store
                    .add(cert)
                    .map_err(|e| StoreError::InvalidUrl(format!("sslrootcert {shown}: {e}")))?;
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(StoreError::InvalidUrl(
                    "sslrootcert: the platform has no trusted roots; name a PEM file with sslrootcert=PATH".into(),
                ));
            }
        }
    }
    Ok(store)
}

/// `prefer` and `require`: encrypted, the certificate not checked (as
/// libpq). The handshake's signatures are still verified, so the session
/// is with whoever holds the certificate's key.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a root; the host name may differ.
/// webpki checks the chain before the name, so a name error means the
/// chain held.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(NotValidForName | NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(mode: SslMode, roots: Roots) -> Tls {
        Tls { mode, roots }
    }

    #[test]
    fn split_takes_out_the_tls_parameters_and_keeps_the_rest() {
        let file = || Roots::File("/etc/ca.pem".into());
        let table: &[(&str, &str, Tls)] = &[
            (
                "postgres://u@h/db",
                "postgres://u@h/db",
                tls(SslMode::Prefer, Roots::System),
            ),
            (
                "postgres://u@h/db?sslmode=disable",
                "postgres://u@h/db",
                tls(SslMode::Disable, Roots::System),
            ),
            (
                "postgres://u@h/db?sslmode=allow",
                "postgres://u@h/db",
                tls(SslMode::Prefer, Roots::System),
            ),
            (
                "postgres://u@h/db?application_name=x&sslmode=require&connect_timeout=5",
                "postgres://u@h/db?application_name=x&connect_timeout=5",
                tls(SslMode::Require, Roots::System),
            ),
            (
                "postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
                "postgres://u@h/db",
                tls(SslMode::VerifyFull, file()),
            ),
            (
                "postgres://u@h/db?sslrootcert=/etc/ca.pem&sslmode=verify-ca",
                "postgres://u@h/db",
                tls(SslMode::VerifyCa, file()),
            ),
            (
                "postgres://u@h/db?sslmode=verify-full&sslrootcert=system",
                "postgres://u@h/db",
                tls(SslMode::VerifyFull, Roots::System),
            ),
            // A `?` in the password is the driver's credentials, not a query.
            (
                "postgres://u:a?sslmode=disable@h/db?sslmode=require",
                "postgres://u:a?sslmode=disable@h/db",
                tls(SslMode::Require, Roots::System),
            ),
            (
                "postgres://h1:5432,h2:5433/db?target_session_attrs=read-write&sslmode=require",
                "postgres://h1:5432,h2:5433/db?target_session_attrs=read-write",
                tls(SslMode::Require, Roots::System),
            ),
        ];
        for (url, rest, expected) in table {
            assert_eq!(split(url), Ok((rest.to_string(), expected.clone())), "{url}");
        }
    }

    #[test]
    fn split_refuses_an_unknown_mode_and_an_empty_root_naming_the_parameter() {
        let e = split("postgres://u:hunter2@h/db?sslmode=verify").unwrap_err();
        assert!(e.starts_with("sslmode=\"verify\": one of disable"), "{e}");
        assert!(!e.contains("hunter2"));
        let e = split("postgres://u@h/db?sslrootcert=").unwrap_err();
        assert!(e.starts_with("sslrootcert is empty"), "{e}");
    }

    #[test]
    fn the_driver_negotiates_and_the_verifier_decides() {
        let modes = [
            (SslMode::Disable, DriverMode::Disable),
            (SslMode::Prefer, DriverMode::Prefer),
            (SslMode::Require, DriverMode::Require),
            (SslMode::VerifyCa, DriverMode::Require),
            (SslMode::VerifyFull, DriverMode::Require),
        ];
        for (mode, driver) in modes {
            assert_eq!(tls(mode, Roots::System).driver_mode(), driver, "{mode:?}");
        }
    }

    #[test]
    fn a_root_file_that_is_missing_or_holds_no_certificate_is_a_clear_error() {
        let missing = tls(SslMode::VerifyFull, Roots::File("/nonexistent/ca.pem".into()));
        let e = client_config(&missing).unwrap_err().to_string();
        assert!(e.contains("sslrootcert /nonexistent/ca.pem"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = client_config(&tls(SslMode::VerifyCa, Roots::File(empty)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no certificate in it"), "{e}");
        // Modes that check nothing read no roots.
        client_config(&tls(SslMode::Require, Roots::File("/nonexistent/ca.pem".into()))).unwrap();
    }
}
