//! Local cloud provider APIs for tests: HTTP servers on 127.0.0.1 that implement the
//! documented request and response shapes of the endpoints netpolicy calls (Hetzner
//! Cloud floating IPs, actions and firewalls; DigitalOcean reserved IPs, their actions
//! and firewalls), keep the cloud's state, and record every request (method, path,
//! `Authorization` header, body) so tests can check what a client sent and in which
//! order. The real provider clients run against them unchanged (`endpoint`).
//!
//! ```no_run
//! # async fn f() {
//! let (base, cloud) = netpolicy_testenv::cloud::serve(netpolicy_testenv::cloud::hetzner::api, "/v1").await;
//! // point a client at `base`, then look at `cloud.lock().unwrap().log`
//! # }
//! ```

// Test fixtures: a request the fixture cannot handle is a broken test, said loudly.
#![allow(clippy::unwrap_used)]

pub mod digitalocean;
pub mod hetzner;

use std::sync::{Arc, Mutex};

use axum::{
    Router,
    body::Bytes,
    handler::Handler,
    http::{HeaderMap, Method, Uri},
};
use serde_json::Value;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Req {
    /// `GET`, `POST`, ...
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The `Authorization` header.
    pub auth: String,
    /// The JSON body (`null` without one).
    pub body: Value,
}

/// A cloud's state and the requests it received.
#[derive(Default)]
pub struct Cloud {
    /// IPs as the provider shows them.
    pub ips: Vec<Value>,
    /// Firewalls as the provider shows them.
    pub firewalls: Vec<Value>,
    /// The last ID handed out.
    pub next: u64,
    /// Every request, in order.
    pub log: Vec<Req>,
    /// Paths (prefix) answered once with 429 and `Retry-After: 1`.
    pub throttle: Vec<String>,
}

/// A cloud shared between its server and the test.
pub type Shared = Arc<Mutex<Cloud>>;

/// What to do with a request before the endpoint sees it.
pub enum Gate {
    /// Wrong or missing token.
    Unauthorized,
    /// A throttled path: answer 429 once.
    Throttled,
    /// Serve it: the path without the API version prefix, and the JSON body.
    Pass {
        /// The path without the version prefix.
        path: String,
        /// The JSON body.
        body: Value,
    },
}

/// Records the request, then checks the bearer `token` and the throttle list.
#[allow(clippy::too_many_arguments)]
pub fn gate(
    c: &mut Cloud,
    token: &str,
    version: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Gate {
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    c.log.push(Req {
        method: method.to_string(),
        path: uri
            .path_and_query()
            .map(ToString::to_string)
            .unwrap_or_default(),
        auth: auth.clone(),
        body: body.clone(),
    });
    if auth != format!("Bearer {token}") {
        return Gate::Unauthorized;
    }
    let path = uri.path().trim_start_matches(version).to_owned();
    if let Some(i) = c.throttle.iter().position(|p| path.starts_with(p.as_str())) {
        c.throttle.remove(i);
        return Gate::Throttled;
    }
    Gate::Pass { path, body }
}

/// Serves `api` on a free local port; the base URL ends with `version` (`/v2`).
///
/// # Panics
/// When no local port can be bound.
pub async fn serve<H, T>(api: H, version: &str) -> (String, Shared)
where
    H: Handler<T, Shared>,
    T: 'static,
{
    serve_on("127.0.0.1", api, version).await
}

/// [`serve`] on a free port of `ip` (a pod reaches the machine on
/// [`crate::node::HOST_IP`]).
///
/// # Panics
/// When no port of `ip` can be bound.
pub async fn serve_on<H, T>(ip: &str, api: H, version: &str) -> (String, Shared)
where
    H: Handler<T, Shared>,
    T: 'static,
{
    let state: Shared = Arc::default();
    let app = Router::new().fallback(api).with_state(Arc::clone(&state));
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}{version}"), state)
}
