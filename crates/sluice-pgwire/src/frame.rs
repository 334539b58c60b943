//! PostgreSQL wire messages: reading backend messages out of a buffer and
//! writing the few frontend messages Sluice sends.
//!
//! Parsing never panics: a partial message is `Ok(None)` (read more), a
//! malformed one is an error.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use sluice_core::CompactString;

/// The largest backend message accepted (1 GiB, PostgreSQL's own limit for
/// one field); anything claiming more is garbage, not data.
const MAX_MESSAGE_LEN: usize = 1 << 30;

#[derive(Debug)]
pub enum Backend {
    Authentication(Auth),
    ParameterStatus {
        name: String,
        value: String,
    },
    BackendKeyData,
    ReadyForQuery,
    /// Column names and type OIDs.
    RowDescription(Vec<String>, Vec<u32>),
    DataRow(Vec<Option<Bytes>>),
    CommandComplete,
    EmptyQueryResponse,
    Error(Fields),
    Notice(Fields),
    CopyBothResponse,
    CopyOutResponse,
    CopyInResponse,
    CopyData(Bytes),
    CopyDone,
    /// Any other message; ignored where it is harmless.
    Other(u8),
}

#[derive(Debug)]
pub enum Auth {
    Ok,
    Cleartext,
    Md5 { salt: [u8; 4] },
    Sasl { mechanisms: Vec<String> },
    SaslContinue(Bytes),
    SaslFinal(Bytes),
    Unsupported(i32),
}

/// The fields of an ErrorResponse or NoticeResponse.
#[derive(Debug, Clone, Default)]
pub struct Fields {
    pub severity: String,
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("malformed message from the server: {0}")]
pub struct Malformed(pub &'static str);

/// The tag and length of the message at the front of `buf` once all of it
/// is there; until then `None`, with room reserved for the rest.
fn whole(buf: &mut BytesMut) -> Result<Option<(u8, usize)>, Malformed> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if !(4..=MAX_MESSAGE_LEN).contains(&len) {
        return Err(Malformed("message length out of range"));
    }
    if buf.len() < len + 1 {
        buf.reserve(len + 1 - buf.len());
        return Ok(None);
    }
    Ok(Some((buf[0], len)))
}

/// Takes one whole message off the front of `buf`, if one is there.
pub fn parse(buf: &mut BytesMut) -> Result<Option<Backend>, Malformed> {
    let Some((tag, len)) = whole(buf)? else {
        return Ok(None);
    };
    buf.advance(5);
    let body = buf.split_to(len - 4).freeze();
    decode(tag, body).map(Some)
}

/// Takes a whole DataRow off the front of `buf` as text values, when the
/// next message is one and all of it is there; `None` leaves `buf` as it
/// is (read more, or take the message with [`parse`]). It reads the values
/// straight out of the buffer: a snapshot takes millions of rows this way,
/// and going through [`parse`] cost each value a shared `Bytes` handle to
/// make and drop, and each row a vector of them.
pub fn take_text_row(buf: &mut BytesMut) -> Result<Option<Vec<Option<CompactString>>>, Malformed> {
    let Some((b'D', len)) = whole(buf)? else {
        return Ok(None);
    };
    let row = text_values(&buf[5..len + 1])?;
    buf.advance(len + 1);
    Ok(Some(row))
}

fn text_values(mut body: &[u8]) -> Result<Vec<Option<CompactString>>, Malformed> {
    let count = i16::from_be_bytes(array(&mut body)?).max(0) as usize;
    let mut values = Vec::with_capacity(count.min(1600));
    for _ in 0..count {
        let len = i32::from_be_bytes(array(&mut body)?);
        if len < 0 {
            values.push(None);
            continue;
        }
        let (value, rest) = body.split_at_checked(len as usize).ok_or(Malformed("message ends early"))?;
        body = rest;
        values.push(Some(match std::str::from_utf8(value) {
            Ok(text) => CompactString::from(text),
            Err(_) => CompactString::from(String::from_utf8_lossy(value)),
        }));
    }
    Ok(values)
}

fn array<const N: usize>(body: &mut &[u8]) -> Result<[u8; N], Malformed> {
    let (head, rest) = body.split_first_chunk::<N>().ok_or(Malformed("message ends early"))?;
    *body = rest;
    Ok(*head)
}

