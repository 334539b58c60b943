//! JSON text written straight into a buffer, for the parts of every event
//! that every native record carries: strings, rows and their values. The
//! bytes are the ones `serde_json` writes for the same values (the tests
//! hold them to it); what is saved is its per-value machinery and a
//! byte-by-byte escape of text that, nearly always, needs none.

use std::sync::{Arc, Weak};

use crate::value::{Columns, Row, Value};

/// `text` as a quoted JSON string.
pub fn write_str(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    write_str_contents(out, text);
    out.push(b'"');
}

/// `text` escaped for the inside of a JSON string, as `serde_json`
/// escapes it: quote, backslash and control characters only.
pub fn write_str_contents(out: &mut Vec<u8>, text: &str) {
    escape(text, |piece| out.extend_from_slice(piece.as_bytes()));
}

/// `text` as a quoted JSON string, onto a `String`.
pub fn push_str(out: &mut String, text: &str) {
    out.push('"');
    escape(text, |piece| out.push_str(piece));
    out.push('"');
}

/// `text` escaped for the inside of a JSON string, handed to `put` in
/// pieces: runs of the text as it is, and escape sequences. Every escaped
/// byte is ASCII, so each run ends on a character boundary.
fn escape(text: &str, mut put: impl FnMut(&str)) {
    // Most texts need nothing: a check, then one copy. A rare text with
    // something to escape takes the slow path.
    if !needs_escaping(text.as_bytes()) {
        put(text);
        return;
    }
    let mut start = 0;
    for (at, &b) in text.as_bytes().iter().enumerate() {
        if !ESCAPED[usize::from(b)] {
            continue;
        }
        put(text.get(start..at).unwrap_or_default());
        start = at + 1;
        match b {
            b'"' => put("\\\""),
            b'\\' => put("\\\\"),
            b'\n' => put("\\n"),
            b'\r' => put("\\r"),
            b'\t' => put("\\t"),
            0x08 => put("\\b"),
            0x0C => put("\\f"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let code = [b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xF)]];
                // Six ASCII bytes.
                put(std::str::from_utf8(&code).unwrap_or_default());
            }
        }
    }
    put(text.get(start..).unwrap_or_default());
}

/// Whether any byte needs escaping, eight bytes at a time: a byte below
/// 0x20, a quote or a backslash sets the high bit of its lane. (`x - n`
/// borrows into a lane's high bit only where the lane is below `n`, and
/// `!x` clears it where the byte already had it: no false alarms.)
fn needs_escaping(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = ONES * 0x80;
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH;
    let mut lanes = bytes.chunks_exact(8);
    for lane in &mut lanes {
        let mut word = [0; 8];
        word.copy_from_slice(lane);
        let x = u64::from_ne_bytes(word);
        if below(x, 0x20) | below(x ^ (ONES * u64::from(b'"')), 1) | below(x ^ (ONES * u64::from(b'\\')), 1) != 0 {
            return true;
        }
    }
    lanes.remainder().iter().any(|&b| ESCAPED[usize::from(b)])
}

/// Whether JSON needs a byte escaped: quote, backslash, control characters.
static ESCAPED: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = b < 0x20 || b == b'"' as usize || b == b'\\' as usize;
        b += 1;
    }
    table
};

impl Value {
    /// The value's JSON, as its `Serialize` writes it.
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        match self {
            Value::Null | Value::Unchanged => out.extend_from_slice(b"null"),
            Value::Bool(true) => out.extend_from_slice(b"true"),
            Value::Bool(false) => out.extend_from_slice(b"false"),
            Value::Int(i) => out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes()),
            Value::UInt(u) => out.extend_from_slice(itoa::Buffer::new().format(*u).as_bytes()),
            Value::Decimal(s)
            | Value::Text(s)
            | Value::Date(s)
            | Value::Time(s)
            | Value::Timestamp(s)
            | Value::TimestampTz(s) => write_str(out, s),
            Value::Json(json) => out.extend_from_slice(json.as_str().as_bytes()),
            // Rare, and each with rules of its own (floats, base64, nesting).
            Value::Float(_) | Value::Bytes(_) | Value::Array(_) => serde_json::to_writer(&mut *out, self)?,
        }
        Ok(())
    }
}

