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