fn decode(tag: u8, mut body: Bytes) -> Result<Backend, Malformed> {
    Ok(match tag {
        b'R' => Backend::Authentication(auth(&mut body)?),
        b'S' => Backend::ParameterStatus { name: cstr(&mut body)?, value: cstr(&mut body)? },
        b'K' => Backend::BackendKeyData,
        b'Z' => Backend::ReadyForQuery,
        b'T' => {
            let count = i16_(&mut body)?.max(0) as usize;
            let mut names = Vec::with_capacity(count.min(1600));
            let mut types = Vec::with_capacity(count.min(1600));
            for _ in 0..count {
                names.push(cstr(&mut body)?);
                // table oid, column number; then type oid; size, modifier, format
                skip(&mut body, 6)?;
                types.push(i32_(&mut body)? as u32);
                skip(&mut body, 8)?;
            }
            Backend::RowDescription(names, types)
        }
        b'D' => {
            let count = i16_(&mut body)?.max(0) as usize;
            let mut values = Vec::with_capacity(count.min(1600));
            for _ in 0..count {
                let len = i32_(&mut body)?;
                values.push(if len < 0 { None } else { Some(take(&mut body, len as usize)?) });
            }
            Backend::DataRow(values)
        }
        b'C' => Backend::CommandComplete,
        b'I' => Backend::EmptyQueryResponse,
        b'E' => Backend::Error(fields(&mut body)?),
        b'N' => Backend::Notice(fields(&mut body)?),
        b'W' => Backend::CopyBothResponse,
        b'H' => Backend::CopyOutResponse,
        b'G' => Backend::CopyInResponse,
        b'd' => Backend::CopyData(body),
        b'c' => Backend::CopyDone,
        other => Backend::Other(other),
    })
}

fn auth(body: &mut Bytes) -> Result<Auth, Malformed> {
    Ok(match i32_(body)? {
        0 => Auth::Ok,
        3 => Auth::Cleartext,
        5 => {
            let salt = take(body, 4)?;
            Auth::Md5 { salt: [salt[0], salt[1], salt[2], salt[3]] }
        }
        10 => {
            let mut mechanisms = Vec::new();
            loop {
                let name = cstr(body)?;
                if name.is_empty() {
                    break;
                }
                mechanisms.push(name);
            }
            Auth::Sasl { mechanisms }
        }
        11 => Auth::SaslContinue(body.split_off(0)),
        12 => Auth::SaslFinal(body.split_off(0)),
        other => Auth::Unsupported(other),
    })
}

fn fields(body: &mut Bytes) -> Result<Fields, Malformed> {
    let mut fields = Fields::default();
    loop {
        let kind = u8_(body)?;
        if kind == 0 {
            return Ok(fields);
        }
        let value = cstr(body)?;
        match kind {
            b'V' => fields.severity = value,
            b'S' if fields.severity.is_empty() => fields.severity = value,
            b'C' => fields.code = value,
            b'M' => fields.message = value,
            b'D' => fields.detail = Some(value),
            b'H' => fields.hint = Some(value),
            _ => {}
        }
    }
}

fn u8_(body: &mut Bytes) -> Result<u8, Malformed> {
    if body.is_empty() {
        return Err(Malformed("message ends early"));
    }
    Ok(body.get_u8())
}

fn i16_(body: &mut Bytes) -> Result<i16, Malformed> {
    if body.len() < 2 {
        return Err(Malformed("message ends early"));
    }
    Ok(body.get_i16())
}

fn i32_(body: &mut Bytes) -> Result<i32, Malformed> {
    if body.len() < 4 {
        return Err(Malformed("message ends early"));
    }
    Ok(body.get_i32())
}

fn skip(body: &mut Bytes, len: usize) -> Result<(), Malformed> {
    take(body, len).map(|_| ())
}

fn take(body: &mut Bytes, len: usize) -> Result<Bytes, Malformed> {
    if body.len() < len {
        return Err(Malformed("message ends early"));
    }
    Ok(body.split_to(len))
}

fn cstr(body: &mut Bytes) -> Result<String, Malformed> {
    let end = body.iter().position(|b| *b == 0).ok_or(Malformed("string without terminator"))?;
    let text = String::from_utf8_lossy(&body[..end]).into_owned();
    body.advance(end + 1);
    Ok(text)
}

/// Frontend messages.
pub mod write {
    use super::*;

    /// A message with a tag: the tag, a length placeholder, the body, then
    /// the length filled in.
    fn tagged(buf: &mut BytesMut, tag: u8, body: impl FnOnce(&mut BytesMut)) {
        buf.put_u8(tag);
        let start = buf.len();
        buf.put_u32(0);
        body(buf);
        let len = (buf.len() - start) as u32;
        buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
    }

    fn put_cstr(buf: &mut BytesMut, s: &str) {
        buf.put_slice(s.as_bytes());
        buf.put_u8(0);
    }

    pub fn startup(buf: &mut BytesMut, params: &[(&str, &str)]) {
        let start = buf.len();
        buf.put_u32(0);
        buf.put_u32(196_608); // protocol 3.0
        for (name, value) in params {
            put_cstr(buf, name);
            put_cstr(buf, value);
        }
        buf.put_u8(0);
        let len = (buf.len() - start) as u32;
        buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
    }

    pub fn ssl_request(buf: &mut BytesMut) {
        buf.put_u32(8);
        buf.put_u32(80_877_103);
    }

