//! What a start reports about a connection or an action's setting that
//! can't be used as written or as the environment has it: one variant per
//! problem, each naming the connection, the setting and the variable, and
//! never a value (a value may come from a secret).

use std::fmt;

/// A connection or an action's setting that can't be used as written or as
/// the environment has it. A start reports every one at once.
///
/// ```
/// use jadpo_runtime::connection::{Connections, Setting, StartupError};
/// let text = r#"connection crm { base_url: env("CRM_URL") }"#;
/// let app = jadpo_lang::check("app.jadpo", text).app.expect("the app checks");
/// let Err(problems) = Connections::resolve(&app, |_| None) else { panic!("CRM_URL is unset") };
/// assert_eq!(problems[0], StartupError::EnvMissing {
///     connection: "crm".into(),
///     setting: Setting::BaseUrl,
///     variable: "CRM_URL".into(),
/// });
/// assert_eq!(problems[0].code(), "connection.env_missing");
/// assert_eq!(problems[0].variable(), Some("CRM_URL"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartupError {
    /// `connection.env_missing`: a setting reads `env("X")`, and `X` is not
    /// set.
    EnvMissing {
        /// The connection.
        connection: String,
        /// The setting that reads it.
        setting: Setting,
        /// The environment variable.
        variable: String,
    },
    /// `connection.secret_missing`: a setting reads `secret("X")`, and `X`
    /// is not set.
    SecretMissing {
        /// The connection.
        connection: String,
        /// The setting that reads it.
        setting: Setting,
        /// The environment variable.
        variable: String,
    },
    /// `connection.base_url_invalid`: `base_url:` is not an http or https
    /// URL with a host and without a query or a fragment.
    BaseUrlInvalid {
        /// The connection.
        connection: String,
        /// The variable it was read from, if any.
        variable: Option<String>,
        /// What is wrong with it, without its value.
        why: String,
    },
    /// `connection.url_invalid`: a broker connection's `url:` is not a URL
    /// of its driver's scheme with a host.
    UrlInvalid {
        /// The connection.
        connection: String,
        /// The variable it was read from, if any.
        variable: Option<String>,
        /// What is wrong with it, without its value.
        why: String,
    },
    /// `connection.header_invalid`: a header's name is not an HTTP header
    /// name.
    HeaderNameInvalid {
        /// The connection.
        connection: String,
        /// The header's name as written.
        header: String,
    },
    /// `connection.header_invalid`: a header's value holds characters a
    /// header can't carry (such as a line break).
    HeaderValueInvalid {
        /// The connection.
        connection: String,
        /// The header's name.
        header: String,
        /// The variable its value was read from, if any.
        variable: Option<String>,
    },
    /// `connection.signing_secret_invalid`: `signing_secret:` is not a
    /// usable secret (docs/app-file.md, "Signed calls").
    SigningSecretInvalid {
        /// The connection.
        connection: String,
        /// The variable it was read from, if any.
        variable: Option<String>,
        /// What is wrong with it, without its value.
        why: String,
    },
    /// `connection.double_unknown`: a double replaces a connection the app
    /// does not declare.
    DoubleUnknown {
        /// The name the double was given for.
        connection: String,
    },
    /// `connection.client_failed`: the HTTP client could not start.
    ClientFailed {
        /// Why, as the HTTP library says.
        reason: String,
    },
    /// `action.env_missing`: an action reads an environment variable that
    /// is not set.
    ActionEnvMissing {
        /// The environment variable.
        variable: String,
    },
}

/// The setting of a connection that reads the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Setting {
    /// `base_url:`
    BaseUrl,
    /// A broker connection's `url:`
    Url,
    /// A header of `headers:`, by name.
    Header(String),
    /// `signing_secret:`
    SigningSecret,
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Setting::BaseUrl => f.write_str("`base_url:`"),
            Setting::Url => f.write_str("`url:`"),
            Setting::Header(h) => write!(f, "header `{h}`"),
            Setting::SigningSecret => f.write_str("`signing_secret:`"),
        }
    }
}

