//! Reading a provider's fields, once for every cloud: text, required text, lists, yes/no, the
//! image and hardware types' values with a provider default, and the fields every cloud declares.

use serde_json::{Map, Value};
use std::collections::BTreeMap;

use weft_model::{FieldSchema, ParameterType, PluginType};

use crate::task::{PluginError, Task};

/// A provider's fields (the admin's, secrets included), read with one set of rules.
#[derive(Debug, Clone, Default)]
pub struct Fields(pub Map<String, Value>);

/// A fatal error that names the field.
pub fn bad(name: &str, what: impl std::fmt::Display) -> PluginError {
    PluginError::fatal(format!("provider field {name}: {what}"))
}

impl Fields {
    /// The fields of a task's provider.
    pub fn of(task: &Task) -> Fields {
        Fields(task.provider_fields())
    }

    /// A field as text: a string (trimmed; `None` when empty), a number or a boolean (as JSON
    /// writes them); `None` when absent or of another type.
    pub fn text(&self, name: &str) -> Option<String> {
        crate::task::provider_field(&self.0, name)
    }

    /// A field as text, untrimmed (user data, keys): `None` when absent or blank.
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
    }

    /// A field that must be there.
    pub fn required(&self, name: &str) -> Result<String, PluginError> {
        self.text(name)
            .ok_or_else(|| PluginError::fatal(format!("provider field {name} is missing")))
    }

    /// A list field: values separated by commas (or spaces), empty parts dropped.
    pub fn list(&self, name: &str) -> Vec<String> {
        self.text(name)
            .map(|v| {
                v.split([',', ' '])
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A yes/no field (`true`/`false`, `yes`/`no`, `on`/`off`, `1`/`0`, `none` for no):
    /// `None` when absent or blank, an error naming the field for anything else.
    pub fn flag(&self, name: &str) -> Result<Option<bool>, PluginError> {
        let Some(v) = self.text(name) else {
            return Ok(None);
        };
        match v.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Ok(Some(true)),
            "false" | "no" | "off" | "0" | "none" => Ok(Some(false)),
            _ => Err(bad(name, format!("{v:?} is neither true nor false"))),
        }
    }

    /// An `http://` or `https://` URL field, without its trailing `/`.
    pub fn url(&self, name: &str) -> Result<Option<String>, PluginError> {
        match self.text(name) {
            None => Ok(None),
            Some(u) if u.starts_with("https://") || u.starts_with("http://") => {
                Ok(Some(u.trim_end_matches('/').to_string()))
            }
            Some(u) => Err(bad(name, format!("{u:?} is not an http(s) URL"))),
        }
    }

    /// The task's `config.<key>` (an image or hardware type's providermap value), else the
    /// provider's field `fallback`; a fatal error naming both when neither is set.
    pub fn pick(&self, task: &Task, key: &str, fallback: &str) -> Result<String, PluginError> {
        task.config_str(key)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .or_else(|| self.text(fallback))
            .ok_or_else(|| {
                let owner = if key == "flavor" { "hardware" } else { "image" };
                PluginError::fatal(format!(
                    "no {key}: give the {owner} type a {key} for this provider (providermap) \
                     or the provider a {fallback}"
                ))
            })
    }
}

/// A cloud's plugin type from its JSON descriptor (Coopr's plugin type format: name, label,
/// description, `parameters.admin.fields` and `required`), with the fields the cloud layer reads
/// for every cloud added: the request budget and `ssh_address`. A descriptor that does not parse
/// is a bug caught by every cloud's plugin type test.
pub fn plugin_type(descriptor: &str) -> PluginType {
    let mut t: PluginType = serde_json::from_str(descriptor).expect("a valid plugin descriptor");
    let shared: BTreeMap<String, FieldSchema> =
        serde_json::from_str(include_str!("shared-fields.json")).expect("valid shared fields");
    let admin = t.parameters.entry(ParameterType::Admin).or_default();
    admin.fields.extend(shared);
    t.parameters.entry(ParameterType::User).or_default();
    t.version = 1;
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_are_read_with_one_set_of_rules() {
        let f = Fields(
            json!({"a": " x ", "n": 3, "b": true, "l": "p, q r,,", "y": " No ", "u": "ftp://h",
                "e": ""})
            .as_object()
            .cloned()
            .unwrap(),
        );
        assert_eq!(f.text("a").as_deref(), Some("x"));
        assert_eq!(f.text("n").as_deref(), Some("3"));
        assert_eq!(f.text("e"), None);
        assert!(f.required("e").unwrap_err().message.contains("field e"));
        assert_eq!(f.list("l"), ["p", "q", "r"]);
        assert_eq!(f.flag("b").unwrap(), Some(true));
        assert_eq!(f.flag("y").unwrap(), Some(false));
        assert_eq!(f.flag("missing").unwrap(), None);
        assert!(f.flag("a").unwrap_err().message.contains("field a"));
        assert!(f.url("u").unwrap_err().message.contains("field u"));
    }
}
