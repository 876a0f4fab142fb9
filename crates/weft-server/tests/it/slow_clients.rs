//! Slow clients (issue 14): connections that never finish their request head, or stall in the
//! middle of a body, are cut off after the listener's patience ([`listen::Patience`]) instead of
//! staying open forever; a normal request on the same listener is served meanwhile.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weft_server::listen::{self, Patience};

use crate::common::Harness;

/// Reads until the server closes the connection; returns what it sent, or panics after `within`.
async fn until_closed(s: &mut TcpStream, within: Duration) -> String {
    let mut got = Vec::new();
    tokio::time::timeout(within, async {
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the server closes a slow connection");
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_finish_a_head_or_a_body_are_cut_off() {
    let h = Harness::new().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let patience = Patience {
        header: Duration::from_millis(500),
        body: Duration::from_millis(500),
        drain: Duration::from_secs(2),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(listen::serve(
        listener,
        h.app.external.clone(),
        patience,
        None,
        async move {
            let _ = stopped.await;
        },
    ));

    // A thousand clients that send half a request head and then nothing.
    let mut idle = Vec::new();
    for _ in 0..1000 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        idle.push(s);
    }
    // Meanwhile a well-behaved client is served.
    let mut ok = TcpStream::connect(addr).await.unwrap();
    ok.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = until_closed(&mut ok, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let t0 = Instant::now();
    for s in &mut idle {
        let sent = until_closed(s, Duration::from_secs(20)).await;
        assert!(!sent.contains(" 200 "), "{sent}");
    }
    assert!(t0.elapsed() < Duration::from_secs(20));

    // A client that promises a body and stalls after a few bytes.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(
            b"POST /v2/tenants HTTP/1.1\r\nHost: x\r\nCoopr-TenantID: superadmin\r\n\
              Coopr-UserID: admin\r\nContent-Length: 100\r\n\r\n{\"tenant\"",
        )
        .await
        .unwrap();
    let answer = until_closed(&mut stalled, Duration::from_secs(10)).await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 4"),
        "a stalled body gets a 4xx or a closed connection: {answer}"
    );

    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}
