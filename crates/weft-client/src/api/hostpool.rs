//! [`ApiClient`] calls of the host pools of `hostpool` providers: `/v2/providers/{name}/hosts`.
//! Requests are [`PoolHostRequest`], answers [`PoolHost`] (whose `key` always reads `********`).

use reqwest::Method;
use weft_model::{PoolHost, PoolHostRequest};

use super::{seg, ApiClient};
use crate::ClientResult;

fn hosts(provider: &str) -> String {
    format!("/v2/providers/{}/hosts", seg(provider))
}

fn host(provider: &str, id: &str) -> String {
    format!("{}/{}", hosts(provider), seg(id))
}

impl ApiClient {
    /// The hosts of a provider's pool, by id.
    pub async fn pool_hosts(&self, provider: &str) -> ClientResult<Vec<PoolHost>> {
        self.get(&hosts(provider)).await
    }

    /// One host of a provider's pool.
    pub async fn pool_host(&self, provider: &str, id: &str) -> ClientResult<PoolHost> {
        self.get(&host(provider, id)).await
    }

    /// `POST`: adds a host (409 if the id, or the address and port, is taken).
    pub async fn add_pool_host(
        &self,
        provider: &str,
        req: &PoolHostRequest,
    ) -> ClientResult<PoolHost> {
        let path = hosts(provider);
        let bytes = self.send_json(Method::POST, &path, Some(req)).await?;
        self.decode(&path, &bytes)
    }

    /// `PUT`: replaces a host's definition (creates it if absent); no key keeps the stored one.
    pub async fn put_pool_host(
        &self,
        provider: &str,
        id: &str,
        req: &PoolHostRequest,
    ) -> ClientResult<PoolHost> {
        let path = host(provider, id);
        let bytes = self.send_json(Method::PUT, &path, Some(req)).await?;
        self.decode(&path, &bytes)
    }

    /// `DELETE`: removes a free host (409 while it is lent to a node).
    pub async fn remove_pool_host(&self, provider: &str, id: &str) -> ClientResult<()> {
        self.call(Method::DELETE, &host(provider, id), None, "")
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_escape_their_segments() {
        assert_eq!(
            host("my pool", "h/1"),
            "/v2/providers/my%20pool/hosts/h%2F1"
        );
    }
}
