//! What every netpolicy process shares, operator and node agent alike: logs, the
//! Kubernetes client, the probes server (`/metrics`, `/healthz`, `/readyz`) and the
//! signals that stop it. Nothing here knows a job.

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, atomic::Ordering},
};

use axum::{Router, extract::State, http::StatusCode, routing::get};
use kube::{Client, Config, config::KubeConfigOptions};
use tracing::info;

use crate::{
    error::{Error, Result},
    telemetry::Shared,
};

/// Log formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event for a person.
    Text,
    /// One JSON object per event.
    Json,
}

pub(crate) fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal: a file, a pipe or a log collector gets
    // plain text without ANSI escape codes.
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => b.try_init(),
        LogFormat::Json => b.json().try_init(),
    };
}

/// A client from a kubeconfig file, or the inferred configuration.
pub(crate) async fn client_from(kubeconfig: Option<&PathBuf>) -> Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| Error::Config {
                what: format!("reading kubeconfig {}", path.display()),
                source: Box::new(e),
            })?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| Error::Config {
                    what: format!("kubeconfig {}", path.display()),
                    source: Box::new(e),
                })?
        }
        None => Config::infer().await.map_err(|e| Error::Config {
            what: "no kubeconfig (KUBECONFIG, ~/.kube/config) and not in a cluster".into(),
            source: Box::new(e),
        })?,
    };
    Client::try_from(config).map_err(|source| Error::Kube {
        what: "building the Kubernetes client".into(),
        source,
    })
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(s): State<Arc<Shared>>| async move {
                // `netpolicy_ready`: what /readyz would answer now.
                s.metrics.ready.set(i64::from(s.waiting().is_empty()));
                (
                    [(
                        "content-type",
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    s.metrics.render(),
                )
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(s): State<Arc<Shared>>| async move {
                let waiting = s.waiting();
                if waiting.is_empty() {
                    (StatusCode::OK, "ok".to_owned())
                } else {
                    let mut body = String::from("not ready:\n");
                    for w in waiting {
                        body.push_str(&w);
                        body.push('\n');
                    }
                    (StatusCode::SERVICE_UNAVAILABLE, body)
                }
            }),
        )
        .with_state(shared)
}

pub(crate) async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `listen`, then checks that the API
/// server answers (`/readyz` says so from then on). Abort the handle to stop serving.
pub(crate) async fn serve_probes(
    listen: SocketAddr,
    shared: &Arc<Shared>,
    client: &Client,
) -> Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| Error::Io {
            what: format!("listening on {listen}"),
            source,
        })?;
    info!(listen = %listener.local_addr().map_or(listen, |a| a), "serving /metrics, /healthz, /readyz");
    let server = tokio::spawn(axum::serve(listener, router(Arc::clone(shared))).into_future());
    if let Err(e) = client.apiserver_version().await {
        server.abort();
        return Err(Error::Kube {
            what: "the API server does not answer".into(),
            source: e,
        });
    }
    shared.connected.store(true, Ordering::Release);
    Ok(server)
}

/// How often the operator asks the API server's own `/readyz`.
pub(crate) const API_HEALTH_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// Asks the API server's own `/readyz` every [`API_HEALTH_PERIOD`] (a GET any user may
/// make: `system:public-info-viewer`); while it does not answer, or names failing
/// checks (etcd down: `etcd`, `etcd-readiness`), the operator's `/readyz` says so. A
/// read, never a write; stop it by aborting the handle.
pub(crate) fn watch_api_health(shared: Arc<Shared>, client: Client) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(API_HEALTH_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Ok(req) = axum::http::Request::get("/readyz?verbose").body(Vec::new()) else {
                return;
            };
            let asked = tokio::time::timeout(API_HEALTH_PERIOD, client.request_text(req)).await;
            let why = match asked {
                Err(_) => Some(format!(
                    "no answer to /readyz within {} s",
                    API_HEALTH_PERIOD.as_secs()
                )),
                Ok(Ok(_)) => None,
                Ok(Err(kube::Error::Api(s))) => {
                    Some(failed_checks(&s.message).unwrap_or_else(|| {
                        format!("/readyz answered {}: {}", s.code, s.message.trim())
                    }))
                }
                Ok(Err(e)) => Some(crate::error::Chain(&e).to_string()),
            };
            shared.set_api_trouble(why);
        }
    })
}

/// The failing checks of a verbose `/readyz` body (`[-]etcd failed: ...` lines):
/// `checks failing: etcd, etcd-readiness`.
fn failed_checks(body: &str) -> Option<String> {
    let failed: Vec<&str> = body
        .lines()
        .filter_map(|l| l.trim().strip_prefix("[-]"))
        .map(|l| l.split_whitespace().next().unwrap_or(l))
        .collect();
    (!failed.is_empty()).then(|| format!("checks failing: {}", failed.join(", ")))
}

#[cfg(test)]
mod health_tests {
    use super::failed_checks;

    #[test]
    fn the_api_servers_failing_checks_are_named() {
        let body = "[+]ping ok\n[-]etcd failed: reason withheld\n[+]informer-sync ok\n\
                    [-]etcd-readiness failed: reason withheld\nreadyz check failed\n";
        assert_eq!(
            failed_checks(body).as_deref(),
            Some("checks failing: etcd, etcd-readiness")
        );
        assert_eq!(failed_checks("ok"), None);
    }
}
