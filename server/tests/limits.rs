//! Admission that holds: `--max-queue` against a burst, the header-read timeout, the cap on
//! open connections, requests per connection, and a shutdown that idle connections cannot
//! hold up.

mod common;

use std::time::{Duration, Instant};

use common::{closes_within, read_answer, send, Server};
use hearth_server::ServerOptions;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Headers begun and never finished.
const SLOW_HEADERS: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_is_held_to_the_queue_limit() {
    let options = ServerOptions {
        max_queue: 2,
        ..ServerOptions::default()
    };
    let server = Server::start(1, 1024, options).await;
    // Long answers, so that none ends while the burst arrives.
    let body = json!({ "prompt": "a", "max_tokens": 1000, "temperature": 0 });
    let started = Instant::now();
    let calls: Vec<_> = (0..12)
        .map(|_| {
            let (address, body) = (server.address, body.clone());
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(address).await.unwrap();
                send(&mut stream, "POST", "/v1/completions", Some(&body), true).await;
                read_answer(&mut stream).await.unwrap()
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for call in calls {
        let answer = call.await.unwrap();
        if answer.status == 503 {
            assert_eq!(answer.header("retry-after"), Some("1"));
            assert!(answer.body.contains("--max-queue 2"), "{}", answer.body);
        }
        statuses.push(answer.status);
    }
    statuses.sort();
    // One runs and two wait; the other nine are told to come back.
    let mut want = vec![200; 3];
    want.extend([503; 9]);
    assert_eq!(statuses, want, "after {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_headers_are_cut_off_and_connections_are_capped() {
    let options = ServerOptions {
        header_timeout: Duration::from_secs(1),
        max_connections: 2,
        ..ServerOptions::default()
    };
    let server = Server::start(1, 128, options).await;
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(server.address).await.unwrap();
        s.write_all(SLOW_HEADERS).await.unwrap();
        slow.push(s);
    }
    // Both places are taken: a third connection waits to be accepted.
    let mut third = TcpStream::connect(server.address).await.unwrap();
    send(&mut third, "GET", "/health", None, true).await;
    let waited = tokio::time::timeout(Duration::from_millis(500), read_answer(&mut third)).await;
    assert!(waited.is_err(), "answered past the cap: {waited:?}");
    // The slow ones are closed once their headers are late, and the third is answered.
    for s in &mut slow {
        assert!(closes_within(s, Duration::from_secs(5)).await);
    }
    let answer = tokio::time::timeout(Duration::from_secs(5), read_answer(&mut third))
        .await
        .expect("answered once a place was free")
        .unwrap();
    assert_eq!(answer.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_connection_makes_a_bounded_number_of_requests() {
    let options = ServerOptions {
        max_requests_per_connection: 2,
        ..ServerOptions::default()
    };
    let server = Server::start(1, 128, options).await;
    let mut s = TcpStream::connect(server.address).await.unwrap();
    send(&mut s, "GET", "/health", None, false).await;
    let first = read_answer(&mut s).await.unwrap();
    assert_eq!(first.status, 200);
    assert_ne!(first.header("connection"), Some("close"));
    send(&mut s, "GET", "/health", None, false).await;
    let second = read_answer(&mut s).await.unwrap();
    assert_eq!(second.status, 200);
    assert_eq!(second.header("connection"), Some("close"));
    assert!(closes_within(&mut s, Duration::from_secs(2)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_connections_do_not_hold_up_a_shutdown() {
    let options = ServerOptions {
        header_timeout: Duration::from_secs(60),
        ..ServerOptions::default()
    };
    let mut server = Server::start(1, 128, options).await;
    // One connection sending its headers slowly, one idle between keep-alive requests.
    let mut slow = TcpStream::connect(server.address).await.unwrap();
    slow.write_all(SLOW_HEADERS).await.unwrap();
    let mut idle = TcpStream::connect(server.address).await.unwrap();
    send(&mut idle, "GET", "/health", None, false).await;
    assert_eq!(read_answer(&mut idle).await.unwrap().status, 200);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    server.stop();
    let served = tokio::time::timeout(Duration::from_secs(3), &mut server.served).await;
    assert!(
        matches!(served, Ok(Ok(Ok(())))),
        "the server was still waiting after {:?}",
        started.elapsed()
    );
    assert!(closes_within(&mut slow, Duration::from_secs(1)).await);
    assert!(closes_within(&mut idle, Duration::from_secs(1)).await);
}
