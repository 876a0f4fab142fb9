//! Validation rules that need no store: names, sizes, leases, plugin specs.

use crate::{
    ClusterTemplate, HealthcheckSpec, MachineType, ModelError, PartialTemplate, PluginType,
    Provider, ProvisionerAction, ResourceFormat, Service, ServiceAction, TenantSpecification,
};

/// Checks an entity name: 1..255 characters of `[A-Za-z0-9_.-]`.
pub fn validate_name(field: &str, name: &str) -> Result<(), ModelError> {
    if name.is_empty() {
        return Err(ModelError::invalid(
            field,
            format!("{field} must be specified"),
        ));
    }
    if name == "." || name == ".." {
        return Err(ModelError::invalid(
            field,
            format!("{field} may not be \"{name}\""),
        ));
    }
    if name.len() > 255 {
        return Err(ModelError::invalid(
            field,
            format!("{field} must be at most 255 characters"),
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(ModelError::invalid(
            field,
            format!("{field} \"{name}\" contains '{c}': only letters, digits, '_', '.' and '-' are allowed"),
        ));
    }
    Ok(())
}

/// Input checks that an entity can make on its own.
pub trait Validate {
    /// Checks what the entity can check alone, answering the first fault with its field.
    /// References to other entities are not checked here.
    fn validate(&self) -> Result<(), ModelError>;
}

impl Validate for Provider {
    fn validate(&self) -> Result<(), ModelError> {
        validate_name("name", &self.name)?;
        if self.providertype.is_empty() {
            return Err(ModelError::invalid(
                "providertype",
                "providertype must be specified",
            ));
        }
        if let Some(c) = &self.currency {
            crate::cost::check_currency("currency", c)?;
        }
        if let Some(m) = &self.price_multiplier {
            crate::cost::parse_micros("priceMultiplier", m)?;
        }
        Ok(())
    }
}

impl Validate for MachineType {
    fn validate(&self) -> Result<(), ModelError> {
        validate_name("name", &self.name)?;
        for (provider, entry) in &self.providermap {
            if let Some(price) = entry
                .get(crate::cost::PRICE_KEY)
                .filter(|p| !p.trim().is_empty())
            {
                crate::cost::parse_micros(&format!("providermap.{provider}.price"), price)?;
            }
        }
        Ok(())
    }
}

impl Validate for Service {
    fn validate(&self) -> Result<(), ModelError> {
        validate_name("name", &self.name)?;
        for (action, spec) in &self.provisioner.actions {
            let prefix = format!(
                "provisioner.actions.{}",
                action.upper().to_ascii_lowercase()
            );
            if *action == ProvisionerAction::Status {
                return Err(ModelError::invalid(
                    &prefix,
                    format!("{prefix}: status is asked of a node's provider; a service cannot declare it"),
                ));
            }
            if spec.automator.is_empty() {
                let field = format!("{prefix}.type");
                return Err(ModelError::invalid(
                    &field,
                    format!("{field} must name an automator type"),
                ));
            }
            validate_health_settings(&prefix, *action, spec)?;
        }
        validate_membership_rules(self)
    }
}

/// `membership.maxConcurrent` and `availability.minHealthy` within their bounds.
fn validate_membership_rules(s: &Service) -> Result<(), ModelError> {
    let bounds = [
        (
            "membership.maxConcurrent",
            s.membership.as_ref().and_then(|m| m.max_concurrent),
            100,
        ),
        (
            "availability.minHealthy",
            s.availability.as_ref().and_then(|a| a.min_healthy),
            1000,
        ),
    ];
    for (field, value, max) in bounds {
        match value {
            Some(v) if v == 0 || v > max => {
                return Err(ModelError::invalid(
                    field,
                    format!("{field} must be between 1 and {max}, not {v}"),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// `timeout`, `tries` and `interval` belong to `healthcheck` only, each within its bounds.
fn validate_health_settings(
    prefix: &str,
    action: ProvisionerAction,
    spec: &ServiceAction,
) -> Result<(), ModelError> {
    let settings = [
        ("timeout", spec.timeout, HealthcheckSpec::TIMEOUT_RANGE),
        ("tries", spec.tries, HealthcheckSpec::TRIES_RANGE),
        ("interval", spec.interval, HealthcheckSpec::INTERVAL_RANGE),
    ];
    for (name, value, (min, max)) in settings {
        let Some(v) = value else { continue };
        let field = format!("{prefix}.{name}");
        if action != ProvisionerAction::Healthcheck {
            return Err(ModelError::invalid(
                &field,
                format!("{field}: only the healthcheck action takes {name} (put an automator's own settings in fields)"),
            ));
        }
        if v < min || v > max {
            return Err(ModelError::invalid(
                &field,
                format!("{field} must be between {min} and {max}, not {v}"),
            ));
        }
    }
    Ok(())
}

fn validate_template_parts(
    name: &str,
    constraints: &crate::Constraints,
    admin: &crate::Administration,
    dns_suffix: Option<&str>,
) -> Result<(), ModelError> {
    validate_name("name", name)?;
    let lease = &admin.leaseduration;
    if let Some(m) = &admin.max_cost_per_hour {
        crate::cost::parse_micros("administration.maxCostPerHour", m)?;
    }
    if let Some(i) = &admin.idle {
        if !(1..=8760).contains(&i.hours) {
            return Err(ModelError::invalid(
                "administration.idle.hours",
                format!(
                    "administration.idle.hours must be between 1 and 8760, not {}",
                    i.hours
                ),
            ));
        }
    }
    if let Some(r) = &admin.rollout {
        r.policy(None, "administration.rollout")?;
    }
    let size = &constraints.size;
    if size.min < 1 {
        return Err(ModelError::invalid(
            "constraints.size.min",
            "constraints.size.min must be at least 1",
        ));
    }
    if size.max < size.min {
        return Err(ModelError::invalid(
            "constraints.size.max",
            format!(
                "constraints.size.max ({}) must not be below constraints.size.min ({})",
                size.max, size.min
            ),
        ));
    }
    for (svc, c) in &constraints.services {
        if c.quantities.max < c.quantities.min {
            let field = format!("constraints.services.{svc}.quantities");
            return Err(ModelError::invalid(
                &field,
                format!(
                    "{field}: max ({}) must not be below min ({})",
                    c.quantities.max, c.quantities.min
                ),
            ));
        }
    }
    // 0 means "forever" for initial and "unlimited" for max.
    let initial_over_max = lease.max != 0 && (lease.initial == 0 || lease.initial > lease.max);
    if initial_over_max {
        return Err(ModelError::invalid(
            "administration.leaseduration.initial",
            format!(
                "Initial lease duration cannot be more than max lease duration for template {name}"
            ),
        ));
    }
    if let Some(s) = dns_suffix {
        validate_dns_suffix("defaults.dnsSuffix", s)?;
    }
    Ok(())
}

/// A DNS suffix: labels of 1..63 of `[A-Za-z0-9-]`, not starting or ending with '-', 191
/// characters at most (after an optional leading '.').
pub fn validate_dns_suffix(field: &str, s: &str) -> Result<(), ModelError> {
    let s = s.strip_prefix('.').unwrap_or(s);
    let ok = !s.is_empty()
        && s.len() <= 191
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if ok {
        Ok(())
    } else {
        Err(ModelError::invalid(
            field,
            format!("{field} \"{s}\" is not a valid DNS suffix"),
        ))
    }
}

impl Validate for ClusterTemplate {
    fn validate(&self) -> Result<(), ModelError> {
        validate_template_parts(
            &self.name,
            &self.constraints,
            &self.administration,
            self.defaults.dns_suffix.as_deref(),
        )
    }
}

impl Validate for PartialTemplate {
    fn validate(&self) -> Result<(), ModelError> {
        validate_template_parts(
            &self.name,
            &self.constraints,
            &self.administration,
            self.defaults.dns_suffix.as_deref(),
        )
    }
}

impl Validate for PluginType {
    fn validate(&self) -> Result<(), ModelError> {
        validate_name("name", &self.name)?;
        for (ptype, spec) in &self.parameters {
            let which = if *ptype == crate::ParameterType::Admin {
                "admin"
            } else {
                "user"
            };
            for (fname, f) in &spec.fields {
                if f.label.is_empty() || f.field_type.is_empty() {
                    let field = format!("parameters.{which}.fields.{fname}");
                    return Err(ModelError::invalid(
                        &field,
                        format!("{field} needs a label and a type"),
                    ));
                }
            }
            for set in &spec.required {
                if let Some(missing) = set.iter().find(|r| !spec.fields.contains_key(*r)) {
                    let field = format!("parameters.{which}.required");
                    return Err(ModelError::invalid(
                        &field,
                        format!("{field} names \"{missing}\", which is not a field"),
                    ));
                }
            }
        }
        for (rname, r) in &self.resource_types {
            validate_name("resourceTypes", rname)?;
            if let Some(p) = &r.permissions {
                let field = format!("resourceTypes.{rname}.permissions");
                if r.format != ResourceFormat::File {
                    return Err(ModelError::invalid(
                        &field,
                        format!("{field} is allowed only with format file"),
                    ));
                }
                let ok = (3..=4).contains(&p.len()) && p.chars().all(|c| ('0'..='7').contains(&c));
                if !ok {
                    return Err(ModelError::invalid(
                        &field,
                        format!("{field} must be 3 or 4 octal digits"),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Validate for TenantSpecification {
    fn validate(&self) -> Result<(), ModelError> {
        validate_name("tenant.name", &self.name)?;
        if self.check_interval > 7 * 24 * 3600 {
            return Err(ModelError::invalid(
                "checkInterval",
                "checkInterval must be 0 (the server's) to 604800 seconds",
            ));
        }
        if let Some(m) = &self.max_cost_per_hour {
            crate::cost::parse_micros("maxCostPerHour", m)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthcheck_settings_are_bounded_and_belong_to_healthcheck_only() {
        let svc = |action: &str, extra: &str| {
            let body = format!(
                r#"{{"name":"s","provisioner":{{"actions":{{"{action}":{{"type":"shell","fields":{{"script":"x"}}{extra}}}}}}}}}"#
            );
            crate::lenient::parse_as::<Service>(body.as_bytes(), "a service")
        };
        let ok = svc("healthcheck", r#","timeout":"10","tries":2,"interval":0"#).unwrap();
        ok.validate().unwrap();
        let spec = ok.provisioner.actions[&ProvisionerAction::Healthcheck].healthcheck_spec();
        assert_eq!((spec.timeout, spec.tries, spec.interval), (10, 2, 0));
        let defaults = svc("healthcheck", "").unwrap();
        let spec = defaults.provisioner.actions[&ProvisionerAction::Healthcheck].healthcheck_spec();
        assert_eq!((spec.timeout, spec.tries, spec.interval), (30, 3, 5));
        let s = serde_json::to_value(&defaults).unwrap();
        assert!(
            s["provisioner"]["actions"]["healthcheck"]
                .get("tries")
                .is_none(),
            "unset settings stay out of the wire format: {s}"
        );
        for (action, extra, field) in [
            (
                "healthcheck",
                r#","timeout":0"#,
                "provisioner.actions.healthcheck.timeout",
            ),
            (
                "healthcheck",
                r#","tries":101"#,
                "provisioner.actions.healthcheck.tries",
            ),
            (
                "healthcheck",
                r#","interval":3601"#,
                "provisioner.actions.healthcheck.interval",
            ),
            ("start", r#","tries":2"#, "provisioner.actions.start.tries"),
        ] {
            let e = svc(action, extra).unwrap().validate().unwrap_err();
            assert_eq!(e.field(), Some(field), "{e}");
        }
        let e = svc("healthcheck", r#","tries":"many""#).unwrap_err();
        assert!(
            e.to_string().contains("tries"),
            "a value of the wrong type names its field: {e}"
        );
    }

    #[test]
    fn names() {
        assert!(validate_name("name", "hadoop.example-1_x").is_ok());
        assert!(validate_name("name", "").is_err());
        assert!(validate_name("name", "a b")
            .unwrap_err()
            .to_string()
            .contains("' '"));
        assert!(validate_name("name", &"a".repeat(256)).is_err());
    }

    #[test]
    fn lease_rules() {
        let mut t = ClusterTemplate {
            name: "t".into(),
            ..Default::default()
        };
        t.administration.leaseduration.initial = 10;
        t.administration.leaseduration.max = 5;
        assert!(t
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("Initial lease duration cannot be more"));
        t.administration.leaseduration.max = 0;
        assert!(t.validate().is_ok());
        t.administration.leaseduration.initial = 0;
        t.administration.leaseduration.max = 5;
        assert!(t.validate().is_err());
    }
}

/// Refuses an object key that is not in `known`, naming it and the nearest known key (a typo such
/// as `numMachine` for `numMachines`). Anything but an object passes (the typed read says what is
/// wrong with it).
pub fn known_fields(v: &serde_json::Value, known: &[&str]) -> Result<(), ModelError> {
    let Some(obj) = v.as_object() else {
        return Ok(());
    };
    let Some(bad) = obj.keys().find(|k| !known.contains(&k.as_str())) else {
        return Ok(());
    };
    let hint = match nearest(bad, known) {
        Some(k) => format!(" (did you mean {k}?)"),
        None => format!(" (known fields: {})", known.join(", ")),
    };
    Err(ModelError::invalid(
        bad.clone(),
        format!("unknown field {bad}{hint}"),
    ))
}

/// The entry of `known` nearest to `word` (case aside), when it is near enough to be a typo of it:
/// at most 2 edits, or a third of its length for long names.
pub fn nearest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (edit_distance(&word.to_lowercase(), &k.to_lowercase()), *k))
        .min()
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .map(|(_, k)| k)
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod known_field_tests {
    use super::*;

    #[test]
    fn a_typo_names_the_nearest_field() {
        let known = ["name", "numMachines", "clusterTemplate"];
        let e = known_fields(&serde_json::json!({"numMachine": 3}), &known).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown field numMachine (did you mean numMachines?)"
        );
        assert_eq!(e.field(), Some("numMachine"));
        let e = known_fields(&serde_json::json!({"zzz": 1}), &known).unwrap_err();
        assert!(
            e.to_string().contains("known fields: name, numMachines"),
            "{e}"
        );
        assert!(known_fields(&serde_json::json!({"name": "x"}), &known).is_ok());
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
