//! Lenient JSON input, as Coopr's Gson read it.
//!
//! Accepted: single-quoted strings and names, unquoted names, comments, trailing commas (all through
//! JSON5), numbers and booleans given as strings, `null` meaning "absent", and unknown fields (ignored).
//! Every failure becomes a [`ModelError`] that names the field path, never a panic.

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::ModelError;

/// Parses a request body. An empty (or all-whitespace) body is `Value::Null`, as Gson read it.
pub fn parse(body: &[u8]) -> Result<Value, ModelError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ModelError::Malformed(format!("request body is not UTF-8: {e}")))?;
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return Ok(v);
    }
    // The JSON5 parser recurses without a limit; refuse deep nesting before it can exhaust the stack.
    if nesting_depth(text) > MAX_DEPTH {
        return Err(ModelError::Malformed(format!(
            "JSON is nested more than {MAX_DEPTH} levels deep"
        )));
    }
    json5::from_str::<Value>(text).map_err(|e| ModelError::Malformed(describe_json5_error(&e)))
}

/// The deepest nesting of arrays and objects a body may have.
pub const MAX_DEPTH: usize = 128;

/// The maximum nesting of `[` and `{` outside strings (single- or double-quoted).
fn nesting_depth(text: &str) -> usize {
    let (mut depth, mut max, mut quote, mut escaped) = (0usize, 0usize, None::<char>, false);
    for c in text.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' => quote = Some(c),
                '[' | '{' => {
                    depth += 1;
                    max = max.max(depth);
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    max
}

fn describe_json5_error(e: &json5::Error) -> String {
    let json5::Error::Message { msg, location } = e;
    // pest renders a multi-line picture; keep only the "expected ..." line.
    let what = msg
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("= "))
        .unwrap_or(msg.as_str())
        .to_string();
    match location {
        Some(l) => format!(
            "malformed JSON at line {} column {}: {}",
            l.line, l.column, what
        ),
        None => format!("malformed JSON: {what}"),
    }
}

/// Parses a body that must be a JSON object of type `T`; `what` names the body in messages.
pub fn parse_as<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ModelError> {
    let v = parse(body)?;
    if v.is_null() {
        return Err(ModelError::invalid(
            "",
            format!("request body is empty: expected {what}"),
        ));
    }
    from_value(v)
}

/// Converts a parsed value into `T`, naming the field path on failure.
pub fn from_value<T: DeserializeOwned>(v: Value) -> Result<T, ModelError> {
    serde_path_to_error::deserialize::<_, T>(v).map_err(|e| {
        let path = e.path().to_string().replace(".?", "");
        let inner = e.into_inner().to_string();
        if path == "." || path.is_empty() {
            ModelError::invalid("", inner)
        } else {
            ModelError::invalid(path.clone(), format!("{path}: {inner}"))
        }
    })
}

fn to_u64<E: serde::de::Error>(v: &Value) -> Result<Option<u64>, E> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Ok(Some(u))
            } else if let Some(f) = n
                .as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
            {
                Ok(Some(f as u64))
            } else {
                Err(E::custom(format!(
                    "expected a non-negative integer, got {n}"
                )))
            }
        }
        Value::String(s) => s
            .trim()
            .parse::<u64>()
            .map(Some)
            .map_err(|_| E::custom(format!("expected a non-negative integer, got \"{s}\""))),
        other => Err(E::custom(format!(
            "expected a non-negative integer, got {}",
            kind(other)
        ))),
    }
}

fn to_i64<E: serde::de::Error>(v: &Value) -> Result<Option<i64>, E> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                    .map(|f| f as i64)
            })
            .map(Some)
            .ok_or_else(|| E::custom(format!("expected an integer, got {n}"))),
        Value::String(s) => s
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| E::custom(format!("expected an integer, got \"{s}\""))),
        other => Err(E::custom(format!(
            "expected an integer, got {}",
            kind(other)
        ))),
    }
}

fn to_bool<E: serde::de::Error>(v: &Value) -> Result<Option<bool>, E> {
    match v {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(*b)),
        Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(Some(false)),
        other => Err(E::custom(format!(
            "expected a boolean, got {}",
            kind_or_value(other)
        ))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn kind_or_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        other => kind(other).to_string(),
    }
}

/// A non-negative integer, given as a number or a string; null or absent is 0.
pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(to_u64(&Value::deserialize(d)?)?.unwrap_or(0))
}