impl StartupError {
    /// The stable code, the same the command line shows.
    pub fn code(&self) -> &'static str {
        match self {
            StartupError::EnvMissing { .. } => "connection.env_missing",
            StartupError::SecretMissing { .. } => "connection.secret_missing",
            StartupError::BaseUrlInvalid { .. } => "connection.base_url_invalid",
            StartupError::UrlInvalid { .. } => "connection.url_invalid",
            StartupError::HeaderNameInvalid { .. } | StartupError::HeaderValueInvalid { .. } => {
                "connection.header_invalid"
            }
            StartupError::SigningSecretInvalid { .. } => "connection.signing_secret_invalid",
            StartupError::DoubleUnknown { .. } => "connection.double_unknown",
            StartupError::ClientFailed { .. } => "connection.client_failed",
            StartupError::ActionEnvMissing { .. } => "action.env_missing",
        }
    }

    /// The connection at fault, if one is.
    pub fn connection(&self) -> Option<&str> {
        match self {
            StartupError::EnvMissing { connection, .. }
            | StartupError::SecretMissing { connection, .. }
            | StartupError::BaseUrlInvalid { connection, .. }
            | StartupError::UrlInvalid { connection, .. }
            | StartupError::HeaderNameInvalid { connection, .. }
            | StartupError::HeaderValueInvalid { connection, .. }
            | StartupError::SigningSecretInvalid { connection, .. }
            | StartupError::DoubleUnknown { connection } => Some(connection),
            StartupError::ClientFailed { .. } | StartupError::ActionEnvMissing { .. } => None,
        }
    }

    /// The environment variable concerned, if any.
    pub fn variable(&self) -> Option<&str> {
        match self {
            StartupError::EnvMissing { variable, .. }
            | StartupError::SecretMissing { variable, .. }
            | StartupError::ActionEnvMissing { variable } => Some(variable),
            StartupError::BaseUrlInvalid { variable, .. }
            | StartupError::UrlInvalid { variable, .. }
            | StartupError::HeaderValueInvalid { variable, .. }
            | StartupError::SigningSecretInvalid { variable, .. } => variable.as_deref(),
            StartupError::HeaderNameInvalid { .. }
            | StartupError::DoubleUnknown { .. }
            | StartupError::ClientFailed { .. } => None,
        }
    }
}

/// ` (from `X`)` when a value was read from the variable `X`.
struct FromVariable<'a>(&'a Option<String>);

impl fmt::Display for FromVariable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, " (from `{v}`)"),
            None => Ok(()),
        }
    }
}

/// Names the connection, the setting and the variable; never a value.
impl fmt::Display for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartupError::EnvMissing {
                connection,
                setting,
                variable,
            } => write!(
                f,
                "connection `{connection}`: {setting} reads env(\"{variable}\"), and the environment \
                 variable `{variable}` is not set"
            ),
            StartupError::SecretMissing {
                connection,
                setting,
                variable,
            } => write!(
                f,
                "connection `{connection}`: {setting} reads secret(\"{variable}\"), and the environment \
                 variable `{variable}` is not set"
            ),
            StartupError::BaseUrlInvalid {
                connection,
                variable,
                why,
            } => write!(
                f,
                "connection `{connection}`: `base_url:`{} is not a valid URL: {why}",
                FromVariable(variable)
            ),
            StartupError::UrlInvalid {
                connection,
                variable,
                why,
            } => write!(
                f,
                "connection `{connection}`: `url:`{} is not a valid broker URL: {why}",
                FromVariable(variable)
            ),
            StartupError::HeaderNameInvalid { connection, header } => {
                write!(
                    f,
                    "connection `{connection}`: `{header}` is not a valid HTTP header name"
                )
            }
            StartupError::HeaderValueInvalid {
                connection,
                header,
                variable,
            } => write!(
                f,
                "connection `{connection}`: the value of header `{header}`{} holds characters a header \
                 can't carry (such as a line break)",
                FromVariable(variable)
            ),
            StartupError::SigningSecretInvalid {
                connection,
                variable,
                why,
            } => write!(
                f,
                "connection `{connection}`: `signing_secret:`{} can't be used: {why}",
                FromVariable(variable)
            ),
            StartupError::DoubleUnknown { connection } => write!(
                f,
                "a double replaces `{connection}`, but the app declares no such connection"
            ),
            StartupError::ClientFailed { reason } => write!(f, "the HTTP client could not start: {reason}"),
            StartupError::ActionEnvMissing { variable } => write!(
                f,
                "an action reads the environment variable `{variable}`, which is not set"
            ),
        }
    }
}

impl std::error::Error for StartupError {}
