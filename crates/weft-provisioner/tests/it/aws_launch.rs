//! What the `aws` provider launches, read back from moto (started as in `aws.rs`, with
//! `MOTO_ENABLE_AMI_VALIDATION`): an unknown AMI is fatal and named.

use serde_json::{json, Map, Value};
use weft_provisioner::task::Action;
use weft_provisioner::Provider;

use crate::aws::{moto, provider, task, Moto};

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
}