impl Row {
    /// The row's JSON object, as its `Serialize` writes it.
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let cached = KEYS.try_with(|kept| {
            let Ok(mut kept) = kept.try_borrow_mut() else { return None };
            let keys = Keys::for_columns(&mut kept, &self.columns)?;
            Some(self.write_keyed(keys, out))
        });
        match cached {
            Ok(Some(written)) => written,
            _ => self.write_unkeyed(out),
        }
    }

    /// The same bytes, each key escaped as it is written: for a thread
    /// whose kept places all hold column lists still in use.
    fn write_unkeyed(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.push(b'{');
        let mut first = true;
        for (column, value) in self.columns.iter().zip(&self.values) {
            if matches!(value, Value::Unchanged) {
                continue;
            }
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            write_str(out, column);
            out.push(b':');
            value.write_json(out)?;
        }
        out.push(b'}');
        Ok(())
    }

    fn write_keyed(&self, keys: &Keys, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.push(b'{');
        let mut first = true;
        for (key, value) in keys.each().zip(&self.values) {
            if matches!(value, Value::Unchanged) {
                continue;
            }
            // Each key is `,"name":`; the first leaves its comma out.
            let key = if std::mem::take(&mut first) { key.get(1..).unwrap_or_default() } else { key };
            out.extend_from_slice(key);
            value.write_json(out)?;
        }
        out.push(b'}');
        Ok(())
    }
}

/// How many column lists a thread keeps the keys of: one per table a sink
/// writes (a row and its key have a list each).
const KEPT_KEYS: usize = 32;

