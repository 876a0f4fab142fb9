//! A small XML reader for the answers of AWS query APIs: elements, their text and their
//! children. Attributes, comments, processing instructions and the declaration are skipped;
//! namespace prefixes are dropped from names; the five predefined entities, numeric character
//! references and CDATA sections are decoded. Malformed input is an error, never a panic.

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
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let mut rest = doc;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            text_into(&mut stack, rest)?;
            break;
        };
        text_into(&mut stack, &rest[..lt])?;
        rest = &rest[lt..];
        if let Some(r) = rest.strip_prefix("<![CDATA[") {
            let end = r.find("]]>").ok_or("unterminated CDATA section")?;
            if let Some(top) = stack.last_mut() {
                top.text.push_str(&r[..end]);
            }
            rest = &r[end + 3..];
        } else if let Some(r) = rest.strip_prefix("<!--") {
            rest = &r[r.find("-->").ok_or("unterminated comment")? + 3..];
        } else if rest.starts_with("<?") || rest.starts_with("<!") {
            rest = &rest[rest.find('>').ok_or("unterminated declaration")? + 1..];
        } else if let Some(r) = rest.strip_prefix("</") {
            let end = r.find('>').ok_or("unterminated end tag")?;
            let name = local(r[..end].trim());
            let done = stack.pop().ok_or("end tag without a start tag")?;
            if done.name != name {
                return Err(format!("</{name}> closes <{}>", done.name));
            }
            close(&mut stack, &mut root, done)?;
            rest = &r[end + 1..];
        } else {
            let end = tag_end(rest).ok_or("unterminated start tag")?;
            let inner = &rest[1..end];
            let empty = inner.ends_with('/');
            let inner = inner.trim_end_matches('/');
            let name = inner
                .split_whitespace()
                .next()
                .ok_or("a tag without a name")?;
            let e = Element {
                name: local(name).to_string(),
                ..Default::default()
            };
            if empty {
                close(&mut stack, &mut root, e)?;
            } else {
                stack.push(e);
            }
            rest = &rest[end + 1..];
        }
    }
    if !stack.is_empty() {
        return Err(format!("<{}> is not closed", stack[0].name));
    }
    root.ok_or_else(|| "no element".to_string())
}

/// The index of the `>` ending the start tag at the beginning of `s` (quoted `>` skipped).
fn tag_end(s: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '>') => return Some(i),
            _ => {}
        }
    }
    None
}

fn local(name: &str) -> &str {
    name.rsplit_once(':').map_or(name, |(_, l)| l)
}

fn close(stack: &mut [Element], root: &mut Option<Element>, e: Element) -> Result<(), String> {
    match stack.last_mut() {
        Some(parent) => parent.children.push(e),
        None if root.is_none() => *root = Some(e),
        None => return Err("more than one root element".into()),
    }
    Ok(())
}

fn text_into(stack: &mut [Element], raw: &str) -> Result<(), String> {
    match stack.last_mut() {
        Some(top) => top.text.push_str(&unescape(raw)?),
        None if raw.trim().is_empty() => {}
        None => return Err("text outside the root element".into()),
    }
    Ok(())
}

/// Decodes `&lt;`, `&gt;`, `&amp;`, `&quot;`, `&apos;`, `&#N;` and `&#xN;`.
pub fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let r = &rest[amp + 1..];
        let semi = r.find(';').ok_or("an entity without ';'")?;
        let ent = &r[..semi];
        let c = match ent {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(h) = ent.strip_prefix("#x").or(ent.strip_prefix("#X")) {
                    u32::from_str_radix(h, 16).ok()
                } else if let Some(d) = ent.strip_prefix('#') {
                    d.parse().ok()
                } else {
                    None
                };
                code.and_then(char::from_u32)
                    .ok_or_else(|| format!("unknown entity &{ent};"))?
            }
        };
        out.push(c);
        rest = &r[semi + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_an_ec2_answer() {
        let doc = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>r-1</requestId>
  <reservationSet><item><instancesSet>
    <item><instanceId>i-1</instanceId><instanceState><code>16</code><name>running</name></instanceState>
      <tagSet><item><key>weft:node</key><value>a &amp; b &#x3C;c&#62;</value></item></tagSet>
      <ipAddress/></item>
  </instancesSet></item></reservationSet>
</DescribeInstancesResponse>"#;
        let root = parse(doc).unwrap();
        assert_eq!(root.name, "DescribeInstancesResponse");
        let mut items = Vec::new();
        root.find_all("instanceId", &mut items);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].text, "i-1");
        let inst = root
            .child("reservationSet")
            .and_then(|r| r.child("item"))
            .and_then(|r| r.child("instancesSet"))
            .and_then(|s| s.child("item"))
            .unwrap();
        assert_eq!(inst.text_at(&["instanceState", "name"]), Some("running"));
        assert_eq!(
            inst.text_at(&["tagSet", "item", "value"]),
            Some("a & b <c>")
        );
        assert_eq!(inst.text_at(&["ipAddress"]), None);
    }

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
        let e = parse("<!-- c --><a p='1>2'><![CDATA[<x>]]></a>").unwrap();
        assert_eq!(e.text, "<x>");
    }
}
