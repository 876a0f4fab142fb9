//! The layer order of ARCHITECTURE.md holds in the code: in each crate it lists, a module refers
//! (`use crate::x`, `crate::x::f`, `super::x`, a child `x::f`) only to modules of lower layers, and
//! no file refers to a module that refers back to it, directly or around a loop.
//!
//! The check reads the source text; it skips `#[cfg(test)]` modules and comments. Items that the
//! crate root re-exports (`pub use a::X`) count as references to the module they come from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's layers, bottom first, as ARCHITECTURE.md writes them.
struct Order {
    krate: String,
    layers: Vec<Vec<String>>,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The lines of the `layers` block: `crate: a b < c < d` (bottom first).
fn orders() -> Vec<Order> {
    let text = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    let block = text
        .split("```layers\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("ARCHITECTURE.md has a ```layers block");
    block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (krate, rest) = l.split_once(':').expect("`crate: a < b` lines");
            Order {
                krate: krate.trim().to_string(),
                layers: rest
                    .split('<')
                    .map(|layer| layer.split_whitespace().map(String::from).collect())
                    .collect(),
            }
        })
        .collect()
}

/// Every module file of a crate: module path ("" for the root, "a::b") -> source text.
fn modules(src: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                let mut p = prefix.to_vec();
                p.push(name);
                walk(&path, &p, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let mut p = prefix.to_vec();
                if !(prefix.is_empty() && (name == "lib" || name == "main")) && name != "mod" {
                    p.push(name);
                }
                let text = std::fs::read_to_string(&path).unwrap();
                out.insert(p.join("::"), strip(&text));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, &[], &mut out);
    out
}

/// The text without comments, string literals and `#[cfg(test)]` modules.
fn strip(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            i += 3; // a char literal such as '{'
        } else if b[i] == b'r' && b.get(i + 1) == Some(&b'#') && b.get(i + 2) == Some(&b'"') {
            let end = text[i + 3..].find("\"#").map_or(b.len(), |e| i + 3 + e + 2);
            i = end;
            out.push_str("\"\"");
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths that follow `anchor` (`crate::` or `super::`) in `text`, `{a, b::c}` groups
/// expanded; each path as its segments.
fn paths_after(text: &str, anchor: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(anchor) {
        let start = from + at;
        from = start + anchor.len();
        if text[..start]
            .chars()
            .last()
            .is_some_and(|c| is_ident(c) || c == ':')
        {
            continue; // `super::super::x` is read from the first `super::`
        }
        out.extend(path_tree(&text[from..]));
    }
    out
}

/// Parses `a::b::{c, d::e}` at the start of `s` into its paths.
fn path_tree(s: &str) -> Vec<Vec<String>> {
    let s = s.trim_start();
    if let Some(rest) = s.strip_prefix('{') {
        let mut depth = 1;
        let mut end = 0;
        for (i, c) in rest.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = i;
                break;
            }
        }
        let inner = &rest[..end];
        let mut items = Vec::new();
        let (mut depth, mut last) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&inner[last..i]);
                    last = i + 1;
                }
                _ => {}
            }
        }
        items.push(&inner[last..]);
        return items
            .into_iter()
            .filter(|i| !i.trim().is_empty())
            .flat_map(path_tree)
            .collect();
    }
    let name: String = s.chars().take_while(|c| is_ident(*c)).collect();
    if name.is_empty() {
        return vec![vec![]];
    }
    let rest = &s[name.len()..];
    match rest.strip_prefix("::") {
        Some(more) => path_tree(more)
            .into_iter()
            .map(|mut p| {
                p.insert(0, name.clone());
                p
            })
            .collect(),
        None => vec![vec![name]],
    }
}

/// The module a path from the crate root names: its longest prefix that is a module.
fn module_of(mods: &BTreeMap<String, String>, segs: &[String]) -> String {
    (0..=segs.len())
        .rev()
        .map(|n| segs[..n].join("::"))
        .find(|m| mods.contains_key(m))
        .unwrap_or_default()
}

/// What the root re-exports: item name -> the module it comes from.
fn reexports(mods: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let root = &mods[""];
    let mut out = BTreeMap::new();
    for stmt in root.split(';') {
        let Some(at) = stmt.find("pub use ") else {
            continue;
        };
        for p in path_tree(&stmt[at + "pub use ".len()..]) {
            if let Some(item) = p.last() {
                let from = module_of(mods, &p[..p.len() - 1]);
                if !from.is_empty() {
                    out.insert(item.clone(), from);
                }
            }
        }
    }
    out
}

/// The modules each module refers to (itself left out).
fn edges(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let reexported = reexports(mods);
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, text) in mods {
        let here: Vec<String> = if m.is_empty() {
            vec![]
        } else {
            m.split("::").map(String::from).collect()
        };
        let mut targets = BTreeSet::new();
        for p in paths_after(text, "crate::") {
            targets.insert(resolve(mods, &reexported, &p));
        }
        for p in paths_after(text, "super::") {
            let mut base = here[..here.len().saturating_sub(1)].to_vec();
            let mut rest = p.as_slice();
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            targets.insert(resolve(mods, &reexported, &base));
        }
        // Children used by name (`child::f`), as a parent calls its route groups.
        for child in mods.keys().filter(|c| is_child(m, c)) {
            let name = child.rsplit("::").next().unwrap();
            let used = text.match_indices(&format!("{name}::")).any(|(i, _)| {
                !text[..i]
                    .chars()
                    .last()
                    .is_some_and(|c| is_ident(c) || c == ':')
            });
            if used {
                targets.insert(child.clone());
            }
        }
        targets.remove(m);
        out.insert(m.clone(), targets);
    }
    out
}

