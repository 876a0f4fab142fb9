//! Macro expansion (coopr-internals §3.12) of cluster config and service action fields.
//!
//! A macro is the text between two `%`. `%%` stands for a literal `%` (weft; Coopr kept `%%`), and a
//! `%` with no closing `%` is plain text (as in Coopr). Grammar, with optional spaces around tokens:
//!
//! ```text
//! macro := "join(" inner "," literal ")" | inner
//! inner := "map(" basic "," literal ")" | basic
//! basic := name [ "[" digits "]" ]
//! literal := '...' | "..."          (no escapes)
//! ```
//!
//! Names (`T` is an IP type, `bind_v4` when omitted; `S` a service, dots allowed):
//! `host.service.S`, `ip.service.S`, `ip.T.service.S` (lists over the nodes with S, sorted by
//! nodenum, joined with `,` unless `join` says otherwise; `[i]` picks the i-th, 0-based);
//! `num.service.S`; `instance.self.service.S` (1-based rank of the current node among the nodes with
//! S); `host.self`, `ip.self`, `ip.T.self`; `host.self.service.S`, `ip.self.service.S`,
//! `ip.T.self.service.S` (the current node's host or address if it has S; Coopr documented these
//! but never made them work); `cluster.owner`.
//!
//! `map(x,'fmt')` replaces every `$` in fmt with each value (`$$` is a literal `$`).
//!
//! Null rule, as in Coopr: a macro about a service on no node (or a self form about a service the
//! current node lacks) is null. If every macro in a string is null, the macros are left as written;
//! otherwise null macros become the empty string.

use std::collections::HashMap;

use serde_json::Value;

use crate::error::PlanError;
use crate::layout::{sorted, PlanNode, DEFAULT_IP_TYPE};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Name {
    HostOf(String),
    IpOf(Option<String>, String),
    Num(String),
    Instance(String),
    HostSelf,
    IpSelf(Option<String>),
    HostSelfOf(String),
    IpSelfOf(Option<String>, String),
    Owner,
}

impl Name {
    fn is_list(&self) -> bool {
        matches!(self, Name::HostOf(_) | Name::IpOf(..))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Expr {
    name: Name,
    index: Option<usize>,
    map: Option<String>,
    join: Option<String>,
}

#[derive(Debug)]
enum Piece<'s> {
    Text(&'s str),
    Percent,
    Macro {
        pos: usize,
        raw: &'s str,
        expr: Expr,
    },
}

fn err(pos: usize, problem: impl Into<String>) -> PlanError {
    PlanError::Macro {
        at: String::new(),
        pos,
        problem: problem.into(),
    }
}

/// Split a string into text, `%%` escapes and parsed macros.
fn scan(s: &str) -> Result<Vec<Piece<'_>>, PlanError> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut text_start = 0;
    let bytes = s.as_bytes();
    while i < bytes.len() {
        if bytes[i] != b'%' {
            i += 1;
            continue;
        }
        if text_start < i {
            out.push(Piece::Text(&s[text_start..i]));
        }
        if bytes.get(i + 1) == Some(&b'%') {
            out.push(Piece::Percent);
            i += 2;
        } else if let Some(len) = s[i + 1..].find('%') {
            let raw = &s[i + 1..i + 1 + len];
            let expr = parse(raw)
                .map_err(|(off, p)| err(i, format!("in %{raw}% at offset {off}: {p}")))?;
            out.push(Piece::Macro { pos: i, raw, expr });
            i += len + 2;
        } else {
            // A lone `%` is plain text.
            out.push(Piece::Text(&s[i..]));
            i = bytes.len();
        }
        text_start = i;
    }
    if text_start < bytes.len() {
        out.push(Piece::Text(&s[text_start..]));
    }
    Ok(out)
}

struct Parser<'s> {
    s: &'s str,
    i: usize,
}

type PResult<T> = Result<T, (usize, String)>;

