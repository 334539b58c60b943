//! `route`: give the matching events a destination name, which the sinks
//! use where they would use the table's (`Event::destination`). The event's
//! table, position and id stay as they are.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use regex::Regex;
use sluice_core::Event;

use crate::config::RouteConfig;
use crate::rows::Tables;
use crate::{Transform, TransformError, Verdict};

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Db,
    Schema,
    Name,
    Table,
    Group(usize),
}

/// A table's destination: `None` where the route does not apply.
type Destination = Result<Option<Arc<str>>, TransformError>;

pub(crate) struct Route {
    tables: Tables,
    regex: Option<Regex>,
    to: Vec<Part>,
    template: String,
    /// By table name (one entry per table: some sources make a new name
    /// for each event, so the name's address would not do).
    destinations: Mutex<HashMap<Arc<str>, Destination>>,
}

impl Route {
    pub fn new(config: &RouteConfig) -> Result<Self, String> {
        let regex = match &config.regex {
            Some(pattern) => {
                // Anchored: a route names whole tables, as patterns do.
                Some(Regex::new(&format!("^(?:{pattern})$")).map_err(|e| format!("regex: {e}"))?)
            }
            None => None,
        };
        let groups = regex.as_ref().map_or(0, |r| r.captures_len() - 1);
        let to = parse(&config.to, groups)?;
        Ok(Self {
            tables: Tables::new(&config.tables)?,
            regex,
            to,
            template: config.to.clone(),
            destinations: Mutex::default(),
        })
    }
}

/// Splits `template` into text and placeholders; `groups` is how many
/// capture groups the regex has.
fn parse(template: &str, groups: usize) -> Result<Vec<Part>, String> {
    if template.trim().is_empty() {
        return Err("to: give the destination's name, e.g. to: \"public.orders\" or \"archive_${name}\"".into());
    }
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        text.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').ok_or_else(|| format!("to: {template:?} has a ${{ without its }}"))?;
            (&braced[..end], end + 2)
        } else if let Some(escaped) = after.strip_prefix('$') {
            text.push('$');
            rest = escaped;
            continue;
        } else {
            let digits = after.chars().take_while(char::is_ascii_digit).count();
            if digits == 0 {
                return Err(format!("to: {template:?} has a $ that starts no placeholder; write $$ for a $"));
            }
            (&after[..digits], digits)
        };
        let part = match name {
            "db" => Part::Db,
            "schema" => Part::Schema,
            "name" => Part::Name,
            "table" => Part::Table,
            digits if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                let group: usize = digits.parse().map_err(|_| format!("to: group {digits} is too large"))?;
                if group == 0 || group > groups {
                    return Err(match groups {
                        0 => format!("to: ${group} refers to a regex group, and no regex with groups is given"),
                        n => format!("to: ${group} refers to group {group}, and the regex has {n}"),
                    });
                }
                Part::Group(group)
            }
            other => {
                return Err(format!(
                    "to: unknown placeholder ${{{other}}}; use ${{db}}, ${{schema}}, ${{name}}, ${{table}} or $1…"
                ));
            }
        };
        if !text.is_empty() {
            parts.push(Part::Text(std::mem::take(&mut text)));
        }
        parts.push(part);
        rest = &after[len..];
    }
    text.push_str(rest);
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(parts)
}

impl Route {
    /// The destination of `table`'s events: `None` where the route does
    /// not apply, an error where it names nothing.
    fn destination(&self, database: &str, table: &str) -> Destination {
        if !self.tables.matches(table) {
            return Ok(None);
        }
        let captures = match &self.regex {
            Some(regex) => match regex.captures(table) {
                Some(captures) => Some(captures),
                None => return Ok(None),
            },
            None => None,
        };
        let (schema, name) = table.split_once('.').unwrap_or((database, table));
        let mut out = String::new();
        for part in &self.to {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Db => out.push_str(database),
                Part::Schema => out.push_str(schema),
                Part::Name => out.push_str(name),
                Part::Table => out.push_str(table),
                Part::Group(i) => {
                    if let Some(group) = captures.as_ref().and_then(|c| c.get(*i)) {
                        out.push_str(group.as_str());
                    }
                }
            }
        }
        if out.is_empty() {
            return Err(TransformError(format!(
                "route {:?} gives table {table} an empty destination; make the template name one for every table it matches",
                self.template
            )));
        }
        Ok(Some(Arc::from(out)))
    }
}

impl Transform for Route {
    fn apply(&self, event: &mut Event) -> Result<Verdict, TransformError> {
        // Worked out once per table, not per event.
        let mut known = self.destinations.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let destination = match known.get(&*event.table) {
            Some(found) => found.clone(),
            None => {
                let found = self.destination(&event.database, &event.table);
                known.insert(Arc::clone(&event.table), found.clone());
                found
            }
        }?;
        drop(known);
        if destination.is_some() {
            event.route = destination;
        }
        Ok(Verdict::Keep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_into_their_parts_and_bad_ones_are_refused() {
        assert_eq!(
            parse("x_${schema}.${name}_$1$$", 1).unwrap(),
            [
                Part::Text("x_".into()),
                Part::Schema,
                Part::Text(".".into()),
                Part::Name,
                Part::Text("_".into()),
                Part::Group(1),
                Part::Text("$".into())
            ]
        );
        assert_eq!(parse("${1}0", 1).unwrap(), [Part::Group(1), Part::Text("0".into())]);
        for (bad, groups, says) in [
            ("", 0, "give the destination"),
            ("${nope}", 0, "unknown placeholder ${nope}"),
            ("$2", 1, "the regex has 1"),
            ("$1", 0, "no regex with groups"),
            ("a$b", 0, "write $$ for a $"),
            ("${table", 0, "without its }"),
        ] {
            let error = parse(bad, groups).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }
}
