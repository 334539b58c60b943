//! The NATS JetStream sink.
//!
//! Every message carries `Nats-Msg-Id` = event id, so the server drops a
//! repeat within the stream's duplicate window, and a `Sluice-Position`
//! header.
//!
//! With `exclusive: true` (the stream is written only by this sink) it is
//! exactly-once: on start the sink reads the stream's last message and
//! reports its position, so nothing the stream already holds is sent
//! again; and every publish states the sequence it expects the stream to be
//! at (`Nats-Expected-Last-Sequence`), so another writer is detected and
//! stops the pipeline instead of interleaving silently.

mod sink;

pub use sink::NatsSink;
