//! The listeners: each accepted connection is served (HTTP/1.1 or HTTP/2) with bounded
//! [`Patience`] for slow clients. A client has 10 s to send its request head and may pause at most
//! 30 s while sending its body (a 408 then); a connection that does neither is closed, so a
//! thousand clients that never finish their headers hold nothing for long (over TLS, the
//! handshake counts against the header time). On stop, the listener closes at once and open
//! connections get 10 s to finish.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

/// The router of one connection, which gives each request the client's address
/// ([`axum::extract::ConnectInfo`]).
#[derive(Clone)]
struct WithPeer(Router, std::net::SocketAddr);

impl<B> tower::Service<axum::http::Request<B>> for WithPeer
where
    B: axum::body::HttpBody<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = <Router as tower::Service<axum::http::Request<B>>>::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        tower::Service::<axum::http::Request<B>>::poll_ready(&mut self.0, cx)
    }

    fn call(&mut self, mut req: axum::http::Request<B>) -> Self::Future {
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(self.1));
        self.0.call(req)
    }
}

/// How patient the listener is with clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    /// How long a client may take to send a request's head (line and headers). Default 10 s.
    pub header: Duration,
    /// How long a client may pause while sending a request body. Default 30 s.
    pub body: Duration,
    /// How long open connections may take to finish after a stop. Default 10 s.
    pub drain: Duration,
}

impl Default for Patience {
    fn default() -> Patience {
        Patience {
            header: Duration::from_secs(10),
            body: Duration::from_secs(30),
            drain: Duration::from_secs(10),
        }
    }
}

/// Serves `router` on `listener` until `stop` completes; over TLS with `tls` (the handshake must
/// finish within the header patience).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    patience: Patience,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let router = router.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
        patience.body,
    ));
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(patience.header);
    builder.http2().timer(TokioTimer::new());
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let graceful = GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, say: wait a moment rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let service = TowerToHyperService::new(WithPeer(router.clone(), peer));
        let (builder, watcher, acceptor) = (builder.clone(), graceful.watcher(), acceptor.clone());
        tokio::spawn(async move {
            let ended =
                match acceptor {
                    None => {
                        let conn =
                            builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                        watcher.watch(conn.into_owned()).await
                    }
                    Some(acceptor) => {
                        let stream =
                            match tokio::time::timeout(patience.header, acceptor.accept(stream))
                                .await
                            {
                                Ok(Ok(s)) => s,
                                Ok(Err(e)) => {
                                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                    return;
                                }
                                Err(_) => {
                                    tracing::debug!(%peer, "TLS handshake timed out");
                                    return;
                                }
                            };
                        let conn =
                            builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                        watcher.watch(conn.into_owned()).await
                    }
                };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(patience.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain time; closing them");
    }
    Ok(())
}