/// An optional non-negative integer, given as a number or a string.
pub fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    to_u64(&Value::deserialize(d)?)
}

/// A non-negative integer that must fit in 32 bits; null or absent is 0.
pub fn u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = to_u64(&Value::deserialize(d)?)?.unwrap_or(0);
    u32::try_from(v).map_err(|_| D::Error::custom(format!("{v} is too large")))
}

/// A TCP port.
pub fn u16<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    let v = to_u64(&Value::deserialize(d)?)?.unwrap_or(0);
    u16::try_from(v).map_err(|_| D::Error::custom(format!("{v} is not a valid port")))
}

/// A signed integer, given as a number or a string; null or absent is 0.
pub fn i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    Ok(to_i64(&Value::deserialize(d)?)?.unwrap_or(0))
}

/// An optional signed integer.
pub fn opt_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    to_i64(&Value::deserialize(d)?)
}

/// A boolean, given as a boolean or as "true"/"false"; null or absent is false.
pub fn bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(to_bool(&Value::deserialize(d)?)?.unwrap_or(false))
}

/// An optional boolean.
pub fn opt_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    to_bool(&Value::deserialize(d)?)
}

/// Coopr's "unbounded" default for a missing or null limit.
pub fn u64_or_unbounded<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(to_u64(&Value::deserialize(d)?)?.unwrap_or(crate::UNBOUNDED))
}

/// 1 for a missing or null value (cluster size min).
pub fn u64_or_one<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(to_u64(&Value::deserialize(d)?)?.unwrap_or(1))
}

/// A string; numbers and booleans are turned into their text, null or absent is "".
pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(opt_string_inner::<D::Error>(Value::deserialize(d)?)?.unwrap_or_default())
}

/// An optional string; numbers and booleans become their text.
pub fn opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    opt_string_inner::<D::Error>(Value::deserialize(d)?)
}

/// [`opt_text`] (text only: a number is refused), blank (empty or only white space) read as
/// absent: decimal amounts and codes, which are written as text.
pub fn opt_nonblank<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(opt_text(d)?.filter(|s| !s.trim().is_empty()))
}

fn opt_string_inner<E: serde::de::Error>(v: Value) -> Result<Option<String>, E> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        Value::Number(n) => Ok(Some(n.to_string())),
        Value::Bool(b) => Ok(Some(b.to_string())),
        other => Err(E::custom(format!(
            "expected a string, got {}",
            kind(&other)
        ))),
    }
}

/// Text that must be text (a name, a DNS suffix: a number there is refused); null or absent is "".
pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(opt_text(d)?.unwrap_or_default())
}

/// Optional text that must be text.
pub fn opt_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        other => Err(D::Error::custom(format!(
            "expected a string, got {}",
            kind(&other)
        ))),
    }
}

/// An integer as JSON counts them (`5`, or `5.0`), not text or null: for records read as
/// written (a node's).
pub fn json_i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    match Value::deserialize(d)? {
        v @ Value::Number(_) => Ok(to_i64::<D::Error>(&v)?.unwrap_or(0)),
        other => Err(D::Error::custom(format!(
            "expected an integer, got {}",
            kind(&other)
        ))),
    }
}

/// A non-negative integer as JSON counts them (`5`, or `5.0`).
pub fn json_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match Value::deserialize(d)? {
        v @ Value::Number(_) => Ok(to_u64::<D::Error>(&v)?.unwrap_or(0)),
        other => Err(D::Error::custom(format!(
            "expected a non-negative integer, got {}",
            kind(&other)
        ))),
    }
}

/// An optional non-negative integer as JSON counts them (`5`, `5.0`); `null` is absent.
pub fn opt_json_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v @ Value::Number(_) => Ok(to_u64::<D::Error>(&v)?),
        other => Err(D::Error::custom(format!(
            "expected a non-negative integer, got {}",
            kind(&other)
        ))),
    }
}

/// A 32-bit non-negative integer as JSON counts them.
pub fn json_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = json_u64(d)?;
    u32::try_from(v).map_err(|_| D::Error::custom(format!("{v} is too large")))
}

/// A nested object; null or absent is its default. Read through the caller's deserializer, so
/// errors keep their field paths (serde alone would also read an array as the fields in order).
pub fn section<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(opt_section(d)?.unwrap_or_default())
}

/// An optional nested object; null is absent.
pub fn opt_section<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Section<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Section<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Some)
        }
    }
    d.deserialize_any(Section(std::marker::PhantomData))
}

