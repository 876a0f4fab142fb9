//! What a node's RunInstances asks for beyond the AMI and the instance type, read from the
//! provider's fields and checked before any call: user data, the IAM instance profile, the root
//! volume's size, IMDSv2, the availability zone; which address CONFIRM answers for SSH; and where
//! the AMI comes from (an id, or the newest of an owner's AMIs whose name matches a filter).

use base64::Engine as _;

use super::ec2::{Ec2, InstanceProfile, RunSpec, AMI_NOT_FOUND};
use crate::cloud::fields::{bad, Fields};
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
                let (owner, name) = (owner.to_string(), name.to_string());
                Ok(ImageRef::Named { owner, name })
            }
            _ => Err(PluginError::fatal(format!(
                "image {image:?} is neither an AMI id (ami-...) nor <owner>/<name filter> \
                 (e.g. amazon/al2023-ami-2023.*-x86_64)"
            ))),
        }
    }
}

/// Sets what the provider's fields add to RunInstances on `spec`, each field checked: user data,
/// the IAM instance profile (an ARN, `arn:...`, or a name), IMDSv2, the availability zone. Answers
/// the root volume's size (field `root_volume_gb`), which [`root_volume`] sets once the AMI's root
/// device is known.
pub fn launch_options(f: &Fields, spec: &mut RunSpec) -> Result<Option<u32>, PluginError> {
    SshAddress::read(f)?;
    spec.user_data_base64 = user_data(f)?;
    spec.instance_profile = f
        .text("iam_instance_profile")
        .map(|p| match p.starts_with("arn:") {
            true => InstanceProfile::Arn(p),
            false => InstanceProfile::Name(p),
        });
    spec.imdsv2 = f.flag("imdsv2")?.unwrap_or(false);
    spec.availability_zone = f.text("availability_zone");
    let Some(v) = f.text("root_volume_gb") else {
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

/// Field `user_data` (not trimmed: a script's last newline matters), base64-encoded.
fn user_data(f: &Fields) -> Result<Option<String>, PluginError> {
    let Some(v) = f.0.get("user_data") else {
        return Ok(None);
    };
    let raw = v.as_str().ok_or_else(|| bad("user_data", "must be text"))?;
    if raw.len() > USER_DATA_LIMIT {
        let why = format!(
            "{} bytes is over EC2's limit of 16 KB ({USER_DATA_LIMIT} bytes)",
            raw.len()
        );
        return Err(bad("user_data", why));
    }
    Ok(Some(base64::engine::general_purpose::STANDARD.encode(raw)).filter(|_| !raw.is_empty()))
}

/// Sets the root volume of `spec` (whose `ami` is the AMI id) to `gb` GiB on the AMI's
/// `root_device` (which must be known when a size is asked for).
pub fn root_volume(
    spec: &mut RunSpec,
    gb: Option<u32>,
    root_device: Option<String>,
) -> Result<(), PluginError> {
    spec.root_volume = match (gb, root_device) {
        (None, _) => None,
        (Some(gb), Some(device)) => Some((device, gb)),
        (Some(_), None) => {
            let why = format!("AMI {} names no root device to size", spec.ami);
            return Err(bad("root_volume_gb", why));
        }
    };
    Ok(())
}

/// The AMI id of `image` and its root device name (looked up only when `need_root` or when the
/// image is named by filter). An AMI or a filter EC2 does not know is a fatal error naming it.
pub async fn resolve_image(
    ec2: &Ec2,
    image: &ImageRef,
    need_root: bool,
    w: &Waits,
) -> Result<(String, Option<String>), PluginError> {
    let (found, missing) = match image {
        ImageRef::Id(id) if !need_root => return Ok((id.clone(), None)),
        ImageRef::Id(id) => (
            with_retries(w.calls(), || ec2.image(id)).await?,
            format!("image {id}: ec2: {AMI_NOT_FOUND}: EC2 does not know this AMI"),
        ),
        ImageRef::Named { owner, name } => (
            with_retries(w.calls(), || ec2.latest_image(owner, name)).await?,
            format!(
                "image {owner}/{name}: no AMI of owner {owner} matches the name filter {name:?}"
            ),
        ),
    };
    let i = found.ok_or_else(|| PluginError::fatal(missing))?;
    Ok((i.id, i.root_device_name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

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
        let read = |v: Value| {
            let mut spec = RunSpec {
                ami: "ami-1".into(),
                ..Default::default()
            };
            launch_options(&fields(v), &mut spec).map(|gb| (spec, gb))
        };
        let (o, gb) = read(json!({"user_data": "#!/bin/sh\necho hi\n",
            "iam_instance_profile": "arn:aws:iam::123456789012:instance-profile/web",
            "root_volume_gb": 30, "imdsv2": "true", "availability_zone": "us-east-1b"}))
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
        assert_eq!((gb, o.imdsv2), (Some(30), true));
        assert_eq!(o.availability_zone.as_deref(), Some("us-east-1b"));
        let (o, gb) = read(json!({"iam_instance_profile": "web", "user_data": ""})).unwrap();
        assert_eq!(
            o.instance_profile,
            Some(InstanceProfile::Name("web".into()))
        );
        assert!(!o.imdsv2 && o.user_data_base64.is_none() && gb.is_none());

        let at_limit = "x".repeat(USER_DATA_LIMIT);
        assert!(read(json!({ "user_data": at_limit })).is_ok());
        for (name, v) in [
            ("user_data", json!("x".repeat(USER_DATA_LIMIT + 1))),
            ("user_data", json!(7)),
            ("root_volume_gb", json!(0)),
            ("root_volume_gb", json!("big")),
            ("root_volume_gb", json!(65_537)),
            ("imdsv2", json!("maybe")),
            ("ssh_address", json!("both")),
        ] {
            let e = read(json!({ name: v })).unwrap_err();
            assert!(!e.retryable, "{e}");
            assert!(e.message.contains(&format!("provider field {name}")), "{e}");
        }

        let (mut spec, _) = read(json!({})).unwrap();
        root_volume(&mut spec, Some(20), Some("/dev/xvda".into())).unwrap();
        assert_eq!(spec.root_volume, Some(("/dev/xvda".into(), 20)));
        let e = root_volume(&mut spec, Some(20), None).unwrap_err();
        assert!(
            e.message.contains("root_volume_gb") && e.message.contains("ami-1"),
            "{e}"
        );
    }
}
