//! What a node's RunInstances asks for beyond the AMI and the instance type, read from the
//! provider's fields and checked before any call: user data, the IAM instance profile, the root
//! volume's size, IMDSv2, the availability zone; which address CONFIRM answers for SSH; and where
//! the AMI comes from (an id, or the newest of an owner's AMIs whose name matches a filter).

use base64::Engine as _;
use serde_json::{Map, Value};

use super::ec2::{Ec2, InstanceProfile, RunSpec, AMI_NOT_FOUND};
use crate::cloud::fields::Fields;
use crate::cloud::{with_retries, SshAddress, Waits};
use crate::task::PluginError;

/// The most user data RunInstances takes, before base64 encoding (EC2 User Guide, "Run commands
/// when you launch an EC2 instance with user data input": "User data is limited to 16 KB, in raw
/// form, before it is base64-encoded").
pub const USER_DATA_LIMIT: usize = 16 * 1024;

/// The largest root volume asked for, in GiB (botocore's EC2 model, `EbsBlockDevice.VolumeSize`:
/// gp3 and io2 take up to 65,536 GiB).
pub const ROOT_VOLUME_LIMIT_GB: u32 = 65_536;

/// Where the AMI comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRef {
    /// An AMI id (`ami-0123abcd`).
    Id(String),
    /// The newest (by `CreationDate`) of `owner`'s AMIs whose name matches `name`, written
    /// `<owner>/<name filter>`: `136693071363/debian-12-amd64-*`, `amazon/al2023-ami-2023.*-x86_64`.
    Named {
        /// An account id, or `self`, `amazon`, `aws-marketplace` (DescribeImages' `Owner`).
        owner: String,
        /// The `name` filter (`*` and `?` are wildcards).
        name: String,
    },
}

impl ImageRef {
    /// Reads an image type's `image` (or the provider's `ami`).
    pub fn parse(image: &str) -> Result<ImageRef, PluginError> {
        // EC2 judges an id's form itself (`InvalidAMIID.Malformed`, fatal and named).
        if image.starts_with("ami-") && !image.contains('/') {
            return Ok(ImageRef::Id(image.to_string()));
        }
        let owner_ok =
            |o: &str| !o.is_empty() && o.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        match image.split_once('/') {
            Some((owner, name)) if owner_ok(owner) && !name.trim().is_empty() => {
                Ok(ImageRef::Named {
                    owner: owner.to_string(),
                    name: name.to_string(),
                })
            }
            _ => Err(PluginError::fatal(format!(
                "image {image:?} is neither an AMI id (ami-...) nor <owner>/<name filter> \
                 (e.g. amazon/al2023-ami-2023.*-x86_64)"
            ))),
        }
    }
}

/// What the provider's fields add to RunInstances.
#[derive(Debug, Clone, Default)]
pub struct LaunchOptions {
    /// Field `user_data`, base64-encoded.
    pub user_data_base64: Option<String>,
    /// Field `iam_instance_profile`: an ARN (`arn:...`) or a name.
    pub instance_profile: Option<InstanceProfile>,
    /// Field `root_volume_gb`.
    pub root_volume_gb: Option<u32>,
    /// Field `imdsv2`.
    pub imdsv2: bool,
    /// Field `availability_zone`.
    pub availability_zone: Option<String>,
}

