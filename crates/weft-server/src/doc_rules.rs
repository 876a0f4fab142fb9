//! States in the OpenAPI document the rules the server checks that derive macros cannot express:
//! which service action takes the health-check settings, exactly one of `clusterTemplate` and
//! `template` in a layout preview, what a rollout's `maxInFlight` and `onFailure` may say, and
//! the rules no schema language states (a template's initial lease within its max lease), which
//! are listed in `x-weft-rules` on the schema and on every operation whose request body reaches
//! it (see `api::Op::rule`).

use serde_json::{json, Value};
use weft_model::{HealthcheckSpec, ProvisionerAction};

/// Rules of a component schema that no schema language states: `(schema, id, rule)`.
const SCHEMA_RULES: [(&str, &str, &str); 3] = [
    (
        "LeaseDuration",
        "lease-initial-within-max",
        "administration.leaseduration: with a max lease (not 0), the initial lease is neither 0 \
         (forever) nor above the max",
    ),
    (
        "SizeConstraint",
        "min-not-above-max",
        "constraints.size: min (default 1) is not above max (default unbounded)",
    ),
    (
        "Quantities",
        "min-not-above-max",
        "constraints.services.*.quantities: min (default 0) is not above max (default unbounded)",
    ),
];

/// The document with these rules stated.
pub fn state(doc: &mut Value) {
    let schemas = &mut doc["components"]["schemas"];
    // An unknown field in a create request is refused, naming the nearest known one.
    schemas["ClusterCreateRequest"]["additionalProperties"] = json!(false);
    actions(schemas);
    to_resolve(schemas);
    solve(schemas);
    rollout(schemas);
    for (name, id, rule) in SCHEMA_RULES {
        schemas[name]["x-weft-rules"] = json!([{"id": id, "rule": rule}]);
    }
    if let Some(body) =
        doc.pointer_mut("/paths/~1v2~1resolve/post/requestBody/content/application~1json/schema")
    {
        *body = json!({"$ref": "#/components/schemas/TemplateToResolve"});
    }
    operation_rules(doc);
}

/// A template to resolve (`POST /v2/resolve`, a draft in `POST /v2/solve`): it extends a
/// template, includes partials, or has default services and a default provider of its own.
fn to_resolve(schemas: &mut Value) {
    schemas["TemplateToResolve"] = json!({
        "description": "A cluster template to resolve: it extends a template, includes \
                        partials, or has default services and a default provider of its own \
                        (what a stored parent or partial leaves incomplete or invalid is a 409).",
        "allOf": [{"$ref": "#/components/schemas/ClusterTemplate"}],
        "anyOf": [
            {"required": ["extends"], "properties": {"extends": {"type": "object"}}},
            {"required": ["includes"],
             "properties": {"includes": {"type": "array", "minItems": 1}}},
            {"required": ["defaults"],
             "properties": {"defaults": {
                 "type": "object",
                 "required": ["services", "provider"],
                 "properties": {
                     "services": {"type": "array", "minItems": 1},
                     "provider": {"type": "string", "pattern": "\\S"}
                 }
             }}}
        ]
    });
}

