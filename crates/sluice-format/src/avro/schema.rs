//! A Kafka Connect schema, as JsonConverter writes it, turned into the Avro
//! schema Confluent's AvroConverter registers for it (its `AvroData` with
//! `connect.meta.data` on): the same names and namespaces, `connect.*`
//! properties, logical types and unions, and names written the way Avro's
//! own `Schema.toString` writes them, so the text matches the converter's.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::datum::Node;

/// Where unnamed structs go, as in AvroData.
const DEFAULT_NAMESPACE: &str = "io.confluent.connect.avro";
const DEFAULT_NAME: &str = "ConnectDefault";
/// AvroData's precision for a Connect decimal that declares none.
const DEFAULT_DECIMAL_PRECISION: u64 = 64;

/// The records defined so far (a second use of a name is a reference) and
/// the namespace names are written relative to.
#[derive(Default)]
pub(super) struct Context {
    defined: HashMap<String, Node>,
    space: String,
}

/// The Avro schema and datum writer of the Connect schema `connect`; an
/// optional schema becomes a union with null unless `ignore_optional`.
pub(super) fn convert(connect: &Value, context: &mut Context, ignore_optional: bool) -> Result<(Value, Node), String> {
    let object = connect.as_object().ok_or_else(|| format!("a Connect schema must be an object, not {connect}"))?;
    let text = |key: &str| object.get(key).and_then(Value::as_str);
    let ty = text("type").ok_or("a Connect schema without a type")?;
    let name = text("name");
    let mut props = Map::new();
    let (base, node) = match ty {
        "int8" | "int16" => {
            props.insert("connect.type".into(), json!(ty));
            (json!("int"), Node::Int)
        }
        "int32" => (json!("int"), Node::Int),
        "int64" => (json!("long"), Node::Long),
        "float" => (json!("float"), Node::Float),
        "double" => (json!("double"), Node::Double),
        "boolean" => (json!("boolean"), Node::Bool),
        "string" => (json!("string"), Node::String),
        "bytes" => (json!("bytes"), Node::Bytes),
        "array" => {
            let items = object.get("items").ok_or("an array schema without items")?;
            let (items, node) = convert(items, context, false)?;
            (json!({ "type": "array", "items": items }), Node::Array(Box::new(node)))
        }
        "map" => {
            let key_type = object.get("keys").and_then(|k| k.get("type")).and_then(Value::as_str);
            if key_type != Some("string") {
                return Err("a map whose keys are not strings has no Avro map".into());
            }
            let values = object.get("values").ok_or("a map schema without values")?;
            let (values, node) = convert(values, context, false)?;
            (json!({ "type": "map", "values": values }), Node::Map(Box::new(node)))
        }
        "struct" => return record(object, name, context, ignore_optional),
        other => return Err(format!("Connect type {other:?} has no Avro form")),
    };
    let mut schema = base;
    add_meta(&mut props, object, name, &node)?;
    logical_type(&mut props, object, name);
    if !props.is_empty() {
        let mut full = match schema {
            Value::Object(map) => map,
            primitive => Map::from_iter([("type".to_string(), primitive)]),
        };
        full.extend(props);
        schema = Value::Object(full);
    }
    Ok(optional(object, schema, node, ignore_optional))
}

