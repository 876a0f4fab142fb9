//! What the `aws` provider launches, read back from moto (started as in `aws.rs`, with
//! `MOTO_ENABLE_AMI_VALIDATION`): an unknown AMI is fatal and named; an AMI named by owner and
//! name filter is the newest match; user data, the IAM instance profile, the root volume's size,
//! IMDSv2 and the availability zone reach RunInstances under the names botocore's EC2 model gives
//! them, as DescribeInstances, DescribeVolumes and DescribeInstanceAttribute answer them back; and
//! `ssh_address: private` makes CONFIRM answer the private address.

use base64::Engine as _;
use serde_json::{json, Map, Value};
use weft_provisioner::aws::xml::Element;
use weft_provisioner::task::Action;
use weft_provisioner::Provider;

use crate::aws::{moto, provider, task, Moto};

fn p(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

/// The first element named `name` under `e`, anywhere.
fn first<'a>(e: &'a Element, name: &str) -> &'a Element {
    let mut found = Vec::new();
    e.find_all(name, &mut found);
    found
        .first()
        .unwrap_or_else(|| panic!("no {name} in {e:?}"))
}

/// The instance `id` as DescribeInstances answers it (its `item` in `instancesSet`).
async fn described(m: &Moto, id: &str) -> Element {
    let root = m
        .ec2()
        .call("DescribeInstances", &[p("InstanceId.1", id)])
        .await
        .expect("DescribeInstances");
    first(&root, "instancesSet")
        .child("item")
        .expect("the instance")
        .clone()
}

fn fields_with(m: &Moto, extra: Value) -> Map<String, Value> {
    let mut f = m.fields(&m.endpoint);
    f.extend(extra.as_object().unwrap().clone());
    f
}

#[tokio::test]
async fn an_unknown_ami_fails_at_once_and_is_named() {
    let Some(m) = moto().await else { return };
    let unknown = "ami-0123456789abcdef0";
    let fields = fields_with(&m, json!({ "ami": unknown }));
    let e = provider()
        .create(&task(Action::Create, "n-noami", &fields, &Map::new()))
        .await
        .expect_err("moto, as EC2, refuses an AMI it does not know");
    assert!(!e.retryable, "{e}");
    assert!(e.message.contains("InvalidAMIID.NotFound"), "{e}");
    assert!(e.message.contains(&format!("image {unknown}")), "{e}");
    assert!(m.instances_of("n-noami").await.is_empty());

    let fields = fields_with(&m, json!({ "ami": "debian" }));
    let e = provider()
        .create(&task(Action::Create, "n-badami", &fields, &Map::new()))
        .await
        .expect_err("neither an id nor owner/name");
    assert!(!e.retryable && e.message.contains("\"debian\""), "{e}");
}

/// Makes images named `prefix-1`, `prefix-2`... of an instance until one's CreationDate (EC2
/// gives it to the second) is later than the first's; answers that last image's id, the one
/// image of the newest second.
async fn images_across_a_second(m: &Moto, instance: &str, prefix: &str) -> String {
    let created = |root: Element| first(&root, "imageId").text.trim().to_string();
    let date = |id: String| async move {
        let img = m.ec2().image(&id).await.unwrap().expect("the image made");
        img.creation_date
    };
    let make = |n: u32| {
        let name = format!("{prefix}-{n}");
        async move {
            let params = [p("InstanceId", instance), p("Name", &name)];
            created(
                m.ec2()
                    .call("CreateImage", &params)
                    .await
                    .expect("CreateImage"),
            )
        }
    };
    let first_date = date(make(1).await).await;
    for n in 2..10_000 {
        let id = make(n).await;
        if date(id.clone()).await > first_date {
            return id;
        }
    }
    panic!("no image made in a later second");
}

#[tokio::test]
async fn an_ami_named_by_owner_and_filter_is_the_newest_match() {
    let Some(m) = moto().await else { return };
    // AMIs moto ships, found by their owner (Amazon's account) and a wildcard name: the answer
    // is one whose name matches, of the latest CreationDate among Amazon's matching AMIs.
    let shipped = m
        .ec2()
        .latest_image("137112412989", "amzn2-ami-hvm-*-x86_64-gp2")
        .await
        .unwrap()
        .expect("moto ships Amazon Linux 2");
    let matches = |n: &str| n.starts_with("amzn2-ami-hvm-") && n.ends_with("-x86_64-gp2");
    assert!(matches(&shipped.name), "{shipped:?}");
    assert_eq!(shipped.root_device_name.as_deref(), Some("/dev/xvda"));
    let all = m
        .ec2()
        .call("DescribeImages", &[p("Owner.1", "137112412989")])
        .await
        .unwrap();
    let items = first(&all, "imagesSet").all("item");
    let dates: Vec<&str> = items
        .filter(|i| i.text_at(&["name"]).is_some_and(matches))
        .filter_map(|i| i.text_at(&["creationDate"]))
        .collect();
    assert!(dates.len() > 1, "several match: {dates:?}");
    assert_eq!(
        dates.iter().max().copied(),
        Some(shipped.creation_date.as_str())
    );

    let p0 = provider();
    let fields = m.fields(&m.endpoint);
    let base = p0
        .create(&task(Action::Create, "n-base", &fields, &Map::new()))
        .await
        .expect("an instance to make images of");
    let base = base.result["providerid"].as_str().unwrap().to_string();
    let newest = images_across_a_second(&m, &base, "weft-web").await;
    // Newer still, but its name does not match.
    let params = [p("InstanceId", &base), p("Name", "other-web")];
    m.ec2().call("CreateImage", &params).await.unwrap();

    let named = fields_with(&m, json!({"ami": "self/weft-web-*"}));
    let out = p0
        .create(&task(Action::Create, "n-named", &named, &Map::new()))
        .await
        .expect("create from the newest weft-web image");
    let id = out.result["providerid"].as_str().unwrap();
    assert_eq!(
        first(&described(&m, id).await, "imageId").text.trim(),
        newest
    );
    assert!(out.stdout.contains(&newest), "{}", out.stdout);

    let none = fields_with(&m, json!({"ami": "self/nothing-like-this-*"}));
    let e = p0
        .create(&task(Action::Create, "n-none", &none, &Map::new()))
        .await
        .expect_err("no AMI matches");
    assert!(!e.retryable, "{e}");
    assert!(e.message.contains("\"nothing-like-this-*\""), "{e}");
    assert!(m.instances_of("n-none").await.is_empty());
}

