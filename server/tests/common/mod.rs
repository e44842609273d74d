//! A server over a small random-weight model on the CPU executor, on a port of its own, and a
//! plain HTTP/1.1 client that can misbehave as the tests need.

// Each test binary uses its own part of these helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use hearth_engine::service::{Service, ServiceOptions};
use hearth_engine::{BackendKind, Engine, EngineOptions};
use hearth_models::synthetic::Shape;
use hearth_quant::Format;
use hearth_server::{AppState, Model, ServerOptions};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub struct Server {
    pub address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    pub served: JoinHandle<std::io::Result<()>>,
    _service: Service,
}

impl Server {
    /// Starts serving `parallel` sequences of `n_ctx` tokens with `options`.
    pub async fn start(parallel: usize, n_ctx: usize, options: ServerOptions) -> Server {
        let file = Shape::TINY.build_random("tiny", Format::Q8, 7).unwrap();
        let engine_options = EngineOptions {
            backend: BackendKind::Cpu,
            n_ctx: Some(n_ctx),
            n_seq: parallel,
            ..EngineOptions::default()
        };
        let engine = Engine::load_file(file, &engine_options, &mut |_| true).unwrap();
        let tools = engine.text_tools();
        let (service, handle) = Service::spawn(engine, ServiceOptions { parallel }).unwrap();
        let state = AppState::new(options);
        state.set_model(Model::new(handle, tools, "tiny".into(), Vec::new(), n_ctx));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(hearth_server::serve(listener, state, async move {
            let _ = stopped.await;
        }));
        Server {
            address,
            stop: Some(stop),
            served,
            _service: service,
        }
    }

    /// Stops accepting; [`served`](Self::served) ends once the answers in progress are out.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// One request on a connection of its own.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Answer {
        let mut stream = TcpStream::connect(self.address).await.unwrap();
        send(&mut stream, method, path, body.as_ref(), true).await;
        read_answer(&mut stream).await.expect("an answer")
    }
}

/// A status, headers (names lower-cased) and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

pub async fn send(
    stream: &mut TcpStream,
    method: &str,
    path: &str,
    body: Option<&Value>,
    close: bool,
) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let connection = if close { "close" } else { "keep-alive" };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: {connection}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
}

/// Reads one answer (its body by `Content-Length`, or chunked); `None` when the connection
/// closes first.
pub async fn read_answer(stream: &mut TcpStream) -> Option<Answer> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(at) = find(&buf, b"\r\n\r\n") {
            break at;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = buf[head_end + 4..].to_vec();
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok());
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let done = |body: &[u8]| match length {
        Some(len) => body.len() >= len,
        None if chunked => find(body, b"0\r\n\r\n").is_some(),
        None => false,
    };
    while !done(&body) {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    if chunked {
        body = dechunk(&body);
    }
    Some(Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line) = find(body, b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&body[..line]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = line + 2;
        out.extend_from_slice(&body[start..(start + size).min(body.len())]);
        body = &body[(start + size + 2).min(body.len())..];
    }
    out
}

/// Whether the peer closes `stream` within `wait` (reading and dropping what it sends).
pub async fn closes_within(stream: &mut TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(wait, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}
