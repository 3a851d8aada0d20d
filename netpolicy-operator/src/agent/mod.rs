//! `netpolicy agent`: the node agent. It watches only its node's NodeNetworkConfig,
//! applies it to the node's network namespace through `netpolicy-netlink`, and writes
//! the object's status (observed generation, applied revision, conditions, the items
//! the kernel refused). Drift is repaired when it happens: the kernel's notifications
//! (`netpolicy_netlink::monitor`) of a change to an object netpolicy owns, or inside a
//! hard-synced table, made by anyone but the agent's own socket (told apart by the
//! netlink port the kernel names in each notification: no timing, no race), start a
//! pass at once; the resync timer stays as the safety net. Fights are per object: an
//! object restored [`conditions::fighting::AFTER`] times within a minute is `Fighting`
//! (named in the status), and its notifications start no pass; it is looked at again
//! with backoff ([`Repairs`]). Every other object is still repaired on its
//! notification: the only global valve is a rate ([`netpolicy_netlink::monitor::Budget`],
//! a burst of 200 passes, then 50 a second), which delays a repair by at most 20 ms and
//! never drops it. It listens only
//! for metrics and health (`/metrics`, `/healthz`, `/readyz`, default 127.0.0.1:8081):
//! nothing reaches the node's routing except through the Kubernetes API and its RBAC.
//!
//! Without a NodeNetworkConfig the agent changes nothing (the operator may not have
//! rendered it yet); `--cleanup` removes everything netpolicy made on the node and exits.
//!
//! # Guarantees
//! - Quiet: a pass writes status only when the status it computed differs from the one
//!   the object has, and a condition's `lastTransitionTime` moves only when its status
//!   flips. A watch event that changed no `metadata.generation` (the agent's own status
//!   write, a label) starts no pass; the resync timer does, and finds nothing to write.
//!   A quiet node costs zero API writes.
//! - Honest: `Applied` is `True` only when every desired item is in the kernel as
//!   desired. Every item that is not is in `status.itemErrors` with a reason (refused
//!   with errno, blocked by a foreign object, name taken by another link, not
//!   converged), in the readable form `netpolicy plan` prints.
//! - Safe: a revision it has not seen pass is on probation. The agent checks the API
//!   server (its own connection) and the spec's `probes` (`ping`, `tcp`, in the
//!   namespace it programs) until they all pass or `rollbackSeconds` run out; only then
//!   does it report the revision applied. On failure it restores the last revision that
//!   passed (after a restart, the one in `--state-file`; with none known, netpolicy's
//!   objects are removed), reports `Degraded` and `failedRevision`, and never applies
//!   that revision again — also when the API server is gone, which is when it matters
//!   most.

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, watcher, watcher::Event},
};
use netpolicy_core::{model::RoutingConfig, spec::RoutingSpec};
use netpolicy_netlink::{Adapter, Namespace, Ownership};
use tracing::{info, warn};

mod fleet;
pub use fleet::list_labelled;
mod metrics;
mod probation;
mod repair;
mod status;
mod uninstall;

use probation::*;
pub(crate) use repair::*;
pub(crate) use status::*;
use uninstall::{uninstalled, watch_owner};

use crate::error::{Chain, Error, Result};

use crate::{
    api::{
        NodeNetworkConfig,
        conditions::{self},
    },
    process::{LogFormat, client_from, init_logs, serve_probes, shutdown_signal},
    telemetry::Shared,
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
    /// Address for `/metrics`, `/healthz` and `/readyz` (`IP:PORT`; an IPv6 address
    /// with or without brackets, as the downward API's `status.hostIP` gives it).
    #[arg(long, default_value = "127.0.0.1:8081", value_parser = listen_address)]
    pub listen: SocketAddr,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Remove everything netpolicy made in the namespace, then exit.
    #[arg(long)]
    pub cleanup: bool,
    /// The agent's DaemonSet (`NAMESPACE/NAME`). When set, a stop signal that arrives
    /// while that DaemonSet is gone or being deleted (the chart uninstalled) removes
    /// everything netpolicy made on the node before the agent exits; a stop during a
    /// rolling update (the DaemonSet still there) leaves the node as it is.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub cleanup_on_uninstall: Option<String>,
    /// File where the agent keeps the last revision that passed its probes, so that a
    /// restarted agent rolls a failing revision back to it (without it, a restarted
    /// agent knows no earlier config and a rollback removes netpolicy's objects). The
    /// chart keeps it on the node (`/var/lib/netpolicy`).
    #[arg(long, env = "NETPOLICY_STATE_FILE", value_name = "PATH")]
    pub state_file: Option<PathBuf>,
    /// Milliseconds over which the agents of one wave spread their reports of a newly
    /// applied shared rendering: each waits its own share (from its node name) after
    /// applying, so a wave's status patches do not reach the API server in one burst.
    /// A failure is reported at once. 0: no wait. Not given: what the NetworkFleet says
    /// (`reportSpreadMs`, which the operator sets from the node count: 500 up to 1,000
    /// nodes, half a millisecond a node above), else 500.
    #[arg(long, value_name = "MS")]
    pub report_spread_ms: Option<u64>,
}

