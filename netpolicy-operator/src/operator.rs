//! `netpolicy operator`: the process around the controllers.
//!
//! - **Leader election** on a `coordination.k8s.io` Lease (`kube-lease-manager`): every
//!   instance serves health and metrics, only the holder runs controllers. An instance
//!   that loses the lease stops its controllers and exits (status 1) so that it restarts
//!   from a clean cache; on SIGTERM/SIGINT it stops its controllers, releases the lease
//!   (the standby takes over at once instead of after the lease expires) and exits 0.
//! - **Jobs** (`jobs()`): one set of shared informers ([`crate::runtime::Informers`]:
//!   one WATCH per resource whatever the number of jobs); the global jobs (routing,
//!   floating IPs, traffic domains, route reflectors) under one
//!   [`Runner`], the per-object jobs (routed IPs and their
//!   issuers' checks) under the same runner's per-object shape.
//! - **Endpoints** (`--listen`, default `0.0.0.0:8080`): `/metrics` (Prometheus text:
//!   `netpolicy_reconciles_total`, `netpolicy_reconcile_errors_total`,
//!   `netpolicy_reconcile_errors_by_class_total`,
//!   `netpolicy_reconcile_duration_seconds` per job, `netpolicy_leader`),
//!   `/healthz` (the process runs), `/readyz` (200 when the API server answered and, on
//!   the leader, every job synced every kind it reads and finished its first pass; 503
//!   otherwise, the body naming what each waiting job waits for — also while the API
//!   server's own `/readyz`, asked every 5 s, names failing checks such as etcd, and
//!   while a job's passes have failed transiently for 10 s).
//! - **Logs**: `tracing`, human-readable or `--log-format json`; `RUST_LOG` filters.
//! - **Configuration**: `--kubeconfig`, else `KUBECONFIG` / `~/.kube/config`, else the
//!   in-cluster service account.

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;
use tracing::{error, info, warn};

pub use crate::k8s::DEFAULT_MAX_OBJECT_BYTES;

/// `--write-concurrency`'s default: see benches/README.md, "Scale on the chart's
/// defaults".
pub const DEFAULT_WRITE_CONCURRENCY: u16 = 32;
use crate::{
    error::{Error, Result},
    floating_ip,
    process::{LogFormat, client_from, init_logs, serve_probes, shutdown_signal, watch_api_health},
    route_reflector, routed_ip, routing,
    runtime::{Informers, Runner, Shared},
    trench,
};

