//! `sluice validate --connect` for a Kafka sink: the brokers answer and
//! take the login, the topics exist or may be created, and, for
//! exactly-once, the cluster allows transactions. Nothing is written: a
//! topic creation is only validated, and the transaction check uses an id
//! of its own, so a running pipeline's producer is never fenced.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::producer::{BaseProducer, Producer};
use sluice_core::preflight::Check;

use super::context::{Refusal, Watched};

/// The topics the sink writes that a check can name: the event topic when
/// it has no `${...}`, and the checkpoint topic of an exactly-once sink.
pub struct Wanted {
    pub topics: Vec<String>,
    pub transactional_id: Option<String>,
    /// What to check when the login is refused.
    pub login_hint: &'static str,
}

pub async fn checks(base: ClientConfig, wanted: Wanted, timeout: Duration) -> Vec<Check> {
    let watched = Watched::default();
    let admin: AdminClient<Watched> = match base.create_with_context(watched.clone()) {
        Ok(admin) => admin,
        Err(e) => return vec![Check::fail("client", format!("cannot create a client: {e}"), "check client_conf")],
    };
    let metadata = {
        let admin = &admin;
        tokio::task::block_in_place(|| admin.inner().fetch_metadata(None, timeout))
    };
    let metadata = match metadata {
        Ok(metadata) => metadata,
        Err(e) => {
            let (problem, fix) = match watched.refusal() {
                Some(Refusal::Login(why)) => (format!("the brokers refused the login: {why}"), wanted.login_hint),
                Some(Refusal::Tls(why)) => (format!("the TLS handshake failed: {why}"), "check tls.ca_file and the brokers' certificate names"),
                None => (format!("no answer from the brokers: {e}"), "check brokers, that the cluster runs, and the listener's security protocol"),
            };
            return vec![Check::fail("brokers", problem, fix)];
        }
    };
    let brokers = metadata.brokers().len();
    let mut checks = vec![Check::ok("brokers", format!("{brokers} broker(s) answered and took the credentials"))];
    for topic in &wanted.topics {
        if metadata.topics().iter().any(|t| t.name() == topic && t.error().is_none()) {
            checks.push(Check::ok("topic", format!("{topic} exists")));
            continue;
        }
        let new = NewTopic::new(topic, 1, TopicReplication::Fixed(brokers.clamp(1, 3) as i32));
        let options = AdminOptions::new().validate_only(true).operation_timeout(Some(timeout));
        let created = admin.create_topics([&new], &options).await;
        checks.push(match created.as_deref() {
            Ok([Ok(_)]) => Check::ok("topic", format!("{topic} does not exist; the user may create it")),
            Ok([Err((_, code))]) => Check::fail(
                "topic",
                format!("{topic} does not exist, and creating it is refused: {code}"),
                "create the topic, or grant the user CREATE on it",
            ),
            Ok(_) => Check::fail("topic", format!("{topic}: the brokers answered nothing"), "check the brokers' logs"),
            Err(e) => Check::fail("topic", format!("{topic} does not exist; asking to create it failed: {e}"), "create the topic"),
        });
    }
    if let Some(id) = wanted.transactional_id {
        checks.push(transactions(base, &id, timeout));
    }
    checks
}

/// Starts (and drops) a producer with a transactional id of its own.
fn transactions(mut base: ClientConfig, id: &str, timeout: Duration) -> Check {
    let probe_id = format!("{id}.validate");
    base.set("transactional.id", &probe_id);
    let producer: BaseProducer = match base.create() {
        Ok(producer) => producer,
        Err(e) => return Check::fail("transactions", format!("cannot create a producer: {e}"), "check client_conf"),
    };
    match tokio::task::block_in_place(|| producer.init_transactions(timeout)) {
        Ok(()) => Check::ok("transactions", format!("allowed (checked with transactional.id {probe_id})")),
        Err(e) => Check::fail(
            "transactions",
            format!("the cluster refused a transactional producer: {e}"),
            "grant the user WRITE and DESCRIBE on the transactional id (prefix), and check that transaction.state.log.replication.factor is no more than the brokers",
        ),
    }
}
