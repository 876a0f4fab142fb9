//! Plugin types declared in code (the built-in providers and automators; the clouds read JSON
//! descriptors, [`crate::cloud::fields::plugin_type`]): text fields, and a type whose fields are
//! admin fields.

use weft_model::{
    FieldSchema, ParamSpec, ParameterType, PluginType, ResourceFormat, ResourceTypeSpec,
};

/// A declared text field.
pub fn field(label: &str, tip: &str) -> FieldSchema {
    FieldSchema {
        label: label.into(),
        field_type: "text".into(),
        tip: Some(tip.into()),
        ..Default::default()
    }
}

/// A plugin type whose fields are admin fields (set on the service action).
pub fn plugin_type(
    name: &str,
    label: &str,
    description: &str,
    fields: &[(&str, FieldSchema)],
    required: &[&[&str]],
    resources: &[(&str, ResourceFormat)],
) -> PluginType {
    let admin = ParamSpec {
        fields: fields
            .iter()
            .map(|(k, f)| (k.to_string(), f.clone()))
            .collect(),
        required: required
            .iter()
            .map(|set| set.iter().map(|s| s.to_string()).collect())
            .collect(),
    };
    PluginType {
        name: name.into(),
        label: Some(label.into()),
        description: Some(description.into()),
        icon: None,
        version: 1,
        classname: None,
        parameters: [(ParameterType::Admin, admin)].into(),
        resource_types: resources
            .iter()
            .map(|(k, format)| {
                let permissions = matches!(format, ResourceFormat::File).then(|| "0644".into());
                (
                    k.to_string(),
                    ResourceTypeSpec {
                        format: *format,
                        permissions,
                    },
                )
            })
            .collect(),
    }
}

/// A provider's plugin type: `fields` are admin fields, none required; users set nothing.
pub fn provider_type(
    name: &str,
    label: &str,
    description: &str,
    fields: &[(&str, FieldSchema)],
) -> PluginType {
    let mut t = plugin_type(name, label, description, fields, &[], &[]);
    t.parameters
        .insert(ParameterType::User, ParamSpec::default());
    t
}
