//! Every config field is documented: a field that exists in the structs
//! but not in docs/configuration.md fails this test.
//!
//! The field names are not listed by hand. A recording deserializer walks
//! `Config` the way serde would read a YAML file, and collects the names
//! each struct asks for (the `fields` argument of `deserialize_struct`).
//! Sources and sinks are `{ type, config }` enums: the walk is repeated
//! once per variant, so a sink added to the registry is walked too. Each
//! field must appear in backticks in the section of its source or sink
//! (`### `kafka``), or, for pipeline settings, in "## A pipeline"; and
//! every sink of the registry has its section and a row in guarantees.md.

use std::collections::BTreeSet;
use std::fmt;

use serde::Deserialize;
use serde::de::value::StrDeserializer;
use serde::de::{self, DeserializeSeed, EnumAccess, IntoDeserializer, MapAccess, SeqAccess, VariantAccess, Visitor};
use sluice_config::Config;

const DOC: &str = include_str!("../../../docs/configuration.md");

/// The fields of `Config`, as (section, struct, field), where section is
/// `pipeline`, `source <type>` or `sink <type>`.
fn every_field() -> BTreeSet<(String, &'static str, &'static str)> {
    let mut found = BTreeSet::new();
    let mut picks: Vec<usize> = Vec::new();
    loop {
        let mut walk = Walk { picks: picks.clone(), ..Walk::default() };
        if let Err(Stop(problem)) = Config::deserialize(&mut walk) {
            panic!("the recording deserializer cannot walk Config ({problem}); teach it the new shape");
        }
        found.extend(walk.found);
        // The next combination of variants, last decision first.
        let mut picks_now = walk.counts.iter().enumerate().map(|(d, _)| picks.get(d).copied().unwrap_or(0)).collect();
        if !next_combination(&mut picks_now, &walk.counts) {
            return found;
        }
        picks = picks_now;
    }
}

fn next_combination(picks: &mut Vec<usize>, counts: &[usize]) -> bool {
    while let Some(last) = picks.pop() {
        if last + 1 < counts[picks.len()] {
            picks.push(last + 1);
            return true;
        }
    }
    false
}

/// The text of the section headed `heading` (up to the next heading of
/// the same or a higher level).
fn section(heading: &str) -> &'static str {
    section_in(DOC, heading)
}

/// The section under `heading` within `text` (a source and a sink may
/// share a name, so each is looked up in its own part).
fn section_in(text: &'static str, heading: &str) -> &'static str {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start =
        text.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("docs/configuration.md has no {heading:?}"));
    let body = &text[start + heading.len() + 2..];
    let end = body
        .match_indices("\n#")
        .find(|(at, _)| body[at + 1..].chars().take_while(|c| *c == '#').count() <= level)
        .map_or(body.len(), |(at, _)| at);
    &body[..end]
}

/// The part of a `## ` section before its first `### `.
fn intro(heading: &str) -> &'static str {
    let text = section(heading);
    text.find("\n### ").map_or(text, |end| &text[..end])
}

/// `field` in backticks, alone or as a part of a dotted path
/// (`batch.max_events`, `snapshot.mode`).
fn mentions(text: &str, field: &str) -> bool {
    [format!("`{field}`"), format!(".{field}`"), format!("`{field}.")].iter().any(|form| text.contains(form))
}

#[test]
fn every_config_field_is_in_the_configuration_reference() {
    let fields = every_field();
    let sinks = fields.iter().filter(|(section, _, _)| section.starts_with("sink ")).count();
    assert!(sinks > 20, "the walk reached only {sinks} sink fields; it must reach every sink of the registry");
    let mut missing = Vec::new();
    for (owner, name, field) in &fields {
        let text = match owner.split_once(' ') {
            Some(("sink", kind)) => {
                format!("{}{}", intro("## Sinks"), section_in(section("## Sinks"), &format!("### `{kind}`")))
            }
            Some(("store", _)) => section("## Checkpoint store").to_string(),
            Some(("fleet", _)) => section("## Fleets").to_string(),
            Some((_, kind)) => {
                format!("{}{}", intro("## Sources"), section_in(section("## Sources"), &format!("### `{kind}`")))
            }
            None => section("## A pipeline").to_string(),
        };
        if !mentions(&text, field) {
            missing.push(format!("`{field}` of {name} ({owner})"));
        }
    }
    assert!(missing.is_empty(), "docs/configuration.md does not document: {}", missing.join(", "));
}

