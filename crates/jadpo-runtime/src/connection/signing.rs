//! Standard Webhooks signing: `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}"))>`.
//!
//! The key is the base64-decoded part of a `whsec_` secret, or the secret's
//! raw bytes when it has no such prefix.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;

pub const WEBHOOK_ID: &str = "webhook-id";
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// A connection's signing key. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey(Vec<u8>);

/// Why a signing secret can't be used. Never holds the secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SigningKeyError {
    /// Empty, or `whsec_` with nothing after it.
    Empty,
    /// `whsec_` followed by something that is not base64.
    NotBase64,
}

impl fmt::Display for SigningKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SigningKeyError::Empty => "the signing secret is empty",
            SigningKeyError::NotBase64 => "the part after `whsec_` is not valid base64",
        })
    }
}

impl SigningKey {
    pub fn from_secret(secret: &str) -> Result<SigningKey, SigningKeyError> {
        let key = match secret.strip_prefix("whsec_") {
            Some(encoded) => STANDARD.decode(encoded).map_err(|_| SigningKeyError::NotBase64)?,
            None => secret.as_bytes().to_vec(),
        };
        if key.is_empty() {
            return Err(SigningKeyError::Empty);
        }
        Ok(SigningKey(key))
    }

    /// The `webhook-signature` value: `v1,<base64>`.
    pub fn sign(&self, id: &str, timestamp_s: i64, body: &[u8]) -> String {
        format!("v1,{}", STANDARD.encode(self.mac(id, timestamp_s, body)))
    }

    /// Whether one of the space-separated `v1,` signatures of a
    /// `webhook-signature` value is this key's, compared in constant time.
    pub fn verify(&self, id: &str, timestamp_s: i64, body: &[u8], signatures: &str) -> bool {
        signatures.split(' ').any(|one| {
            let Some(encoded) = one.strip_prefix("v1,") else {
                return false;
            };
            let Ok(given) = STANDARD.decode(encoded) else {
                return false;
            };
            self.hmac(id, timestamp_s, body).verify_slice(&given).is_ok()
        })
    }

    fn hmac(&self, id: &str, timestamp_s: i64, body: &[u8]) -> Hmac<Sha256> {
        // HMAC takes keys of any length: this never fails.
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp_s.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    fn mac(&self, id: &str, timestamp_s: i64, body: &[u8]) -> Vec<u8> {
        self.hmac(id, timestamp_s, body).finalize().into_bytes().to_vec()
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(<redacted>)")
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

    #[test]
    fn a_secret_without_the_prefix_is_its_raw_bytes() {
        let raw = SigningKey::from_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(raw.0, b"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        assert_ne!(raw.sign(ID, TIMESTAMP, BODY), SIGNATURE);
    }

    #[test]
    fn bad_secrets() {
        assert_eq!(SigningKey::from_secret(""), Err(SigningKeyError::Empty));
        assert_eq!(SigningKey::from_secret("whsec_"), Err(SigningKeyError::Empty));
        assert_eq!(
            SigningKey::from_secret("whsec_not base64!"),
            Err(SigningKeyError::NotBase64)
        );
    }

    #[test]
    fn debug_hides_the_key() {
        let key = SigningKey::from_secret("hunter2").unwrap();
        assert!(!format!("{key:?}").contains("hunter2"));
    }
}