/// Makes the IAM instance profile `name` in moto; answers its ARN.
async fn instance_profile(m: &Moto, name: &str) -> String {
    let root = m
        .iam()
        .call("CreateInstanceProfile", &[p("InstanceProfileName", name)])
        .await
        .expect("CreateInstanceProfile");
    first(&root, "Arn").text.trim().to_string()
}

#[tokio::test]
async fn run_instances_options_reach_ec2_and_ssh_goes_to_the_private_address() {
    let Some(m) = moto().await else { return };
    let arn = instance_profile(&m, "weft-nodes").await;
    let script = "#!/bin/sh\necho 'hello from weft' > /tmp/hello\n";
    let fields = fields_with(
        &m,
        json!({"user_data": script, "iam_instance_profile": "weft-nodes", "root_volume_gb": "42",
            "imdsv2": "true", "availability_zone": "us-east-1b", "ssh_address": "private"}),
    );
    let p0 = provider();
    let out = p0
        .create(&task(Action::Create, "n-opts", &fields, &Map::new()))
        .await
        .expect("create with every option");
    let id = out.result["providerid"].as_str().unwrap().to_string();
    let inst = described(&m, &id).await;
    assert_eq!(
        first(&inst, "iamInstanceProfile").text_at(&["arn"]),
        Some(arn.as_str())
    );
    assert_eq!(
        first(&inst, "metadataOptions").text_at(&["httpTokens"]),
        Some("required")
    );
    assert_eq!(
        first(&inst, "placement").text_at(&["availabilityZone"]),
        Some("us-east-1b")
    );
    let root_device = m
        .ec2()
        .image(&m.ami)
        .await
        .unwrap()
        .unwrap()
        .root_device_name
        .unwrap();
    let mapping = first(&inst, "blockDeviceMapping")
        .all("item")
        .find(|b| b.text_at(&["deviceName"]) == Some(root_device.as_str()))
        .unwrap_or_else(|| panic!("no mapping of {root_device}: {inst:?}"));
    let volume = mapping.text_at(&["ebs", "volumeId"]).unwrap();
    let volumes = m
        .ec2()
        .call("DescribeVolumes", &[p("VolumeId.1", volume)])
        .await
        .unwrap();
    assert_eq!(first(&volumes, "size").text.trim(), "42");
    let attr = m
        .ec2()
        .call(
            "DescribeInstanceAttribute",
            &[p("InstanceId", &id), p("Attribute", "userData")],
        )
        .await
        .unwrap();
    let sent = first(&first(&attr, "userData").clone(), "value")
        .text
        .trim()
        .to_string();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(sent)
        .unwrap();
    assert_eq!(String::from_utf8(decoded).unwrap(), script);

    let mut confirm = task(Action::Confirm, "n-opts", &fields, &Map::new());
    confirm.config.insert("providerid".into(), json!(id));
    let ok = p0.confirm(&confirm).await.expect("confirm");
    let ips = ok.ipaddresses.expect("addresses");
    let private = first(&inst, "privateIpAddress").text.trim().to_string();
    assert_eq!(
        (ips["access_v4"].as_str(), ips["bind_v4"].as_str()),
        (private.as_str(), private.as_str())
    );

    // The profile by ARN, and the default address (moto gives a default-VPC instance a public one).
    let by_arn = fields_with(&m, json!({"iam_instance_profile": arn}));
    let out = p0
        .create(&task(Action::Create, "n-arn", &by_arn, &Map::new()))
        .await
        .expect("create with the profile's ARN");
    let id = out.result["providerid"].as_str().unwrap().to_string();
    let inst = described(&m, &id).await;
    assert_eq!(
        first(&inst, "iamInstanceProfile").text_at(&["arn"]),
        Some(arn.as_str())
    );
    assert!(
        inst.child("metadataOptions")
            .and_then(|o| o.text_at(&["httpTokens"]))
            != Some("required")
    );
    let mut confirm = task(Action::Confirm, "n-arn", &by_arn, &Map::new());
    confirm.config.insert("providerid".into(), json!(id));
    let ips = p0
        .confirm(&confirm)
        .await
        .expect("confirm")
        .ipaddresses
        .unwrap();
    let public = inst
        .text_at(&["ipAddress"])
        .expect("moto gives a public address");
    assert_eq!(ips["access_v4"], public);
}

#[tokio::test]
async fn user_data_over_16_kb_is_refused_before_any_call() {
    let Some(m) = moto().await else { return };
    let fields = fields_with(&m, json!({"user_data": "#".repeat(16 * 1024 + 1)}));
    let e = provider()
        .create(&task(Action::Create, "n-big", &fields, &Map::new()))
        .await
        .expect_err("over 16 KB");
    assert!(!e.retryable, "{e}");
    assert!(e.message.contains("provider field user_data"), "{e}");
    assert!(m.instances_of("n-big").await.is_empty());
}