fn record(
    object: &Map<String, Value>,
    name: Option<&str>,
    context: &mut Context,
    ignore_optional: bool,
) -> Result<(Value, Node), String> {
    let full_name = name.unwrap_or("").to_string();
    let (namespace, short) = match name {
        Some(name) => match name.rsplit_once('.') {
            Some((namespace, short)) => (namespace.to_string(), short.to_string()),
            None => (String::new(), name.to_string()),
        },
        None => (DEFAULT_NAMESPACE.to_string(), DEFAULT_NAME.to_string()),
    };
    let full_name = if full_name.is_empty() { format!("{namespace}.{short}") } else { full_name };
    if let Some(node) = context.defined.get(&full_name) {
        // Avro defines a name once; later uses name it, relative to the
        // enclosing namespace as Avro writes references.
        let reference = if namespace == context.space { short } else { full_name.clone() };
        let node = node.clone();
        return Ok(optional(object, json!(reference), node, ignore_optional));
    }
    let mut schema = Map::new();
    schema.insert("type".into(), json!("record"));
    schema.insert("name".into(), json!(short));
    if namespace != context.space {
        schema.insert("namespace".into(), json!(namespace));
    }
    // Connect's doc becomes `connect.doc` only: AvroData takes a record's
    // Avro doc from a parameter Debezium never sets.
    let outer = std::mem::replace(&mut context.space, namespace);
    let mut fields = Vec::new();
    let mut nodes = Vec::new();
    let members = object.get("fields").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for member in members {
        let field_name =
            member.get("field").and_then(Value::as_str).ok_or("a struct member without a field name")?.to_string();
        let (field_schema, node) = match convert(member, context, false) {
            Ok(done) => done,
            Err(e) => {
                context.space = outer;
                return Err(format!("field {field_name:?}: {e}"));
            }
        };
        let mut field = Map::new();
        field.insert("name".into(), json!(field_name));
        field.insert("type".into(), field_schema);
        match member.get("default").filter(|d| !d.is_null()) {
            Some(default) => {
                field.insert("default".into(), avro_default(default, &node));
            }
            None if member.get("optional").and_then(Value::as_bool) == Some(true) => {
                field.insert("default".into(), Value::Null);
            }
            None => {}
        }
        fields.push(Value::Object(field));
        nodes.push((field_name, node));
    }
    context.space = outer;
    schema.insert("fields".into(), Value::Array(fields));
    let node = Node::Record(nodes);
    let mut props = Map::new();
    add_meta(&mut props, object, name, &node)?;
    schema.extend(props);
    context.defined.insert(full_name, node.clone());
    Ok(optional(object, Value::Object(schema), node, ignore_optional))
}

/// AvroData's `connect.*` properties: doc, version, parameters, default, name.
fn add_meta(
    props: &mut Map<String, Value>,
    object: &Map<String, Value>,
    name: Option<&str>,
    node: &Node,
) -> Result<(), String> {
    if let Some(doc) = object.get("doc").and_then(Value::as_str) {
        props.insert("connect.doc".into(), json!(doc));
    }
    if let Some(version) = object.get("version").filter(|v| !v.is_null()) {
        let version = version.as_i64().ok_or_else(|| format!("schema version {version} is not a number"))?;
        props.insert("connect.version".into(), json!(version));
    }
    if let Some(parameters) = object.get("parameters").and_then(Value::as_object) {
        props.insert("connect.parameters".into(), Value::Object(parameters.clone()));
    }
    if let Some(default) = object.get("default").filter(|d| !d.is_null()) {
        props.insert("connect.default".into(), avro_default(default, node));
    }
    if let Some(name) = name {
        props.insert("connect.name".into(), json!(name));
    }
    Ok(())
}

fn logical_type(props: &mut Map<String, Value>, object: &Map<String, Value>, name: Option<&str>) {
    let parameter = |key: &str| {
        object.get("parameters").and_then(|p| p.get(key)).and_then(Value::as_str).and_then(|v| v.parse::<u64>().ok())
    };
    let logical = match name {
        Some("org.apache.kafka.connect.data.Decimal") => {
            props.insert(
                "precision".into(),
                json!(parameter("connect.decimal.precision").unwrap_or(DEFAULT_DECIMAL_PRECISION)),
            );
            props.insert("scale".into(), json!(parameter("scale").unwrap_or(0)));
            "decimal"
        }
        Some("org.apache.kafka.connect.data.Date") => "date",
        Some("org.apache.kafka.connect.data.Time") => "time-millis",
        Some("org.apache.kafka.connect.data.Timestamp") => "timestamp-millis",
        _ => return,
    };
    props.insert("logicalType".into(), json!(logical));
}

/// An optional schema as a union with null: null first, unless the schema
/// has a default, which an Avro union takes from its first branch.
fn optional(object: &Map<String, Value>, schema: Value, node: Node, ignore_optional: bool) -> (Value, Node) {
    if ignore_optional || object.get("optional").and_then(Value::as_bool) != Some(true) {
        return (schema, node);
    }
    let null_first = object.get("default").is_none_or(Value::is_null);
    let union = if null_first { json!(["null", schema]) } else { json!([schema, "null"]) };
    (union, Node::Optional { node: Box::new(node), null_first })
}

/// A default as Avro's JSON writes one: bytes as a string of code points
/// 0–255, the rest as JsonConverter has them.
fn avro_default(default: &Value, node: &Node) -> Value {
    use base64::Engine as _;
    let inner = match node {
        Node::Optional { node, .. } => node,
        node => node,
    };
    match (inner, default) {
        (Node::Bytes, Value::String(encoded)) => match base64::engine::general_purpose::STANDARD.decode(encoded) {
            Ok(bytes) => json!(bytes.iter().map(|b| char::from(*b)).collect::<String>()),
            Err(_) => default.clone(),
        },
        _ => default.clone(),
    }
}