fn is_child(parent: &str, child: &str) -> bool {
    match parent {
        "" => !child.is_empty() && !child.contains("::"),
        p => child
            .strip_prefix(p)
            .and_then(|r| r.strip_prefix("::"))
            .is_some_and(|r| !r.contains("::")),
    }
}

fn resolve(
    mods: &BTreeMap<String, String>,
    reexported: &BTreeMap<String, String>,
    p: &[String],
) -> String {
    let m = module_of(mods, p);
    if m.is_empty() {
        if let Some(from) = p.first().and_then(|item| reexported.get(item)) {
            return from.clone();
        }
    }
    m
}

fn top(m: &str) -> &str {
    m.split("::").next().unwrap()
}

/// A loop of module references, if any (a depth-first search).
fn find_loop(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(m.to_string(), 1);
        stack.push(m.to_string());
        for n in edges.get(m).into_iter().flatten() {
            match state.get(n.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|s| s == n).unwrap();
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(n.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(n, edges, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in edges.keys() {
        if state.get(m.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(m, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// The problems of one crate against its order: unplaced modules, references to a module that is
/// not lower, and loops.
fn problems(order: &Order) -> Vec<String> {
    let src = workspace().join("crates").join(&order.krate).join("src");
    let mods = modules(&src);
    let layer: BTreeMap<&str, usize> = order
        .layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.iter().map(move |m| (m.as_str(), i)))
        .collect();
    let mut out = Vec::new();
    let tops: BTreeSet<&str> = mods
        .keys()
        .filter(|m| !m.is_empty())
        .map(|m| top(m))
        .collect();
    for t in &tops {
        if !layer.contains_key(t) {
            out.push(format!("{}: module `{t}` is in no layer", order.krate));
        }
    }
    for t in layer.keys() {
        if !tops.contains(t) {
            out.push(format!(
                "{}: layer names `{t}`, which is no module",
                order.krate
            ));
        }
    }
    let edges = edges(&mods);
    for (m, targets) in &edges {
        if m.is_empty() {
            continue; // the crate root sits above every module
        }
        for t in targets {
            if t.is_empty() {
                out.push(format!(
                    "{}: `{m}` uses an item defined in the crate root; define it in a module",
                    order.krate
                ));
                continue;
            }
            let (from, to) = (top(m), top(t));
            if from != to && layer.get(to) >= layer.get(from) {
                out.push(format!(
                    "{}: `{m}` uses `{t}`, which is not in a lower layer",
                    order.krate
                ));
            }
        }
    }
    if let Some(cycle) = find_loop(&edges) {
        out.push(format!(
            "{}: modules refer to each other in a loop: {}",
            order.krate,
            cycle.join(" -> ")
        ));
    }
    out
}

#[test]
fn modules_only_use_lower_layers() {
    let orders = orders();
    let crates: BTreeSet<&str> = orders.iter().map(|o| o.krate.as_str()).collect();
    for must in ["weft-engine", "weft-server"] {
        assert!(
            crates.contains(must),
            "ARCHITECTURE.md orders no layers of {must}"
        );
    }
    let found: Vec<String> = orders.iter().flat_map(problems).collect();
    assert!(found.is_empty(), "layering broken:\n{}", found.join("\n"));
}

/// What in a handler's source reaches the store: the crate, or the store handle of the state.
fn store_uses(text: &str) -> Vec<&'static str> {
    ["weft_store", ".store"]
        .into_iter()
        .filter(|needle| {
            text.match_indices(needle).any(|(i, _)| {
                let after = text[i + needle.len()..].chars().next();
                !after.is_some_and(is_ident)
            })
        })
        .collect()
}

/// Route handlers only parse, call the engine and render (ARCHITECTURE.md): no module of
/// `routes` or `ui` reaches the store; the engine owns every rule that reads or writes it.
#[test]
fn route_and_ui_modules_do_not_reach_the_store() {
    let src = workspace().join("crates/weft-server/src");
    let found: Vec<String> = modules(&src)
        .into_iter()
        .filter(|(m, _)| {
            m == "routes" || m.starts_with("routes::") || m == "ui" || m.starts_with("ui::")
        })
        .flat_map(|(m, text)| {
            store_uses(&text)
                .into_iter()
                .map(move |u| format!("{m} uses {u}"))
        })
        .collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
    assert_eq!(
        store_uses("use weft_store::X; st.store.get(); st.stored; weft_storex"),
        ["weft_store", ".store"]
    );
    assert!(store_uses("st.stored; weft_storex").is_empty());
}

#[test]
fn the_check_sees_grouped_and_nested_paths() {
    let paths = paths_after(
        "use crate::{a::b, c::{d, e::f}};\nlet x = crate::g::h(1); super::super::i::j();",
        "crate::",
    );
    let flat: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(flat, ["a::b", "c::d", "c::e::f", "g::h"]);
    let text = strip("let s = \"crate::x\"; // crate::y\nlet c = '{'; crate::z::w();");
    let flat: Vec<String> = paths_after(&text, "crate::")
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(flat, ["z::w"]);
    let mut edges = BTreeMap::new();
    edges.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    edges.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(find_loop(&edges).unwrap(), ["a", "b", "a"]);
}