/// `provisioner.actions`: each action by name, `status` not among them (a node's provider
/// answers it); only `healthcheck` takes `timeout`, `tries` and `interval`.
fn actions(schemas: &mut Value) {
    let mut health = schemas["ServiceAction"].clone();
    let setting = |(min, max): (u64, u64), what: &str| json!({"type": ["integer", "null"], "minimum": min, "maximum": max, "description": what});
    health["properties"]["timeout"] = setting(
        HealthcheckSpec::TIMEOUT_RANGE,
        "seconds one try may run (default 30)",
    );
    health["properties"]["tries"] = setting(
        HealthcheckSpec::TRIES_RANGE,
        "tries before the service counts as unhealthy (default 3)",
    );
    health["properties"]["interval"] = setting(
        HealthcheckSpec::INTERVAL_RANGE,
        "seconds between tries (default 5)",
    );
    health["description"] = json!("The healthcheck action (weft extension): the automator type, its fields, and how the check runs.");
    let other = &mut schemas["ServiceAction"];
    for name in ["timeout", "tries", "interval"] {
        other["properties"][name] = json!({
            "type": "null",
            "description": "only the healthcheck action takes it (null is read as absent)"
        });
    }
    other["description"] = json!(
        "One service action: the automator type and its admin fields (the healthcheck action \
         is a HealthcheckAction)."
    );
    schemas["HealthcheckAction"] = health;
    let mut props = serde_json::Map::new();
    for a in ProvisionerAction::ALL {
        let name = a.upper().to_ascii_lowercase();
        let schema = match a {
            ProvisionerAction::Status => continue,
            ProvisionerAction::Healthcheck => "HealthcheckAction",
            _ => "ServiceAction",
        };
        props.insert(
            name,
            json!({"$ref": format!("#/components/schemas/{schema}")}),
        );
    }
    schemas["ServiceProvisioner"]["properties"]["actions"] = json!({
        "type": ["object", "null"],
        "description": "The service's lifecycle actions by name.",
        "properties": props,
        "additionalProperties": false
    });
}

/// `POST /v2/solve`: exactly one of `clusterTemplate` (a name) and `template` (a body); null
/// is read as absent.
fn solve(schemas: &mut Value) {
    schemas["SolveRequest"]["properties"]["template"] = json!({
        "description": "A template body, saved or not (Coopr's template JSON).",
        "anyOf": [{"$ref": "#/components/schemas/TemplateToResolve"}, {"type": "null"}]
    });
    schemas["SolveRequest"]["oneOf"] = json!([
        {"required": ["clusterTemplate"],
         "properties": {"clusterTemplate": {"not": {"type": "null"}}, "template": {"type": "null"}}},
        {"required": ["template"],
         "properties": {"template": {"type": "object"}, "clusterTemplate": {"type": "null"}}}
    ]);
}

/// A rollout's `maxInFlight` (a count from 1, or a percentage from 1% to 100%) and `onFailure`.
fn rollout(schemas: &mut Value) {
    let props = &mut schemas["RolloutSpec"]["properties"];
    props["maxInFlight"] = json!({
        "description": "Nodes changed at once after the canaries: a count (at least 1) or a \
                        percentage of the nodes changed, such as \"25%\" (default 1).",
        "anyOf": [
            {"type": "integer", "minimum": 1, "maximum": u64::MAX},
            {"type": "string", "pattern": "^(100|[1-9][0-9]?)%$"},
            {"type": "string", "pattern": "^[1-9][0-9]{0,17}$"},
            {"type": "null"}
        ]
    });
    props["onFailure"] = json!({
        "description": "What a failed health gate does: pause (default) or rollback.",
        "type": ["string", "null"],
        "enum": ["pause", "rollback", null]
    });
}

/// Lists each schema rule on the operations whose request body reaches that schema.
fn operation_rules(doc: &mut Value) {
    let reach = crate::lenient_doc::reach;
    let mut found = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in item.as_object().into_iter().flatten() {
            let names = reach(doc, &op["requestBody"]);
            for (schema, id, rule) in SCHEMA_RULES {
                if names.contains(schema) {
                    found.push((path.clone(), method.clone(), id, rule));
                }
            }
        }
    }
    for (path, method, id, rule) in found {
        let op = &mut doc["paths"][&path][&method];
        let text = op["description"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| "Rules the server checks beyond the schema:".to_string());
        op["description"] = json!(format!("{text}\n- {rule}"));
        match op["x-weft-rules"].as_array_mut() {
            Some(list) => list.push(json!({"id": id, "rule": rule})),
            None => op["x-weft-rules"] = json!([{"id": id, "rule": rule}]),
        }
    }
}