impl<'s> Parser<'s> {
    fn ws(&mut self) {
        while self.s[self.i..].starts_with(' ') {
            self.i += 1;
        }
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        if self.s[self.i..].starts_with(tok) {
            self.i += tok.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, tok: &str, what: &str) -> PResult<()> {
        if self.eat(tok) {
            Ok(())
        } else {
            Err((self.i, format!("expected '{tok}' {what}")))
        }
    }

    fn literal(&mut self) -> PResult<String> {
        self.ws();
        let quote = match self.s[self.i..].chars().next() {
            Some(q @ ('\'' | '"')) => q,
            _ => return Err((self.i, "expected a quoted literal".into())),
        };
        let start = self.i + 1;
        match self.s[start..].find(quote) {
            Some(len) => {
                self.i = start + len + 1;
                Ok(self.s[start..start + len].to_string())
            }
            None => Err((self.i, "unterminated literal".into())),
        }
    }

    fn basic(&mut self) -> PResult<(Name, Option<usize>)> {
        self.ws();
        let start = self.i;
        let len = self.s[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
            .unwrap_or(self.s.len() - start);
        if len == 0 {
            return Err((start, "expected a macro name".into()));
        }
        self.i += len;
        let name = name(&self.s[start..start + len]).map_err(|p| (start, p))?;
        let index = if self.eat("[") {
            let ds = self.i;
            let dl = self.s[ds..]
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(self.s.len() - ds);
            if dl == 0 {
                return Err((ds, "expected digits inside [ ]".into()));
            }
            let n = self.s[ds..ds + dl]
                .parse::<usize>()
                .map_err(|_| (ds, "index is too large".to_string()))?;
            self.i += dl;
            self.expect("]", "after the index")?;
            if !name.is_list() {
                return Err((
                    ds,
                    "an index applies only to host.service and ip.service lists".into(),
                ));
            }
            Some(n)
        } else {
            None
        };
        Ok((name, index))
    }

    fn inner(&mut self) -> PResult<Expr> {
        if self.eat("map(") {
            let (name, index) = self.basic()?;
            self.expect(",", "after the map argument")?;
            let fmt = self.literal()?;
            self.expect(")", "to close map(")?;
            Ok(Expr {
                name,
                index,
                map: Some(fmt),
                join: None,
            })
        } else {
            let (name, index) = self.basic()?;
            Ok(Expr {
                name,
                index,
                map: None,
                join: None,
            })
        }
    }

    fn expr(&mut self) -> PResult<Expr> {
        let e = if self.eat("join(") {
            let mut e = self.inner()?;
            self.expect(",", "after the join argument")?;
            e.join = Some(self.literal()?);
            self.expect(")", "to close join(")?;
            e
        } else {
            self.inner()?
        };
        self.ws();
        if self.i < self.s.len() {
            return Err((self.i, format!("unexpected '{}'", &self.s[self.i..])));
        }
        Ok(e)
    }
}

fn parse(body: &str) -> PResult<Expr> {
    Parser { s: body, i: 0 }.expr()
}

fn name(n: &str) -> Result<Name, String> {
    let service = |rest: &str| -> Result<String, String> {
        if rest.is_empty() {
            Err(format!("'{n}' names no service"))
        } else {
            Ok(rest.to_string())
        }
    };
    if n == "cluster.owner" {
        return Ok(Name::Owner);
    }
    if n == "host.self" {
        return Ok(Name::HostSelf);
    }
    if let Some(rest) = n.strip_prefix("host.self.service.") {
        return Ok(Name::HostSelfOf(service(rest)?));
    }
    if let Some(rest) = n.strip_prefix("host.service.") {
        return Ok(Name::HostOf(service(rest)?));
    }
    if let Some(rest) = n.strip_prefix("num.service.") {
        return Ok(Name::Num(service(rest)?));
    }
    if let Some(rest) = n.strip_prefix("instance.self.service.") {
        return Ok(Name::Instance(service(rest)?));
    }
    if let Some(rest) = n.strip_prefix("ip.") {
        // ip.self | ip.self.service.S | ip.service.S | ip.T.self | ip.T.self.service.S | ip.T.service.S
        let (ty, rest) =
            if rest == "self" || rest.starts_with("self.") || rest.starts_with("service.") {
                (None, rest)
            } else {
                match rest.split_once('.') {
                    Some((t, r)) if !t.is_empty() => (Some(t.to_string()), r),
                    _ => return Err(format!("unknown macro '{n}'")),
                }
            };
        if rest == "self" {
            return Ok(Name::IpSelf(ty));
        }
        if let Some(s) = rest.strip_prefix("self.service.") {
            return Ok(Name::IpSelfOf(ty, service(s)?));
        }
        if let Some(s) = rest.strip_prefix("service.") {
            return Ok(Name::IpOf(ty, service(s)?));
        }
    }
    Err(format!("unknown macro '{n}'"))
}

/// Check the macro syntax of a string without a cluster (Coopr's `Expander.validate`).
pub fn validate(s: &str) -> Result<(), PlanError> {
    scan(s).map(|_| ())
}

/// The services the macros of `s` name, in order of appearance, each once: `%ip.service.web%`,
/// `%num.service.db%`, `%host.self.service.kv%`... An error if a macro does not parse (as
/// [`validate`]).
pub fn named_services(s: &str) -> Result<Vec<String>, PlanError> {
    let mut out: Vec<String> = Vec::new();
    for piece in scan(s)? {
        let Piece::Macro { expr, .. } = piece else {
            continue;
        };
        let svc = match expr.name {
            Name::HostOf(svc)
            | Name::IpOf(_, svc)
            | Name::Num(svc)
            | Name::Instance(svc)
            | Name::HostSelfOf(svc)
            | Name::IpSelfOf(_, svc) => svc,
            Name::HostSelf | Name::IpSelf(_) | Name::Owner => continue,
        };
        if !out.contains(&svc) {
            out.push(svc);
        }
    }
    Ok(out)
}

/// The services whose every node a plain macro of `s` lists (no index, `map` or `join`), with
/// the macro's text: `http://%host.service.web%/` names `web`. Over several nodes such a macro
/// reads as a comma-separated list, which in a link is no URL. A string that does not parse names
/// none.
pub fn plain_service_macros(s: &str) -> Vec<(String, String)> {
    if !s.contains('%') {
        return Vec::new();
    }
    let Ok(pieces) = scan(s) else {
        return Vec::new();
    };
    pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Macro { raw, expr, .. }
                if expr.index.is_none() && expr.map.is_none() && expr.join.is_none() =>
            {
                match &expr.name {
                    Name::HostOf(svc) | Name::IpOf(_, svc) => {
                        Some((svc.clone(), format!("%{raw}%")))
                    }
                    _ => None,
                }
            }
            _ => None,
        })
        .collect()
}

