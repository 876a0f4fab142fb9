//! States in the OpenAPI document what the lenient reader (`weft_model::lenient`) accepts in
//! request bodies, so that a client generated from the document and the server agree: an
//! optional field also takes `null` (read as absent), a version is any unsigned 64-bit integer,
//! text also comes as a number or a boolean (read as its text: Gson's habit, kept for Coopr's
//! clients), and a `PUT .../{name}` body may leave out its `name` (the path's is used; one it
//! gives must be the path's, and the path's name follows the rules of the body's).
//! Schemas the server reads with plain serde (a node record) are stated as they are.

use std::collections::BTreeSet;

use serde_json::{json, Value};

/// Schemas read with plain serde, not the lenient reader: null only where the schema says so,
/// text only as text (their integers may be written `5.0`, as JSON Schema counts integers).
const STRICT: [&str; 7] = [
    "ApplyRequest",
    "ClusterSpec",
    "Node",
    "NodeProperties",
    "NodeAction",
    "TaskFailure",
    "SealedExportRequest",
];

/// Lists of names read as text only (`(schema, property)`): a number there is refused.
const TEXT_ONLY: [(&str, &str); 5] = [
    ("ClusterCreateRequest", "services"),
    ("SolveRequest", "services"),
    ("ClusterDefaults", "services"),
    ("LayoutConstraint", "mustcoexist"),
    ("LayoutConstraint", "cantcoexist"),
];

/// The document with the lenient reader's rules stated on every schema a request body reaches.
pub fn state(doc: utoipa::openapi::OpenApi) -> Value {
    let mut v = serde_json::to_value(&doc).expect("the document is JSON");
    let bodies = request_schemas(&v);
    if let Some(schemas) = v
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        for (name, s) in schemas.iter_mut() {
            if bodies.contains(name) && !STRICT.contains(&name.as_str()) {
                widen(s, name, true);
            }
        }
    }
    updates_without_name(&mut v);
    v
}

/// Names of the component schemas request bodies reach, directly or through other schemas.
fn request_schemas(doc: &Value) -> BTreeSet<String> {
    let mut bodies = Value::Array(Vec::new());
    for item in doc["paths"]
        .as_object()
        .into_iter()
        .flat_map(|p| p.values())
    {
        for op in item.as_object().into_iter().flat_map(|o| o.values()) {
            if let Some(a) = bodies.as_array_mut() {
                a.push(op["requestBody"].clone());
            }
        }
    }
    reach(doc, &bodies)
}

/// Names of the component schemas `v` reaches, directly or through other schemas.
pub(crate) fn reach(doc: &Value, v: &Value) -> BTreeSet<String> {
    let mut todo = Vec::new();
    refs(v, &mut todo);
    let mut seen = BTreeSet::new();
    while let Some(n) = todo.pop() {
        if seen.insert(n.clone()) {
            refs(&doc["components"]["schemas"][&n], &mut todo);
        }
    }
    seen
}

fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                out.push(r.trim_start_matches("#/components/schemas/").to_string());
            }
            m.values().for_each(|x| refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

fn types(s: &Value) -> Vec<String> {
    match &s["type"] {
        Value::String(t) => vec![t.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    }
}

fn set_types(s: &mut Value, add: &[&str]) {
    let mut t = types(s);
    for a in add {
        if !t.iter().any(|x| x == a) {
            t.push(a.to_string());
        }
    }
    s["type"] = json!(t);
}

/// Widens one schema (`owner`, a component's name) and what it holds: optional properties take
/// null, unsigned integers (int64 from a minimum of 0 or more, with no maximum: the u64s)
/// reach 2^64 - 1, text takes numbers and booleans (with `text`).
fn widen(s: &mut Value, owner: &str, text: bool) {
    if !s.is_object() || s.get("$ref").is_some() {
        return;
    }
    let t = types(s);
    if t.iter().any(|x| x == "integer")
        && s["format"] == "int64"
        && s["minimum"].as_f64().is_some_and(|m| m >= 0.0)
        && s.get("maximum").is_none()
    {
        let m = s.as_object_mut().expect("an object");
        m.remove("format");
        m.insert("maximum".into(), json!(u64::MAX));
    }
    // A set is read from a list that may repeat itself.
    if let Some(m) = s.as_object_mut() {
        m.remove("uniqueItems");
    }
    // Text with a pattern (a name, a DNS suffix) must be text.
    let plain = ["enum", "format", "pattern"]
        .iter()
        .all(|k| s.get(*k).is_none());
    if text && plain && t.iter().any(|x| x == "string") {
        set_types(s, &["number", "boolean"]);
    }
    let required: BTreeSet<String> = s["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str().map(String::from))
        .collect();
    if let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) {
        for (name, p) in props.iter_mut() {
            let text = text && !TEXT_ONLY.contains(&(owner, name.as_str()));
            widen(p, owner, text);
            if !required.contains(name) && p.get("type").is_some() {
                set_types(p, &["null"]);
            } else if !required.contains(name) && p.get("$ref").is_some() {
                *p = json!({"anyOf": [p.clone(), {"type": "null"}]});
            }
        }
    }
    if let Some(x) = s.get_mut("items") {
        widen(x, owner, text);
    }
    // A map of text (`fields`) or of maps (`providermap`): a null value is dropped, or empty.
    if let Some(x) = s.get_mut("additionalProperties") {
        widen(x, owner, text);
        if types(x).iter().any(|t| t == "string" || t == "object") {
            set_types(x, &["null"]);
        }
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(a) = s.get_mut(key).and_then(Value::as_array_mut) {
            a.iter_mut().for_each(|x| widen(x, owner, text));
        }
    }
}

/// `PUT .../{name}` bodies: the entity's schema without `name`, which the path gives (a `name`
/// in the body must be the path's, or the answer is 400). The path's `name` follows the rules
/// of the body's.
fn updates_without_name(doc: &mut Value) {
    let mut made = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        let r = item
            .pointer("/put/requestBody/content/application~1json/schema/$ref")
            .and_then(Value::as_str);
        if let (true, Some(r)) = (path.ends_with("/{name}"), r) {
            let name = r.trim_start_matches("#/components/schemas/").to_string();
            made.push((path.clone(), name));
        }
    }
    for (path, name) in made {
        let update = format!("{name}Update");
        let schemas = &mut doc["components"]["schemas"];
        let mut s = schemas[&name].clone();
        let mut rules = json!({"type": "string"});
        if let Some(n) = s["properties"]
            .as_object_mut()
            .and_then(|m| m.remove("name"))
        {
            for key in ["minLength", "maxLength", "pattern"] {
                if let Some(v) = n.get(key) {
                    rules[key] = v.clone();
                }
            }
        }
        if let Some(r) = s["required"].as_array_mut() {
            r.retain(|x| x != "name");
        }
        s["description"] = json!(format!(
            "{name} as written by PUT: the name is the path's (a `name` in the body must be it, \
             else 400)."
        ));
        schemas[&update] = s;
        let put = &mut doc["paths"][&path]["put"];
        put["requestBody"]["content"]["application/json"]["schema"]["$ref"] =
            json!(format!("#/components/schemas/{update}"));
        for p in put["parameters"].as_array_mut().into_iter().flatten() {
            if p["name"] == "name" && p["in"] == "path" {
                p["schema"] = rules.clone();
            }
        }
    }
}
