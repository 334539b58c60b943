//! A client of a Confluent-compatible schema registry (Confluent's REST
//! API, which Apicurio and others speak under their compatibility path).
//!
//! A sink registers each schema version once and caches its id: the
//! registry is asked once per schema, never per event. The wire format
//! that carries the id in front of each message is [`frame`].

mod client;
mod error;

pub use client::Registry;
pub use error::RegistryError;
pub use sluice_format::RegistryConfig;

/// Confluent's wire format: a zero magic byte, the schema id as four
/// big-endian bytes, then the encoded datum.
pub fn frame(id: u32, datum: &[u8], out: &mut Vec<u8>) {
    out.reserve(5 + datum.len());
    out.push(0);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(datum);
}

#[cfg(test)]
mod tests {
    #[test]
    fn frames_carry_the_id_big_endian_after_a_zero_byte() {
        let mut out = Vec::new();
        super::frame(0x0102_0304, b"ab", &mut out);
        assert_eq!(out, [0, 1, 2, 3, 4, b'a', b'b']);
    }
}