/// Whether a string has a macro about other nodes' hosts or addresses (or one that does not parse).
pub(crate) fn refers_to_other_nodes(s: &str) -> bool {
    if !s.contains('%') {
        return false;
    }
    match scan(s) {
        Ok(pieces) => pieces
            .iter()
            .any(|p| matches!(p, Piece::Macro { expr, .. } if matches!(expr.name, Name::HostOf(_) | Name::IpOf(..)))),
        Err(_) => true,
    }
}

/// A layout indexed for macro expansion. Build once per cluster, then expand for each node.
#[derive(Debug)]
pub struct MacroContext<'a> {
    nodes: Vec<&'a PlanNode>,
    by_id: HashMap<&'a str, usize>,
    by_service: HashMap<&'a str, Vec<usize>>,
    owner: &'a str,
}

enum Val {
    Null,
    One(String),
    List(Vec<String>),
}

impl<'a> MacroContext<'a> {
    /// Index the layout (nodes are ordered by nodenum). `owner` is the cluster owner's user id.
    pub fn new(nodes: &'a [PlanNode], owner: &'a str) -> Result<MacroContext<'a>, PlanError> {
        let nodes = sorted(nodes, "macro")?;
        let mut by_id = HashMap::new();
        let mut by_service: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            by_id.insert(n.id.as_str(), i);
            for s in &n.services {
                by_service.entry(s.as_str()).or_default().push(i);
            }
        }
        Ok(MacroContext {
            nodes,
            by_id,
            by_service,
            owner,
        })
    }

    fn current(&self, id: Option<&str>, pos: usize, raw: &str) -> Result<&'a PlanNode, PlanError> {
        match id {
            None => Err(err(
                pos,
                format!("%{raw}% needs a current node, and there is none"),
            )),
            Some(id) => match self.by_id.get(id) {
                Some(&i) => Ok(self.nodes[i]),
                None => Err(err(pos, format!("node {id} is not in the layout"))),
            },
        }
    }

    fn with(&self, s: &str) -> &[usize] {
        self.by_service.get(s).map(Vec::as_slice).unwrap_or(&[])
    }

    fn host(node: &PlanNode, pos: usize) -> Result<String, PlanError> {
        if node.hostname.is_empty() {
            Err(err(pos, format!("node {} has no hostname yet", node.id)))
        } else {
            Ok(node.hostname.clone())
        }
    }

    fn ip(node: &PlanNode, ty: &Option<String>, pos: usize) -> Result<String, PlanError> {
        let ty = ty.as_deref().unwrap_or(DEFAULT_IP_TYPE);
        match node.ipaddresses.get(ty) {
            Some(ip) => Ok(ip.clone()),
            None => Err(err(
                pos,
                format!("node {} has no {ty} address yet", node.id),
            )),
        }
    }

    fn eval(&self, me: Option<&str>, pos: usize, raw: &str, e: &Expr) -> Result<Val, PlanError> {
        let val = match &e.name {
            Name::Owner => Val::One(self.owner.to_string()),
            Name::Num(s) => Val::One(self.with(s).len().to_string()),
            Name::HostOf(s) | Name::IpOf(_, s) => {
                let on = self.with(s);
                let get = |n: &PlanNode| match &e.name {
                    Name::IpOf(ty, _) => Self::ip(n, ty, pos),
                    _ => Self::host(n, pos),
                };
                if let Some(i) = e.index {
                    match on.get(i) {
                        Some(&k) => Val::One(get(self.nodes[k])?),
                        None => {
                            return Err(err(
                                pos,
                                format!(
                                    "index {i} is out of range: service {s} is on {} nodes",
                                    on.len()
                                ),
                            ))
                        }
                    }
                } else if on.is_empty() {
                    Val::Null
                } else {
                    Val::List(
                        on.iter()
                            .map(|&k| get(self.nodes[k]))
                            .collect::<Result<_, _>>()?,
                    )
                }
            }
            Name::Instance(s) => {
                let me = self.current(me, pos, raw)?;
                match self.with(s).iter().position(|&k| self.nodes[k].id == me.id) {
                    Some(r) => Val::One((r + 1).to_string()),
                    None => Val::Null,
                }
            }
            Name::HostSelf => {
                let me = self.current(me, pos, raw)?;
                if me.hostname.is_empty() {
                    Val::Null
                } else {
                    Val::One(me.hostname.clone())
                }
            }
            Name::IpSelf(ty) => Val::One(Self::ip(self.current(me, pos, raw)?, ty, pos)?),
            Name::HostSelfOf(s) => {
                let me = self.current(me, pos, raw)?;
                if me.services.contains(s) {
                    Val::One(Self::host(me, pos)?)
                } else {
                    Val::Null
                }
            }
            Name::IpSelfOf(ty, s) => {
                let me = self.current(me, pos, raw)?;
                if me.services.contains(s) {
                    Val::One(Self::ip(me, ty, pos)?)
                } else {
                    Val::Null
                }
            }
        };
        let fmt = |v: &str| match &e.map {
            None => v.to_string(),
            Some(f) => apply_map(f, v),
        };
        Ok(match val {
            Val::Null => Val::Null,
            Val::One(v) => Val::One(fmt(&v)),
            Val::List(vs) => {
                let items: Vec<String> = vs.iter().map(|v| fmt(v)).collect();
                Val::One(items.join(e.join.as_deref().unwrap_or(",")))
            }
        })
    }

    /// Expand every macro in `s` for the node `me` (None when there is no current node, e.g. for
    /// links; self forms then fail).
    pub fn expand_str(&self, me: Option<&str>, s: &str) -> Result<String, PlanError> {
        if !s.contains('%') {
            return Ok(s.to_string());
        }
        self.expand_pieces(me, &scan(s)?, None)
    }

    /// Expands a link's `s` once per node of the first service that a plain macro of it names on
    /// several nodes (`http://%host.service.web%/` over three web nodes: three URLs, in node
    /// order), where [`expand_str`](Self::expand_str) joins them with commas into one string that
    /// is no URL. Macros with `join(...)` or `map(...)`, or an index, keep their meaning; a string
    /// naming no such service expands to one value.
    pub fn expand_each(&self, s: &str) -> Result<Vec<String>, PlanError> {
        if !s.contains('%') {
            return Ok(vec![s.to_string()]);
        }
        let pieces = scan(s)?;
        let spread = pieces.iter().find_map(|p| match p {
            Piece::Macro { expr, .. } => self.spread_service(expr),
            _ => None,
        });
        match spread {
            None => Ok(vec![self.expand_pieces(None, &pieces, None)?]),
            Some(svc) => (0..self.with(svc).len())
                .map(|i| self.expand_pieces(None, &pieces, Some((svc, i))))
                .collect(),
        }
    }

    /// The service a macro lists every node of when it names several (no index, no map, no join).
    fn spread_service<'e>(&self, e: &'e Expr) -> Option<&'e str> {
        match &e.name {
            Name::HostOf(s) | Name::IpOf(_, s)
                if e.index.is_none()
                    && e.map.is_none()
                    && e.join.is_none()
                    && self.with(s).len() > 1 =>
            {
                Some(s.as_str())
            }
            _ => None,
        }
    }

    /// Expands scanned `pieces`; `pin` = (service, i) reads the plain macros of that service as
    /// its `i`-th node only.
    fn expand_pieces(
        &self,
        me: Option<&str>,
        pieces: &[Piece<'_>],
        pin: Option<(&str, usize)>,
    ) -> Result<String, PlanError> {
        let mut values = Vec::new();
        let mut any = false;
        for p in pieces {
            if let Piece::Macro { pos, raw, expr } = p {
                let v = match pin {
                    Some((svc, i)) if self.spread_service(expr) == Some(svc) => {
                        let pinned = Expr {
                            index: Some(i),
                            ..expr.clone()
                        };
                        self.eval(me, *pos, raw, &pinned)?
                    }
                    _ => self.eval(me, *pos, raw, expr)?,
                };
                any |= !matches!(v, Val::Null);
                values.push(v);
            }
        }
        let mut out = String::new();
        let mut vals = values.into_iter();
        for p in pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Percent => out.push('%'),
                Piece::Macro { raw, .. } => match vals.next() {
                    Some(Val::One(v)) => out.push_str(&v),
                    Some(Val::List(vs)) => out.push_str(&vs.join(",")),
                    Some(Val::Null) | None => {
                        if !any {
                            out.push('%');
                            out.push_str(raw);
                            out.push('%');
                        }
                    }
                },
            }
        }
        Ok(out)
    }

    /// Expand every string inside a JSON value (object keys are left alone). Errors carry the JSON
    /// path of the string (`hadoop.core_site[2]`).
    pub fn expand_value(&self, me: Option<&str>, v: &Value) -> Result<Value, PlanError> {
        let mut path = String::new();
        self.expand_at(me, v, &mut path)
    }

    fn expand_at(
        &self,
        me: Option<&str>,
        v: &Value,
        path: &mut String,
    ) -> Result<Value, PlanError> {
        Ok(match v {
            Value::String(s) => Value::String(self.expand_str(me, s).map_err(|e| e.at_path(path))?),
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    out.push(self.expand_at(me, item, path)?);
                    path.truncate(len);
                }
                Value::Array(out)
            }
            Value::Object(map) => {
                let mut out = serde_json::Map::with_capacity(map.len());
                for (k, item) in map {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                    out.insert(k.clone(), self.expand_at(me, item, path)?);
                    path.truncate(len);
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }
}

fn apply_map(fmt: &str, v: &str) -> String {
    let mut out = String::with_capacity(fmt.len() + v.len());
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' {
            if chars.peek() == Some(&'$') {
                chars.next();
                out.push('$');
            } else {
                out.push_str(v);
            }
        } else {
            out.push(c);
        }
    }
    out
}