/// The field names a settings struct (and those it holds) asks for.
fn fields_of<T: for<'de> Deserialize<'de>>() -> Vec<&'static str> {
    let mut walk = Walk::default();
    if let Err(Stop(problem)) = T::deserialize(&mut walk) {
        panic!("the recording deserializer cannot walk a transform's settings ({problem})");
    }
    walk.found.into_iter().map(|(_, _, field)| field).collect()
}

#[test]
fn every_transform_field_is_in_the_transforms_reference() {
    const TRANSFORMS: &str = include_str!("../../../docs/transforms.md");
    let kinds = [
        ("filter", fields_of::<sluice_transform::FilterConfig>()),
        ("columns", fields_of::<sluice_transform::ColumnsConfig>()),
        ("mask", fields_of::<sluice_transform::MaskConfig>()),
        ("route", fields_of::<sluice_transform::RouteConfig>()),
    ];
    let mut missing = Vec::new();
    for (kind, fields) in &kinds {
        assert!(fields.len() >= 3, "the walk reached only {fields:?} of {kind}");
        let text = section_in(TRANSFORMS, &format!("## `{kind}`"));
        for field in fields {
            // Also as a key in an example (`equals: v`) or inside a path.
            let shown =
                mentions(text, field) || text.contains(&format!("`{field}:")) || text.contains(&format!(".{field}."));
            if !shown {
                missing.push(format!("`{field}` of {kind}"));
            }
        }
    }
    assert!(missing.is_empty(), "docs/transforms.md does not document: {}", missing.join(", "));
}

#[test]
fn every_sink_of_the_registry_has_a_section_and_a_guarantee_row() {
    const GUARANTEES: &str = include_str!("../../../docs/guarantees.md");
    for (kind, _) in sluice_config::SINK_TYPES {
        assert!(DOC.contains(&format!("\n### `{kind}`\n")), "docs/configuration.md has no section for sink `{kind}`");
        assert!(GUARANTEES.contains(&format!("\n| `{kind}`")), "docs/guarantees.md has no row for sink `{kind}`");
    }
}

#[test]
fn a_field_missing_from_a_section_is_found() {
    let kafka = section("### `kafka`");
    assert!(mentions(kafka, "client_conf") && mentions(kafka, "brokers"));
    assert!(!mentions(kafka, "stream_subjects"), "a nats field is not in the kafka section");
    assert!(mentions(section("## A pipeline"), "max_events"), "a dotted path counts");
    let mut picks = vec![0, 1];
    assert!(next_combination(&mut picks, &[2, 2]));
    assert_eq!(picks, [1]);
    assert!(!next_combination(&mut vec![1, 1], &[2, 2]));
}

#[derive(Debug)]
struct Stop(String);

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Stop(msg.to_string())
    }
}

/// A deserializer that answers every question with a plausible value and
/// writes down the struct fields asked for.
#[derive(Default)]
struct Walk {
    /// The variant to take at each `{ type, config }` choice of this run.
    picks: Vec<usize>,
    /// How many variants each choice had, learned during the run.
    counts: Vec<usize>,
    /// The `{ type, config }` enums being read, innermost last, with the
    /// variant taken once it is known.
    owners: Vec<(&'static str, Option<&'static str>)>,
    found: BTreeSet<(String, &'static str, &'static str)>,
    /// The field whose value is being read.
    field: &'static str,
}

impl Walk {
    fn owner(&self) -> String {
        match self.owners.last() {
            Some((name, Some(variant))) if name.starts_with("Sink") => format!("sink {variant}"),
            Some(("StoreConfig", Some(variant))) => format!("store {variant}"),
            Some(("LeasesConfig", Some(variant))) => format!("fleet {variant}"),
            Some((_, Some(variant))) => format!("source {variant}"),
            _ => "pipeline".to_string(),
        }
    }
}

/// A tagged enum is read as a struct of these two fields.
const TAGGED: &[&str] = &["type", "config"];

impl<'de> de::Deserializer<'de> for &mut Walk {
    type Error = Stop;