/// Options of `netpolicy operator`.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Kubeconfig file (default: `KUBECONFIG`, `~/.kube/config`, or in-cluster).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "netpolicy-system")]
    pub lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "netpolicy-operator")]
    pub lease_name: String,
    /// This instance's identity in the Lease (default: the pod or host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Lease duration in seconds; a standby takes over this long after the leader
    /// stops renewing.
    #[arg(long, default_value_t = 15)]
    pub lease_seconds: u64,
    /// Seconds between full passes of a quiet controller (they write nothing when
    /// nothing differs; events start passes at once).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub resync_seconds: u64,
    /// Largest NodeNetworkConfig the operator writes, in bytes of JSON. A larger one is
    /// not written (the API server would refuse it: etcd's request limit is ~1.5 MiB):
    /// the node keeps its last config and the policies selecting it report `TooLarge`.
    #[arg(long, default_value_t = DEFAULT_MAX_OBJECT_BYTES)]
    pub max_object_bytes: usize,
    /// Writes the routing and floating-IP jobs keep in flight at once (each job; the
    /// API server's priority and fairness answers more with 429s, which back off). With
    /// the default, a cold start at 10,000 nodes took 1.35–1.80× as long as the API
    /// server's own write pace would for the operator's writes, and twice the default
    /// changed nothing: the API server sets the pace (benches/README.md, "Scale on the
    /// chart's defaults").
    #[arg(long, default_value_t = DEFAULT_WRITE_CONCURRENCY, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub write_concurrency: u16,
    /// Remove a deleted ClusterConfig's or NodeConfig's items from the nodes (ipruler's
    /// `node-cleanup-on-deletion`, default true). With `false` they stay in the kernel as
    /// they are, are no longer netpolicy's (never changed or removed again), and are
    /// listed in each node's NodeNetworkConfig (`spec.leftBehind`, `status.leftBehind`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub node_cleanup_on_deletion: bool,
    /// Shared renderings (issue 68; docs/architecture.md, node agent model): one
    /// immutable NodeNetworkRendering per distinct configuration and the NetworkFleet
    /// naming the rendering each group of nodes runs, rolled out in waves; a node whose
    /// agent reads them gets only its own items in its NodeNetworkConfig. A cluster-wide
    /// edit then writes one rendering per group and one fleet per wave instead of one
    /// object per node. Needs `--node-cleanup-on-deletion=true`.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub shared_renderings: bool,
    /// Address for `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Images, service accounts and resource templates of Meridio's workloads (YAML:
    /// `registry`, `repository`, `version`, `versions`, `nseVlanImage`, `nscImage`,
    /// `initImage`, `imagePullSecrets`, `nspServiceAccount`, `feServiceAccount`,
    /// `logLevel`, `resourceTemplates`, ...), for `dataPlane: meridio` trenches. The
    /// chart writes it from its `meridio` values. Default: Meridio's own.
    #[arg(long, value_name = "PATH")]
    pub meridio_settings: Option<PathBuf>,
    /// Serve only the traffic domains of this namespace, with Meridio's workloads (the
    /// scope of Meridio's own operator, and a namespaced Role is enough). The other jobs
    /// and `dataPlane: node` trenches need the cluster-wide operator.
    #[arg(long, env = "WATCH_NAMESPACE", value_name = "NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Read Rancher's `provisioning.cattle.io/v1` Clusters: FloatingIPRange
    /// `kubeVip.guests.discovery: rancher` finds each guest through them (needs list and
    /// watch on them, and get on the kubeconfig Secrets in their namespace).
    #[arg(long)]
    pub rancher_clusters: bool,
    /// Log every floating-IP pass's allocations: each FloatingIP's address, each
    /// range's capacity and use (kube-fip's `traceIpamData`; target `ipam`, at info).
    #[arg(long)]
    pub trace_ipam_data: bool,
}

async fn client(opts: &Options) -> Result<Client> {
    client_from(opts.kubeconfig.as_ref()).await
}

/// What ended the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// A signal asked it to stop; the lease was released.
    Stopped,
    /// It lost the lease (another instance leads now).
    LostLease,
}

/// Every job of the operator, on one set of shared informers: registered for
/// readiness at once, running when the returned future is polled, until `stop`.
fn jobs(
    client: &Client,
    shared: &Arc<Shared>,
    opts: &Options,
    meridio: &crate::trench::meridio::Settings,
    stop: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + 'static {
    let resync = Duration::from_secs(opts.resync_seconds);
    let informers = Arc::new(Informers::in_namespace(
        client.clone(),
        opts.watch_namespace.clone(),
    ));
    let runner = Runner::new(Arc::clone(shared), resync);
    let trench = runner.run(
        trench::controller::setup(&informers, client, meridio.clone()),
        stop.clone(),
    );
    if let Some(ns) = &opts.watch_namespace {
        info!(namespace = %ns, "limited to one namespace: traffic domains only");
        shared.started.store(true, Ordering::Release);
        informers.start();
        return futures::future::Either::Left(async move {
            trench.await;
            informers.stop();
        });
    }
    let routing = runner.run(
        routing::controller::setup(
            &informers,
            client,
            shared,
            opts.max_object_bytes,
            opts.node_cleanup_on_deletion,
            usize::from(opts.write_concurrency),
            opts.shared_renderings,
        ),
        stop.clone(),
    );
    let floating_ip = runner.run(
        floating_ip::controller::setup(
            &informers,
            client,
            shared,
            opts.rancher_clusters,
            opts.trace_ipam_data,
            usize::from(opts.write_concurrency),
        ),
        stop.clone(),
    );
    let (routed_ips, issuer_checks) =
        routed_ip::controller::setup(&informers, client, shared, resync);
    let routed_ip = futures::future::join(
        runner.run_each(routed_ips, stop.clone()),
        runner.run_each(issuer_checks, stop.clone()),
    );
    let route_reflector = runner.run(
        route_reflector::controller::setup(&informers, client, shared),
        stop.clone(),
    );
    shared.started.store(true, Ordering::Release);
    informers.start();
    futures::future::Either::Right(async move {
        tokio::join!(routing, floating_ip, trench, routed_ip, route_reflector);
        informers.stop();
    })
}

