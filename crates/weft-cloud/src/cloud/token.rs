//! Tokens that expire (Google access tokens, Keystone and Rackspace tokens), written once: a
//! [`Token`] holds one, fetched on first use and again once it is due for renewal, under an
//! async lock so that the tasks sharing it ask for one token, not one each; a token the API
//! refused is forgotten. [`Keyed`] holds one value per key (per service account, per set of
//! credentials), made on first use and shared from then on.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::CloudError;

/// When a token is renewed: `ahead` of its expiry, but at most `1/part` of its lifetime ahead
/// (a short-lived token is used for the rest).
#[derive(Debug, Clone, Copy)]
pub struct Renew {
    /// How long before its expiry a token is renewed.
    pub ahead: Duration,
    /// The share of a token's lifetime it is renewed ahead at most (4: a quarter).
    pub part: u32,
}

impl Renew {
    fn at(self, lifetime: Duration) -> Instant {
        Instant::now() + lifetime.saturating_sub(self.ahead.min(lifetime / self.part))
    }
}

/// One token (with what came with it), renewed ahead of its expiry.
pub struct Token<V> {
    held: tokio::sync::Mutex<Option<(V, Instant)>>,
}

impl<V> Default for Token<V> {
    fn default() -> Token<V> {
        Token {
            held: tokio::sync::Mutex::new(None),
        }
    }
}

impl<V: Clone> Token<V> {
    /// The token held, else a new one from `fetch` (the token and its lifetime).
    pub async fn get<F>(&self, renew: Renew, fetch: impl FnOnce() -> F) -> Result<V, CloudError>
    where
        F: Future<Output = Result<(V, Duration), CloudError>>,
    {
        let mut held = self.held.lock().await;
        if let Some((v, _)) = held.as_ref().filter(|(_, at)| Instant::now() < *at) {
            return Ok(v.clone());
        }
        let (v, lifetime) = fetch().await?;
        *held = Some((v.clone(), renew.at(lifetime)));
        Ok(v)
    }

    /// Forgets the token held if `refused` says the API refused it.
    pub async fn forget(&self, refused: impl Fn(&V) -> bool) {
        let mut held = self.held.lock().await;
        if held.as_ref().is_some_and(|(v, _)| refused(v)) {
            *held = None;
        }
    }
}

/// One value per key, made on first use and shared by every task that uses the key.
pub struct Keyed<T> {
    map: Mutex<HashMap<String, Arc<T>>>,
}

impl<T> Default for Keyed<T> {
    fn default() -> Keyed<T> {
        Keyed {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Keyed<T> {
    /// The value of `key`, made by `make` when there is none yet.
    pub fn of(&self, key: &str, make: impl FnOnce() -> T) -> Arc<T> {
        let mut map = self.map.lock().expect("keyed lock");
        Arc::clone(
            map.entry(key.to_string())
                .or_insert_with(|| Arc::new(make())),
        )
    }
}