/// `IP:PORT`, `[IPv6]:PORT` or `IPv6:PORT` (the last colon parts the port).
fn listen_address(s: &str) -> std::result::Result<SocketAddr, String> {
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    let bad = || format!("{s:?}: want IP:PORT (e.g. 10.0.0.5:8081 or fd00::5:8081)");
    let (ip, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let ip: std::net::IpAddr = ip.parse().map_err(|_| bad())?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    Ok(SocketAddr::new(ip, port))
}

/// Field manager of the agent's status writes.
pub(crate) const FIELD_MANAGER: &str = "netpolicy-agent";

/// Runs the agent until a signal.
///
/// # Errors
/// No configuration, the namespace or the listen address unusable, the API server
/// unreachable at start.
pub(crate) async fn run(opts: AgentOptions) -> Result<()> {
    init_logs(opts.log_format);
    let ns = opts
        .netns
        .clone()
        .map_or(Namespace::Current, Namespace::Named);
    let adapter = Adapter::open(&ns, Ownership::default()).map_err(|source| Error::Netlink {
        what: format!("opening the network namespace {ns:?}"),
        source,
    })?;
    let own_port = adapter.port().map_err(|source| Error::Netlink {
        what: "reading the adapter's netlink port".into(),
        source,
    })?;
    let adapter = Arc::new(Mutex::new(adapter));
    if opts.cleanup {
        return cleanup(&adapter).await;
    }
    // The kernel's notifications: a foreign change to what netpolicy owns (or inside a
    // hard-synced table) starts a pass at once; the resync stays as the safety net.
    let mut kernel = watch_kernel(&ns)?;
    let mut trigger = Trigger::default();
    let client = client_from(opts.kubeconfig.as_ref()).await?;
    let shared = Arc::new(Shared::default());
    shared.metrics.component("agent");
    let metrics = shared.metrics.of::<metrics::Metrics>();
    let server = serve_probes(opts.listen, &shared, &client).await?;
    let api: Api<NodeNetworkConfig> = Api::all(client.clone());
    let recorder = crate::k8s::events::Recorder::new(
        client.clone(),
        kube::runtime::events::Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(opts.node.clone()),
        },
    );
    let mut ctx = Ctx::new(&opts, &ns, client);
    // The agent's own DaemonSet, watched from the start: when the chart is uninstalled,
    // its RBAC and service account go in the same breath as the DaemonSet, so by the
    // time the stop signal arrives the agent may no longer be allowed to ask.
    let mut owner = opts
        .cleanup_on_uninstall
        .as_deref()
        .and_then(|ds| watch_owner(&ctx.client, ds));
    let cfg = watcher::Config::default().fields(&format!("metadata.name={}", opts.node));
    let mut events = watcher(api.clone(), cfg).default_backoff().boxed();
    // A shared object (spec.shared) runs its group's rendering: the agent's Node labels
    // the fleet and its group's rollouts say which (agent/fleet.rs); renderings are read when picked.
    let mut view = fleet::FleetView::new(ctx.client.clone(), &opts.node);
    let mut shared_events = view.watch(&ctx.client);
    let mut tick = tokio::time::interval(Duration::from_secs(opts.resync_seconds.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let signal = shutdown_signal();
    tokio::pin!(signal);
    info!(node = %opts.node, "agent running");
    let mut watched = Watched::default();
    loop {
        // A pass started by the kernel's notifications does not probe known duplicate
        // addresses again; a new spec, a resync or a fight's look does.
        let mut from_kernel = false;
        tokio::select! {
            () = &mut signal => break,
            ev = events.next() => {
                match ev {
                    None => break,
                    Some(Err(e)) => {
                        warn!(error = %e, "watch error (retrying)");
                        continue;
                    }
                    Some(Ok(ev)) => {
                        if !watched.on_event(ev) {
                            continue;
                        }
                    }
                }
            }
            Some(ev) = shared_events.next() => {
                // Only a shared object runs something else when these change.
                if !(view.on(&ev) && is_shared(watched.latest.as_ref())) {
                    continue;
                }
            }
            _ = tick.tick() => {}
            batch = kernel.recv() => {
                let Some(batch) = batch else {
                    warn!("kernel notifications stopped: drift is repaired on resync only");
                    kernel = tokio::sync::mpsc::channel(1).1;
                    continue;
                };
                let latest = view.ran().or(watched.latest.as_ref());
                let fought = ctx.repairs.fighting();
                if !kernel_starts_a_pass(&mut trigger, &batch, own_port, latest, fought) {
                    continue;
                }
                from_kernel = true;
            }
            () = event_timer(trigger.deferred()) => {
                trigger.fire(Instant::now());
                from_kernel = true;
            }
            () = event_timer(ctx.repairs.next_check()) => {
                if watched.latest.is_none() {
                    // No NodeNetworkConfig: nothing to fight over any more.
                    ctx.repairs = Repairs::default();
                    continue;
                }
                info!(objects = ?ctx.repairs.fighting(), "Fighting: looking again");
                ctx.repairs.look_again(Instant::now());
            }
            () = event_timer(ctx.repairs.next_event()) => {
                match &watched.latest {
                    Some(o) => ctx.repairs.publish(&recorder, o).await,
                    None => ctx.repairs = Repairs::default(),
                }
                continue;
            }
        }
        let Some(nnc) = watched.latest.clone() else {
            continue;
        };
        if !from_kernel && let Ok(mut a) = adapter.lock() {
            a.forget_duplicates();
        }
        ctx.from_kernel = from_kernel;
        let Some((ok, took)) =
            pass_over(&api, &adapter, &mut ctx, &mut view, &mut watched, &nnc).await
        else {
            continue;
        };
        record(
            &shared,
            &metrics,
            &mut ctx,
            watched.latest.as_ref(),
            took,
            ok,
        );
        if let Some(o) = &watched.latest {
            ctx.repairs.publish(&recorder, o).await;
        }
    }
    server.abort();
    if let Some(ds) = &opts.cleanup_on_uninstall
        && uninstalled(&api.clone().into_client(), ds, owner.as_mut()).await
    {
        info!(daemonset = %ds, "the agent's DaemonSet is gone: removing what netpolicy made");
        return cleanup(&adapter).await;
    }
    info!("agent stopped (the node keeps its configuration)");
    Ok(())
}

/// Whether a batch of the kernel's notifications starts a pass now (a storm of them is
/// repaired shortly, when the trigger's timer fires).
fn kernel_starts_a_pass(
    trigger: &mut Trigger,
    batch: &netpolicy_netlink::monitor::Batch,
    own_port: u32,
    latest: Option<&NodeNetworkConfig>,
    fought: &std::collections::BTreeSet<netpolicy_netlink::monitor::Subject>,
) -> bool {
    let hard: Vec<u32> = latest
        .map(|o| o.spec.rendered.table_hard_sync.clone())
        .unwrap_or_default();
    match trigger.on_batch(batch, own_port, &hard, fought, Instant::now()) {
        KernelTrigger::Nothing => false,
        KernelTrigger::Later(what) => {
            info!(change = %what, "changed behind netpolicy's back: repairing shortly (a storm of changes)");
            false
        }
        KernelTrigger::Now(what) => {
            info!(change = %what, "changed behind netpolicy's back: repairing");
            true
        }
    }
}

/// The node's NodeNetworkConfig as last seen (watch events and the agent's own status
/// writes), and the (uid, generation) the last pass acted on.
#[derive(Debug, Default)]
struct Watched {
    latest: Option<NodeNetworkConfig>,
    /// A relist in progress.
    relisted: Option<NodeNetworkConfig>,
    acted: Option<(String, i64)>,
}

impl Watched {
    /// Takes one watch event; whether it is worth a pass now. Only a new spec (or a new
    /// object) is: status-only changes, the agent's own writes among them, wait for the
    /// resync.
    fn on_event(&mut self, ev: Event<NodeNetworkConfig>) -> bool {
        match ev {
            Event::Apply(o) => self.latest = Some(o),
            Event::Delete(_) => {
                self.latest = None;
                return false;
            }
            Event::Init => {
                self.relisted = None;
                return false;
            }
            Event::InitApply(o) => {
                self.relisted = Some(o);
                return false;
            }
            Event::InitDone => self.latest = self.relisted.take(),
        }
        self.latest
            .as_ref()
            .is_some_and(|o| self.acted.as_ref() != Some(&generation_key(o)))
    }
}

/// A pass's metrics: its duration and outcome, the repairs it made, and what the
/// status it left says.
fn record(
    shared: &Shared,
    metrics: &metrics::Metrics,
    ctx: &mut Ctx,
    latest: Option<&NodeNetworkConfig>,
    took: Duration,
    ok: bool,
) {
    shared
        .metrics
        .reconciled("agent", took, (!ok).then_some("transient"));
    metrics.repaired(std::mem::take(&mut ctx.repaired));
    if let Some(st) = latest.and_then(|o| o.status.as_ref()) {
        let reasons: Vec<&str> = st.item_errors.iter().map(|e| e.reason.as_str()).collect();
        metrics.status(&reasons, ctx.repairs.fighting().len(), st.not_probed.len());
    }
}

/// The kernel's notifications for `ns`, read on a thread of their own (a blocking
/// socket), as a channel; it ends when the socket fails.
fn watch_kernel(
    ns: &Namespace,
) -> Result<tokio::sync::mpsc::Receiver<netpolicy_netlink::monitor::Batch>> {
    let mut monitor =
        netpolicy_netlink::monitor::Monitor::open(ns).map_err(|source| Error::Netlink {
            what: "subscribing to the kernel's notifications".into(),
            source,
        })?;
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    std::thread::Builder::new()
        .name("netlink-monitor".into())
        .spawn(move || {
            loop {
                match monitor.recv_burst(netpolicy_netlink::monitor::SETTLE) {
                    Ok(b) => {
                        if tx.blocking_send(b).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "kernel notifications: the socket failed");
                        return;
                    }
                }
            }
        })
        .map_err(|e| Error::Incomplete(format!("starting the notification thread: {e}")))?;
    Ok(rx)
}

/// Removes everything netpolicy made in the namespace, checks the result, and fails
/// naming what was left.
async fn cleanup(adapter: &Arc<Mutex<Adapter>>) -> Result<()> {
    let report = with_adapter(adapter, "removing what netpolicy made", Adapter::cleanup).await?;
    let left = item_errors(&report, &RoutingConfig::default());
    if !left.is_empty() {
        for p in &left {
            warn!(item = %p.item, reason = %p.reason, errno = ?p.errno, "{}", p.message);
        }
        return Err(Error::Incomplete(format!(
            "cleanup left {} object(s) netpolicy made in place",
            left.len()
        )));
    }
    info!(removed = report.results.len(), "cleanup done");
    Ok(())
}

/// A pass over `nnc` (what it runs: [`fleet::FleetView::what_runs`]), remembered in `watched`
/// and `view`: whether it succeeded, and how long it took; `None`: nothing to run yet.
async fn pass_over(
    api: &Api<NodeNetworkConfig>,
    adapter: &Arc<Mutex<Adapter>>,
    ctx: &mut Ctx,
    view: &mut fleet::FleetView,
    watched: &mut Watched,
    nnc: &NodeNetworkConfig,
) -> Option<(bool, Duration)> {
    let (run, rendering) = view.what_runs(nnc).await?;
    let start = Instant::now();
    let spread = ctx.report_spread.unwrap_or_else(|| view.report_spread());
    let ok = match pass(api, &run, adapter, ctx, rendering.as_deref(), spread).await {
        Ok(written) => {
            watched.acted = Some(generation_key(nnc));
            view.record(run, rendering);
            if let Some(w) = written {
                watched.latest = Some(w);
            }
            true
        }
        Err(e) => {
            warn!(error = %Chain(&e), "apply failed");
            false
        }
    };
    Some((ok, start.elapsed()))
}

/// Whether `o` runs a shared rendering (a change of the fleet or the Node's labels
/// matters to it).
fn is_shared(o: Option<&NodeNetworkConfig>) -> bool {
    o.is_some_and(|o| o.spec.shared)
}

fn generation_key(o: &NodeNetworkConfig) -> (String, i64) {
    (
        o.uid().unwrap_or_default(),
        o.metadata.generation.unwrap_or(0),
    )
}

/// What the agent remembers between passes. Across restarts: the last good config when
/// `--state-file` is set ([`load_last_good`]); a restarted agent also takes the
/// revision its status reports applied as proven.
#[derive(Debug, Default)]
struct Memory {
    /// The last revision that passed its probes, and its items: what a rollback
    /// restores.
    last_good: Option<(String, RoutingConfig)>,
    /// The revision that failed, and why (kept so that it is never applied again and
    /// its status is written once the API server answers).
    failed: Option<Failure>,
}

/// What a pass needs besides the object.
struct Ctx {
    ns: Namespace,
    repairs: Repairs,
    /// Whether this pass was started by a kernel notification (it ends no fight).
    from_kernel: bool,
    /// Objects the last pass restored (for the repairs counter).
    repaired: usize,
    not_probed: NotProbed,
    client: kube::Client,
    mem: Memory,
    state_file: Option<PathBuf>,
    /// This node's name (the state file says whose it is).
    node: String,
    /// `--report-spread-ms` (`None`: the fleet's).
    report_spread: Option<Duration>,
}

impl Ctx {
    /// A new agent's context: its last good config read from `--state-file`.
    fn new(opts: &AgentOptions, ns: &Namespace, client: kube::Client) -> Self {
        Self {
            ns: ns.clone(),
            repairs: Repairs::default(),
            from_kernel: false,
            repaired: 0,
            not_probed: NotProbed::default(),
            client,
            mem: Memory {
                last_good: opts
                    .state_file
                    .as_deref()
                    .and_then(|path| load_last_good(path, &opts.node)),
                ..Memory::default()
            },
            state_file: opts.state_file.clone(),
            node: opts.node.clone(),
            report_spread: opts.report_spread_ms.map(Duration::from_millis),
        }
    }

    /// Records `revision` as the last good config, also in the state file when there
    /// is one (a failure to write it is logged: the node is fine, only a restart would
    /// forget the revision).
    fn proven(&mut self, revision: &str, desired: RoutingConfig, spec: &RoutingSpec) {
        if let Some(path) = &self.state_file
            && self
                .mem
                .last_good
                .as_ref()
                .is_none_or(|(r, _)| r != revision)
        {
            match save_last_good(path, &self.node, revision, spec) {
                Ok(()) => info!(revision, path = %path.display(), "last good config kept"),
                Err(e) => warn!(
                    revision,
                    path = %path.display(),
                    error = %e,
                    "could not keep the last good config (a restart would forget it)"
                ),
            }
        }
        self.mem.last_good = Some((revision.to_owned(), desired));
    }
}

/// One pass: apply the object, compute its status, write the status only if it
/// changed. A revision the agent has not seen pass yet is on probation: its probes and
/// the API server must answer within `rollbackSeconds`, or the last good config is
/// restored and the revision is never applied again. `nnc` is what the node runs (for
/// a shared object, its rendering `rendering` with its own items laid over it). Returns
/// the object as written, when a write happened.
async fn pass(
    api: &Api<NodeNetworkConfig>,
    nnc: &NodeNetworkConfig,
    adapter: &Arc<Mutex<Adapter>>,
    ctx: &mut Ctx,
    rendering: Option<&str>,
    report_spread: Duration,
) -> Result<Option<NodeNetworkConfig>> {
    let node = nnc.name_any();
    let current = nnc.status.clone().unwrap_or_default();
    let generation = nnc.metadata.generation;
    let revision = nnc.spec.revision.clone();
    // A failed revision is never applied again: the node stays at its last good config.
    let failed = ctx
        .mem
        .failed
        .clone()
        .filter(|f| f.revision == revision)
        .or_else(|| failure_in_status(&current, &revision));
    let mut not_given_up: Vec<(String, String)> = Vec::new();
    let outcome = if let Some(f) = failed {
        if let Some((_, good)) = ctx.mem.last_good.clone() {
            with_adapter(adapter, "keeping the last good config", move |a| {
                a.reconcile(&good, false)
            })
            .await?;
        }
        PassOutcome::RolledBack(f)
    } else {
        let spec = nnc.spec.rendered.routing();
        // Items of deleted policies stay (node cleanup off): an invalid list changes
        // nothing (applying without it would remove them).
        let left = nnc.spec.left_behind.routing();
        match spec
            .validate("spec")
            .and_then(|d| Ok((d, left.validate("spec.leftBehind")?)))
        {
            Err(e) => PassOutcome::Invalid(e.to_string()),
            Ok((desired, left)) => {
                // Given up before the reconcile below would remove them.
                not_given_up = disown_left_behind(adapter, &node, left).await?;
                let d = desired.clone();
                let report = with_adapter(adapter, "applying the NodeNetworkConfig", move |a| {
                    a.reconcile(&d, false)
                })
                .await?;
                if !report.drift.is_empty() {
                    info!(node, repaired = report.drift.len(), "drift repaired");
                }
                ctx.not_probed.record(&report, &desired);
                ctx.repaired = report.drift.len();
                if ctx.from_kernel {
                    ctx.repairs
                        .record_unasked(Instant::now(), &repaired(&report));
                } else {
                    ctx.repairs.record(Instant::now(), &repaired(&report));
                }
                let proven = match &ctx.mem.last_good {
                    Some((r, _)) => *r == revision,
                    // A restarted agent: what its status reports applied was proven.
                    None => current.applied_revision.as_deref() == Some(revision.as_str()),
                };
                let applied =
                    PassOutcome::Applied(item_errors(&report, &desired), removed_foreign(&report));
                if proven {
                    if ctx.mem.last_good.is_none() {
                        ctx.proven(&revision, desired, &spec);
                    }
                    applied
                } else {
                    match probation(ctx, nnc).await {
                        Ok(took) => {
                            info!(node, revision, ?took, "probes passed");
                            ctx.proven(&revision, desired, &spec);
                            applied
                        }
                        Err((reason, why)) => {
                            let (restored, good) = ctx.mem.last_good.clone().unwrap_or_else(|| {
                                (
                                    "none (no earlier revision is known)".into(),
                                    RoutingConfig::default(),
                                )
                            });
                            with_adapter(adapter, "restoring the last good config", move |a| {
                                a.reconcile(&good, false)
                            })
                            .await?;
                            let secs = rollback_seconds(nnc);
                            let f = Failure {
                                revision: revision.clone(),
                                reason,
                                message: format!(
                                    "{why} within {secs}s of applying revision {revision}: restored \
                                     revision {restored}; revision {revision} is not applied again"
                                ),
                            };
                            warn!(node, "rolled back: {}", f.message);
                            ctx.mem.failed = Some(f.clone());
                            PassOutcome::RolledBack(f)
                        }
                    }
                }
            }
        }
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut next = next_status(&current, generation, &revision, &outcome, now.clone());
    if let Some(c) = fighting_condition(&current, ctx.repairs.fighting(), generation, &now) {
        next.conditions.retain(|c| c.type_ != conditions::FIGHTING);
        next.conditions.push(c);
    }
    next.left_behind = left_behind_lines(&nnc.spec.left_behind);
    next.not_probed = ctx.not_probed.lines();
    next.left_behind.extend(
        not_given_up
            .iter()
            .map(|(what, why)| format!("not given up (still netpolicy's): {what}: {why}")),
    );
    shared_status(&mut next, &outcome, &revision, rendering);
    if let PassOutcome::Invalid(e) = &outcome {
        warn!(node, "invalid NodeNetworkConfig (nothing changed): {e}");
    }
    write_status(api, &node, &current, &next, report_spread).await
}

/// Gives up the left-behind `items` that are still netpolicy's; returns those the kernel
/// refused to give up, with why
/// (a no-op once they are given up).
async fn disown_left_behind(
    adapter: &Arc<Mutex<Adapter>>,
    node: &str,
    items: RoutingConfig,
) -> Result<Vec<(String, String)>> {
    if items == RoutingConfig::default() {
        return Ok(Vec::new());
    }
    let given = with_adapter(adapter, "giving up left-behind items", move |a| {
        a.disown(&items)
    })
    .await?;
    let mut failed = Vec::new();
    for d in given {
        match d.outcome {
            netpolicy_netlink::Outcome::Failed { message, .. } => {
                warn!(node, item = %d.what, "could not give up a left-behind item: {message}");
                failed.push((d.what, message));
            }
            _ => info!(node, item = %d.what, "left behind: no longer netpolicy's"),
        }
    }
    Ok(failed)
}

/// `spec.leftBehind` in readable form, each item with the policies it came from.
pub(crate) fn left_behind_lines(left: &netpolicy_core::render::RenderedSpec) -> Vec<String> {
    use netpolicy_core::spec::RoutingSpec;
    let from = |sources: &[netpolicy_core::render::SourceRef]| {
        sources
            .iter()
            .map(|s| format!("{}/{}", s.kind, s.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let one = |spec: RoutingSpec| spec.validate("spec.leftBehind").ok();
    let mut out = Vec::new();
    for v in &left.vlans {
        if let Some(m) = one(RoutingSpec {
            vlans: vec![v.item.clone()],
            ..RoutingSpec::default()
        }) {
            out.extend(
                m.vlans
                    .iter()
                    .map(|x| format!("vlan {x} ({})", from(&v.sources))),
            );
        }
    }
    for a in &left.addresses {
        if let Some(m) = one(RoutingSpec {
            addresses: vec![a.item.clone()],
            ..RoutingSpec::default()
        }) {
            out.extend(
                m.addresses
                    .iter()
                    .map(|x| format!("address {x} ({})", from(&a.sources))),
            );
        }
    }
    for r in &left.routes {
        if let Some(m) = one(RoutingSpec {
            routes: vec![r.item.clone()],
            ..RoutingSpec::default()
        }) {
            out.extend(
                m.routes
                    .iter()
                    .map(|x| format!("route {x} ({})", from(&r.sources))),
            );
        }
    }
    for r in &left.rules {
        if let Some(m) = one(RoutingSpec {
            rules: vec![r.item.clone()],
            ..RoutingSpec::default()
        }) {
            out.extend(
                m.rules
                    .iter()
                    .map(|x| format!("rule {x} ({})", from(&r.sources))),
            );
        }
    }
    out
}

/// Runs `f` on the adapter on a blocking thread (netlink calls block).
async fn with_adapter<T: Send + 'static>(
    adapter: &Arc<Mutex<Adapter>>,
    what: &str,
    f: impl FnOnce(&mut Adapter) -> netpolicy_netlink::Result<T> + Send + 'static,
) -> Result<T> {
    let a = Arc::clone(adapter);
    let result = tokio::task::spawn_blocking(move || {
        // A pass that panicked leaves the adapter usable: every pass observes the
        // kernel again before it acts.
        let mut guard = a.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    })
    .await
    .map_err(|e| Error::Incomplete(format!("{what}: the worker thread failed: {e}")))?;
    result.map_err(|source| Error::Netlink {
        what: what.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use netpolicy_core::plan::Op;
    use netpolicy_netlink::{Outcome, Report, monitor::Subject};

    use crate::api::{
        ItemError, NodeNetworkConfigStatus,
        conditions::{item, reasons},
    };

    fn at(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn err(item: &str) -> ItemError {
        ItemError {
            item: item.into(),
            reason: item::REFUSED.into(),
            errno: Some(101),
            message: "unreachable".into(),
        }
    }

    #[test]
    fn the_listen_address_takes_what_the_downward_api_gives_for_either_family() {
        assert_eq!(
            listen_address("10.0.0.5:8081"),
            Ok("10.0.0.5:8081".parse().unwrap())
        );
        assert_eq!(
            listen_address("[fd00::5]:8081"),
            Ok("[fd00::5]:8081".parse().unwrap())
        );
        assert_eq!(
            listen_address("fd00::5:8081"),
            Ok("[fd00::5]:8081".parse().unwrap())
        );
        for bad in [
            "",
            "8081",
            "10.0.0.5",
            "10.0.0.5:http",
            "node:8081",
            "fd00::5:70000",
        ] {
            let e = listen_address(bad).unwrap_err();
            assert!(e.contains("want IP:PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_pass_that_found_nothing_new_computes_the_status_it_already_has() {
        let t0 = at("2026-01-01T00:00:00Z");
        let first = next_status(
            &NodeNetworkConfigStatus::default(),
            Some(1),
            "r1",
            &PassOutcome::Applied(vec![], vec![]),
            t0.clone(),
        );
        let again = next_status(
            &first,
            Some(1),
            "r1",
            &PassOutcome::Applied(vec![], vec![]),
            at("2026-01-01T00:05:00Z"),
        );
        assert_eq!(again, first);
        assert_eq!(first.conditions[0].last_transition_time, t0);
        assert_eq!(first.applied_revision.as_deref(), Some("r1"));
    }

    #[test]
    fn a_shared_pass_reports_the_rendering_it_applied_or_failed_and_keeps_it_otherwise() {
        let t = at("2026-01-01T00:00:00Z");
        // Each rendering under the same own items is its own revision.
        let status = |current: &NodeNetworkConfigStatus, outcome: &PassOutcome, r: Option<&str>| {
            let revision = format!("e-{}", r.unwrap_or("whole"));
            let mut next = next_status(current, Some(1), &revision, outcome, t.clone());
            shared_status(&mut next, outcome, &revision, r);
            next
        };
        let applied = status(
            &NodeNetworkConfigStatus::default(),
            &PassOutcome::Applied(vec![], vec![]),
            Some("r-a"),
        );
        assert!(
            applied.shared_renderings,
            "this agent reads shared renderings"
        );
        assert_eq!(applied.applied_rendering.as_deref(), Some("r-a"));
        // The same again: the same status (a quiet pass writes nothing).
        assert_eq!(
            status(&applied, &PassOutcome::Applied(vec![], vec![]), Some("r-a")),
            applied
        );
        // Not applied completely: what it reported stands.
        let partly = status(
            &applied,
            &PassOutcome::Applied(vec![err("route x")], vec![]),
            Some("r-b"),
        );
        assert_eq!(partly.applied_rendering.as_deref(), Some("r-a"));
        let failure = Failure {
            revision: "e-r-b".into(),
            reason: conditions::degraded::PROBE_FAILED,
            message: "ping failed".into(),
        };
        let failed = status(&applied, &PassOutcome::RolledBack(failure), Some("r-b"));
        assert_eq!(
            (
                failed.applied_rendering.as_deref(),
                failed.failed_rendering.as_deref()
            ),
            (Some("r-a"), Some("r-b"))
        );
        // A whole per-node object: no rendering.
        let whole = status(&failed, &PassOutcome::Applied(vec![], vec![]), None);
        assert_eq!(
            (whole.applied_rendering, whole.failed_rendering),
            (None, None)
        );
    }

    #[test]
    fn a_wave_reports_its_new_rendering_spread_and_a_failure_at_once() {
        let spread = Duration::from_millis(500);
        let delays: Vec<Duration> = (0..1000)
            .map(|i| report_delay(&format!("node-{i:04}"), spread))
            .collect();
        assert!(delays.iter().all(|d| *d < spread), "within the spread");
        // Spread over it, not bunched: each fifth of it holds some of a wave's agents.
        let fifths: std::collections::BTreeSet<u128> =
            delays.iter().map(|d| d.as_millis() / 100).collect();
        assert_eq!(fifths, (0..5).collect::<std::collections::BTreeSet<u128>>());
        // The same node waits the same (a restarted agent keeps its place).
        assert_eq!(report_delay("node-0007", spread), delays[7]);
        assert_eq!(report_delay("node-0007", Duration::ZERO), Duration::ZERO);
        let was = NodeNetworkConfigStatus {
            applied_rendering: Some("r-a".into()),
            ..NodeNetworkConfigStatus::default()
        };
        let new = NodeNetworkConfigStatus {
            applied_rendering: Some("r-b".into()),
            ..was.clone()
        };
        assert!(reports_new_rendering(&was, &new));
        assert!(!reports_new_rendering(&new, &new), "nothing new");
        let failed = NodeNetworkConfigStatus {
            failed_rendering: Some("r-c".into()),
            ..was.clone()
        };
        assert!(
            !reports_new_rendering(&was, &failed),
            "a failure is told at once"
        );
        let whole = NodeNetworkConfigStatus::default();
        assert!(
            !reports_new_rendering(&was, &whole),
            "a per-node object: no rendering"
        );
    }

    #[test]
    fn last_transition_time_moves_only_when_the_condition_flips() {
        let t0 = at("2026-01-01T00:00:00Z");
        let t1 = at("2026-01-01T00:01:00Z");
        let t2 = at("2026-01-01T00:02:00Z");
        let ok = next_status(
            &NodeNetworkConfigStatus::default(),
            Some(1),
            "r1",
            &PassOutcome::Applied(vec![], vec![]),
            t0,
        );
        // A new revision that also applies: same status, same transition time.
        let ok2 = next_status(
            &ok,
            Some(2),
            "r2",
            &PassOutcome::Applied(vec![], vec![]),
            t1.clone(),
        );
        assert_eq!(
            ok2.conditions[0].last_transition_time,
            ok.conditions[0].last_transition_time
        );
        // A failure flips it, and keeps the last complete revision.
        let bad = next_status(
            &ok2,
            Some(3),
            "r3",
            &PassOutcome::Applied(vec![err("add route 10.21.0.0/16 table 100")], vec![]),
            t1.clone(),
        );
        assert_eq!(bad.conditions[0].status, "False");
        assert_eq!(bad.conditions[0].reason, reasons::ITEMS_NOT_APPLIED);
        assert_eq!(bad.conditions[0].last_transition_time, t1);
        assert_eq!(bad.applied_revision.as_deref(), Some("r2"));
        assert_eq!(bad.item_errors.len(), 1);
        // The same failure again: nothing changes.
        let bad2 = next_status(
            &bad,
            Some(3),
            "r3",
            &PassOutcome::Applied(vec![err("add route 10.21.0.0/16 table 100")], vec![]),
            t2,
        );
        assert_eq!(bad2, bad);
    }

    #[test]
    fn an_invalid_spec_is_not_applied_and_says_why() {
        let s = next_status(
            &NodeNetworkConfigStatus::default(),
            Some(4),
            "r4",
            &PassOutcome::Invalid("spec.routes[0].to: bad".into()),
            at("2026-01-01T00:00:00Z"),
        );
        assert_eq!(s.conditions[0].status, "False");
        assert_eq!(s.conditions[0].reason, reasons::INVALID);
        assert!(s.conditions[0].message.contains("spec.routes[0].to"));
        assert_eq!(s.applied_revision, None);
    }

    fn route_subject(to: &str) -> Subject {
        Subject::Route(netpolicy_core::model::RouteKey {
            table: 100,
            to: to.parse().unwrap(),
            metric: 0,
        })
    }

    #[test]
    fn a_storm_of_notifications_delays_passes_and_a_fought_object_starts_none() {
        use netpolicy_netlink::monitor::{Action, Batch, Change, Object};
        let route = |to: &str, port: u32| {
            Batch::Changes(vec![Change {
                object: Object::Route,
                action: Action::Deleted,
                port,
                owned: true,
                table: Some(100),
                what: format!("route {to} table 100"),
                subject: Some(route_subject(to)),
            }])
        };
        let mut t = Trigger::default();
        let none = std::collections::BTreeSet::new();
        let t0 = Instant::now();
        assert_eq!(
            t.on_batch(&route("10.1.0.0/16", 7), 7, &[], &none, t0),
            KernelTrigger::Nothing,
            "our own write"
        );
        let fought = std::collections::BTreeSet::from([route_subject("10.9.0.0/16")]);
        assert_eq!(
            t.on_batch(&route("10.9.0.0/16", 9), 7, &[], &fought, t0),
            KernelTrigger::Nothing,
            "fought over: its look, not a pass"
        );
        // The burst, then the rate: later, never dropped.
        let burst = netpolicy_netlink::monitor::Budget::BURST as usize;
        for _ in 0..burst {
            assert!(matches!(
                t.on_batch(&route("10.1.0.0/16", 9), 7, &[], &fought, t0),
                KernelTrigger::Now(_)
            ));
        }
        assert!(matches!(
            t.on_batch(&route("10.2.0.0/16", 9), 7, &[], &fought, t0),
            KernelTrigger::Later(_)
        ));
        let due = t.deferred().expect("a pass is due");
        assert!(due - t0 <= Duration::from_millis(20), "{:?}", due - t0);
        t.fire(due);
        assert_eq!(t.deferred(), None);
    }

    #[test]
    fn repairs_are_told_at_most_once_a_minute_naming_what_was_restored() {
        let mut r = Repairs::default();
        let t0 = Instant::now();
        let route = (
            route_subject("10.20.0.0/16"),
            "route 10.20.0.0/16 table 100 removed or changed by someone, restored".to_owned(),
        );
        assert_eq!(r.next_event(), None, "nothing to tell");
        r.record(t0, std::slice::from_ref(&route));
        let (reason, note) = r.event_due(t0).expect("the first one at once");
        assert_eq!(reason, conditions::events::DRIFT_REPAIRED);
        assert_eq!(note, route.1);
        // A flusher every second: no Event for a minute, then one that counts them.
        for k in 1..60 {
            let t = t0 + Duration::from_secs(k);
            r.record(
                t,
                &[(
                    route_subject(&format!("10.{k}.0.0/16")),
                    format!("route 10.{k}.0.0/16 removed, restored"),
                )],
            );
            assert_eq!(r.event_due(t), None, "second {k}");
        }
        assert_eq!(r.next_event(), Some(t0 + Repairs::EVENT_EVERY));
        let (_, note) = r
            .event_due(t0 + Repairs::EVENT_EVERY)
            .expect("a minute later");
        assert!(
            note.starts_with("route 10.1.0.0/16 removed, restored; route 10.2.0.0/16"),
            "{note}"
        );
        assert!(note.ends_with("and 55 more"), "{note}");
        assert_eq!(r.next_event(), None);
    }

    #[test]
    fn an_object_restored_again_and_again_is_a_fight_until_a_pass_finds_it_intact() {
        let mut r = Repairs::default();
        let t0 = Instant::now();
        let route = (route_subject("10.20.0.0/16"), "route … restored".to_owned());
        for k in 0..conditions::fighting::AFTER - 1 {
            r.record(
                t0 + Duration::from_secs(k as u64),
                std::slice::from_ref(&route),
            );
        }
        assert!(r.fighting().is_empty(), "not yet");
        let t = t0 + Duration::from_secs(20);
        r.record(t, std::slice::from_ref(&route));
        assert!(r.fighting().contains(&route.0));
        assert_eq!(r.next_check(), Some(t + Repairs::CHECK_FIRST), "backs off");
        let c = fighting_condition(
            &NodeNetworkConfigStatus::default(),
            r.fighting(),
            Some(1),
            &at("2026-01-01T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", conditions::fighting::FIGHTING)
        );
        assert!(
            c.message.contains("route 10.20.0.0/16 table 100"),
            "{}",
            c.message
        );
        // The fight is told as a Warning, in the next Event (still at most one a minute).
        let _ = r.event_due(t);
        r.record(t + Duration::from_secs(1), std::slice::from_ref(&route));
        let (reason, note) = r.event_due(t + Repairs::EVENT_EVERY).unwrap();
        assert_eq!(reason, conditions::events::FIGHTING);
        assert!(note.contains("route 10.20.0.0/16 table 100"), "{note}");
        // A resync still repairing it: still a fight, told no more than once a minute.
        r.record(t + Duration::from_secs(61), std::slice::from_ref(&route));
        assert!(!r.fighting().is_empty());
        assert_eq!(
            r.next_check(),
            Some(t + Repairs::CHECK_FIRST),
            "a resync does not move the look"
        );
        let look = t + Repairs::CHECK_FIRST;
        r.look_again(look);
        assert_eq!(
            r.next_check(),
            Some(look + Repairs::CHECK_FIRST * 2),
            "each look later than the one before"
        );
        r.look_again(look + Repairs::CHECK_FIRST * 2);
        assert_eq!(
            r.next_check(),
            Some(look + Repairs::CHECK_FIRST * 6),
            "doubling"
        );
        // A pass another object's notification started finds it intact between two of
        // the peer's changes: that is no look, the fight goes on.
        r.record_unasked(
            t + Duration::from_secs(120),
            &[(route_subject("10.30.0.0/16"), "route … restored".to_owned())],
        );
        assert!(r.fighting().contains(&route.0), "still fought over");
        // A look right after such a pass restored it finds it intact: that is no proof
        // the peer stopped, the fight goes on.
        r.record_unasked(
            t + Duration::from_millis(120_500),
            std::slice::from_ref(&route),
        );
        r.record(t + Duration::from_millis(120_600), &[]);
        assert!(r.fighting().contains(&route.0), "intact for 100 ms only");
        // A look that finds it intact, nothing having restored it for a while, ends it;
        // the condition turns False, once.
        r.record(t + Duration::from_secs(130), &[]);
        assert!(r.fighting().is_empty());
        assert_eq!(r.next_check(), None);
        let status = NodeNetworkConfigStatus {
            conditions: vec![c],
            ..NodeNetworkConfigStatus::default()
        };
        let c2 = fighting_condition(&status, r.fighting(), Some(1), &at("2026-01-01T00:02:00Z"))
            .unwrap();
        assert_eq!(
            (c2.status.as_str(), c2.reason.as_str()),
            ("False", conditions::fighting::STOPPED)
        );
        assert_eq!(
            fighting_condition(
                &NodeNetworkConfigStatus::default(),
                r.fighting(),
                Some(1),
                &at("2026-01-01T00:00:00Z")
            ),
            None,
            "a node that never fought has none"
        );
    }

    #[test]
    fn an_address_added_unprobed_is_listed_until_probed_or_no_longer_desired() {
        use netpolicy_netlink::OpResult;
        let spec: RoutingSpec = serde_json::from_value(serde_json::json!({
            "addresses": [
                {"dev": "eth1", "address": "192.0.2.7/24"},
                {"dev": "eth2", "address": "198.51.100.7/24"}
            ]
        }))
        .unwrap();
        let desired = spec.validate("spec").unwrap();
        let add = |dev: &str, a: &str| Op::AddAddress {
            dev: netpolicy_core::model::IfName::new(dev).unwrap(),
            address: a.parse().unwrap(),
        };
        let report = |results: Vec<OpResult>| Report {
            results,
            ..Report::default()
        };
        let mut np = NotProbed::default();
        np.record(
            &report(vec![
                OpResult {
                    op: add("eth1", "192.0.2.7/24"),
                    outcome: Outcome::Unprobed {
                        why: "eth1 is down".into(),
                    },
                },
                OpResult {
                    op: add("eth2", "198.51.100.7/24"),
                    outcome: Outcome::Done,
                },
            ]),
            &desired,
        );
        assert_eq!(np.lines(), ["address 192.0.2.7/24 dev eth1: eth1 is down"]);
        // A pass with nothing to add keeps it listed (the address is still unchecked).
        np.record(&report(vec![]), &desired);
        assert_eq!(np.lines().len(), 1);
        // Probed when added again (removed by someone, the link up): no longer listed.
        np.record(
            &report(vec![OpResult {
                op: add("eth1", "192.0.2.7/24"),
                outcome: Outcome::Done,
            }]),
            &desired,
        );
        assert!(np.lines().is_empty());
        // No longer desired: no longer listed.
        np.record(
            &report(vec![OpResult {
                op: add("eth1", "192.0.2.7/24"),
                outcome: Outcome::Unprobed {
                    why: "eth1 is down".into(),
                },
            }]),
            &desired,
        );
        np.record(&report(vec![]), &RoutingConfig::default());
        assert!(np.lines().is_empty());
    }

    #[test]
    fn a_repair_line_says_what_someone_did_and_whether_it_was_restored() {
        let spec: RoutingSpec = serde_json::from_value(serde_json::json!({
            "routes": [{"to": "10.20.0.0/16", "via": "192.0.2.1", "table": 100}]
        }))
        .unwrap();
        let r = spec.validate("spec").unwrap().routes[0].clone();
        let line = repair_line(&Op::ReplaceRoute(r.clone()), None);
        assert!(
            line.starts_with("route 10.20.0.0/16")
                && line.ends_with("removed or changed by someone, restored"),
            "{line}"
        );
        let line = repair_line(&Op::ReplaceRoute(r), Some("Network is unreachable"));
        assert!(
            line.ends_with("not restored: Network is unreachable"),
            "{line}"
        );
        let line = repair_line(
            &Op::SetUp(netpolicy_core::model::IfName::new("vlan100").unwrap()),
            None,
        );
        assert_eq!(line, "link vlan100 set down by someone, set up again");
    }

    #[test]
    fn a_duplicate_address_is_an_item_error_naming_the_other_hosts_mac() {
        let address: ipnetwork::IpNetwork = "10.88.0.2/24".parse().unwrap();
        let report = Report {
            results: vec![netpolicy_netlink::OpResult {
                op: Op::AddAddress {
                    dev: netpolicy_core::model::IfName::new("eth1").unwrap(),
                    address,
                },
                outcome: Outcome::Duplicate {
                    by: Some("02:00:00:00:00:02".into()),
                },
            }],
            ..Report::default()
        };
        let errors = item_errors(&report, &RoutingConfig::default());
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].reason, item::DUPLICATE_ADDRESS);
        assert_eq!(errors[0].item, "add address 10.88.0.2/24 dev eth1");
        assert!(
            errors[0].message.contains("MAC 02:00:00:00:00:02"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn foreign_removals_are_reported_and_kept_until_the_next_ones() {
        let t = at("2026-01-01T00:00:00Z");
        let removed = vec!["delete route 10.98.0.0/16 table 100 via 192.0.2.1 proto 3".to_owned()];
        let s1 = next_status(
            &NodeNetworkConfigStatus::default(),
            Some(1),
            "r1",
            &PassOutcome::Applied(vec![], removed.clone()),
            t.clone(),
        );
        assert_eq!(s1.removed_foreign, removed);
        // A quiet pass changes nothing: the same status, nothing to write.
        let s2 = next_status(&s1, Some(1), "r1", &PassOutcome::Applied(vec![], vec![]), t);
        assert_eq!(s2, s1);
    }
}
