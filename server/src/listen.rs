//! Accepting connections, with the limits a server that runs for weeks needs against
//! clients that misbehave: at most `--max-connections` open at once (past it, new ones wait
//! in the listen backlog), `--header-timeout` for a request's headers to arrive (hyper
//! closes a connection that sends too slowly), `--max-requests-per-connection` on one
//! keep-alive connection (its last answer says `Connection: close`), and HTTP/1.1's one
//! request at a time per connection.
//!
//! Stopping waits only for connections with a request in hand, until its answer is written:
//! an idle connection, or one still sending its headers, is closed at once, so it cannot hold
//! the process past its shutdown timeout.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::http::{header, HeaderValue, Request};
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tower::ServiceExt;

/// How connections are limited.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub header_timeout: Duration,
    pub max_connections: usize,
    pub max_requests_per_connection: usize,
}

/// Once a connection's last request in hand is answered during a shutdown, how long its
/// answer's last bytes may take to leave.
const FLUSH: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` until `shutdown` completes, then until every answer in
/// progress is written.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop_tx, stop) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // A permit first: past the cap, connections wait in the kernel's backlog.
        let permit = tokio::select! {
            () = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was taken:
                    // wait a moment rather than spin.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        connections.spawn(connection(
            stream,
            app.clone(),
            limits,
            stop.clone(),
            permit,
        ));
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// Serves one connection; `_permit` holds its place under the cap until it ends.
async fn connection(
    stream: TcpStream,
    app: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let in_hand = Arc::new(watch::Sender::new(0usize));
    let served = Arc::new(AtomicUsize::new(0));
    let counter = in_hand.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let handling = Handling::start(counter.clone());
        let last = served.fetch_add(1, Ordering::Relaxed) + 1 >= limits.max_requests_per_connection;
        let app = app.clone();
        async move {
            let mut response = app.oneshot(request.map(Body::new)).await?;
            if last {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, std::convert::Infallible>(response.map(|body| {
                Body::new(Tracked {
                    body,
                    _handling: handling,
                })
            }))
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let stopping = async {
        let _ = stop.wait_for(|stopped| *stopped).await;
    };
    tokio::select! {
        _ = conn.as_mut() => return,
        () = stopping => {}
    }
    // No more requests on this connection; an idle one closes here.
    conn.as_mut().graceful_shutdown();
    let mut requests = in_hand.subscribe();
    if *requests.borrow() == 0 {
        // Idle, or still sending headers: nothing of ours to finish.
        return;
    }
    let answered = async {
        let _ = requests.wait_for(|n| *n == 0).await;
    };
    tokio::select! {
        _ = conn.as_mut() => {}
        () = answered => {
            let _ = tokio::time::timeout(FLUSH, conn.as_mut()).await;
        }
    }
}

/// A request in hand, from its arrival until its answer's body is done with.
struct Handling(Arc<watch::Sender<usize>>);

impl Handling {
    fn start(count: Arc<watch::Sender<usize>>) -> Self {
        count.send_modify(|n| *n += 1);
        Self(count)
    }
}

impl Drop for Handling {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// An answer's body that keeps its request counted as in hand until it is dropped: once
/// written, or when the client goes away.
struct Tracked {
    body: Body,
    _handling: Handling,
}

impl HttpBody for Tracked {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
