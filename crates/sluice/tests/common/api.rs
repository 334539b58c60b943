//! A plain HTTP/1.1 client for the API of a `sluice run` under test, and
//! a checker of JSON values against the schemas of `openapi.json`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// The address the API of the `n`-th (from 0) `sluice run` logging to
/// `dir/sluice.log` bound.
pub fn api_addr_after(dir: &Path, n: usize) -> String {
    wait_for_addr(dir, |addrs| addrs.get(n).cloned())
}

/// The address the API of the `sluice run` logging to `dir/sluice.log`
/// bound (tests pass port 0).
pub fn api_addr(dir: &Path) -> String {
    wait_for_addr(dir, |addrs| addrs.last().cloned())
}

/// Waits until `pick` finds its address among those the API logged.
fn wait_for_addr(dir: &Path, pick: impl Fn(&[String]) -> Option<String>) -> String {
    let mut found = None;
    super::wait_until(Duration::from_secs(60), "the API to listen", || {
        let log = std::fs::read_to_string(dir.join("sluice.log")).unwrap_or_default();
        let addrs: Vec<String> = log
            .lines()
            .filter(|l| l.contains("HTTP API listening"))
            .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("addr=")))
            .map(str::to_string)
            .collect();
        found = pick(&addrs);
        found.is_some()
    });
    found.unwrap()
}

pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One request; `token` goes in the Authorization header. State-changing
/// methods say `Content-Type: application/json`, as the API demands.
pub fn call(addr: &str, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> Answer {
    let mut headers = vec![format!("Host: {addr}")];
    if let Some(token) = token {
        headers.push(format!("Authorization: Bearer {token}"));
    }
    if matches!(method, "POST" | "PUT" | "PATCH" | "DELETE") {
        headers.push("Content-Type: application/json".to_string());
    }
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    raw(addr, method, path, &headers, body.unwrap_or(""))
}

/// One request with exactly these header lines (`Name: value`, no
/// `Host` unless given) and body.
pub fn raw(addr: &str, method: &str, path: &str, headers: &[&str], body: &str) -> Answer {
    let mut stream = TcpStream::connect(addr).expect("connect to the API");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for header in headers {
        request.push_str(&format!("{header}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).unwrap();
    // Read the head, then as many body bytes as it announces: not every
    // server closes the connection when asked to.
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the connection closed before the answer's head ended");
        raw.extend_from_slice(&buf[..n]);
    };
    let head_text = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let length =
        head_text.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse::<usize>().ok());
    match length {
        Some(length) => {
            while raw.len() < head_end + length {
                let n = stream.read(&mut buf).unwrap();
                assert!(n > 0, "the connection closed mid-body");
                raw.extend_from_slice(&buf[..n]);
            }
        }
        None => {
            stream.read_to_end(&mut raw).unwrap();
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status code");
    let content_type = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type:").map(|v| v.trim().to_string()))
        .unwrap_or_default();
    Answer { status, content_type, body: body.to_string() }
}

pub fn get(addr: &str, path: &str, token: Option<&str>) -> Answer {
    call(addr, "GET", path, token, None)
}

/// The first server-sent event of `path`, as JSON; checks the content type.
pub fn first_event(addr: &str, path: &str, token: Option<&str>) -> Value {
    let mut stream = TcpStream::connect(addr).expect("connect to the API");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}\r\n").as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the event stream closed before its first event");
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw);
        let event = text.lines().filter_map(|l| l.strip_prefix("data: ")).find_map(|d| serde_json::from_str(d).ok());
        if let Some(event) = event {
            assert!(text.to_ascii_lowercase().contains("content-type: text/event-stream"), "{text}");
            return event;
        }
    }
}

/// Checks `value` against `schema`, resolving `$ref`s in `doc`; returns
/// every mismatch with its JSON path. Covers the keywords openapi.json
/// uses: type (with null), properties, required, additionalProperties,
/// items, enum, oneOf, minimum, $ref.
pub fn mismatches(doc: &Value, schema: &Value, value: &Value, at: &str) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(reference) = schema["$ref"].as_str() {
        let pointer = reference.trim_start_matches('#');
        let target = doc.pointer(pointer).unwrap_or_else(|| panic!("dangling $ref {reference}"));
        return mismatches(doc, target, value, at);
    }
    if let Some(options) = schema["oneOf"].as_array() {
        let matching = options.iter().filter(|o| mismatches(doc, o, value, at).is_empty()).count();
        if matching != 1 {
            found.push(format!("{at}: matches {matching} of the oneOf schemas"));
        }
        return found;
    }
    if let Some(types) = schema.get("type") {
        let types: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let fits = |t: &str| match t {
            "null" => value.is_null(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => false,
        };
        if !types.iter().any(|t| fits(t)) {
            found.push(format!("{at}: {value} is not of type {types:?}"));
            return found;
        }
    }
    if let (Some(min), Some(n)) = (schema["minimum"].as_f64(), value.as_f64())
        && n < min
    {
        found.push(format!("{at}: {n} is below {min}"));
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        found.push(format!("{at}: {value} is not one of {allowed:?}"));
    }
    if let Some(object) = value.as_object() {
        let properties = schema["properties"].as_object();
        for required in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if !object.contains_key(required) {
                found.push(format!("{at}: lacks {required:?}"));
            }
        }
        for (name, field) in object {
            match properties.and_then(|p| p.get(name)) {
                Some(property) => found.extend(mismatches(doc, property, field, &format!("{at}.{name}"))),
                None if schema["additionalProperties"] == Value::Bool(false) => {
                    found.push(format!("{at}: {name:?} is not in the schema"))
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
        for (index, item) in list.iter().enumerate() {
            found.extend(mismatches(doc, items, item, &format!("{at}[{index}]")));
        }
    }
    found
}

/// Checks an answer against what openapi.json documents for the route,
/// method and status; panics with every mismatch.
pub fn assert_documented(doc: &Value, route: &str, method: &str, answer: &Answer) {
    let operation = &doc["paths"][route][method.to_ascii_lowercase()];
    assert!(operation.is_object(), "{method} {route} is not in openapi.json");
    let documented = &operation["responses"][answer.status.to_string()];
    assert!(
        documented.is_object(),
        "{method} {route} answered {}, which openapi.json does not list: {}",
        answer.status,
        answer.body
    );
    let Some(content) = documented["content"].as_object() else { return };
    let (media, spec) = content.iter().next().unwrap();
    assert!(
        answer.content_type.starts_with(media.as_str()),
        "{method} {route}: content type {} is not {media}",
        answer.content_type
    );
    if media == "application/json" {
        let problems = mismatches(doc, &spec["schema"], &answer.json(), "$");
        assert!(
            problems.is_empty(),
            "{method} {route} ({}) does not match openapi.json:\n{}\n{}",
            answer.status,
            problems.join("\n"),
            answer.body
        );
    }
}
