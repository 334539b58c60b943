//! Short ASCII text built on the stack: a position's fixed-size parts, a
//! date or a time. Building it piece by piece in a `String` or a
//! `CompactString` checks the capacity or the layout on every push and
//! allocates; here the text becomes a value in one copy at the end.

use crate::CompactString;

/// Room for the longest text built here: a position's prefix, a u64, a
/// colon and a u32 (44 bytes); a timestamp of the largest year
/// (`+292278-…T…​.123456Z`, 30 bytes).
pub const CAPACITY: usize = 48;

/// Text of at most [`CAPACITY`] bytes; a push past it is cut off, never a
/// panic. Callers push ASCII only, so no cut lands inside a character.
pub struct StackText {
    bytes: [u8; CAPACITY],
    len: usize,
}

impl Default for StackText {
    fn default() -> Self {
        StackText { bytes: [0; CAPACITY], len: 0 }
    }
}

impl StackText {
    pub fn push_bytes(&mut self, piece: &[u8]) {
        let end = (self.len + piece.len()).min(CAPACITY);
        self.bytes[self.len..end].copy_from_slice(&piece[..end - self.len]);
        self.len = end;
    }

    pub fn push_str(&mut self, text: &str) {
        self.push_bytes(text.as_bytes());
    }

    pub fn push(&mut self, byte: u8) {
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = byte;
            self.len += 1;
        }
    }

    /// `value` in decimal.
    pub fn push_int(&mut self, value: impl itoa::Integer) {
        self.push_str(itoa::Buffer::new().format(value));
    }

    /// `value` zero-padded to `width` digits, as `{value:0width$}` writes it.
    pub fn push_padded(&mut self, value: u64, width: usize) {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(value);
        for _ in digits.len()..width {
            self.push(b'0');
        }
        self.push_str(digits);
    }

    pub fn as_str(&self) -> &str {
        // Empty rather than a panic if a caller ever broke the ASCII rule.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }

    pub fn to_compact(&self) -> CompactString {
        CompactString::from(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_join_in_order() {
        let mut text = StackText::default();
        text.push_str("pg:");
        text.push_int(42u64);
        text.push(b':');
        text.push_padded(7, 3);
        text.push_bytes(b"/x");
        assert_eq!(text.as_str(), "pg:42:007/x");
        assert_eq!(text.to_compact(), "pg:42:007/x");
    }

    #[test]
    fn padded_numbers_read_as_format_writes_them() {
        for value in [0, 1, 9, 10, 59, 999_999, 1_000_000, 123_456_789, u64::MAX] {
            for width in 0..=24 {
                let mut text = StackText::default();
                text.push_padded(value, width);
                assert_eq!(text.as_str(), format!("{value:0width$}"));
            }
        }
    }

    #[test]
    fn text_past_the_capacity_is_cut_off_without_a_panic() {
        let mut text = StackText::default();
        for _ in 0..CAPACITY {
            text.push_str("12");
        }
        text.push(b'3');
        text.push_padded(u64::MAX, 30);
        assert_eq!(text.as_str().len(), CAPACITY);
        assert!(text.as_str().starts_with("1212"));
    }
}
