//! Small pieces of HTTP: method names, `Retry-After`, and call paths.

use jadpo_core::path::{self, Piece};
use jadpo_core::{Failure, FailureKind};
use jadpo_lang::{Method, PathPart, PathTemplate};
use std::time::{Duration, SystemTime};

/// The method as sent: `POST`.
pub fn method_name(method: Method) -> &'static str {
    match method {
        Method::Get => "GET",
        Method::Post => "POST",
        Method::Put => "PUT",
        Method::Patch => "PATCH",
        Method::Delete => "DELETE",
        Method::Head => "HEAD",
    }
}

pub(crate) fn reqwest_method(method: Method) -> reqwest::Method {
    match method {
        Method::Get => reqwest::Method::GET,
        Method::Post => reqwest::Method::POST,
        Method::Put => reqwest::Method::PUT,
        Method::Patch => reqwest::Method::PATCH,
        Method::Delete => reqwest::Method::DELETE,
        Method::Head => reqwest::Method::HEAD,
    }
}

/// A `Retry-After` value as a wait: delay-seconds, or an HTTP date taken
/// relative to `now` (the answer's `Date`, else the caller's time). A date
/// in the past is no wait; anything unreadable is ignored.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // An absurd number of seconds saturates rather than being ignored.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The template as written: `/payments/{payment_id}/record`. This, not the
/// interpolated path, is what logs show.
pub fn template_text(template: &PathTemplate) -> String {
    template.text().to_owned()
}

/// The path to send: each parameter's value percent-encoded as exactly one
/// path segment (`jadpo_core::path::render`: a value that would be empty,
/// `.` or `..` is `call.path_segment_invalid`). A parameter `arg` doesn't
/// know is a defect (`internal_fault`).
pub fn render_path(template: &PathTemplate, arg: impl Fn(&str) -> Option<String>) -> Result<String, Failure> {
    let values = params(template, arg, "call.path_param_missing")?;
    let mut values = values.iter();
    path::render(template.parts().iter().map(|part| match part {
        PathPart::Literal(s) => Piece::Literal(s),
        PathPart::Param(name) => Piece::Param {
            name,
            value: values.next().map_or("", String::as_str),
        },
    }))
}

/// A publish's target: each parameter's value one word of it
/// (`jadpo_core::publish::render_target`: `publish.target_word_invalid`
/// otherwise). A parameter `arg` doesn't know is a defect
/// (`internal_fault`).
pub fn render_target(template: &PathTemplate, arg: impl Fn(&str) -> Option<String>) -> Result<String, Failure> {
    let values = params(template, arg, "publish.target_param_missing")?;
    let mut values = values.iter();
    jadpo_core::publish::render_target(template.parts().iter().map(|part| match part {
        PathPart::Literal(s) => Piece::Literal(s),
        PathPart::Param(name) => Piece::Param {
            name,
            value: values.next().map_or("", String::as_str),
        },
    }))
}

/// Each parameter's value, in the template's order.
fn params(
    template: &PathTemplate,
    arg: impl Fn(&str) -> Option<String>,
    missing: &str,
) -> Result<Vec<String>, Failure> {
    let mut values = Vec::new();
    for part in template.parts() {
        if let PathPart::Param(p) = part {
            match arg(p) {
                Some(value) => values.push(value),
                None => return Err(Failure::new(missing, FailureKind::InternalFault).with_field("param", p.clone())),
            }
        }
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn retry_after_in_seconds() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(parse_retry_after("-5", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("", now), None);
    }

    #[test]
    fn retry_after_as_an_http_date() {
        // Sun, 06 Nov 1994 08:49:37 GMT is 784111777.
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777 - 90);
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
            Some(Duration::from_secs(90))
        );
        // The two obsolete forms HTTP still accepts.
        assert_eq!(
            parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            parse_retry_after("Sun Nov  6 08:49:37 1994", now),
            Some(Duration::from_secs(90))
        );
        // In the past: no wait.
        let later = now + Duration::from_secs(3_600);
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", later),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn paths_are_rendered_and_encoded() {
        let template = PathTemplate::new(vec![
            PathPart::Literal("/payments/".into()),
            PathPart::Param("id".into()),
            PathPart::Literal("/record".into()),
        ]);
        assert_eq!(template_text(&template), "/payments/{id}/record");
        let path = render_path(&template, |p| (p == "id").then(|| "a b/c?d#é".into())).unwrap();
        assert_eq!(path, "/payments/a%20b%2Fc%3Fd%23%C3%A9/record");
        let missing = render_path(&template, |_| None).unwrap_err();
        assert_eq!(missing.code, "call.path_param_missing");
        assert_eq!(missing.kind, FailureKind::InternalFault);
    }
}
