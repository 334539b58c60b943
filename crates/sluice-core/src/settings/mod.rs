//! The vocabulary every config checker shares: sources' and sinks'
//! configs live in different crates, but a broken setting reads the same
//! wherever it is found.

mod secret;

use std::fmt;

pub use secret::Secret;

/// How a PostgreSQL client (the source, the `postgres` sink) uses TLS;
/// libpq's `sslmode` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    /// Plain text only.
    Disable,
    /// TLS if the server offers it, without checking its certificate.
    Prefer,
    /// TLS, without checking the certificate.
    Require,
    /// TLS, certificate signed by `ca_file`; any host name.
    VerifyCa,
    /// TLS, certificate signed by `ca_file` and naming `host`.
    VerifyFull,
}

/// How a MySQL or MariaDB client (the source, the `mysql` sink) uses TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MysqlSslMode {
    Disable,
    /// TLS without checking the certificate.
    Require,
    /// TLS, certificate signed by `ca_file` and naming `host`.
    VerifyFull,
}

/// The longest id or name. Ids end up in checkpoint keys, file names and
/// Kafka transactional ids, so they stay short and plain.
pub const MAX_ID_LEN: usize = 64;

/// A config that parsed but breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// Where the problem is, e.g. `pipelines[0].sinks[1].config.id`.
    pub field: String,
    pub problem: String,
    /// What to change.
    pub hint: String,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}; hint: {}", self.field, self.problem, self.hint)
    }
}

impl std::error::Error for Invalid {}

impl Invalid {
    pub fn new(field: impl Into<String>, problem: impl Into<String>, hint: impl Into<String>) -> Self {
        Self { field: field.into(), problem: problem.into(), hint: hint.into() }
    }
}

/// An id or name: 1 to [`MAX_ID_LEN`] plain characters.
pub fn check_id(field: &str, id: &str) -> Result<(), Invalid> {
    let plain = id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if id.is_empty() || id.len() > MAX_ID_LEN || !plain {
        return Err(Invalid::new(
            field,
            format!("{id:?} is not a valid id"),
            format!("use 1 to {MAX_ID_LEN} characters from A-Z, a-z, 0-9, '_', '-' and '.'"),
        ));
    }
    Ok(())
}

/// A duration setting in whole seconds, from 1 to `max`.
pub fn check_seconds(at: &str, field: &str, value: u64, max: u64) -> Result<(), Invalid> {
    check_range(at, field, value, 1, max, "seconds")
}

/// A numeric setting within `min..=max`; `unit` ends the hint.
pub fn check_range(at: &str, field: &str, value: u64, min: u64, max: u64, unit: &str) -> Result<(), Invalid> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(Invalid::new(
        format!("{at}.{field}"),
        format!("{value} is outside {min}..={max}"),
        format!("set {field} between {min} and {max} {unit}"),
    ))
}

/// The placeholders a topic, stream, subject, key or URL template may use.
pub fn check_template(template: &str) -> Result<(), String> {
    literal_text(template).map(|_| ())
}

/// The template's text outside its placeholders, once each placeholder
/// is found to be one [`check_template`] allows.
fn literal_text(template: &str) -> Result<String, String> {
    let mut literal = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        literal.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| format!("`${{` without a closing `}}` in {template:?}"))?;
        let name = &after[..end];
        let known = matches!(name, "db" | "table" | "op") || name.strip_prefix("key.").is_some_and(|c| !c.is_empty());
        if !known {
            return Err(format!(
                "unknown placeholder ${{{name}}}; use ${{db}}, ${{table}}, ${{op}} or ${{key.<column>}}"
            ));
        }
        rest = &after[end + 1..];
    }
    literal.push_str(rest);
    Ok(literal)
}

/// A topic template whose own text breaks Kafka's rule for topic names
/// would fail every event at run time, so it is refused up front. What a
/// placeholder yields (a table's name) is checked per event.
pub fn check_topic_template(template: &str) -> Result<(), String> {
    let literal = literal_text(template)?;
    if let Some(bad) = literal.chars().find(|&c| !topic_char(c)) {
        return Err(format!("{template:?} has {bad:?}, which a Kafka topic name may not contain"));
    }
    let whole = literal.len() == template.len();
    if literal.len() > MAX_TOPIC_LEN || (whole && !valid_topic(template)) {
        return Err(format!("{template:?} is not a valid Kafka topic name"));
    }
    Ok(())
}

const MAX_TOPIC_LEN: usize = 249;

fn topic_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Kafka's rule for topic names.
pub fn valid_topic(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_TOPIC_LEN && name != "." && name != ".." && name.chars().all(topic_char)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_templates_whose_own_text_cannot_name_a_topic_are_refused() {
        for good in ["${db}.${table}", "cdc_${table}-${op}", "orders", "a.${key.id}"] {
            assert_eq!(check_topic_template(good), Ok(()), "{good}");
        }
        for bad in ["t$X", "cdc/${table}", "${db} ${table}", "", "..", &"x".repeat(250)] {
            assert!(check_topic_template(bad).is_err(), "{bad}");
        }
        assert!(check_topic_template("${nope}").unwrap_err().contains("unknown placeholder"));
    }
}
