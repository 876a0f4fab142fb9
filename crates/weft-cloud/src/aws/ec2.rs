//! The EC2 calls the `aws` provider makes, over [`QueryClient`], each one try (the cloud layer
//! retries them): DescribeInstances (by id, or by tags), RunInstances, TerminateInstances,
//! ImportKeyPair, DeleteKeyPair, GetConsoleOutput and DescribeImages (by id, or the newest of an
//! owner's AMIs by name).

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::client::{malformed, QueryClient};
use super::xml::Element;
use crate::cloud::CloudError;

/// The code EC2 answers for an instance id it does not know.
pub const INSTANCE_NOT_FOUND: &str = "InvalidInstanceID.NotFound";

/// The code EC2 answers for an AMI id it does not know.
pub const AMI_NOT_FOUND: &str = "InvalidAMIID.NotFound";

/// States of an instance that still is (or will be) a machine.
pub const LIVE_STATES: &[&str] = &["pending", "running", "stopping", "stopped"];

/// One instance as DescribeInstances or RunInstances shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instance {
    /// The instance id (`i-...`).
    pub id: String,
    /// The state's name: `pending`, `running`, `shutting-down`, `terminated`, `stopping`,
    /// `stopped`; empty when the answer has none.
    pub state: String,
    /// The private IPv4 address, once it has one.
    pub private_ip: Option<String>,
    /// The public IPv4 address, if it has one.
    pub public_ip: Option<String>,
    /// When the instance was launched, as EC2 writes it (ISO 8601, UTC); empty when absent.
    pub launch_time: String,
    /// The instance's tags, key to value.
    pub tags: BTreeMap<String, String>,
}

impl Instance {
    fn from_item(e: &Element) -> Option<Instance> {
        let text = |e: &Element, p: &[&str]| e.text_at(p).map(str::to_string);
        let tags = e.child("tagSet").into_iter().flat_map(|s| s.all("item"));
        let tag = |t| Some((text(t, &["key"])?, text(t, &["value"]).unwrap_or_default()));
        Some(Instance {
            id: text(e, &["instanceId"])?,
            state: text(e, &["instanceState", "name"]).unwrap_or_default(),
            private_ip: text(e, &["privateIpAddress"]),
            public_ip: text(e, &["ipAddress"]),
            launch_time: text(e, &["launchTime"]).unwrap_or_default(),
            tags: tags.filter_map(tag).collect(),
        })
    }

    /// Whether the instance is (or will be) a machine: not shutting down, not terminated.
    pub fn is_live(&self) -> bool {
        LIVE_STATES.contains(&self.state.as_str())
    }
}

/// The instances in an answer's `instancesSet`s (RunInstances, DescribeInstances).
fn instances_in(root: &Element) -> Vec<Instance> {
    let mut sets = Vec::new();
    root.find_all("instancesSet", &mut sets);
    sets.iter()
        .flat_map(|s| s.all("item"))
        .filter_map(Instance::from_item)
        .collect()
}

/// An AMI as DescribeImages shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Image {
    /// The AMI id (`ami-...`).
    pub id: String,
    /// The AMI's name; empty when the answer has none.
    pub name: String,
    /// When the AMI was made (ISO 8601, UTC, so that text order is time order); empty when absent.
    pub creation_date: String,
    /// The root device's name (`/dev/xvda`, `/dev/sda1`), when the answer has one.
    pub root_device_name: Option<String>,
}

impl Image {
    fn from_item(e: &Element) -> Option<Image> {
        let text = |p: &[&str]| e.text_at(p).map(str::to_string);
        Some(Image {
            id: text(&["imageId"])?,
            name: text(&["name"]).unwrap_or_default(),
            creation_date: text(&["creationDate"]).unwrap_or_default(),
            root_device_name: text(&["rootDeviceName"]),
        })
    }
}

/// The images of a DescribeImages answer (`imagesSet`).
fn images_in(root: &Element) -> Vec<Image> {
    root.child("imagesSet")
        .map(|s| s.all("item").filter_map(Image::from_item).collect())
        .unwrap_or_default()
}

/// The IAM instance profile an instance launches with (`IamInstanceProfile.Name` or `.Arn`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceProfile {
    /// By name.
    Name(String),
    /// By ARN (`arn:aws:iam::<account>:instance-profile/<name>`).
    Arn(String),
}

