//! `${VAR}` and `${VAR:-default}` expansion of config text.
//!
//! Expansion runs on the raw text before YAML parsing, like shell
//! interpolation. An unset variable without a default is an error, never an
//! empty string: a silently empty password or path is worse than a refusal.
//! `$${` writes a literal `${`. Whole-line comments are left alone so a
//! commented-out example does not demand its variables. The sink template
//! placeholders `${db}`, `${table}`, `${op}`, `${key.<column>}`, the
//! database sinks' `${schema}`, the route transform's `${name}` and `${1}`,
//! and the outbox transform's `${routedByValue}` are not variables and
//! pass through untouched.

/// A `${VAR}` with no value and no default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpandError {
    pub line: usize,
    pub problem: String,
}

pub fn expand(text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(text.len());
    for (index, line) in text.split_inclusive('\n').enumerate() {
        if line.trim_start().starts_with('#') {
            out.push_str(line);
            continue;
        }
        expand_line(line, index + 1, &lookup, &mut out)?;
    }
    Ok(out)
}

fn expand_line(
    line: &str,
    line_number: usize,
    lookup: &impl Fn(&str) -> Option<String>,
    out: &mut String,
) -> Result<(), ExpandError> {
    let mut rest = line;
    while let Some(start) = rest.find('$') {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        if let Some(stripped) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = stripped;
            continue;
        }
        let Some(body_and_rest) = after.strip_prefix("${") else {
            out.push('$');
            rest = &after[1..];
            continue;
        };
        let end = body_and_rest.find('}').ok_or_else(|| ExpandError {
            line: line_number,
            problem: "`${` without a closing `}`; write `$${` for a literal `${`".into(),
        })?;
        let body = &body_and_rest[..end];
        // Sink, route and outbox templates fill these in per event.
        let placeholder = matches!(body, "db" | "table" | "op" | "schema" | "name" | "routedByValue")
            || body.starts_with("key.")
            || (!body.is_empty() && body.bytes().all(|b| b.is_ascii_digit()));
        if placeholder {
            out.push_str("${");
            out.push_str(body);
            out.push('}');
            rest = &body_and_rest[end + 1..];
            continue;
        }
        let (name, default) = match body.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (body, None),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(ExpandError {
                line: line_number,
                problem: format!("`${{{body}}}` is not a variable reference; names use A-Z, 0-9 and _"),
            });
        }
        match (lookup(name), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(ExpandError {
                    line: line_number,
                    problem: format!(
                        "environment variable {name} is not set; set it, or write `${{{name}:-default}}` to give a default"
                    ),
                });
            }
        }
        rest = &body_and_rest[end + 1..];
    }
    out.push_str(rest);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("db.local".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_set_variables_and_defaults() {
        let text = "a: ${HOST}\nb: ${PORT:-5432}\nc: x${EMPTY}y\nd: $$notvar $${HOST}\n";
        assert_eq!(expand(text, env).unwrap(), "a: db.local\nb: 5432\nc: xy\nd: $$notvar ${HOST}\n");
    }

    #[test]
    fn unset_variable_without_default_is_an_error_with_its_line() {
        let err = expand("a: 1\nb: ${PASSWORD}\n", env).unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.problem.contains("PASSWORD is not set"), "{}", err.problem);
    }

    #[test]
    fn comments_and_malformed_references() {
        assert_eq!(expand("  # uses ${UNSET}\n", env).unwrap(), "  # uses ${UNSET}\n");
        assert!(expand("a: ${HOST\n", env).is_err());
        assert!(expand("a: ${not-a-name}\n", env).is_err());
        assert_eq!(expand("t: ${db}.${table}.${op}.${key.id}\n", env).unwrap(), "t: ${db}.${table}.${op}.${key.id}\n");
        assert_eq!(expand("to: outbox.${routedByValue}\n", env).unwrap(), "to: outbox.${routedByValue}\n");
        assert_eq!(expand("s: ${schema}_mirror\n", env).unwrap(), "s: ${schema}_mirror\n");
        assert!(expand("a: ${}\n", env).is_err());
    }
}
