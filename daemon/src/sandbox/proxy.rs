//! The allowlist proxy (Unix): an HTTP proxy the daemon serves for each command whose network is
//! an allowlist. The kernel lets such a command open TCP connections to this proxy's port only
//! (its own network namespace, or a Landlock port rule), and its environment points
//! `HTTP(S)_PROXY`/`ALL_PROXY` here; so every connection it makes goes through [`serve`], which
//! resolves the name itself and connects only to hosts the allowlist names.
//!
//! Two kinds of request, the two every HTTP client sends a proxy:
//! - `CONNECT host:port` (HTTPS, and anything tunnelled): answered `200` and the bytes relayed
//!   both ways, or refused;
//! - a request with an absolute URI (`GET http://host/path`, plain HTTP): sent on to the host
//!   over a connection of its own, one per request (so a kept-alive connection cannot reach a
//!   second host past the check), the response relayed back.
//!
//! A refusal is `403` with a reason phrase and a body saying why, which is what clients print
//! (`curl: (56) CONNECT tunnel failed, response 403`, pip's "Tunnel connection failed: 403
//! yieldshell: …"). Each proxy serves one process, with that process's allowlist, on a listener
//! its holder keeps (so it survives a daemon restart), and holds at most
//! [`MAX_CONNECTIONS`] connections at once: a command cannot use up the daemon's descriptors.

use std::convert::Infallible;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

use super::Network;

/// Connections one proxy serves at once; more are closed at once.
pub const MAX_CONNECTIONS: usize = 256;
/// How long connecting to a host may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

type Body = BoxBody<Bytes, hyper::Error>;

/// Serves the proxy on `listener` (a listening TCP socket; it may live in the command's network
/// namespace) for the process `process_id` with the allowlist `network`, until `stop` is
/// cancelled or the listener fails.
pub fn serve(
    listener: OwnedFd,
    network: Network,
    process_id: String,
    stop: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let std_listener = std::net::TcpListener::from(listener);
    std_listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(std_listener)?;
    let policy = Arc::new(Policy {
        network,
        process_id,
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    Ok(tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => break,
                a = listener.accept() => a,
            };
            let (stream, _) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and the like pass; a listener that is gone ends the proxy.
                    tracing::debug!(process_id = %policy.process_id, "proxy accept: {e}");
                    if e.raw_os_error() == Some(libc::EBADF)
                        || e.raw_os_error() == Some(libc::EINVAL)
                    {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                // Over the limit: closed at once (the client sees a reset).
                continue;
            };
            let policy = policy.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let service = hyper::service::service_fn(move |req| {
                    let policy = policy.clone();
                    async move { Ok::<_, Infallible>(policy.handle(req).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .preserve_header_case(true)
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades();
                tokio::select! {
                    _ = conn => {}
                    _ = stop.cancelled() => {}
                }
            });
        }
    }))
}

/// What one proxy allows, and whose it is.
#[derive(Debug)]
struct Policy {
    network: Network,
    process_id: String,
}

fn text(status: StatusCode, reason: &'static str, body: String) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    r.extensions_mut()
        .insert(hyper::ext::ReasonPhrase::from_static(reason.as_bytes()));
    r
}

/// `host:port` of an authority (`[v6]:port` too), with the scheme's port when it has none.
fn host_and_port(authority: &hyper::http::uri::Authority, default_port: u16) -> (String, u16) {
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    (host, authority.port_u16().unwrap_or(default_port))
}

