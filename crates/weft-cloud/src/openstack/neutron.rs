//! The few networking API v2.0 (Neutron) calls a floating address needs: a server's ports, the
//! floating IPs on a port, allocating and releasing one, and the external network by id or name.
//! Each is one try with a typed answer (the callers retry them where that is safe).

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use super::nova::{named, path_part, Api, List, Named, Nova, One};
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

impl Nova {
    /// The ports of the server `server`.
    pub(crate) async fn ports(&self, server: &str) -> Result<Vec<Port>, CloudError> {
        let query = [("device_id", server)];
        let p: List<Port> = self.get(Api::Network, "/v2.0/ports", &query).await?;
        Ok(p.items)
    }

    /// The floating IPs attached to the port `port`.
    pub(crate) async fn floating_ips(&self, port: &str) -> Result<Vec<FloatingIp>, CloudError> {
        let query = [("port_id", port)];
        let f: List<FloatingIp> = self.get(Api::Network, "/v2.0/floatingips", &query).await?;
        Ok(f.items)
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
        let body = json!({ "floatingip": body });
        let a = self.call(
            Api::Network,
            Method::POST,
            "/v2.0/floatingips",
            &[],
            Some(&body),
        );
        Ok(a.await?.json::<One<FloatingIp>>("neutron")?.item)
    }

    /// Releases the floating IP `id`; false when it was already gone.
    pub(crate) async fn release_floating_ip(&self, id: &str) -> Result<bool, CloudError> {
        let path = format!("/v2.0/floatingips/{}", path_part(id));
        self.found(Api::Network, Method::DELETE, &path).await
    }

    /// The network `value` names: the one with that id, else the ones with exactly that name
    /// (`GET /v2.0/networks?name=`).
    pub(crate) async fn find_network(&self, value: &str) -> Result<Vec<String>, CloudError> {
        let by_id = format!("/v2.0/networks/{}", path_part(value));
        if self.found(Api::Network, Method::GET, &by_id).await? {
            return Ok(vec![value.to_string()]);
        }
        let query = [("name", value)];
        let n: List<Named> = self.get(Api::Network, "/v2.0/networks", &query).await?;
        Ok(named(n.items, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_typed() {
        let p: List<Port> = serde_json::from_value(json!({"ports": [{"id": "p1", "device_id": "s",
            "fixed_ips": [{"subnet_id": "x", "ip_address": "10.0.0.5"}]}]}))
        .unwrap();
        assert_eq!(p.items[0].fixed_ips[0].ip_address, "10.0.0.5");
        let f: One<FloatingIp> = serde_json::from_value(json!({"floatingip": {"id": "f1",
            "floating_ip_address": "172.24.4.228", "port_id": "p1", "description": null}}))
        .unwrap();
        assert_eq!(f.item.floating_ip_address, "172.24.4.228");
        assert!(serde_json::from_value::<List<Port>>(json!({"other": []})).is_err());
    }
}