/// Runs the operator until a signal or the loss of the lease.
///
/// # Errors
/// No configuration, the listen address taken, or the API server unreachable at start.
pub async fn run(opts: Options) -> Result<Exit> {
    init_logs(opts.log_format);
    if opts.shared_renderings && !opts.node_cleanup_on_deletion {
        return Err(Error::Config {
            what: "--shared-renderings".into(),
            source: "needs --node-cleanup-on-deletion=true: items left behind by deleted \
                     policies are kept per node, which a shared rendering cannot carry"
                .into(),
        });
    }
    let meridio = match &opts.meridio_settings {
        None => crate::trench::meridio::Settings::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
                what: format!("reading --meridio-settings {}", path.display()),
                source,
            })?;
            serde_saphyr::from_str(&text).map_err(|e| Error::Config {
                what: format!("--meridio-settings {}: not valid", path.display()),
                source: Box::new(e),
            })?
        }
    };
    let client = client(&opts).await?;
    let shared = Arc::new(Shared::default());
    shared.metrics.component("operator");
    let server = serve_probes(opts.listen, &shared, &client).await?;
    let api_health = watch_api_health(Arc::clone(&shared), client.clone());

    let identity = opts
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("netpolicy-{}", std::process::id()));
    let manager = LeaseManagerBuilder::new(client.clone(), opts.lease_name.clone())
        .with_namespace(opts.lease_namespace.clone())
        .with_identity(identity.clone())
        .with_duration(opts.lease_seconds)
        .with_grace(opts.lease_seconds.div_ceil(3).max(1))
        .build()
        .await
        .map_err(|e| Error::Config {
            what: "setting up leader election".into(),
            source: Box::new(e),
        })?;
    let (mut leading, lease_task) = manager.watch().await;
    info!(%identity, lease = %opts.lease_name, namespace = %opts.lease_namespace, "waiting for the lease");

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut controllers = None;
    let signal = shutdown_signal();
    tokio::pin!(signal);
    let exit = loop {
        tokio::select! {
            () = &mut signal => {
                info!("signal received: stopping");
                break Exit::Stopped;
            }
            changed = leading.changed() => {
                if changed.is_err() {
                    error!("leader election stopped");
                    break Exit::LostLease;
                }
                let now = *leading.borrow_and_update();
                shared.leading.store(now, Ordering::Release);
                shared.metrics.leader.set(i64::from(now));
                if now && controllers.is_none() {
                    info!(%identity, "acquired the lease: starting controllers");
                    let jobs = jobs(&client, &shared, &opts, &meridio, stop_rx.clone());
                    controllers = Some(tokio::spawn(jobs));
                } else if !now && controllers.is_some() {
                    warn!(%identity, "lost the lease: stopping");
                    break Exit::LostLease;
                }
            }
        }
    };
    let _ = stop_tx.send(true);
    if let Some(c) = controllers
        && tokio::time::timeout(Duration::from_secs(10), c)
            .await
            .is_err()
    {
        warn!("controllers did not stop within 10 s");
    }
    shared.leading.store(false, Ordering::Release);
    shared.started.store(false, Ordering::Release);
    shared.clear_jobs();
    shared.metrics.leader.set(0);
    // Closing the channel makes the lease task release the lease and end.
    drop(leading);
    match tokio::time::timeout(Duration::from_secs(5), lease_task).await {
        Ok(Ok(Ok(_))) => info!("lease released"),
        _ => warn!("could not release the lease; it expires on its own"),
    }
    server.abort();
    api_health.abort();
    Ok(exit)
}
