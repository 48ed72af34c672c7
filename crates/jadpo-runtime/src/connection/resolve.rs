//! Reading a connection's settings at start: `env("X")` and `secret("X")`
//! looked up once, the base URL and headers checked, the signing secret
//! decoded. Every problem is reported at once, naming the connection, the
//! setting and the variable, never a value.

use super::signing::SigningKey;
use jadpo_lang::{Connection, Value};
use reqwest::header::{HeaderName, HeaderValue};
use std::fmt;
use std::time::Duration;
use url::Url;

/// A connection that can't be used as written or as the environment has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartupError {
    /// Stable: `connection.env_missing`, `connection.secret_missing`,
    /// `connection.base_url_invalid`, `connection.header_invalid`,
    /// `connection.signing_secret_invalid`, `connection.double_unknown`,
    /// `connection.client_failed`.
    pub code: &'static str,
    pub connection: String,
    /// The environment variable concerned, if any.
    pub variable: Option<String>,
    /// Names the connection, the setting and the variable; never a value.
    pub message: String,
}

impl fmt::Display for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StartupError {}

impl StartupError {
    pub(crate) fn new(code: &'static str, connection: &str, message: String) -> StartupError {
        StartupError {
            code,
            connection: connection.to_owned(),
            variable: None,
            message,
        }
    }
}

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
fn shown_url(base: &str) -> String {
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
    let base_url = lookup(name, "`base_url:`", &conn.base_url, env, errors)
        .and_then(|raw| check_base_url(name, &raw, &conn.base_url, errors));
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

fn resolve_header(
    connection: &str,
    header: &str,
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<StartupError>,
) -> Option<(HeaderName, HeaderValue)> {
    let setting = format!("header `{header}`");
    let raw = lookup(connection, &setting, value, env, errors)?;
    let Ok(header_name) = HeaderName::from_bytes(header.as_bytes()) else {
        errors.push(StartupError::new(
            "connection.header_invalid",
            connection,
            format!("connection `{connection}`: `{header}` is not a valid HTTP header name"),
        ));
        return None;
    };
    match HeaderValue::from_str(&raw) {
        Ok(mut v) => {
            // Sensitive: never shown by `Debug`, never indexed by HTTP/2 header compression.
            v.set_sensitive(true);
            Some((header_name, v))
        }
        Err(_) => {
            errors.push(StartupError {
                variable: variable_of(value),
                ..StartupError::new(
                    "connection.header_invalid",
                    connection,
                    format!(
                        "connection `{connection}`: the value of header `{header}`{} holds characters \
                         a header can't carry (such as a line break)",
                        from_variable(value)
                    ),
                )
            });
            None
        }
    }
}

fn resolve_signing_key(
    connection: &str,
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<StartupError>,
) -> Option<SigningKey> {
    let raw = lookup(connection, "`signing_secret:`", value, env, errors)?;
    match SigningKey::from_secret(&raw) {
        Ok(key) => Some(key),
        Err(why) => {
            errors.push(StartupError {
                variable: variable_of(value),
                ..StartupError::new(
                    "connection.signing_secret_invalid",
                    connection,
                    format!(
                        "connection `{connection}`: `signing_secret:`{} can't be used: {why}",
                        from_variable(value)
                    ),
                )
            });
            None
        }
    }
}

fn lookup(
    connection: &str,
    setting: &str,
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<StartupError>,
) -> Option<String> {
    let (var, code, how) = match value {
        Value::String(s) => return Some(s.clone()),
        Value::Env(var) => (var, "connection.env_missing", "env"),
        Value::Secret(var) => (var, "connection.secret_missing", "secret"),
    };
    if let Some(found) = env(var) {
        return Some(found);
    }
    errors.push(StartupError {
        code,
        connection: connection.to_owned(),
        variable: Some(var.clone()),
        message: format!(
            "connection `{connection}`: {setting} reads {how}(\"{var}\"), and the environment \
             variable `{var}` is not set"
        ),
    });
    None
}

fn variable_of(value: &Value) -> Option<String> {
    match value {
        Value::String(_) => None,
        Value::Env(v) | Value::Secret(v) => Some(v.clone()),
    }
}

fn from_variable(value: &Value) -> String {
    match value {
        Value::String(_) => String::new(),
        Value::Env(v) | Value::Secret(v) => format!(" (from `{v}`)"),
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
            errors.push(StartupError {
                variable: variable_of(value),
                ..StartupError::new(
                    "connection.base_url_invalid",
                    connection,
                    format!(
                        "connection `{connection}`: `base_url:`{} is not a valid URL: {why}",
                        from_variable(value)
                    ),
                )
            });
            None
        }
    }
}
