//! Writing JSON text straight into a buffer, for the hot path.

/// Appends `s` as a JSON string.
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, byte) in s.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x00..=0x1F => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            out.push_str(&format!("\\u{byte:04x}"));
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_escape_as_serde_json_does() {
        for s in ["plain", "qu\"ote", "back\\slash", "line\nbreak", "\u{1}ctl", "ünï€😀", ""] {
            let mut out = String::new();
            push_str(&mut out, s);
            assert_eq!(out, serde_json::to_string(s).unwrap());
        }
    }
}
