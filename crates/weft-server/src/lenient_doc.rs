//! States in the OpenAPI document what the lenient reader (`weft_model::lenient`) accepts in
//! request bodies, so that a client generated from the document and the server agree: an
//! optional field also takes `null` (read as absent), a version is any unsigned 64-bit integer. A `PUT .../{name}` body
//! may leave out its `name` (the path's is used); one it gives must be the path's.

use std::collections::BTreeSet;

use serde_json::{json, Value};

/// The document with the lenient reader's rules stated on every schema a request body reaches.
pub fn state(doc: utoipa::openapi::OpenApi) -> Value {
    let mut v = serde_json::to_value(&doc).expect("the document is JSON");
    let bodies = request_schemas(&v);
    if let Some(schemas) = v
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        for (name, s) in schemas.iter_mut() {
            if bodies.contains(name) {
                widen(s);
            }
        }
    }
    updates_without_name(&mut v);
    v
}

/// Names of the component schemas request bodies reach, directly or through other schemas.
fn request_schemas(doc: &Value) -> BTreeSet<String> {
    let mut todo = Vec::new();
    for item in doc["paths"]
        .as_object()
        .into_iter()
        .flat_map(|p| p.values())
    {
        for op in item.as_object().into_iter().flat_map(|o| o.values()) {
            refs(&op["requestBody"], &mut todo);
        }
    }
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

/// Widens one schema and what it holds: optional properties take null, unsigned integers reach
/// 2^64 - 1. (Text given as a number or boolean is not stated: not every text field reads it.)
fn widen(s: &mut Value) {
    if !s.is_object() || s.get("$ref").is_some() {
        return;
    }
    let t = types(s);
    if t.iter().any(|x| x == "integer")
        && s["format"] == "int64"
        && s["minimum"].as_f64() == Some(0.0)
        && s.get("maximum").is_none()
    {
        let m = s.as_object_mut().expect("an object");
        m.remove("format");
        m.insert("maximum".into(), json!(u64::MAX));
    }
    let required: BTreeSet<String> = s["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str().map(String::from))
        .collect();
    if let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) {
        for (name, p) in props.iter_mut() {
            widen(p);
            if !required.contains(name) && p.get("type").is_some() {
                set_types(p, &["null"]);
            }
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(x) = s.get_mut(key) {
            widen(x);
        }
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(a) = s.get_mut(key).and_then(Value::as_array_mut) {
            a.iter_mut().for_each(widen);
        }
    }
}

/// `PUT .../{name}` bodies: the entity's schema without `name`, which the path gives (a `name`
/// in the body must be the path's, or the answer is 400).
fn updates_without_name(doc: &mut Value) {
    let mut made = Vec::new();
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        if !path.ends_with("/{name}") {
            continue;
        }
        let Some(body) = item.pointer_mut("/put/requestBody/content/application~1json/schema")
        else {
            continue;
        };
        let Some(r) = body.get("$ref").and_then(Value::as_str).map(String::from) else {
            continue;
        };
        let name = r.trim_start_matches("#/components/schemas/").to_string();
        let update = format!("{name}Update");
        body["$ref"] = json!(format!("#/components/schemas/{update}"));
        made.push((name, update));
    }
    let schemas = &mut doc["components"]["schemas"];
    for (name, update) in made {
        let mut s = schemas[&name].clone();
        if let Some(m) = s["properties"].as_object_mut() {
            m.remove("name");
        }
        if let Some(r) = s["required"].as_array_mut() {
            r.retain(|x| x != "name");
        }
        s["description"] = json!(format!(
            "{name} as written by PUT: the name is the path's (a `name` in the body must be it, \
             else 400)."
        ));
        schemas[&update] = s;
    }
}
