//! The producer's client context: it remembers the last refusal librdkafka
//! reported on its own (a failed login, a failed TLS handshake), which
//! otherwise reaches the sink only as a metadata request that timed out.

use std::sync::{Arc, Mutex};

use rdkafka::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use sluice_core::sync::lock;

/// A refusal by the brokers that retrying will not change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The brokers refused the SASL login.
    Login(String),
    /// The TLS handshake failed (an unknown CA, a name that does not match).
    Tls(String),
}

#[derive(Clone, Default)]
pub struct Watched {
    refusal: Arc<Mutex<Option<Refusal>>>,
}

impl Watched {
    /// The last refusal seen, if any.
    pub fn refusal(&self) -> Option<Refusal> {
        lock(&self.refusal).clone()
    }
}

/// Which global errors are refusals, by code.
pub fn refusal_of(code: RDKafkaErrorCode, reason: &str) -> Option<Refusal> {
    match code {
        RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed => {
            Some(Refusal::Login(reason.to_string()))
        }
        RDKafkaErrorCode::SSL => Some(Refusal::Tls(reason.to_string())),
        _ => None,
    }
}

impl ClientContext for Watched {
    fn error(&self, error: KafkaError, reason: &str) {
        let reason = sluice_core::redact::credentials(reason).into_owned();
        if let Some(refusal) = error.rdkafka_error_code().and_then(|code| refusal_of(code, &reason)) {
            *lock(&self.refusal) = Some(refusal);
        }
        tracing::warn!(target: "librdkafka", error = %error, %reason, "kafka client error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_and_handshakes_are_refusals_and_outages_are_not() {
        assert!(matches!(refusal_of(RDKafkaErrorCode::Authentication, "bad"), Some(Refusal::Login(_))));
        assert!(matches!(refusal_of(RDKafkaErrorCode::SaslAuthenticationFailed, "bad"), Some(Refusal::Login(_))));
        assert!(matches!(refusal_of(RDKafkaErrorCode::SSL, "unknown ca"), Some(Refusal::Tls(_))));
        for code in [RDKafkaErrorCode::AllBrokersDown, RDKafkaErrorCode::BrokerTransportFailure] {
            assert_eq!(refusal_of(code, "down"), None, "{code:?}");
        }
    }
}