/// What RunInstances makes.
#[derive(Debug, Clone, Default)]
pub struct RunSpec {
    /// The AMI id to launch (`ImageId`).
    pub ami: String,
    /// The instance type, e.g. `t3.small`.
    pub instance_type: String,
    /// The idempotency token (`ClientToken`): the same token never launches a second instance.
    pub client_token: String,
    /// The subnet to launch in; `None` is the default VPC's.
    pub subnet_id: Option<String>,
    /// The security groups, by id; empty is the default group.
    pub security_group_ids: Vec<String>,
    /// The key pair to launch with; `None` launches without one.
    pub key_name: Option<String>,
    /// Tags the instance carries from its launch (`TagSpecifications`).
    pub tags: Vec<(String, String)>,
    /// The user data, already base64-encoded (`UserData`).
    pub user_data_base64: Option<String>,
    /// The IAM instance profile (`IamInstanceProfile`).
    pub instance_profile: Option<InstanceProfile>,
    /// The root volume: the AMI's root device name and its size in GiB
    /// (`BlockDeviceMapping.1.DeviceName`, `BlockDeviceMapping.1.Ebs.VolumeSize`).
    pub root_volume: Option<(String, u32)>,
    /// Whether the instance metadata service answers only IMDSv2 sessions
    /// (`MetadataOptions.HttpTokens=required`).
    pub imdsv2: bool,
    /// The availability zone (`Placement.AvailabilityZone`); `None` lets EC2 choose.
    pub availability_zone: Option<String>,
}

impl RunSpec {
    /// The RunInstances parameters, named as botocore's EC2 model serializes them (the query
    /// protocol takes each member's `locationName`, capitalised, and flattens lists:
    /// `BlockDeviceMapping.1.Ebs.VolumeSize`, `IamInstanceProfile.Arn`, `TagSpecification.1.Tag.1.Key`).
    pub fn params(&self) -> Vec<(String, String)> {
        let mut params = vec![
            p("ImageId", &self.ami),
            p("InstanceType", &self.instance_type),
            p("MinCount", "1"),
            p("MaxCount", "1"),
            p("ClientToken", &self.client_token),
            p("TagSpecification.1.ResourceType", "instance"),
        ];
        for (i, (k, v)) in self.tags.iter().enumerate() {
            params.push(p(format!("TagSpecification.1.Tag.{}.Key", i + 1), k));
            params.push(p(format!("TagSpecification.1.Tag.{}.Value", i + 1), v));
        }
        for (i, g) in self.security_group_ids.iter().enumerate() {
            params.push(p(format!("SecurityGroupId.{}", i + 1), g));
        }
        let zone = self.availability_zone.as_deref();
        let tokens = self.imdsv2.then_some("required");
        let optional = [
            ("SubnetId", self.subnet_id.as_deref()),
            ("KeyName", self.key_name.as_deref()),
            ("UserData", self.user_data_base64.as_deref()),
            ("Placement.AvailabilityZone", zone),
            ("MetadataOptions.HttpTokens", tokens),
        ];
        params.extend(optional.into_iter().filter_map(|(k, v)| Some(p(k, v?))));
        match &self.instance_profile {
            Some(InstanceProfile::Name(n)) => params.push(p("IamInstanceProfile.Name", n)),
            Some(InstanceProfile::Arn(a)) => params.push(p("IamInstanceProfile.Arn", a)),
            None => {}
        }
        if let Some((device, gb)) = &self.root_volume {
            params.push(p("BlockDeviceMapping.1.DeviceName", device));
            params.push(p("BlockDeviceMapping.1.Ebs.VolumeSize", gb.to_string()));
        }
        params
    }
}

/// An error about the AMI (`InvalidAMIID.NotFound`, `.Malformed`, `.Unavailable`) names the
/// image and is never retried: another try launches the same AMI.
fn name_the_image(e: CloudError, ami: &str) -> CloudError {
    if !e.code.starts_with("InvalidAMIID.") {
        return e;
    }
    CloudError {
        message: format!("image {ami}: {}", e.message),
        ..e.retryable(false)
    }
}