/// A map of strings: scalar values become their text, null values are dropped.
pub fn string_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<std::collections::BTreeMap<String, String>, D::Error> {
    let v = Value::deserialize(d)?;
    let mut out = std::collections::BTreeMap::new();
    match v {
        Value::Null => {}
        Value::Object(m) => {
            for (k, v) in m {
                if let Some(s) = opt_string_inner::<D::Error>(v)
                    .map_err(|e| D::Error::custom(format!("{k}: {e}")))?
                {
                    out.insert(k, s);
                }
            }
        }
        other => {
            return Err(D::Error::custom(format!(
                "expected an object, got {}",
                kind(&other)
            )))
        }
    }
    Ok(out)
}

/// A JSON object (free-form map); null or absent is empty.
pub fn object<'de, D: Deserializer<'de>>(d: D) -> Result<serde_json::Map<String, Value>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(serde_json::Map::new()),
        Value::Object(m) => Ok(m),
        other => Err(D::Error::custom(format!(
            "expected an object, got {}",
            kind(&other)
        ))),
    }
}

/// A value read by its own rules; null or absent is its default.
pub fn or_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A list; null or absent is empty. Elements use their own (lenient) rules.
pub fn vec<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    match Value::deserialize(d)? {
        Value::Null => Ok(Vec::new()),
        Value::Array(a) => a
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                serde_json::from_value(v).map_err(|e| D::Error::custom(format!("[{i}]: {e}")))
            })
            .collect(),
        other => Err(D::Error::custom(format!(
            "expected an array, got {}",
            kind(&other)
        ))),
    }
}

/// A list of strings (scalars accepted as text); null or absent is empty.
pub fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(Vec::new()),
        Value::Array(a) => a
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                opt_string_inner::<D::Error>(v)
                    .map_err(|e| D::Error::custom(format!("[{i}]: {e}")))?
                    .ok_or_else(|| D::Error::custom(format!("[{i}]: expected a string, got null")))
            })
            .collect(),
        other => Err(D::Error::custom(format!(
            "expected an array of strings, got {}",
            kind(&other)
        ))),
    }
}

/// A duration in milliseconds: a number, or a string with a suffix `s`, `m`, `h` or `d`
/// (`"48h"`), or a plain number in a string. Null or absent is 0.
pub fn duration_ms<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = Value::deserialize(d)?;
    if let Value::String(s) = &v {
        return parse_duration_ms(s).map_err(D::Error::custom);
    }
    Ok(to_u64(&v)?.unwrap_or(0))
}

/// Parses `"1500"`, `"30s"`, `"10m"`, `"48h"` or `"7d"` into milliseconds.
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = || {
        format!(
            "invalid duration \"{s}\": expected milliseconds or a number with suffix s, m, h or d"
        )
    };
    let (digits, mult) = match t.char_indices().last() {
        Some((i, 's')) => (&t[..i], 1_000u64),
        Some((i, 'm')) => (&t[..i], 60_000),
        Some((i, 'h')) => (&t[..i], 3_600_000),
        Some((i, 'd')) => (&t[..i], 86_400_000),
        Some(_) => (t, 1),
        None => return Err(bad()),
    };
    let n: u64 = digits.trim().parse().map_err(|_| bad())?;
    n.checked_mul(mult).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_gson_lenient_input() {
        let v = parse(b"{'expireTime' : 22000, name: 'x', // c\n }").unwrap();
        assert_eq!(v["expireTime"], 22000);
        assert_eq!(v["name"], "x");
        assert_eq!(parse(b"  ").unwrap(), Value::Null);
    }

    #[test]
    fn malformed_json_names_position() {
        let e = parse(b"{\"a\":}").unwrap_err().to_string();
        assert!(e.contains("line 1 column 6"), "{e}");
    }

    #[test]
    fn deep_nesting_is_refused_not_a_crash() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse(deep.as_bytes()).is_err());
        let deep5 = format!("{{a:{}1{}}}", "['x',".repeat(50_000), "]".repeat(50_000));
        assert!(parse(deep5.as_bytes())
            .unwrap_err()
            .to_string()
            .contains("nested"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("48h").unwrap(), 172_800_000);
        assert_eq!(parse_duration_ms("1s").unwrap(), 1000);
        assert_eq!(parse_duration_ms("250").unwrap(), 250);
        assert!(parse_duration_ms("5y").is_err());
        assert!(parse_duration_ms("").is_err());
    }
}
