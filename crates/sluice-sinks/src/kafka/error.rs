//! Which Kafka error codes mean what for the sink. librdkafka reports a
//! refusal of one message with the same code whether its own size check
//! refused it at `produce` or the broker refused it later, so one table
//! covers both.

use rdkafka::types::RDKafkaErrorCode;

/// What an error code says about the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Another producer took over the `transactional.id`.
    Fenced,
    /// This one message can never be written, whatever is retried: it
    /// belongs in the dead letter queue, with `reason`, while the others go on.
    PerEvent { reason: &'static str },
    /// Anything else: the producer's fatal state and the error itself decide.
    Other,
}

pub fn class_of(code: RDKafkaErrorCode) -> Class {
    use RDKafkaErrorCode as C;
    match code {
        C::Fenced | C::ProducerFenced | C::TransactionCoordinatorFenced => Class::Fenced,
        C::MessageSizeTooLarge => Class::PerEvent {
            reason: "is larger than the broker accepts (message.max.bytes in client_conf, the topic's max.message.bytes)",
        },
        C::InvalidMessageSize => Class::PerEvent { reason: "has a size the broker refuses" },
        C::MessageBatchTooLarge => {
            Class::PerEvent { reason: "is larger than the broker's log segment (the topic's segment.bytes)" }
        }
        C::InvalidRecord => {
            Class::PerEvent { reason: "is a record the broker refuses (a compacted topic needs a key, for instance)" }
        }
        C::InvalidTopic => Class::PerEvent { reason: "names a topic the broker refuses" },
        _ => Class::Other,
    }
}

/// The code of an error about one message, where it has one.
pub fn per_event(code: Option<RDKafkaErrorCode>) -> Option<&'static str> {
    match code.map(class_of) {
        Some(Class::PerEvent { reason }) => Some(reason),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_too_large_is_per_event_wherever_it_was_refused() {
        // librdkafka's local check at produce and the broker's answer both
        // come back as MSG_SIZE_TOO_LARGE.
        let reason = per_event(Some(RDKafkaErrorCode::MessageSizeTooLarge)).unwrap();
        assert!(reason.contains("larger than the broker accepts"), "{reason}");
        for code in [
            RDKafkaErrorCode::InvalidMessageSize,
            RDKafkaErrorCode::MessageBatchTooLarge,
            RDKafkaErrorCode::InvalidRecord,
            RDKafkaErrorCode::InvalidTopic,
        ] {
            assert!(matches!(class_of(code), Class::PerEvent { .. }), "{code:?}");
        }
    }

    #[test]
    fn fencing_is_its_own_class() {
        for code in
            [RDKafkaErrorCode::Fenced, RDKafkaErrorCode::ProducerFenced, RDKafkaErrorCode::TransactionCoordinatorFenced]
        {
            assert_eq!(class_of(code), Class::Fenced, "{code:?}");
        }
    }

    #[test]
    fn errors_of_the_connection_or_the_producer_are_not_per_event() {
        // These say nothing about one message: sending it to the queue
        // would lose it to a passing outage.
        for code in [
            RDKafkaErrorCode::QueueFull,
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::NotEnoughReplicas,
            RDKafkaErrorCode::UnknownTopicOrPartition,
            RDKafkaErrorCode::TopicAuthorizationFailed,
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::InvalidProducerEpoch,
        ] {
            assert_eq!(class_of(code), Class::Other, "{code:?}");
            assert_eq!(per_event(Some(code)), None, "{code:?}");
        }
        assert_eq!(per_event(None), None);
    }
}
