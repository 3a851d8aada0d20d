//! What the provider tests share: a local server that records every request and keeps
//! the cloud's state, the checks every endpoint makes first (token, throttling), and the
//! desired-state fixtures. Each provider's test file answers in its provider's JSON shapes.

#![allow(dead_code, unreachable_pub)] // each test binary uses its own part

use std::sync::{Arc, Mutex};

use axum::{
    Router,
    body::Bytes,
    handler::Handler,
    http::{HeaderMap, Method, Uri},
};
use netpolicy_issuers::{Desired, PortRule, Tags};
use serde_json::Value;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: String,
    pub path: String,
    pub auth: String,
    pub body: Value,
}

#[derive(Default)]
pub struct Cloud {
    pub ips: Vec<Value>,
    pub firewalls: Vec<Value>,
    pub next: u64,
    pub log: Vec<Req>,
    /// Paths (prefix) answered once with 429 and `Retry-After: 1`.
    pub throttle: Vec<String>,
}

pub type Shared = Arc<Mutex<Cloud>>;

/// What to do with a request before the endpoint sees it.
pub enum Gate {
    /// Wrong or missing token.
    Unauthorized,
    /// A throttled path: answer 429 once.
    Throttled,
    /// Serve it: the path without the API version prefix, and the JSON body.
    Pass { path: String, body: Value },
}

/// Records the request, then checks the bearer `token` and the throttle list.
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
pub async fn serve<H, T>(api: H, version: &str) -> (String, Shared)
where
    H: Handler<T, Shared>,
    T: 'static,
{
    let state: Shared = Arc::default();
    let app = Router::new().fallback(api).with_state(Arc::clone(&state));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}{version}"), state)
}

pub fn tags() -> Tags {
    Tags {
        cluster: "prod-eu".into(),
        routed_ip: "ingress".into(),
    }
}

/// The address on `node`, TCP `ports` open through the `web` firewall.
pub fn desired(node: &str, ports: &[u16]) -> Desired {
    Desired {
        node: Some(node.into()),
        firewall: Some("web".into()),
        ports: ports.iter().map(|p| PortRule::tcp(*p)).collect(),
    }
}
