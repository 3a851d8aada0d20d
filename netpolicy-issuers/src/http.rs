//! The HTTP side shared by the cloud clients: bearer auth, JSON, 30 s timeouts, retries
//! with a short exponential backoff on 5xx; a connection that fails or takes longer than
//! [`crate::CONNECT_TIMEOUT`] twice is [`Error::Unreachable`] at once; on 429 the provider's
//! delay (`Retry-After`, else `RateLimit-Reset`), waited out here only when it is short
//! (≤ 2 s) and otherwise returned at once as [`Error::RateLimited`] for the caller to
//! schedule; errors mapped to [`Error`] without the token anywhere in them.
//!
//! Why 429 only: DigitalOcean sends `ratelimit-reset` on *every* response — the time the
//! oldest request of the window expires, up to an hour ahead — so reading it on a 500
//! would turn one server error into a long wait. A 500 is not a rate limit.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::{Error, Result};

/// The longest provider-requested delay (429) waited out inside a call.
const MAX_INLINE_WAIT: Duration = Duration::from_secs(2);

/// A JSON API endpoint with a bearer token.
pub struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
    /// Retries of a request answered 429 or 5xx (or not answered at all).
    pub retries: u32,
    /// Longest wait between retries, whatever `Retry-After` says.
    pub max_backoff: Duration,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .field("token", &"<redacted>")
            .field("retries", &self.retries)
            .finish()
    }
}

impl Api {
    /// An endpoint at `base` with `token`.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(base: impl Into<String>, token: impl Into<String>) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(crate::CONNECT_TIMEOUT)
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| Error::Provider(format!("HTTP client: {e}")))?;
        Ok(Self {
            http,
            base: base.into().trim_end_matches('/').to_owned(),
            token: token.into(),
            retries: 5,
            max_backoff: Duration::from_secs(60),
        })
    }

    fn backoff(&self, attempt: u32, wait: Option<Duration>) -> Duration {
        let exp = Duration::from_millis(200u64.saturating_mul(1 << attempt.min(8)));
        wait.unwrap_or(exp).min(self.max_backoff)
    }

    /// One call with retries; returns the JSON body (`null` for an empty answer).
    ///
    /// # Errors
    /// The provider's answer as an [`Error`] once the retries are spent.
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut attempt = 0;
        let mut unanswered = 0;
        loop {
            let mut req = self
                .http
                .request(method.clone(), &url)
                .bearer_auth(&self.token);
            if let Some(b) = &body {
                req = req.json(b);
            }
            let resp = match req.send().await {
                Ok(r) => r,
                // No connection: tried once more, then said at once (the caller backs
                // off), never the whole retry budget of timeouts.
                Err(e) if crate::unreachable(&e) => {
                    unanswered += 1;
                    if unanswered < crate::CONNECT_ATTEMPTS {
                        tokio::time::sleep(self.backoff(0, None)).await;
                        continue;
                    }
                    return Err(Error::Unreachable(format!(
                        "{method} {path}: {}",
                        e.without_url()
                    )));
                }
                Err(_) if attempt < self.retries => {
                    attempt += 1;
                    tokio::time::sleep(self.backoff(attempt, None)).await;
                    continue;
                }
                Err(e) => {
                    return Err(Error::Provider(format!(
                        "{method} {path}: {}",
                        e.without_url()
                    )));
                }
            };
            let status = resp.status();
            let wait = retry_after(resp.headers());
            let text = resp.text().await.unwrap_or_default();
            if status.is_success() {
                if text.trim().is_empty() {
                    return Ok(Value::Null);
                }
                return serde_json::from_str(&text)
                    .map_err(|e| Error::Provider(format!("{method} {path}: bad JSON: {e}")));
            }
            // 5xx: a short backoff here. 429: the provider's delay, waited out here
            // only when it is short; a longer one is returned at once as `RateLimited`
            // for the caller to schedule, so a rate-limited call holds up nothing else.
            let limited = status == StatusCode::TOO_MANY_REQUESTS;
            let short = wait.is_none_or(|w| w <= MAX_INLINE_WAIT);
            if (status.is_server_error() || (limited && short)) && attempt < self.retries {
                attempt += 1;
                let delay = self.backoff(attempt, if limited { wait } else { None });
                tokio::time::sleep(delay).await;
                continue;
            }
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            // Hetzner: {"error": {"code", "message"}}; DigitalOcean: {"id", "message"}.
            let code = v["error"]["code"]
                .as_str()
                .or_else(|| v["id"].as_str())
                .unwrap_or_default()
                .to_owned();
            let message = v["error"]["message"]
                .as_str()
                .or_else(|| v["message"].as_str())
                .unwrap_or(&text)
                .to_owned();
            let what = format!("{method} {path}: {message}");
            return Err(match status {
                StatusCode::NOT_FOUND => Error::NotFound(what),
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Error::Unauthorized(what),
                StatusCode::CONFLICT | StatusCode::LOCKED => Error::Conflict(what),
                StatusCode::TOO_MANY_REQUESTS => Error::RateLimited {
                    retry_after: wait.map_or(1, |d| d.as_secs().max(1)),
                },
                _ if code == "conflict" || code == "locked" => Error::Conflict(what),
                _ => Error::Provider(format!("{what} (HTTP {status})")),
            });
        }
    }
}

fn retry_after(h: &reqwest::header::HeaderMap) -> Option<Duration> {
    let secs = |name: &str| h.get(name)?.to_str().ok()?.trim().parse::<u64>().ok();
    if let Some(s) = secs("retry-after") {
        return Some(Duration::from_secs(s));
    }
    let reset = secs("ratelimit-reset")?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Some(Duration::from_secs(reset.saturating_sub(now)))
}
