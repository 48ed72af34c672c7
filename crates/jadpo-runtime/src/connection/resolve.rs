//! Reading a connection's settings at start: `env("X")` and `secret("X")`
//! looked up once, the base URL and headers checked, the signing secret
//! decoded. Every problem is reported at once, naming the connection, the
//! setting and the variable, never a value.

use super::signing::SigningKey;
use super::startup_error::{Setting, StartupError};
use jadpo_lang::{Connection, Value};
use reqwest::header::{HeaderName, HeaderValue};
use std::fmt;
use std::time::Duration;
use url::Url;

/// A connection as its real driver uses it. `Debug` shows header names but
/// not their values, and the base URL without its user information.
#[derive(Clone)]
pub struct HttpConnection {
    pub(crate) name: String,
    /// Without a trailing `/`; a call's path is appended to it.
    pub(crate) base_url: String,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) timeout: Duration,
    pub(crate) attempts: u32,
    pub(crate) signing: Option<SigningKey>,
}

impl HttpConnection {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    pub fn is_signed(&self) -> bool {
        self.signing.is_some()
    }
}

impl fmt::Debug for HttpConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|(name, _)| format!("{name}: <redacted>"))
            .collect();
        f.debug_struct("HttpConnection")
            .field("name", &self.name)
            .field("base_url", &shown_url(&self.base_url))
            .field("headers", &headers)
            .field("timeout", &self.timeout)
            .field("attempts", &self.attempts)
            .field("signing", &self.signing.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The base URL without user name, password, query or fragment.
pub(super) fn shown_url(base: &str) -> String {
    match Url::parse(base) {
        Ok(url) => {
            let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
            let host = url.host_str().unwrap_or("");
            format!("{}://{host}{port}{}", url.scheme(), url.path())
        }
        Err(_) => "<invalid>".to_owned(),
    }
}

/// Resolves one connection, adding every problem to `errors`.
pub(crate) fn resolve_http(
    conn: &Connection,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<StartupError>,
) -> Option<HttpConnection> {
    let before = errors.len();
    let name = conn.name.as_str();
    let base_url = lookup(name, Setting::BaseUrl, &conn.url, env, errors)
        .and_then(|raw| check_base_url(name, &raw, &conn.url, errors));
    let headers: Vec<(HeaderName, HeaderValue)> = conn
        .headers
        .iter()
        .filter_map(|(header, value)| resolve_header(name, header, value, env, errors))
        .collect();
    let signing = conn
        .signing_secret
        .as_ref()
        .and_then(|value| resolve_signing_key(name, value, env, errors));
    // Every setting was looked at first, so one start reports all problems.
    if errors.len() > before {
        return None;
    }
    Some(HttpConnection {
        name: name.to_owned(),
        base_url: base_url?,
        headers,
        timeout: conn.timeout,
        attempts: conn.attempts.max(1),
        signing,
    })
}

pub(super) fn resolve_header(
    connection: &str,
    header: &str,
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<StartupError>,
) -> Option<(HeaderName, HeaderValue)> {
    let raw = lookup(connection, Setting::Header(header.to_owned()), value, env, errors)?;
    let Ok(header_name) = HeaderName::from_bytes(header.as_bytes()) else {
        errors.push(StartupError::HeaderNameInvalid {
            connection: connection.to_owned(),
            header: header.to_owned(),
        });
        return None;
    };
    match HeaderValue::from_str(&raw) {
        Ok(mut v) => {
            // Sensitive: never shown by `Debug`, never indexed by HTTP/2 header compression.
            v.set_sensitive(true);
            Some((header_name, v))
        }
        Err(_) => {
            errors.push(StartupError::HeaderValueInvalid {
                connection: connection.to_owned(),
                header: header.to_owned(),
                variable: variable_of(value),
            });
            None
        }
    }
}

pub(super) fn resolve_signing_key(
    connection: &str,
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<StartupError>,
) -> Option<SigningKey> {
    let raw = lookup(connection, Setting::SigningSecret, value, env, errors)?;
    match SigningKey::from_secret(&raw) {
        Ok(key) => Some(key),
        Err(why) => {
            errors.push(StartupError::SigningSecretInvalid {
                connection: connection.to_owned(),
                variable: variable_of(value),
                why: why.to_string(),
            });
            None
        }
    }
}

pub(super) fn lookup(
    connection: &str,
    setting: Setting,
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<StartupError>,
) -> Option<String> {
    let (connection, variable) = (
        connection.to_owned(),
        match value {
            Value::String(s) => return Some(s.clone()),
            Value::Env(var) | Value::Secret(var) => var,
        },
    );
    if let Some(found) = env(variable) {
        return Some(found);
    }
    let variable = variable.clone();
    errors.push(match value {
        Value::Secret(_) => StartupError::SecretMissing {
            connection,
            setting,
            variable,
        },
        _ => StartupError::EnvMissing {
            connection,
            setting,
            variable,
        },
    });
    None
}

pub(super) fn variable_of(value: &Value) -> Option<String> {
    match value {
        Value::String(_) => None,
        Value::Env(v) | Value::Secret(v) => Some(v.clone()),
    }
}

fn check_base_url(connection: &str, raw: &str, value: &Value, errors: &mut Vec<StartupError>) -> Option<String> {
    // The message never repeats the value: it may come from a secret.
    let problem = match Url::parse(raw) {
        Err(e) => Some(e.to_string()),
        Ok(url) if !matches!(url.scheme(), "http" | "https") => {
            Some(format!("the scheme must be http or https, not `{}`", url.scheme()))
        }
        Ok(url) if url.host_str().is_none_or(str::is_empty) => Some("it has no host".to_owned()),
        Ok(url) if url.query().is_some() || url.fragment().is_some() => {
            Some("it may not have a query or a fragment".to_owned())
        }
        Ok(_) => None,
    };
    match problem {
        None => Some(raw.trim_end_matches('/').to_owned()),
        Some(why) => {
            errors.push(StartupError::BaseUrlInvalid {
                connection: connection.to_owned(),
                variable: variable_of(value),
                why,
            });
            None
        }
    }
}