/// `r`'s value, or `None` when it failed with the error code `code`.
fn unless_code<T>(r: Result<T, CloudError>, code: &str) -> Result<Option<T>, CloudError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code == code => Ok(None),
        Err(e) => Err(e),
    }
}

fn p(k: impl Into<String>, v: impl Into<String>) -> (String, String) {
    (k.into(), v.into())
}

/// The EC2 API of one region, with credentials.
#[derive(Debug, Clone)]
pub struct Ec2 {
    /// The signed query client of the region's EC2 endpoint.
    pub q: QueryClient,
}

impl Ec2 {
    /// One call.
    pub async fn call(
        &self,
        action: &str,
        params: &[(String, String)],
    ) -> Result<Element, CloudError> {
        self.q.call(action, params).await
    }

    /// The instances carrying every tag of `tags`, in `states` (all states when empty), oldest
    /// first.
    pub async fn instances_tagged(
        &self,
        tags: &[(String, String)],
        states: &[&str],
    ) -> Result<Vec<Instance>, CloudError> {
        let filters = tags
            .iter()
            .map(|(k, v)| (format!("tag:{k}"), vec![v.as_str()]));
        self.instances_filtered(filters.collect(), states).await
    }

    /// The instances carrying a tag `key` (any value), in `states`, oldest first.
    pub async fn instances_with_tag_key(
        &self,
        key: &str,
        states: &[&str],
    ) -> Result<Vec<Instance>, CloudError> {
        let filters = vec![("tag-key".to_string(), vec![key])];
        self.instances_filtered(filters, states).await
    }

    /// The instances matching every filter (its name and values) and in `states` (all when
    /// empty), oldest first.
    async fn instances_filtered(
        &self,
        mut filters: Vec<(String, Vec<&str>)>,
        states: &[&str],
    ) -> Result<Vec<Instance>, CloudError> {
        if !states.is_empty() {
            filters.push(("instance-state-name".into(), states.to_vec()));
        }
        let mut params = Vec::new();
        for (n, (name, values)) in filters.iter().enumerate() {
            params.push(p(format!("Filter.{}.Name", n + 1), name.as_str()));
            for (i, v) in values.iter().enumerate() {
                params.push(p(format!("Filter.{}.Value.{}", n + 1, i + 1), *v));
            }
        }
        let mut all = self.describe_pages(params).await?;
        all.sort_by(|a, b| (&a.launch_time, &a.id).cmp(&(&b.launch_time, &b.id)));
        Ok(all)
    }

