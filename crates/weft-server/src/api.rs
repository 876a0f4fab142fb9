//! Registers routes and documents them in the same call, so the OpenAPI document can never miss a
//! route. Request and response schemas name the model types the handlers read and write (derived
//! with utoipa from the same Rust types).

use std::collections::BTreeMap;

use axum::handler::Handler;
use axum::routing::{on, MethodFilter};
use axum::Router;
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::{
    ContentBuilder, ObjectBuilder, PathItem, Ref, RefOr, ResponseBuilder, Schema, Type,
};

use crate::state::AppState;

/// What a request or response body holds.
#[derive(Debug, Clone, Copy)]
pub enum Body {
    /// A JSON object of the named component schema.
    Json(&'static str),
    /// A JSON array of the named component schema.
    Array(&'static str),
    /// A map from names to the named schema.
    MapOf(&'static str),
    /// Any JSON object.
    AnyJson,
    /// Plain text.
    Text,
    /// Raw bytes.
    Bytes,
    /// A stream of events: Server-Sent Events, or one JSON object per line (NDJSON).
    Events,
    /// A JSON object of the named component schema, or the same as CSV text.
    JsonOrCsv(&'static str),
}

impl Body {
    /// The media types the body may come as, each with its schema.
    fn contents(self) -> Vec<(&'static str, RefOr<Schema>)> {
        match self {
            Body::Events => {
                let (sse, text) = self.content();
                vec![(sse, text.clone()), ("application/x-ndjson", text)]
            }
            Body::JsonOrCsv(n) => {
                let csv = RefOr::T(Schema::Object(
                    ObjectBuilder::new().schema_type(Type::String).build(),
                ));
                vec![Body::Json(n).content(), ("text/csv", csv)]
            }
            other => vec![other.content()],
        }
    }

    fn content(self) -> (&'static str, RefOr<Schema>) {
        let reference = |n: &str| RefOr::Ref(Ref::from_schema_name(n));
        match self {
            Body::Json(n) | Body::JsonOrCsv(n) => ("application/json", reference(n)),
            Body::Array(n) => (
                "application/json",
                RefOr::T(Schema::Array(
                    utoipa::openapi::schema::ArrayBuilder::new()
                        .items(reference(n))
                        .build(),
                )),
            ),
            Body::MapOf(n) => (
                "application/json",
                RefOr::T(Schema::Object(
                    ObjectBuilder::new()
                        .schema_type(Type::Object)
                        .additional_properties(Some(reference(n)))
                        .build(),
                )),
            ),
            Body::AnyJson => (
                "application/json",
                RefOr::T(Schema::Object(
                    ObjectBuilder::new().schema_type(Type::Object).build(),
                )),
            ),
            Body::Text => (
                "text/plain",
                RefOr::T(Schema::Object(
                    ObjectBuilder::new().schema_type(Type::String).build(),
                )),
            ),
            Body::Events => (
                "text/event-stream",
                RefOr::T(Schema::Object(
                    ObjectBuilder::new().schema_type(Type::String).build(),
                )),
            ),
            Body::Bytes => (
                "application/octet-stream",
                RefOr::T(Schema::Object(
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                            utoipa::openapi::KnownFormat::Binary,
                        )))
                        .build(),
                )),
            ),
        }
    }
}

/// The largest value of a [`Param::Int`]: 2^53 - 1, which every client's JSON numbers hold.
pub const MAX_INT: u64 = 9_007_199_254_740_991;

/// What a path or query parameter holds, so that a client generated from the document checks
/// what the server checks.
#[derive(Debug, Clone, Copy)]
pub enum Param {
    /// Any text (an empty value included).
    Text,
    /// A path segment: text, never empty.
    PathText,
    /// A version: an integer from 1 to 2^63 - 1.
    Version,
    /// An integer, at least this.
    Int(i64),
    /// A time or duration: an integer from 0 to 2^63 - 1.
    Time,
    /// One of these words.
    OneOf(&'static [&'static str]),
}