    pub fn password(buf: &mut BytesMut, password: &[u8]) {
        tagged(buf, b'p', |b| {
            b.put_slice(password);
            b.put_u8(0);
        });
    }

    pub fn sasl_initial(buf: &mut BytesMut, mechanism: &str, data: &[u8]) {
        tagged(buf, b'p', |b| {
            put_cstr(b, mechanism);
            b.put_i32(data.len() as i32);
            b.put_slice(data);
        });
    }

    pub fn sasl_response(buf: &mut BytesMut, data: &[u8]) {
        tagged(buf, b'p', |b| b.put_slice(data));
    }

    pub fn query(buf: &mut BytesMut, sql: &str) {
        tagged(buf, b'Q', |b| put_cstr(b, sql));
    }

    pub fn copy_data(buf: &mut BytesMut, data: &[u8]) {
        tagged(buf, b'd', |b| b.put_slice(data));
    }

    pub fn copy_done(buf: &mut BytesMut) {
        tagged(buf, b'c', |_| {});
    }

    pub fn terminate(buf: &mut BytesMut) {
        tagged(buf, b'X', |_| {});
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_messages_wait_and_whole_ones_parse() {
        let mut wire = BytesMut::new();
        write::query(&mut wire, "SELECT 1");
        // A frontend query has the same framing as a backend message.
        let whole = wire.clone();
        let mut partial = BytesMut::from(&whole[..6]);
        assert!(parse(&mut partial).unwrap().is_none());
        let mut data_row = BytesMut::from(&b"D\x00\x00\x00\x10\x00\x02\xff\xff\xff\xff\x00\x00\x00\x02hi"[..]);
        match parse(&mut data_row).unwrap() {
            Some(Backend::DataRow(values)) => {
                assert_eq!(values.len(), 2);
                assert!(values[0].is_none());
                assert_eq!(values[1].as_deref(), Some(&b"hi"[..]));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(data_row.is_empty());
    }

    #[test]
    fn a_text_row_is_taken_whole_or_not_at_all() {
        let row = &b"D\x00\x00\x00\x14\x00\x03\xff\xff\xff\xff\x00\x00\x00\x02hi\x00\x00\x00\x00"[..];
        let mut buf = BytesMut::from(row);
        buf.put_slice(b"Z\x00\x00\x00\x05I");
        let values = take_text_row(&mut buf).unwrap().unwrap();
        assert_eq!(values, vec![None, Some("hi".into()), Some(CompactString::default())]);
        // The next message is not a row: left for `parse`.
        assert!(take_text_row(&mut buf).unwrap().is_none());
        assert!(matches!(parse(&mut buf).unwrap(), Some(Backend::ReadyForQuery)));
        for cut in 0..row.len() {
            let mut partial = BytesMut::from(&row[..cut]);
            assert!(take_text_row(&mut partial).unwrap().is_none());
            assert_eq!(partial.len(), cut);
        }
        let mut bad_utf8 = BytesMut::from(&b"D\x00\x00\x00\x0b\x00\x01\x00\x00\x00\x01\xff"[..]);
        assert_eq!(take_text_row(&mut bad_utf8).unwrap().unwrap(), vec![Some("\u{fffd}".into())]);
        let mut short = BytesMut::from(&b"D\x00\x00\x00\x0a\x00\x01\x00\x00\x00\x09"[..]);
        assert!(take_text_row(&mut short).is_err());
    }

    #[test]
    fn a_row_description_gives_names_and_type_oids() {
        let mut body = BytesMut::new();
        body.put_i16(2);
        for (name, oid) in [("id", 20u32), ("note", 25)] {
            body.put_slice(name.as_bytes());
            body.put_u8(0);
            body.put_u32(16_384); // table oid
            body.put_i16(1); // column number
            body.put_u32(oid);
            body.put_i16(8); // size
            body.put_i32(-1); // modifier
            body.put_i16(0); // text format
        }
        let mut wire = BytesMut::new();
        wire.put_u8(b'T');
        wire.put_i32(body.len() as i32 + 4);
        wire.put_slice(&body);
        match parse(&mut wire).unwrap() {
            Some(Backend::RowDescription(names, types)) => {
                assert_eq!(names, ["id", "note"]);
                assert_eq!(types, [20, 25]);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        let cases: [&[u8]; 5] = [
            b"D\x00\x00\x00\x06\x00\x05",
            b"D\x00\x00\x00\x0a\x00\x01\x00\x00\x00\x09",
            b"E\x00\x00\x00\x06Mx",
            b"R\x00\x00\x00\x05\x00",
            b"X\x00\x00\x00\x02",
        ];
        for case in cases {
            let mut buf = BytesMut::from(case);
            assert!(parse(&mut buf).is_err(), "{case:?}");
        }
        let mut huge = BytesMut::from(&b"d\x7f\xff\xff\xff"[..]);
        assert!(parse(&mut huge).is_err());
    }
}