thread_local! {
    static KEYS: std::cell::RefCell<Vec<Keys>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A column list's object keys as JSON, each `,"name":`, escaped once. A
/// row's columns are shared by every row decoded with the same table
/// version, so each sink thread writes the keys of a table with one copy
/// per column, not an escape check and four copies.
struct Keys {
    /// The list, by a weak reference: it keeps the list's allocation, so
    /// no other list can take its address, but not the list itself, so
    /// every thread's keys of a table version that is gone show as gone.
    columns: Weak<[Arc<str>]>,
    text: Vec<u8>,
    ends: Vec<usize>,
}

impl Keys {
    fn new(columns: &Columns) -> Self {
        let mut text = Vec::new();
        let mut ends = Vec::with_capacity(columns.len());
        for column in columns.iter() {
            text.push(b',');
            write_str(&mut text, column);
            text.push(b':');
            ends.push(text.len());
        }
        Self { columns: Arc::downgrade(columns), text, ends }
    }

    /// The kept keys of `columns`, made if there is room: a free place,
    /// or that of a list no longer in use (its table version is gone).
    /// `None` when every place holds a list still in use.
    fn for_columns<'a>(kept: &'a mut Vec<Keys>, columns: &Columns) -> Option<&'a Keys> {
        let at = match kept.iter().position(|k| std::ptr::addr_eq(k.columns.as_ptr(), Arc::as_ptr(columns))) {
            Some(at) => at,
            None if kept.len() < KEPT_KEYS => {
                kept.push(Keys::new(columns));
                kept.len() - 1
            }
            None => {
                let at = kept.iter().position(|k| k.columns.strong_count() == 0)?;
                kept[at] = Keys::new(columns);
                at
            }
        };
        kept.get(at)
    }

    fn each(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(start, &end)| self.text.get(start..end).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::value::JsonText;

    /// The text through both writers, which must agree.
    fn written(text: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, text);
        let mut pushed = String::new();
        push_str(&mut pushed, text);
        let out = String::from_utf8(out).unwrap();
        assert_eq!(pushed, out, "{text:?}");
        out
    }

    #[test]
    fn strings_are_escaped_byte_for_byte_as_serde_json_escapes_them() {
        let every_ascii: String = (0u8..128).map(char::from).collect();
        for text in [every_ascii.as_str(), "", "plain", "a\"b\\c", "tab\there", "ünïcødé ✓ \u{7f}", "\u{1}\u{1f}end"]
        {
            assert_eq!(written(text), serde_json::to_string(text).unwrap(), "{text:?}");
        }
        // Each byte value in each place of a word and of the tail after it.
        for b in 0u8..128 {
            for at in 0..12 {
                let mut text = vec![b'x'; 12];
                text[at] = b;
                let text = String::from_utf8(text).unwrap();
                assert_eq!(written(&text), serde_json::to_string(&text).unwrap(), "{text:?}");
            }
        }
    }

    #[test]
    fn values_and_rows_write_what_their_serialize_writes() {
        let values = vec![
            Value::Null,
            Value::Bool(true),
            Value::Bool(false),
            Value::Int(i64::MIN),
            Value::UInt(u64::MAX),
            Value::Float(1.5e300),
            Value::Float(f64::NAN),
            Value::Float(f64::NEG_INFINITY),
            Value::Decimal("-12.50".into()),
            Value::Text("line\nnext \"quoted\"".into()),
            Value::Bytes(vec![0, 255, 7]),
            Value::Json(JsonText::parse("{\"a\": [1, 2]}".into()).unwrap()),
            Value::Date("2026-12-06".into()),
            Value::Time("10:00:00+02".into()),
            Value::Timestamp("2026-12-06T10:00:00".into()),
            Value::TimestampTz("2026-12-06T10:00:00Z".into()),
            Value::Array(vec![Value::Int(1), Value::Text("x".into()), Value::Null]),
            Value::Unchanged,
        ];
        for value in &values {
            let mut out = Vec::new();
            value.write_json(&mut out).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(value).unwrap(), "{value:?}");
        }
        let columns: crate::value::Columns = (0..values.len()).map(|i| Arc::from(format!("c\"{i}"))).collect();
        let row = Row { columns, values };
        let mut out = Vec::new();
        row.write_json(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&row).unwrap());
    }

    fn row_of(columns: &Columns, values: Vec<Value>) -> Row {
        Row { columns: columns.clone(), values }
    }

    fn json_of(row: &Row) -> String {
        let mut out = Vec::new();
        row.write_json(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn rows_written_with_kept_keys_match_serde_whatever_the_list() {
        let names = |n: usize, tag: &str| -> Columns { (0..n).map(|i| Arc::from(format!("{tag}\"{i}"))).collect() };
        // More live lists than are kept: the last ones are written without.
        let lists: Vec<Columns> = (0..KEPT_KEYS + 5).map(|i| names(i % 4 + 1, &format!("t{i}"))).collect();
        for round in 0..2 {
            for list in &lists {
                let values = (0..list.len()).map(|i| if i == 1 { Value::Unchanged } else { Value::Int(i as i64) });
                let row = row_of(list, values.collect());
                assert_eq!(json_of(&row), serde_json::to_string(&row).unwrap(), "round {round}");
            }
        }
        // Fewer values than columns, more values than columns.
        let short = row_of(&lists[3], vec![Value::Bool(true)]);
        assert_eq!(json_of(&short), serde_json::to_string(&short).unwrap());
        let long = row_of(&lists[0], vec![Value::Int(1), Value::Int(2)]);
        assert_eq!(json_of(&long), serde_json::to_string(&long).unwrap());
        let kept = || KEYS.with_borrow(|kept| kept.iter().map(|k| k.columns.clone()).collect::<Vec<_>>());
        let holds = |list: &Columns| kept().iter().any(|k| std::ptr::addr_eq(k.as_ptr(), Arc::as_ptr(list)));
        assert!(holds(&lists[0]) && !holds(&lists[KEPT_KEYS]));
        assert_eq!(kept().len(), KEPT_KEYS);
        // Once the lists are gone, new ones take their places.
        drop(lists);
        let fresh = names(2, "fresh");
        let row = row_of(&fresh, vec![Value::Null, Value::Text("x".into())]);
        assert_eq!(json_of(&row), r#"{"fresh\"0":null,"fresh\"1":"x"}"#);
        assert!(holds(&fresh));
    }

    #[test]
    fn kept_keys_do_not_hold_the_column_list() {
        let list: Columns = vec![Arc::from("a")].into();
        let row = row_of(&list, vec![Value::Int(1)]);
        let other = row.clone();
        std::thread::spawn(move || json_of(&other)).join().unwrap();
        assert_eq!(json_of(&row), r#"{"a":1}"#);
        drop(row);
        // Two threads keep its keys; neither keeps the list in use.
        assert_eq!(Arc::strong_count(&list), 1);
    }
}