fn text(f: &Map<String, Value>, name: &str) -> Option<String> {
    match f.get(name)? {
        Value::String(s) => Some(s.trim().to_string()).filter(|s| !s.is_empty()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn bad(name: &str, what: impl std::fmt::Display) -> PluginError {
    PluginError::fatal(format!("provider field {name}: {what}"))
}

/// The launch options of the provider's fields, each checked.
pub fn launch_options(fields: &Fields) -> Result<LaunchOptions, PluginError> {
    SshAddress::read(fields)?;
    let f = &fields.0;
    Ok(LaunchOptions {
        user_data_base64: user_data(f)?,
        instance_profile: text(f, "iam_instance_profile").map(|p| {
            if p.starts_with("arn:") {
                InstanceProfile::Arn(p)
            } else {
                InstanceProfile::Name(p)
            }
        }),
        root_volume_gb: root_volume_gb(f)?,
        imdsv2: flag(f, "imdsv2")?,
        availability_zone: text(f, "availability_zone"),
    })
}

/// Field `user_data` (not trimmed: a script's last newline matters), base64-encoded.
fn user_data(f: &Map<String, Value>) -> Result<Option<String>, PluginError> {
    let Some(v) = f.get("user_data") else {
        return Ok(None);
    };
    let raw = v.as_str().ok_or_else(|| bad("user_data", "must be text"))?;
    if raw.is_empty() {
        return Ok(None);
    }
    if raw.len() > USER_DATA_LIMIT {
        return Err(bad(
            "user_data",
            format!(
                "{} bytes is over EC2's limit of 16 KB ({USER_DATA_LIMIT} bytes)",
                raw.len()
            ),
        ));
    }
    Ok(Some(base64::engine::general_purpose::STANDARD.encode(raw)))
}

fn root_volume_gb(f: &Map<String, Value>) -> Result<Option<u32>, PluginError> {
    let Some(v) = text(f, "root_volume_gb") else {
        return Ok(None);
    };
    match v.parse::<u32>() {
        Ok(gb) if (1..=ROOT_VOLUME_LIMIT_GB).contains(&gb) => Ok(Some(gb)),
        _ => Err(bad(
            "root_volume_gb",
            format!("{v:?} is not a size in GiB from 1 to {ROOT_VOLUME_LIMIT_GB}"),
        )),
    }
}

fn flag(f: &Map<String, Value>, name: &str) -> Result<bool, PluginError> {
    match text(f, name).map(|s| s.to_ascii_lowercase()).as_deref() {
        None | Some("false" | "no" | "0") => Ok(false),
        Some("true" | "yes" | "1") => Ok(true),
        Some(other) => Err(bad(name, format!("{other:?} is neither true nor false"))),
    }
}

impl LaunchOptions {
    /// Sets these options on `spec`, whose `ami` is the AMI id; `root_device` is the AMI's root
    /// device name (needed when a root volume size is asked for).
    pub fn apply(
        &self,
        spec: &mut RunSpec,
        root_device: Option<String>,
    ) -> Result<(), PluginError> {
        spec.user_data_base64.clone_from(&self.user_data_base64);
        spec.instance_profile.clone_from(&self.instance_profile);
        spec.imdsv2 = self.imdsv2;
        spec.availability_zone.clone_from(&self.availability_zone);
        spec.root_volume = match (self.root_volume_gb, root_device) {
            (None, _) => None,
            (Some(gb), Some(device)) => Some((device, gb)),
            (Some(_), None) => {
                return Err(bad(
                    "root_volume_gb",
                    format!("AMI {} names no root device to size", spec.ami),
                ))
            }
        };
        Ok(())
    }
}

/// The AMI id of `image` and its root device name (looked up only when `need_root` or when the
/// image is named by filter). An AMI or a filter EC2 does not know is a fatal error naming it.
pub async fn resolve_image(
    ec2: &Ec2,
    image: &ImageRef,
    need_root: bool,
    w: &Waits,
) -> Result<(String, Option<String>), PluginError> {
    match image {
        ImageRef::Id(id) if !need_root => Ok((id.clone(), None)),
        ImageRef::Id(id) => match with_retries(w.calls(), || ec2.image(id)).await? {
            Some(i) => Ok((i.id, i.root_device_name)),
            None => Err(PluginError::fatal(format!(
                "image {id}: ec2: {AMI_NOT_FOUND}: EC2 does not know this AMI"
            ))),
        },
        ImageRef::Named { owner, name } => {
            match with_retries(w.calls(), || ec2.latest_image(owner, name)).await? {
                Some(i) => Ok((i.id, i.root_device_name)),
                None => Err(PluginError::fatal(format!(
                "image {owner}/{name}: no AMI of owner {owner} matches the name filter {name:?}"
            ))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Fields {
        Fields(v.as_object().unwrap().clone())
    }

    #[test]
    fn images_are_ids_or_owner_and_name() {
        assert_eq!(
            ImageRef::parse("ami-0abc12").unwrap(),
            ImageRef::Id("ami-0abc12".into())
        );
        assert_eq!(
            ImageRef::parse("amazon/al2023-ami-*/x86_64").unwrap(),
            ImageRef::Named {
                owner: "amazon".into(),
                name: "al2023-ami-*/x86_64".into()
            }
        );
        for bad in ["ubuntu", "/name", "amazon/", "own er/x", "ami"] {
            let e = ImageRef::parse(bad);
            assert!(e.is_err(), "{bad}");
        }
        let e = ImageRef::parse("ubuntu").unwrap_err();
        assert!(!e.retryable && e.message.contains("\"ubuntu\""), "{e}");
    }

    #[test]
    fn options_are_read_and_each_bad_one_is_named() {
        let o = launch_options(&fields(json!({"user_data": "#!/bin/sh\necho hi\n",
            "iam_instance_profile": "arn:aws:iam::123456789012:instance-profile/web",
            "root_volume_gb": 30, "imdsv2": "true", "availability_zone": "us-east-1b"})))
        .unwrap();
        assert_eq!(
            o.user_data_base64.as_deref(),
            Some("IyEvYmluL3NoCmVjaG8gaGkK")
        );
        assert_eq!(
            o.instance_profile,
            Some(InstanceProfile::Arn(
                "arn:aws:iam::123456789012:instance-profile/web".into()
            ))
        );
        assert_eq!((o.root_volume_gb, o.imdsv2), (Some(30), true));
        let o = launch_options(&fields(json!({"iam_instance_profile": "web"}))).unwrap();
        assert_eq!(
            o.instance_profile,
            Some(InstanceProfile::Name("web".into()))
        );
        assert!(!o.imdsv2 && o.user_data_base64.is_none());

        let at_limit = "x".repeat(USER_DATA_LIMIT);
        assert!(launch_options(&fields(json!({"user_data": at_limit}))).is_ok());
        for (name, v) in [
            ("user_data", json!("x".repeat(USER_DATA_LIMIT + 1))),
            ("user_data", json!(7)),
            ("root_volume_gb", json!(0)),
            ("root_volume_gb", json!("big")),
            ("root_volume_gb", json!(65_537)),
            ("imdsv2", json!("maybe")),
            ("ssh_address", json!("both")),
        ] {
            let e = launch_options(&fields(json!({ name: v }))).unwrap_err();
            assert!(!e.retryable, "{e}");
            assert!(e.message.contains(&format!("provider field {name}")), "{e}");
        }
    }

    #[test]
    fn a_root_volume_needs_the_ami_s_root_device() {
        let o = LaunchOptions {
            root_volume_gb: Some(20),
            ..Default::default()
        };
        let mut spec = RunSpec {
            ami: "ami-1".into(),
            ..Default::default()
        };
        o.apply(&mut spec, Some("/dev/xvda".into())).unwrap();
        assert_eq!(spec.root_volume, Some(("/dev/xvda".into(), 20)));
        let e = o.apply(&mut spec, None).unwrap_err();
        assert!(
            e.message.contains("root_volume_gb") && e.message.contains("ami-1"),
            "{e}"
        );
    }
}
