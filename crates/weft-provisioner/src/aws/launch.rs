//! Where a node's AMI comes from: an id, or the newest of an owner's AMIs whose name matches a
//! filter.

use super::ec2::Ec2;
use crate::task::PluginError;

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

/// The AMI id of `image`: an id as it is, a name filter looked up (DescribeImages). A filter
/// no AMI matches is a fatal error naming it.
pub async fn resolve_image(ec2: &Ec2, image: &ImageRef) -> Result<String, PluginError> {
    match image {
        ImageRef::Id(id) => Ok(id.clone()),
        ImageRef::Named { owner, name } => match ec2.latest_image(owner, name).await? {
            Some(i) => Ok(i.id),
            None => Err(PluginError::fatal(format!(
                "image {owner}/{name}: no AMI of owner {owner} matches the name filter {name:?}"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
