//! The answers of AWS query APIs as a tree of elements, read with quick-xml: elements, their text
//! and their children. Attributes, comments, processing instructions and the declaration are
//! skipped; namespace prefixes are dropped from names; the five predefined entities, numeric
//! character references and CDATA sections are decoded. Malformed input is an error, never a panic.

use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

/// One element: its local name, its text (concatenated, entities decoded) and its children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Element {
    /// The element's local name, without a namespace prefix.
    pub name: String,
    /// The element's own text, its pieces concatenated, entities decoded (not its children's).
    pub text: String,
    /// The child elements, in document order.
    pub children: Vec<Element>,
}

impl Element {
    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// Every child named `name`.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The trimmed text of the descendant at `path` (child names), if there is one and it is
    /// not empty.
    pub fn text_at(&self, path: &[&str]) -> Option<&str> {
        let mut e = self;
        for name in path {
            e = e.child(name)?;
        }
        Some(e.text.trim()).filter(|t| !t.is_empty())
    }

    /// Every descendant (depth first) named `name`, this element included.
    pub fn find_all<'a>(&'a self, name: &str, out: &mut Vec<&'a Element>) {
        if self.name == name {
            out.push(self);
        }
        for c in &self.children {
            c.find_all(name, out);
        }
    }
}

/// Parses a document into its root element.
pub fn parse(doc: &str) -> Result<Element, String> {
    let mut reader = Reader::from_str(doc);
    let (mut stack, mut root) = (Vec::new(), None);
    loop {
        let text = match reader.read_event().map_err(|e| e.to_string())? {
            Event::Start(s) => {
                stack.push(Element::named(&s));
                continue;
            }
            Event::Empty(s) => Element::named(&s).close(&mut stack, &mut root)?,
            Event::End(_) => stack
                .pop()
                .ok_or("end tag without a start tag")?
                .close(&mut stack, &mut root)?,
            Event::Text(t) => t.xml10_content().into_owned(),
            Event::CData(c) => c.to_string(),
            Event::GeneralRef(r) => match r.resolve_char_ref().map_err(|e| e.to_string())? {
                Some(c) => c.to_string(),
                None => resolve_predefined_entity(&r)
                    .ok_or_else(|| format!("unknown entity &{};", &*r))?
                    .to_string(),
            },
            Event::Eof => break,
            _ => continue,
        };
        match stack.last_mut() {
            Some(top) => top.text.push_str(&text),
            None if text.trim().is_empty() => {}
            None => return Err("text outside the root element".into()),
        }
    }
    if let Some(open) = stack.first() {
        return Err(format!("<{}> is not closed", open.name));
    }
    root.ok_or_else(|| "no element".to_string())
}

impl Element {
    fn named(start: &BytesStart<'_>) -> Element {
        let name = start.local_name().as_ref().to_string();
        Element {
            name,
            ..Default::default()
        }
    }

    /// Adds this finished element to its parent (or makes it the root); answers no text.
    fn close(self, stack: &mut [Element], root: &mut Option<Element>) -> Result<String, String> {
        match stack.last_mut() {
            Some(parent) => parent.children.push(self),
            None if root.is_none() => *root = Some(self),
            None => return Err("more than one root element".into()),
        }
        Ok(String::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_documents_are_errors() {
        for bad in [
            "",
            "<a>",
            "<a></b>",
            "<a/><b/>",
            "text",
            "<a>&bogus;</a>",
            "<a x='>",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let e = parse("<!-- c --><x:a xmlns:x='u' p='1>2'><![CDATA[<x>]]></x:a>").unwrap();
        assert_eq!((e.name.as_str(), e.text.as_str()), ("a", "<x>"));
    }
}