    /// Only hand-written `Deserialize` impls ask for "anything": a word
    /// each takes (`MysqlStart` reads a YAML value; the s3 sink's `format`
    /// is a word or a block).
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        match self.field {
            "format" => visitor.visit_str("jsonl"),
            // `true`, `false` or `read_back`.
            "exactly_once" => visitor.visit_bool(false),
            // The content of a `{ type, config }` variant without settings
            // (the embedded store).
            "config" => visitor.visit_unit(),
            _ => visitor.visit_str("current"),
        }
    }
    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_bool(false)
    }
    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_i64(1)
    }
    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_i64(1)
    }
    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_i64(1)
    }
    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_i64(1)
    }
    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_u64(1)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_u64(1)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_u64(1)
    }
    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_u64(1)
    }
    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_f64(1.0)
    }
    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_f64(1.0)
    }
    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_char('x')
    }
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_str("x")
    }
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_str("x")
    }
    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_bytes(b"x")
    }
    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_bytes(b"x")
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_some(self)
    }
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_unit()
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(self, _: &'static str, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_unit()
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_newtype_struct(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        // A transform is an internally tagged enum, which serde reads
        // through its own buffer, out of this walk's sight: the transforms'
        // fields are walked one struct at a time, against transforms.md.
        let left = if self.field == "transforms" { 0 } else { 1 };
        visitor.visit_seq(Items { walk: self, left })
    }
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_seq(Items { walk: self, left: len })
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Stop> {
        visitor.visit_seq(Items { walk: self, left: len })
    }
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_map(Fields { walk: self, names: &["x"], next: 0 })
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Stop> {
        if fields == TAGGED {
            self.owners.push((name, None));
            let value = visitor.visit_map(Fields { walk: &mut *self, names: fields, next: 0 });
            self.owners.pop();
            return value;
        }
        let owner = if name == "FleetConfig" { "fleet settings".to_string() } else { self.owner() };
        for field in fields {
            self.found.insert((owner.clone(), name, field));
        }
        visitor.visit_map(Fields { walk: self, names: fields, next: 0 })
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Stop> {
        // Only the `{ type, config }` choices branch: the other enums are
        // plain words and hold no fields.
        let variant = match self.owners.last_mut() {
            Some((owner, chosen @ None)) if *owner == name => {
                let decision = self.counts.len();
                self.counts.push(variants.len());
                let variant = variants[self.picks.get(decision).copied().unwrap_or(0)];
                *chosen = Some(variant);
                variant
            }
            _ => variants[0],
        };
        visitor.visit_enum(Chosen { walk: self, variant })
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_str("x")
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_unit()
    }
}

/// A map whose keys are `names`, each value read by the walk.
struct Fields<'a> {
    walk: &'a mut Walk,
    names: &'static [&'static str],
    next: usize,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = Stop;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Stop> {
        let Some(name) = self.names.get(self.next) else { return Ok(None) };
        self.next += 1;
        self.walk.field = name;
        let key: StrDeserializer<'_, Stop> = name.into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Stop> {
        seed.deserialize(&mut *self.walk)
    }
}

/// A sequence of `left` items.
struct Items<'a> {
    walk: &'a mut Walk,
    left: usize,
}

impl<'de> SeqAccess<'de> for Items<'_> {
    type Error = Stop;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Stop> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.walk).map(Some)
    }
}

/// The variant the walk took.
struct Chosen<'a> {
    walk: &'a mut Walk,
    variant: &'static str,
}

impl<'de, 'a> EnumAccess<'de> for Chosen<'a> {
    type Error = Stop;
    type Variant = &'a mut Walk;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, &'a mut Walk), Stop> {
        let name: StrDeserializer<'_, Stop> = self.variant.into_deserializer();
        Ok((seed.deserialize(name)?, self.walk))
    }
}

impl<'de> VariantAccess<'de> for &mut Walk {
    type Error = Stop;

    fn unit_variant(self) -> Result<(), Stop> {
        Ok(())
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Stop> {
        seed.deserialize(self)
    }
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Stop> {
        de::Deserializer::deserialize_tuple(self, len, visitor)
    }
    fn struct_variant<V: Visitor<'de>>(self, fields: &'static [&'static str], visitor: V) -> Result<V::Value, Stop> {
        de::Deserializer::deserialize_struct(self, "variant", fields, visitor)
    }
}