impl Param {
    fn schema(self) -> Schema {
        let b = ObjectBuilder::new();
        Schema::Object(match self {
            // An empty query value is read as absent; an empty path segment never reaches a route.
            Param::Text => b.schema_type(Type::String).build(),
            Param::PathText => b.schema_type(Type::String).min_length(Some(1)).build(),
            // Versions are read as 64-bit signed integers.
            Param::Version => b
                .schema_type(Type::Integer)
                .minimum(Some(1))
                .maximum(Some(i64::MAX as isize))
                .build(),
            Param::Time => b
                .schema_type(Type::Integer)
                .minimum(Some(0))
                .maximum(Some(i64::MAX as isize))
                .build(),
            // At most 2^53 - 1: every client's JSON numbers hold it exactly.
            Param::Int(min) => b
                .schema_type(Type::Integer)
                .minimum(Some(min as f64))
                .maximum(Some(MAX_INT as f64))
                .build(),
            Param::OneOf(words) => b
                .schema_type(Type::String)
                .enum_values(Some(words.iter().copied()))
                .build(),
        })
    }

    /// Path parameters by name: versions are positive numbers, plugin kinds are two words, event
    /// ids are positive integers.
    fn of_path(name: &str) -> Param {
        match name {
            "version" => Param::Version,
            "ptype" => Param::OneOf(&["providertypes", "automatortypes"]),
            "event" => Param::Int(1),
            _ => Param::PathText,
        }
    }
}

/// The documentation of one operation.
#[derive(Debug, Clone)]
pub struct Op {
    summary: String,
    tag: String,
    request: Option<Body>,
    request_required: bool,
    responses: Vec<(u16, &'static str, Option<Body>)>,
    query: Vec<(&'static str, &'static str, Param)>,
    rules: Vec<(&'static str, &'static str)>,
}

/// Starts documenting an operation.
pub fn op(tag: impl Into<String>, summary: impl Into<String>) -> Op {
    Op {
        summary: summary.into(),
        tag: tag.into(),
        request: None,
        request_required: false,
        responses: Vec::new(),
        query: Vec::new(),
        rules: Vec::new(),
    }
}

impl Op {
    /// A request body the operation needs.
    pub fn body(mut self, b: Body) -> Self {
        self.request = Some(b);
        self.request_required = true;
        self
    }

    /// A request body the operation may do without.
    pub fn optional_body(mut self, b: Body) -> Self {
        self.request = Some(b);
        self.request_required = false;
        self
    }

    /// A response with a body.
    pub fn ok(mut self, code: u16, desc: &'static str, b: Body) -> Self {
        self.responses.push((code, desc, Some(b)));
        self
    }

    /// A response; error responses carry a plain-text message.
    pub fn status(mut self, code: u16, desc: &'static str) -> Self {
        let body = if code >= 400 { Some(Body::Text) } else { None };
        self.responses.push((code, desc, body));
        self
    }

    /// A query parameter that takes any text.
    pub fn query(self, name: &'static str, desc: &'static str) -> Self {
        self.query_as(name, desc, Param::Text)
    }

    /// A query parameter whose values are limited.
    pub fn query_as(mut self, name: &'static str, desc: &'static str, p: Param) -> Self {
        self.query.push((name, desc, p));
        self
    }

    /// A rule the server checks that no schema states (one field against another, or against
    /// the path): listed in the operation's description and in `x-weft-rules` (`{id, rule}`),
    /// which the fuzz test's hooks honour by `id`.
    pub fn rule(mut self, id: &'static str, rule: &'static str) -> Self {
        self.rules.push((id, rule));
        self
    }

    fn has(&self, code: u16) -> bool {
        self.responses.iter().any(|(c, _, _)| *c == code)
    }

    /// Adds the error answers every operation of its kind can give, unless it documents them
    /// itself: a bad header, body or parameter (400), identity or token refused (401), a path
    /// naming nothing or a caller's tenant that does not exist (404), a body over the limit (413).
    fn with_common_errors(mut self, path: &str, internal: bool) -> Self {
        let open = path == "/status" || path == "/v2/openapi.json";
        let identity = !internal && !open;
        let add = |code: u16, desc: &'static str, op: &mut Op| {
            if !op.has(code) {
                op.responses.push((code, desc, Some(Body::Text)));
            }
        };
        let takes_input = self.request.is_some() || !self.query.is_empty() || path.contains('{');
        if identity || takes_input {
            add(400, "invalid input; the message names the field", &mut self);
        }
        if identity {
            add(
                401,
                "identity headers missing, or (auth apikey) the API key missing or not accepted",
                &mut self,
            );
            add(
                404,
                "not found: what the path names, or the caller's tenant",
                &mut self,
            );
        } else if internal && !open {
            add(
                401,
                "provisioner token missing or not accepted (auth apikey)",
                &mut self,
            );
        }
        if path.contains('{') {
            add(404, "not found", &mut self);
        }
        if self.request.is_some() {
            add(413, "request body too large", &mut self);
        }
        self.responses.sort_by_key(|(c, _, _)| *c);
        self
    }
}