impl Policy {
    async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        if req.method() == Method::CONNECT {
            return self.tunnel(req).await;
        }
        let uri = req.uri().clone();
        match (uri.scheme_str(), uri.authority()) {
            (Some("http"), Some(authority)) => {
                let (host, port) = host_and_port(authority, 80);
                self.forward(req, host, port).await
            }
            (Some(other), Some(_)) => text(
                StatusCode::BAD_REQUEST,
                "yieldshell: only http:// is proxied in the clear; https goes through CONNECT",
                format!(
                    "yieldshell sandbox: a {other}:// request cannot be proxied; use http:// or \
                     https:// (CONNECT)\n"
                ),
            ),
            _ => text(
                StatusCode::BAD_REQUEST,
                "yieldshell: this is the sandbox's HTTP proxy",
                "yieldshell sandbox: this port is the sandbox's HTTP proxy; send it proxy \
                 requests (HTTP_PROXY / HTTPS_PROXY)\n"
                    .to_string(),
            ),
        }
    }

    /// The refusal of `host`, or `None` when it is allowed.
    fn refuse(&self, host: &str) -> Option<Response<Body>> {
        if self.network.allows_host(host) {
            return None;
        }
        tracing::info!(process_id = %self.process_id, host, "sandbox proxy refused a host");
        Some(text(
            StatusCode::FORBIDDEN,
            "yieldshell: host not in the sandbox's allowlist",
            format!(
                "yieldshell sandbox: {host} is not in this command's network allowlist \
                 (allowed: {}); widen YIELDSHELL_SANDBOX_NETWORK=allow:… to reach it\n",
                self.network.hosts().join(", ")
            ),
        ))
    }

    /// Connects to `host:port`, the name resolved here.
    async fn connect(
        &self,
        host: &str,
        port: u16,
    ) -> Result<tokio::net::TcpStream, Response<Body>> {
        let failed = |why: String| {
            text(
                StatusCode::BAD_GATEWAY,
                "yieldshell: the allowed host could not be reached",
                format!("yieldshell sandbox proxy: {host}:{port}: {why}\n"),
            )
        };
        match tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio::net::TcpStream::connect((host, port)),
        )
        .await
        {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(failed(e.to_string())),
            Err(_) => Err(failed(format!("no connection within {CONNECT_TIMEOUT:?}"))),
        }
    }

    async fn tunnel(&self, req: Request<Incoming>) -> Response<Body> {
        let Some(authority) = req.uri().authority().cloned() else {
            return text(
                StatusCode::BAD_REQUEST,
                "yieldshell: CONNECT needs host:port",
                "yieldshell sandbox proxy: CONNECT needs host:port\n".to_string(),
            );
        };
        let (host, port) = host_and_port(&authority, 443);
        if let Some(refused) = self.refuse(&host) {
            return refused;
        }
        let upstream = match self.connect(&host, port).await {
            Ok(s) => s,
            Err(failed) => return failed,
        };
        let process_id = self.process_id.clone();
        tokio::spawn(async move {
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => {
                    let mut client = TokioIo::new(upgraded);
                    let mut upstream = upstream;
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
                Err(e) => tracing::debug!(%process_id, "proxy tunnel not upgraded: {e}"),
            }
        });
        Response::new(
            http_body_util::Empty::new()
                .map_err(|never| match never {})
                .boxed(),
        )
    }

    async fn forward(&self, mut req: Request<Incoming>, host: String, port: u16) -> Response<Body> {
        if let Some(refused) = self.refuse(&host) {
            return refused;
        }
        let upstream = match self.connect(&host, port).await {
            Ok(s) => s,
            Err(failed) => return failed,
        };
        // Origin form for the host; hop-by-hop and proxy headers stay here; one request per
        // upstream connection.
        let path = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        *req.uri_mut() = match path.parse() {
            Ok(u) => u,
            Err(_) => return self.bad_gateway(&host, "the request path"),
        };
        for h in ["proxy-authorization", "proxy-connection", "keep-alive"] {
            req.headers_mut().remove(h);
        }
        req.headers_mut().insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
        let (mut sender, conn) =
            match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
                Ok(x) => x,
                Err(e) => return self.bad_gateway(&host, &e.to_string()),
            };
        tokio::spawn(async move {
            let _ = conn.await;
        });
        match sender.send_request(req).await {
            Ok(resp) => resp.map(BodyExt::boxed),
            Err(e) => self.bad_gateway(&host, &e.to_string()),
        }
    }

    fn bad_gateway(&self, host: &str, why: &str) -> Response<Body> {
        text(
            StatusCode::BAD_GATEWAY,
            "yieldshell: the request to the allowed host failed",
            format!("yieldshell sandbox proxy: {host}: {why}\n"),
        )
    }
}
