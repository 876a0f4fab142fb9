//! The few networking API v2.0 (Neutron) calls a floating address needs: a server's ports, the
//! floating IPs on a port, allocating and releasing one, and the external network by id or name.
//! Each is one try with a typed answer (the callers retry them where that is safe).

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use super::nova::{one_named, path_part, read, Api, Found, Named, Nova};
use crate::cloud::error::found;
use crate::cloud::CloudError;

/// A port of a server (`GET /v2.0/ports?device_id=`).
#[derive(Debug, Clone, Deserialize)]
pub struct Port {
    /// Its id.
    pub id: String,
    /// Its fixed addresses.
    #[serde(default)]
    pub fixed_ips: Vec<FixedIp>,
}

/// One fixed address of a port.
#[derive(Debug, Clone, Deserialize)]
pub struct FixedIp {
    /// The address.
    pub ip_address: String,
}

/// A floating IP as Neutron shows it (the fields weft reads).
#[derive(Debug, Clone, Deserialize)]
pub struct FloatingIp {
    /// Its id.
    pub id: String,
    /// The floating (public) address.
    pub floating_ip_address: String,
    /// Its description: weft's say which node they were allocated for.
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Deserialize)]
struct Ports {
    ports: Vec<Port>,
}

#[derive(Deserialize)]
struct FloatingIps {
    floatingips: Vec<FloatingIp>,
}

#[derive(Deserialize)]
struct OneFloatingIp {
    floatingip: FloatingIp,
}

#[derive(Deserialize)]
struct Networks {
    networks: Vec<Named>,
}

impl Nova<'_> {
    /// The ports of the server `server`.
    pub(crate) async fn ports(&self, server: &str) -> Result<Vec<Port>, CloudError> {
        let p: Ports = self
            .get(
                Api::Network,
                "/v2.0/ports",
                &[("device_id", server)],
                "ports",
            )
            .await?;
        Ok(p.ports)
    }

    /// The floating IPs attached to the port `port`.
    pub(crate) async fn floating_ips(&self, port: &str) -> Result<Vec<FloatingIp>, CloudError> {
        let f: FloatingIps = self
            .get(
                Api::Network,
                "/v2.0/floatingips",
                &[("port_id", port)],
                "floating IPs",
            )
            .await?;
        Ok(f.floatingips)
    }

    /// Allocates a floating IP on the network `network` attached to `port` (at its fixed
    /// address `fixed` when given). One try: a retried POST could allocate a second.
    pub(crate) async fn allocate_floating_ip(
        &self,
        network: &str,
        port: &str,
        fixed: Option<&str>,
        description: &str,
    ) -> Result<FloatingIp, CloudError> {
        let mut body = json!({"floating_network_id": network, "port_id": port,
            "description": description});
        if let Some(f) = fixed {
            body["fixed_ip_address"] = json!(f);
        }
        let a = self
            .call_on(
                Api::Network,
                Method::POST,
                "/v2.0/floatingips",
                &[],
                Some(&json!({ "floatingip": body })),
            )
            .await?;
        let one: OneFloatingIp = read(&a, "neutron", "floating IP")?;
        Ok(one.floatingip)
    }

    /// Releases the floating IP `id`; false when it was already gone.
    pub(crate) async fn release_floating_ip(&self, id: &str) -> Result<bool, CloudError> {
        let path = format!("/v2.0/floatingips/{}", path_part(id));
        let r = self
            .call_on(Api::Network, Method::DELETE, &path, &[], None)
            .await;
        Ok(found(r)?.is_some())
    }

    /// The network `value` names: the one with that id, else the one with exactly that name
    /// (`GET /v2.0/networks?name=`).
    pub(crate) async fn find_network(&self, value: &str) -> Result<Found, CloudError> {
        let by_id = format!("/v2.0/networks/{}", path_part(value));
        if self.exists(Api::Network, &by_id).await? {
            return Ok(Found::One(value.to_string()));
        }
        let n: Networks = self
            .get(
                Api::Network,
                "/v2.0/networks",
                &[("name", value)],
                "networks",
            )
            .await?;
        Ok(one_named(n.networks, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_typed() {
        let p: Ports = serde_json::from_value(json!({"ports": [{"id": "p1", "device_id": "s",
            "fixed_ips": [{"subnet_id": "x", "ip_address": "10.0.0.5"}]}]}))
        .unwrap();
        assert_eq!(p.ports[0].fixed_ips[0].ip_address, "10.0.0.5");
        let f: OneFloatingIp = serde_json::from_value(json!({"floatingip": {"id": "f1",
            "floating_ip_address": "172.24.4.228", "port_id": "p1", "description": null}}))
        .unwrap();
        assert_eq!(f.floatingip.floating_ip_address, "172.24.4.228");
    }
}
