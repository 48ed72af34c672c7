//! Standard Webhooks signing: `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}"))>`.
//!
//! A secret is read as the official verifiers read it: an optional `whsec_`
//! prefix, then the key in standard base64, padded or not. Several secrets,
//! separated by spaces, sign each message once each (`v1,A v1,B`), so a
//! receiver can move to a new secret without refusing a message
//! (docs/app-file.md, "Signed calls").

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;

pub const WEBHOOK_ID: &str = "webhook-id";
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// The most secrets one connection signs with: a rotation needs two.
pub const MAX_SECRETS: usize = 4;

/// Standard base64 with or without its `=` padding, as the official
/// libraries decode a secret.
const SECRET_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// A connection's signing keys, in the order their secrets were given.
/// Its `Debug` never shows a key.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey(Vec<Vec<u8>>);

/// Why a signing secret can't be used. Never holds the secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SigningKeyError {
    /// Empty, or `whsec_` with nothing after it.
    Empty,
    /// Not standard base64 after the optional `whsec_`.
    NotBase64,
    /// More than [`MAX_SECRETS`] secrets.
    TooMany,
}

impl fmt::Display for SigningKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SigningKeyError::Empty => {
                "the signing secret is empty: give `whsec_` followed by the key in base64 \
                 (24 to 64 random bytes, such as `whsec_$(openssl rand -base64 32)`)"
            }
            SigningKeyError::NotBase64 => {
                "a signing secret must be `whsec_` (optional) followed by the key in standard base64 \
                 (A-Z, a-z, 0-9, + and /, padding optional), as the Standard Webhooks libraries read it; \
                 several secrets are separated by spaces"
            }
            SigningKeyError::TooMany => "at most 4 signing secrets, separated by spaces",
        })
    }
}

impl SigningKey {
    /// One secret, or several separated by whitespace (a rotation).
    pub fn from_secret(secrets: &str) -> Result<SigningKey, SigningKeyError> {
        let keys = secrets
            .split_whitespace()
            .map(|one| {
                let encoded = one.strip_prefix("whsec_").unwrap_or(one);
                if encoded.is_empty() {
                    return Err(SigningKeyError::Empty);
                }
                let key = SECRET_BASE64.decode(encoded).map_err(|_| SigningKeyError::NotBase64)?;
                if key.is_empty() {
                    return Err(SigningKeyError::Empty);
                }
                Ok(key)
            })
            .collect::<Result<Vec<_>, _>>()?;
        match keys.len() {
            0 => Err(SigningKeyError::Empty),
            n if n > MAX_SECRETS => Err(SigningKeyError::TooMany),
            _ => Ok(SigningKey(keys)),
        }
    }

    /// The `webhook-signature` value: `v1,<base64>` for each key, separated
    /// by spaces.
    pub fn sign(&self, id: &str, timestamp_s: i64, body: &[u8]) -> String {
        let signatures: Vec<String> = self
            .0
            .iter()
            .map(|key| {
                format!(
                    "v1,{}",
                    STANDARD.encode(hmac(key, id, timestamp_s, body).finalize().into_bytes())
                )
            })
            .collect();
        signatures.join(" ")
    }

    /// Whether one of the space-separated `v1,` signatures of a
    /// `webhook-signature` value is one of these keys', compared in
    /// constant time.
    pub fn verify(&self, id: &str, timestamp_s: i64, body: &[u8], signatures: &str) -> bool {
        signatures.split(' ').any(|one| {
            let Some(encoded) = one.strip_prefix("v1,") else {
                return false;
            };
            let Ok(given) = STANDARD.decode(encoded) else {
                return false;
            };
            self.0
                .iter()
                .any(|key| hmac(key, id, timestamp_s, body).verify_slice(&given).is_ok())
        })
    }
}

fn hmac(key: &[u8], id: &str, timestamp_s: i64, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length: this never fails.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp_s.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey(<{} redacted>)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TIMESTAMP: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn the_specification_vector() {
        let key = SigningKey::from_secret(SECRET).unwrap();
        assert_eq!(key.sign(ID, TIMESTAMP, BODY), SIGNATURE);
        assert!(key.verify(ID, TIMESTAMP, BODY, SIGNATURE));
        assert!(key.verify(ID, TIMESTAMP, BODY, &format!("v1,bm9wZQ== {SIGNATURE}")));
        assert!(!key.verify(ID, TIMESTAMP + 1, BODY, SIGNATURE));
        assert!(!key.verify(ID, TIMESTAMP, b"{}", SIGNATURE));
        assert!(!key.verify(ID, TIMESTAMP, BODY, "v1a,abcd"));
    }

    /// What the official libraries read as the same key, Jadpo does: with
    /// or without `whsec_`, with or without padding.
    #[test]
    fn every_form_the_libraries_accept_is_the_same_key() {
        let expected = SigningKey::from_secret(SECRET).unwrap();
        // 32 characters: no padding to leave out; one of 34 bytes needs it.
        for form in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "  whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
        ] {
            assert_eq!(SigningKey::from_secret(form).unwrap(), expected, "{form:?}");
        }
        let padded = SigningKey::from_secret("whsec_c2VjcmV0LXdpdGgtcGFkZGluZy0zNA==").unwrap();
        for form in ["whsec_c2VjcmV0LXdpdGgtcGFkZGluZy0zNA", "c2VjcmV0LXdpdGgtcGFkZGluZy0zNA"] {
            assert_eq!(SigningKey::from_secret(form).unwrap(), padded, "{form:?}");
        }
        assert_eq!(padded.0[0], b"secret-with-padding-34");
    }

    #[test]
    fn several_secrets_sign_once_each() {
        let old = "whsec_c2VjcmV0LW5vdC10aGUtc2FtZQ==";
        let both = SigningKey::from_secret(&format!("{SECRET} {old}")).unwrap();
        let signature = both.sign(ID, TIMESTAMP, BODY);
        let parts: Vec<&str> = signature.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], SIGNATURE);
        // Each key alone verifies the pair: the receiver on either secret.
        for one in [SECRET, old] {
            assert!(SigningKey::from_secret(one)
                .unwrap()
                .verify(ID, TIMESTAMP, BODY, &signature));
        }
    }

    #[test]
    fn bad_secrets_are_refused_with_the_form_to_use() {
        for (secret, why) in [
            ("", SigningKeyError::Empty),
            ("   ", SigningKeyError::Empty),
            ("whsec_", SigningKeyError::Empty),
            ("whsec_not base64!", SigningKeyError::NotBase64),
            ("plain-secret", SigningKeyError::NotBase64),
            ("whsec_abc_def", SigningKeyError::NotBase64),
            ("YQ YQ YQ YQ YQ", SigningKeyError::TooMany),
        ] {
            assert_eq!(SigningKey::from_secret(secret), Err(why), "{secret:?}");
        }
        assert!(SigningKeyError::NotBase64.to_string().contains("whsec_"));
    }

    #[test]
    fn debug_hides_the_key() {
        let key = SigningKey::from_secret("aHVudGVyMg==").unwrap();
        assert!(!format!("{key:?}").contains("aHVudGVyMg"));
        assert!(!format!("{key:?}").contains("hunter2"));
    }
}