/// States an operation's rules in its description and in `x-weft-rules`.
fn with_rules(b: OperationBuilder, rules: &[(&'static str, &'static str)]) -> OperationBuilder {
    let text: Vec<String> = rules.iter().map(|(_, r)| format!("- {r}")).collect();
    let list: Vec<serde_json::Value> = rules
        .iter()
        .map(|(id, r)| serde_json::json!({"id": id, "rule": r}))
        .collect();
    b.description(Some(format!(
        "Rules the server checks beyond the schema:\n{}",
        text.join("\n")
    )))
    .extensions(Some(
        utoipa::openapi::extensions::ExtensionsBuilder::new()
            .add("x-weft-rules", serde_json::Value::Array(list))
            .build(),
    ))
}

/// A router and its OpenAPI paths, built together.
pub struct Api {
    /// The routes registered so far.
    pub router: Router<AppState>,
    /// The OpenAPI path items of those routes, keyed by path.
    pub paths: BTreeMap<String, PathItem>,
    /// Appended to every operation's tag (`""` or `" (internal port)"`).
    tag_suffix: &'static str,
}

impl Api {
    /// An empty set of routes; `tag_suffix` is appended to every operation's tag (`""` or `"
    /// (internal port)"`).
    pub fn new(tag_suffix: &'static str) -> Self {
        Api {
            router: Router::new(),
            paths: BTreeMap::new(),
            tag_suffix,
        }
    }

    /// Registers `handler` for `method` on `path` and writes `doc` into the OpenAPI paths, with the
    /// errors every route shares added.
    pub fn route<H, T>(mut self, method: MethodFilter, path: &str, handler: H, doc: Op) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.router = self.router.route(path, on(method, handler));
        self.document(method, path, doc);
        self
    }

    fn document(&mut self, method: MethodFilter, path: &str, doc: Op) {
        let doc = doc.with_common_errors(path, !self.tag_suffix.is_empty());
        let tag = format!("{}{}", doc.tag, self.tag_suffix);
        let mut b = OperationBuilder::new()
            .summary(Some(doc.summary.clone()))
            .tag(tag);
        if !doc.rules.is_empty() {
            b = with_rules(b, &doc.rules);
        }
        for seg in path.split('/') {
            if let Some(name) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                b = b.parameter(
                    ParameterBuilder::new()
                        .name(name)
                        .parameter_in(ParameterIn::Path)
                        .required(utoipa::openapi::Required::True)
                        .schema(Some(Param::of_path(name).schema())),
                );
            }
        }
        for (name, desc, p) in &doc.query {
            b = b.parameter(
                ParameterBuilder::new()
                    .name(*name)
                    .description(Some(*desc))
                    .parameter_in(ParameterIn::Query)
                    .required(utoipa::openapi::Required::False)
                    .schema(Some(p.schema())),
            );
        }
        if let Some(body) = doc.request {
            let (mime, schema) = body.content();
            let required = if doc.request_required {
                utoipa::openapi::Required::True
            } else {
                utoipa::openapi::Required::False
            };
            b = b.request_body(Some(
                RequestBodyBuilder::new()
                    .content(mime, ContentBuilder::new().schema(Some(schema)).build())
                    .required(Some(required))
                    .build(),
            ));
        }
        for (code, desc, body) in doc.responses {
            let mut r = ResponseBuilder::new().description(desc);
            if let Some(body) = body {
                for (mime, schema) in body.contents() {
                    r = r.content(mime, ContentBuilder::new().schema(Some(schema)).build());
                }
            }
            b = b.response(code.to_string(), r.build());
        }
        let method = if method == MethodFilter::GET {
            HttpMethod::Get
        } else if method == MethodFilter::POST {
            HttpMethod::Post
        } else if method == MethodFilter::PUT {
            HttpMethod::Put
        } else if method == MethodFilter::DELETE {
            HttpMethod::Delete
        } else {
            HttpMethod::Patch
        };
        let openapi_path = path.to_string();
        let op = b.build();
        match self.paths.get_mut(&openapi_path) {
            Some(item) => {
                let fresh = PathItem::new(method, op);
                item.merge_operations(fresh);
            }
            None => {
                self.paths.insert(openapi_path, PathItem::new(method, op));
            }
        }
    }
}
