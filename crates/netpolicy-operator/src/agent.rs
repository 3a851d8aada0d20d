//! `netpolicy agent`: the node agent. It watches only its node's NodeNetworkConfig,
//! applies it to the node's network namespace through `netpolicy-netlink`, and writes
//! the object's status (observed generation, applied revision, conditions, the items
//! the kernel refused). A resync timer repairs drift between changes. It listens only
//! for metrics and health (`/metrics`, `/healthz`, `/readyz`, default 127.0.0.1:8081):
//! nothing reaches the node's routing except through the Kubernetes API and its RBAC.
//!
//! Without a NodeNetworkConfig the agent changes nothing (the operator may not have
//! rendered it yet); `--cleanup` removes everything netpolicy made on the node and exits.

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, Mutex, atomic::Ordering},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use futures::StreamExt;
use kube::{
    Api,
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use netpolicy_netlink::{Adapter, Namespace, Outcome, Ownership};
use serde_json::json;
use tracing::{info, warn};

use crate::{
    api::NodeNetworkConfig,
    runtime::{LogFormat, Shared, client_from, init_logs, serve_probes, shutdown_signal},
};

/// Options of `netpolicy agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentOptions {
    /// This node's name (its NodeNetworkConfig has the same name).
    #[arg(long, env = "NODE_NAME")]
    pub node: String,
    /// Kubeconfig file (default: `KUBECONFIG`, `~/.kube/config`, or in-cluster).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Apply to this named network namespace instead of the agent's own (embedding,
    /// tests).
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// Seconds between resyncs that repair drift.
    #[arg(long, default_value_t = 60)]
    pub resync_seconds: u64,
    /// Address for `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Remove everything netpolicy made in the namespace, then exit.
    #[arg(long)]
    pub cleanup: bool,
}

/// Field manager of the agent's status writes.
pub const FIELD_MANAGER: &str = "netpolicy-agent";

/// Runs the agent until a signal.
///
/// # Errors
/// No configuration, the namespace or the listen address unusable, the API server
/// unreachable at start.
pub async fn run(opts: AgentOptions) -> anyhow::Result<()> {
    init_logs(opts.log_format);
    let ns = opts
        .netns
        .clone()
        .map_or(Namespace::Current, Namespace::Named);
    let adapter = Adapter::open(&ns, Ownership::default())
        .with_context(|| format!("opening the network namespace {ns:?}"))?;
    let adapter = Arc::new(Mutex::new(adapter));
    if opts.cleanup {
        let report = tokio::task::spawn_blocking({
            let a = Arc::clone(&adapter);
            move || {
                a.lock()
                    .map_err(|_| anyhow::anyhow!("adapter lock"))?
                    .cleanup()
                    .map_err(anyhow::Error::from)
            }
        })
        .await??;
        info!(removed = report.results.len(), "cleanup done");
        return Ok(());
    }
    let client = client_from(opts.kubeconfig.as_ref()).await?;
    let shared = Arc::new(Shared::default());
    let server = serve_probes(opts.listen, &shared, &client).await?;
    let api: Api<NodeNetworkConfig> = Api::all(client);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={}", opts.node));
    let mut events = watcher(api.clone(), cfg).default_backoff().boxed();
    let mut tick = tokio::time::interval(Duration::from_secs(opts.resync_seconds.max(1)));
    let signal = shutdown_signal();
    tokio::pin!(signal);
    info!(node = %opts.node, "agent running");
    loop {
        tokio::select! {
            () = &mut signal => break,
            ev = events.next() => {
                if let Some(Err(e)) = ev {
                    warn!(error = %e, "watch error (retrying)");
                    continue;
                }
            }
            _ = tick.tick() => {}
        }
        let start = Instant::now();
        let ok = match apply(&api, &opts.node, &adapter).await {
            Ok(()) => true,
            Err(e) => {
                warn!(error = %format!("{e:#}"), "apply failed");
                false
            }
        };
        shared.synced.store(true, Ordering::Release);
        shared.metrics.reconciled("agent", start.elapsed(), ok);
    }
    info!("agent stopped (the node keeps its configuration)");
    server.abort();
    Ok(())
}

/// One pass: read the node's object, apply it, write its status.
async fn apply(
    api: &Api<NodeNetworkConfig>,
    node: &str,
    adapter: &Arc<Mutex<Adapter>>,
) -> anyhow::Result<()> {
    let Some(nnc) = api.get_opt(node).await? else {
        return Ok(());
    };
    let generation = nnc.metadata.generation;
    let revision = nnc.spec.revision.clone();
    // Server-side apply drops fields this manager stops sending: keep the last revision
    // that applied completely when this one does not.
    let previous = nnc.status.as_ref().and_then(|s| s.applied_revision.clone());
    let desired = match nnc.spec.rendered.routing().validate("spec") {
        Ok(d) => d,
        Err(e) => {
            write_status(
                api,
                node,
                generation,
                previous.as_deref(),
                false,
                &e.to_string(),
                &[],
            )
            .await?;
            anyhow::bail!("{node}: invalid NodeNetworkConfig: {e}");
        }
    };
    let a = Arc::clone(adapter);
    let report = tokio::task::spawn_blocking(move || {
        a.lock()
            .map_err(|_| anyhow::anyhow!("adapter lock"))?
            .reconcile(&desired, false)
            .map_err(anyhow::Error::from)
    })
    .await??;
    if !report.drift.is_empty() {
        info!(node, repaired = report.drift.len(), "drift repaired");
    }
    let errors: Vec<serde_json::Value> = report
        .failures()
        .map(|r| {
            let (errno, message) = match &r.outcome {
                Outcome::Failed { errno, message } => (*errno, message.clone()),
                _ => (None, String::new()),
            };
            json!({"item": format!("{:?}", r.op), "errno": errno, "message": message})
        })
        .collect();
    let ok = errors.is_empty();
    let message = if ok {
        format!("applied revision {revision}")
    } else {
        format!("{} item(s) failed", errors.len())
    };
    write_status(
        api,
        node,
        generation,
        if ok {
            Some(revision.as_str())
        } else {
            previous.as_deref()
        },
        ok,
        &message,
        &errors,
    )
    .await
}

async fn write_status(
    api: &Api<NodeNetworkConfig>,
    node: &str,
    generation: Option<i64>,
    applied: Option<&str>,
    ok: bool,
    message: &str,
    errors: &[serde_json::Value],
) -> anyhow::Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let mut status = json!({
        "observedGeneration": generation,
        "conditions": [{
            "type": "Applied",
            "status": if ok { "True" } else { "False" },
            "reason": if ok { "Applied" } else { "ItemsFailed" },
            "message": message,
            "lastTransitionTime": now,
            "observedGeneration": generation,
        }],
        "itemErrors": errors,
    });
    if let Some(rev) = applied {
        status["appliedRevision"] = json!(rev);
    }
    let patch = json!({
        "apiVersion": "netpolicy.io/v1alpha1",
        "kind": "NodeNetworkConfig",
        "status": status,
    });
    api.patch_status(
        node,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .context("writing status")?;
    Ok(())
}