    async fn describe_pages(
        &self,
        params: Vec<(String, String)>,
    ) -> Result<Vec<Instance>, CloudError> {
        let (mut all, mut token) = (Vec::new(), None::<String>);
        for _ in 0..100 {
            let next = token.iter().map(|t| p("NextToken", t));
            let page: Vec<_> = params.iter().cloned().chain(next).collect();
            let root = self.call("DescribeInstances", &page).await?;
            all.extend(instances_in(&root));
            token = root.text_at(&["nextToken"]).map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        Ok(all)
    }

    /// One instance by id; `None` when EC2 does not know it.
    pub async fn instance(&self, id: &str) -> Result<Option<Instance>, CloudError> {
        let found = self.describe_pages(vec![p("InstanceId.1", id)]).await;
        let found = unless_code(found, INSTANCE_NOT_FOUND)?.unwrap_or_default();
        Ok(found.into_iter().find(|i| i.id == id))
    }

    /// Launches one instance (called once: the caller looks for it by tag before another try).
    pub async fn run_instance(&self, spec: &RunSpec) -> Result<Instance, CloudError> {
        let root = self
            .q
            .call("RunInstances", &spec.params())
            .await
            .map_err(|e| name_the_image(e, &spec.ami))?;
        let none = || malformed("ec2", "RunInstances answered no instance");
        instances_in(&root).into_iter().next().ok_or_else(none)
    }

    /// One AMI by id; `None` when EC2 does not know it (`InvalidAMIID.NotFound`, or an empty set).
    pub async fn image(&self, id: &str) -> Result<Option<Image>, CloudError> {
        let root = self.call("DescribeImages", &[p("ImageId.1", id)]).await;
        let found = unless_code(root, AMI_NOT_FOUND)?.map(|r| images_in(&r));
        Ok(found.unwrap_or_default().into_iter().find(|i| i.id == id))
    }

    /// The most recent AMI (by `CreationDate`) of `owner` (an account id, `self`, `amazon`,
    /// `aws-marketplace`) whose name matches `name` (the `name` filter: `*` and `?` are
    /// wildcards); `None` when none matches.
    pub async fn latest_image(&self, owner: &str, name: &str) -> Result<Option<Image>, CloudError> {
        let params = [
            p("Owner.1", owner),
            p("Filter.1.Name", "name"),
            p("Filter.1.Value.1", name),
        ];
        let root = self.call("DescribeImages", &params).await?;
        Ok(images_in(&root)
            .into_iter()
            .max_by(|a, b| (&a.creation_date, &a.id).cmp(&(&b.creation_date, &b.id))))
    }

    /// Terminates one instance; answers false when EC2 does not know it.
    pub async fn terminate(&self, id: &str) -> Result<bool, CloudError> {
        let r = self
            .call("TerminateInstances", &[p("InstanceId.1", id)])
            .await;
        Ok(unless_code(r, INSTANCE_NOT_FOUND)?.is_some())
    }

    /// Imports a public key (OpenSSH) as a key pair; one already there under the name is kept.
    pub async fn import_key_pair(&self, name: &str, public: &str) -> Result<bool, CloudError> {
        let material = STANDARD.encode(public);
        let params = [p("KeyName", name), p("PublicKeyMaterial", material)];
        let r = self.call("ImportKeyPair", &params).await;
        Ok(unless_code(r, "InvalidKeyPair.Duplicate")?.is_some())
    }

    /// Deletes a key pair (a missing one is fine).
    pub async fn delete_key_pair(&self, name: &str) -> Result<(), CloudError> {
        let r = self.call("DeleteKeyPair", &[p("KeyName", name)]).await;
        unless_code(r, "InvalidKeyPair.NotFound").map(drop)
    }

    /// The instance's console output (decoded), when EC2 has some.
    pub async fn console_output(&self, id: &str) -> Result<Option<String>, CloudError> {
        let root = self
            .call("GetConsoleOutput", &[p("InstanceId", id)])
            .await?;
        let b64 = root
            .text_at(&["output"])
            .map(|b| b.split_whitespace().collect::<String>());
        let raw = b64.and_then(|b| STANDARD.decode(b).ok());
        Ok(raw.map(|b| String::from_utf8_lossy(&b).into_owned()))
    }
}

/// The SSH host keys cloud-init prints to the console between `-----BEGIN SSH HOST KEY KEYS-----`
/// and `-----END SSH HOST KEY KEYS-----`, by kind (`ed25519`, `ecdsa`, `rsa`).
pub fn console_host_keys(console: &str) -> BTreeMap<String, String> {
    let mut keys = BTreeMap::new();
    let Some((_, rest)) = console.split_once("-----BEGIN SSH HOST KEY KEYS-----") else {
        return keys;
    };
    let block = rest
        .split_once("-----END SSH HOST KEY KEYS-----")
        .map_or("", |(b, _)| b);
    for line in block.lines() {
        let mut parts = line.split_whitespace();
        let (Some(alg), Some(blob)) = (parts.next(), parts.next()) else {
            continue;
        };
        let kind = match alg {
            "ssh-ed25519" => "ed25519",
            "ssh-rsa" => "rsa",
            a if a.starts_with("ecdsa-sha2-") => "ecdsa",
            _ => continue,
        };
        keys.insert(kind.to_string(), format!("{alg} {blob}"));
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::xml;

    #[test]
    fn instances_are_read_from_answers() {
        let doc = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <reservationSet><item><instancesSet><item><instanceId>i-9</instanceId>
    <instanceState><code>0</code><name>pending</name></instanceState><ipAddress/>
    <privateIpAddress>10.0.0.5</privateIpAddress><launchTime>2026-01-01T00:00:00Z</launchTime>
    <tagSet><item><key>weft:node</key><value>a &amp; b &#x3C;c&#62;</value></item>
      <item><key>e</key><value/></item></tagSet>
  </item></instancesSet></item></reservationSet>
</DescribeInstancesResponse>"#;
        let got = instances_in(&xml::parse(doc).unwrap());
        assert_eq!(got.len(), 1);
        let i = &got[0];
        assert_eq!(i.id, "i-9");
        assert_eq!(i.state, "pending");
        assert!(i.is_live());
        assert_eq!(i.private_ip.as_deref(), Some("10.0.0.5"));
        assert_eq!(i.public_ip, None);
        let node = i.tags.get("weft:node").map(String::as_str);
        assert_eq!(node, Some("a & b <c>"));
        assert_eq!(i.tags.get("e").map(String::as_str), Some(""));
    }

    #[test]
    fn run_instances_parameters_are_named_as_botocore_serializes_them() {
        let spec = RunSpec {
            ami: "ami-1".into(),
            instance_type: "t3.small".into(),
            client_token: "tok".into(),
            user_data_base64: Some("aGk=".into()),
            instance_profile: Some(InstanceProfile::Arn(
                "arn:aws:iam::1:instance-profile/p".into(),
            )),
            root_volume: Some(("/dev/xvda".into(), 30)),
            imdsv2: true,
            availability_zone: Some("us-east-1b".into()),
            ..Default::default()
        };
        let params: BTreeMap<String, String> = spec.params().into_iter().collect();
        let get = |k: &str| params.get(k).map(String::as_str);
        assert_eq!(get("UserData"), Some("aGk="));
        assert_eq!(
            get("IamInstanceProfile.Arn"),
            Some("arn:aws:iam::1:instance-profile/p")
        );
        assert_eq!(get("IamInstanceProfile.Name"), None);
        assert_eq!(get("BlockDeviceMapping.1.DeviceName"), Some("/dev/xvda"));
        assert_eq!(get("BlockDeviceMapping.1.Ebs.VolumeSize"), Some("30"));
        assert_eq!(get("MetadataOptions.HttpTokens"), Some("required"));
        assert_eq!(get("Placement.AvailabilityZone"), Some("us-east-1b"));
        let plain: BTreeMap<String, String> = RunSpec::default().params().into_iter().collect();
        for k in [
            "UserData",
            "MetadataOptions.HttpTokens",
            "Placement.AvailabilityZone",
            "SubnetId",
        ] {
            assert!(!plain.contains_key(k), "{k}");
        }
    }

    #[test]
    fn images_are_read_and_ami_errors_name_the_image() {
        let doc = "<DescribeImagesResponse><imagesSet><item><imageId>ami-1</imageId>\
            <name>deb-12</name><creationDate>2026-01-02T00:00:00.000Z</creationDate>\
            <rootDeviceName>/dev/xvda</rootDeviceName><blockDeviceMapping><item>\
            <deviceName>/dev/xvda</deviceName></item></blockDeviceMapping></item></imagesSet>\
            </DescribeImagesResponse>";
        let got = images_in(&xml::parse(doc).unwrap());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].root_device_name.as_deref(), Some("/dev/xvda"));
        assert_eq!(got[0].creation_date, "2026-01-02T00:00:00.000Z");
        let error = |status, code| CloudError::from_status("ec2", status, code, "bad", None);
        for code in ["InvalidAMIID.NotFound", "InvalidAMIID.Malformed"] {
            let e = name_the_image(error(400, code), "ami-x");
            assert!(!e.retryable && e.message == "image ami-x: bad", "{e}");
        }
        let other = error(503, "Unavailable");
        assert_eq!(name_the_image(other.clone(), "ami-x"), other);
    }

    #[test]
    fn host_keys_are_read_from_the_console() {
        let console = "boot...\n-----BEGIN SSH HOST KEY KEYS-----\n\
            ecdsa-sha2-nistp256 AAAAE2 root@h\nssh-ed25519 AAAAC3Nz root@h\n\
            ssh-rsa AAAAB3 root@h\n-----END SSH HOST KEY KEYS-----\nlogin:";
        let keys = console_host_keys(console);
        assert_eq!(
            keys.get("ed25519").map(String::as_str),
            Some("ssh-ed25519 AAAAC3Nz")
        );
        assert_eq!(keys.len(), 3);
        assert!(console_host_keys("no keys here").is_empty());
    }
}
