//! What a shared NodeNetworkConfig (`spec.shared`, issue 68) runs: the agent's own
//! choice of its group's rendering ([`netpolicy_core::fleet::choose`], from its Node's
//! labels, the NetworkFleet and its group's NetworkRollouts), the rendering and its
//! layers each read once by its label (they never change), and the node's own items
//! laid over them
//! ([`crate::api::NodeNetworkConfigSpec::effective`]).
//!
//! The agent watches three things, none of which grows with the node count: its Node's
//! metadata and the NetworkFleet, each by name, and the NetworkRollouts labelled with its
//! own group ([`crate::api::group_label`]): a wave of a change that moves other groups
//! never reaches it. Its group follows from its labels and the fleet's policies; when it
//! changes, the rollout watch is started again on the new group.
//!
//! Until the agent knows its labels, the fleet, its group's rollouts and the rendering,
//! a shared object is not applied: the node keeps what it runs (the last good config).
//! A group with neither a rollout nor a settled rendering keeps the rendering the node
//! last ran.

use std::collections::BTreeMap;

use futures::{StreamExt, stream::BoxStream};
use kube::{
    Api, ResourceExt,
    api::ListParams,
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher, watcher::Event},
};
use netpolicy_core::{
    fleet::{PolicySelector, choose},
    selector::Labels,
};
use tracing::{info, warn};

use crate::api::{
    FLEET_NAME, Joined, NetworkFleet, NetworkFleetSpec, NetworkRollout, NetworkRolloutSpec,
    NodeNetworkConfig, NodeNetworkRendering, RENDERING_LABEL, SeenRollouts, delta_name, delta_to,
    group_label, join,
};

type NodeMeta = PartialObjectMeta<k8s_openapi::api::core::v1::Node>;

/// A change of what a shared object's pick reads: the agent's Node (metadata), the
/// NetworkFleet, or a NetworkRollout of the group its watch follows.
#[derive(Debug)]
pub(crate) enum Changed {
    Node(Event<NodeMeta>),
    Fleet(Event<NetworkFleet>),
    Rollout(String, Event<NetworkRollout>),
}

/// The NetworkRollouts of one group at a time: a task that watches those labelled with
/// the group it is given (and starts again when it is given another), sending their
/// events tagged with the group.
fn follow_rollouts(
    client: &kube::Client,
) -> (
    tokio::sync::watch::Sender<Option<String>>,
    BoxStream<'static, Changed>,
) {
    let (group_tx, mut group_rx) = tokio::sync::watch::channel(None::<String>);
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let api = Api::<NetworkRollout>::all(client.clone());
    tokio::spawn(async move {
        loop {
            let group = group_rx.borrow_and_update().clone();
            let mut events = match &group {
                Some(g) => {
                    let cfg = watcher::Config::default().labels(&group_label(g));
                    watcher(api.clone(), cfg).default_backoff().boxed()
                }
                None => futures::stream::pending().boxed(),
            };
            loop {
                tokio::select! {
                    changed = group_rx.changed() => {
                        if changed.is_err() {
                            return; // The agent stopped.
                        }
                        break;
                    }
                    ev = events.next() => {
                        let sent = match (ev, &group) {
                            (Some(Ok(ev)), Some(g)) => tx.send(Changed::Rollout(g.clone(), ev)).await.is_ok(),
                            (Some(Err(e)), _) => {
                                warn!(error = %e, "NetworkRollout watch error (retrying)");
                                true
                            }
                            _ => true,
                        };
                        if !sent {
                            return; // The agent stopped.
                        }
                    }
                }
            }
        }
    });
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
    (group_tx, stream.boxed())
}

/// Renderings and layers kept after they were read (the current one with its layers,
/// and those a rollback or the next wave would want).
const KEEP: usize = 8;

/// What the agent knows of the shared objects.
#[derive(Debug)]
pub(crate) struct FleetView {
    /// Where renderings are read.
    api: Api<NodeNetworkRendering>,
    /// The node (its group follows from its name and labels).
    node: String,
    /// What the last pass ran (a shared object's rendering under its own items, and the
    /// rendering): kept while a new pick cannot be made, so that drift is still
    /// repaired.
    ran: Option<(NodeNetworkConfig, Option<String>)>,
    /// Its Node's labels (`None`: not seen yet).
    labels: Option<Labels>,
    /// The NetworkFleet (`None`: not seen yet, or deleted).
    fleet: Option<NetworkFleetSpec>,
    /// The fleet's policy index ([`NetworkFleetSpec::index`]), made when the fleet
    /// changes rather than on every pick.
    index: Vec<PolicySelector>,
    /// The node's group, once its labels and the fleet are known.
    group: Option<String>,
    /// Where the rollout watch is told the group to follow.
    follow: Option<tokio::sync::watch::Sender<Option<String>>>,
    /// The rollouts of the group listed last ([`Self::listed`]), as the fleet needs
    /// them: one deleted before this agent saw the fleet that folds it still counts.
    rollouts: SeenRollouts,
    /// The group whose rollouts were listed (`None`: none yet).
    listed: Option<String>,
    /// Rollouts of a list in progress.
    listing: Option<BTreeMap<String, NetworkRolloutSpec>>,
    /// Renderings read, by name, with the order they were last used in.
    renderings: BTreeMap<String, (u64, Joined)>,
    used: u64,
    /// The last rendering laid over its layers ([`Joined::lay`]): a pass on the same
    /// rendering does not lay it again.
    laid: Option<Joined>,
    /// The rendering the node runs (what a group without a rendering keeps).
    running: Option<String>,
    /// The last reason a shared object was not applied (logged once).
    told: Option<String>,
}

/// What a shared object runs now.
#[derive(Debug)]
enum Effective {
    /// Apply this (the object with its rendering laid under its own items), from this
    /// rendering.
    Run(Box<NodeNetworkConfig>, Option<String>),
    /// Not yet (why is logged once).
    Wait,
}

impl FleetView {
    /// Nothing known yet about node `node`; renderings read through `client`.
    pub(crate) fn new(client: kube::Client, node: &str) -> Self {
        Self {
            api: Api::all(client),
            node: node.to_owned(),
            ran: None,
            labels: None,
            fleet: None,
            index: Vec::new(),
            group: None,
            follow: None,
            rollouts: SeenRollouts::default(),
            listed: None,
            listing: None,
            renderings: BTreeMap::new(),
            used: 0,
            laid: None,
            running: None,
            told: None,
        }
    }

    /// The watches of what a shared object's pick reads: the node's metadata and the
    /// NetworkFleet, each by its name, and the rollouts of the node's group (errors are
    /// logged; the watches retry with backoff).
    pub(crate) fn watch(&mut self, client: &kube::Client) -> BoxStream<'static, Changed> {
        let by_name = |n: &str| watcher::Config::default().fields(&format!("metadata.name={n}"));
        let nodes = watcher(Api::<NodeMeta>::all(client.clone()), by_name(&self.node))
            .default_backoff()
            .map(|e| e.map(Changed::Node));
        let fleets = watcher(
            Api::<NetworkFleet>::all(client.clone()),
            by_name(FLEET_NAME),
        )
        .default_backoff()
        .map(|e| e.map(Changed::Fleet));
        let named = futures::stream::select(nodes, fleets).filter_map(|e| async move {
            e.map_err(|e| warn!(error = %e, "Node or NetworkFleet watch error (retrying)"))
                .ok()
        });
        let (follow, rollouts) = follow_rollouts(client);
        self.follow = Some(follow);
        futures::stream::select(named, rollouts).boxed()
    }

    /// Takes a change; whether it may change what a shared object runs.
    pub(crate) fn on(&mut self, ev: &Changed) -> bool {
        let changed = match ev {
            Changed::Node(e) => self.on_node(e),
            Changed::Fleet(e) => {
                let changed = self.on_fleet(e);
                self.rollouts.fleet_seen(self.fleet.as_ref());
                changed
            }
            Changed::Rollout(g, e) => return self.on_rollout(g, e),
        };
        if changed {
            self.regroup();
        }
        changed
    }

    /// The node's group from its labels and the fleet; the rollout watch follows it.
    fn regroup(&mut self) {
        let (Some(labels), Some(_)) = (&self.labels, &self.fleet) else {
            return;
        };
        let group = choose(&self.node, labels, &self.index, &[]).group;
        if self.group.as_ref() == Some(&group) {
            return;
        }
        info!(group = %group, "following the rollouts of this node's group");
        self.group = Some(group.clone());
        if let Some(f) = &self.follow {
            f.send_replace(Some(group));
        }
    }

    /// Takes a watch event of a rollout of `group`; whether what the group's rollouts
    /// say changed.
    fn on_rollout(&mut self, group: &str, ev: &Event<NetworkRollout>) -> bool {
        if self.group.as_deref() != Some(group) {
            return false; // From the watch of a group the node left.
        }
        match ev {
            Event::Init => {
                self.listing = Some(BTreeMap::new());
                false
            }
            Event::InitApply(r) => {
                if let Some(l) = &mut self.listing {
                    l.insert(r.name_any(), r.spec.clone());
                }
                false
            }
            Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                if self.listed.as_deref() != Some(group) {
                    self.rollouts.clear();
                }
                let changed = self.rollouts.listed(listed, self.fleet.as_ref());
                let first = self.listed.as_deref() != Some(group);
                self.listed = Some(group.to_owned());
                changed || first
            }
            Event::Apply(r) => self.rollouts.applied(&r.name_any(), &r.spec),
            Event::Delete(r) => self.rollouts.deleted(&r.name_any(), self.fleet.as_ref()),
        }
    }

    /// What the last pass ran, if any.
    pub(crate) fn ran(&self) -> Option<&NodeNetworkConfig> {
        self.ran.as_ref().map(|(o, _)| o)
    }

    /// The report spread the fleet gives ([`NetworkFleetSpec::report_spread`]; no fleet
    /// seen yet: the least).
    pub(crate) fn report_spread(&self) -> std::time::Duration {
        self.fleet.as_ref().map_or(
            std::time::Duration::from_millis(u64::from(
                netpolicy_core::fleet::MIN_REPORT_SPREAD_MS,
            )),
            NetworkFleetSpec::report_spread,
        )
    }

    /// A pass ran `run` (from `rendering`, for a shared object).
    pub(crate) fn record(&mut self, run: NodeNetworkConfig, rendering: Option<String>) {
        if rendering.is_some() {
            self.running.clone_from(&rendering);
        }
        self.ran = Some((run, rendering));
    }

    /// What a pass over `nnc` runs, and from which rendering: [`Self::effective`], or
    /// what the last pass ran while no pick can be made; `None`: nothing yet.
    pub(crate) async fn what_runs(
        &mut self,
        nnc: &NodeNetworkConfig,
    ) -> Option<(NodeNetworkConfig, Option<String>)> {
        if self.running.is_none() {
            // A restarted agent runs what its status says it applied.
            self.running = nnc
                .status
                .as_ref()
                .and_then(|s| s.applied_rendering.clone());
        }
        match self.effective(nnc).await {
            Effective::Run(o, r) => Some((*o, r)),
            // The same object: keep running what it ran.
            Effective::Wait => self.ran.clone().filter(|(o, _)| o.uid() == nnc.uid()),
        }
    }

    /// Takes a watch event of the agent's Node (metadata); whether its labels changed.
    fn on_node(&mut self, ev: &Event<NodeMeta>) -> bool {
        let labels = match ev {
            Event::Apply(n) | Event::InitApply(n) => n.labels().clone(),
            Event::Delete(_) => return false,
            Event::Init | Event::InitDone => return false,
        };
        if self.labels.as_ref() == Some(&labels) {
            return false;
        }
        self.labels = Some(labels);
        true
    }

    /// Takes a watch event of the NetworkFleet; whether it changed.
    fn on_fleet(&mut self, ev: &Event<NetworkFleet>) -> bool {
        let next = match ev {
            Event::Apply(f) | Event::InitApply(f) => Some(f.spec.clone()),
            Event::Delete(_) => None,
            Event::Init | Event::InitDone => return false,
        };
        if self.fleet == next {
            return false;
        }
        self.index = next
            .as_ref()
            .map(NetworkFleetSpec::index)
            .unwrap_or_default();
        self.fleet = next;
        true
    }

    /// The rendering the node runs now, from what the agent knows (`Ok(None)`: its
    /// group has neither a rollout nor a settled rendering and it runs nothing shared
    /// yet).
    ///
    /// # Errors
    /// Why it cannot tell: its labels, the fleet or its group's rollouts not seen yet, a
    /// rollout field that does not parse.
    pub(crate) fn pick(&self) -> Result<Option<String>, String> {
        let labels = self
            .labels
            .as_ref()
            .ok_or_else(|| format!("the labels of Node {} are not known yet", self.node))?;
        let fleet = self
            .fleet
            .as_ref()
            .ok_or_else(|| "the NetworkFleet is not there (yet)".to_owned())?;
        let group = self.group.as_deref().unwrap_or_default();
        if self.listed.as_deref() != Some(group) {
            return Err(format!(
                "the NetworkRollouts of group {group} are not listed yet"
            ));
        }
        // Its group's entries only (the group `regroup` found from the same labels and
        // fleet): the same choice, without a copy of every group's each pass.
        let rollouts = self
            .rollouts
            .current_of(group, Some(fleet))
            .map_err(|e| e.to_string())?;
        let choice = choose(&self.node, labels, &self.index, &rollouts);
        Ok(choice.rendering.or_else(|| self.running.clone()))
    }

    /// What `nnc` runs now: itself when it is not shared; else its rendering (read
    /// once, by its label) with its own items laid over it.
    async fn effective(&mut self, nnc: &NodeNetworkConfig) -> Effective {
        if !nnc.spec.shared {
            return Effective::Run(Box::new(nnc.clone()), None);
        }
        let name = match self.pick() {
            Ok(Some(name)) => name,
            Ok(None) => {
                return self.wait(
                    "neither a rollout nor a settled rendering for this node's group yet"
                        .to_owned(),
                );
            }
            Err(why) => return self.wait(why),
        };
        if let Err(why) = self.read(&name).await {
            return self.wait(why);
        }
        let layers = self
            .renderings
            .get(&name)
            .map(|(_, j)| j.layers.clone())
            .unwrap_or_default();
        for layer in &layers {
            if let Err(why) = self.read_layer(layer).await {
                return self.wait(why);
            }
        }
        let laid = match self.renderings.get(&name) {
            _ if self.laid.as_ref().is_some_and(|j| j.rendering == name) => Ok(None),
            Some((_, joined)) => joined
                .lay(|n| self.renderings.get(n).map(|(_, j)| j))
                .map(Some),
            None => return self.wait(format!("rendering {name}: not kept")),
        };
        // The least recently used go, never what this pass read.
        while self.renderings.len() > KEEP {
            let oldest = self
                .renderings
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(n, _)| n.clone());
            if let Some(n) = oldest {
                self.renderings.remove(&n);
            }
        }
        match laid {
            Ok(Some(j)) => self.laid = Some(j),
            Ok(None) => {}
            Err(e) => return self.wait(e.to_string()),
        }
        let Some(joined) = &self.laid else {
            return self.wait(format!("rendering {name}: not laid"));
        };
        self.told = None;
        let mut out = nnc.clone();
        out.spec = nnc.spec.effective(joined);
        Effective::Run(Box::new(out), Some(name))
    }

    /// Rendering or layer `name`, read (once, by its label: it never changes) and kept
    /// as the last used; why not when it cannot be read whole.
    async fn read(&mut self, name: &str) -> Result<(), String> {
        self.used += 1;
        let used = self.used;
        if let Some((at, _)) = self.renderings.get_mut(name) {
            *at = used;
            return Ok(());
        }
        let joined = list_labelled(&self.api, name, |parts| {
            join(name, parts.iter().map(|p| &p.spec)).map(|j| (j, parts.len()))
        })
        .await
        .map_err(|e| format!("reading rendering {name}: {e}"))?;
        let (joined, parts) = joined.map_err(|e| e.to_string())?;
        info!(rendering = %name, parts, layers = joined.layers.len(), "rendering read");
        self.renderings.insert(name.to_owned(), (used, joined));
        Ok(())
    }

    /// Layer `name`: built from its delta ([`delta_name`]) when this agent holds the
    /// layer the delta is from (a few items read instead of the layer whole, checked
    /// against the layer's content address by [`Joined::from_delta`]); else read whole.
    async fn read_layer(&mut self, name: &str) -> Result<(), String> {
        let holds_a_layer = self.renderings.keys().any(|k| k.starts_with("l-"));
        if !self.renderings.contains_key(name)
            && holds_a_layer
            && let Some(layer) = self.built_from_delta(name).await
        {
            self.used += 1;
            self.renderings.insert(name.to_owned(), (self.used, layer));
            return Ok(());
        }
        self.read(name).await
    }

    /// Layer `name` from its delta and the layer it is from, when there is one and this
    /// agent holds that layer; `None` otherwise (the layer is then read whole).
    async fn built_from_delta(&self, name: &str) -> Option<Joined> {
        // By its label, as renderings are read (the agent's role lists them).
        let found = list_labelled(&self.api, &delta_name(name), |objects| {
            delta_to(objects.iter().map(|o| &o.spec), name)
                .cloned()
                .ok_or(())
        })
        .await;
        let delta = match found {
            Ok(Ok(delta)) => delta,
            Ok(Err(())) => return None,
            Err(e) => {
                warn!(layer = %name, "reading the layer's delta: {e}; reading the layer whole");
                return None;
            }
        };
        let (_, base) = self.renderings.get(&delta.from)?;
        match Joined::from_delta(&delta, base) {
            Ok(layer) => {
                info!(layer = %name, from = %delta.from, "layer built from its delta");
                Some(layer)
            }
            Err(e) => {
                warn!("{e}; reading the layer whole");
                None
            }
        }
    }

    fn wait(&mut self, why: String) -> Effective {
        if self.told.as_ref() != Some(&why) {
            warn!("shared NodeNetworkConfig not applied yet (the node keeps what it runs): {why}");
            self.told = Some(why);
        }
        Effective::Wait
    }
}

/// The NodeNetworkRenderings labelled `netpolicy.io/rendering: <value>` (a rendering's
/// parts, a layer's delta), given to `complete`: first as the API server's watch cache
/// holds them (`resourceVersion=0`: no read of etcd), and only when `complete` refuses
/// that, once more as a consistent read. Renderings and deltas never change once written
/// (each is named by its content), so a cache behind etcd can only lack some objects,
/// never hold other content under their names: what `complete` accepts from it is what
/// etcd holds. One wave's agents all read the same few objects; a consistent list costs
/// the API server a read of etcd each (issue 68, benches/README.md).
///
/// ```no_run
/// # async fn read(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use kube::Api;
/// use netpolicy_operator::{
///     api::{NodeNetworkRendering, join},
///     list_labelled,
/// };
/// let api: Api<NodeNetworkRendering> = Api::all(client);
/// let name = "r-0123456789abcdef";
/// // Whole or not at all: a part missing from the cache sends it to etcd.
/// let rendering = list_labelled(&api, name, |parts| {
///     join(name, parts.iter().map(|p| &p.spec))
/// })
/// .await??;
/// println!("{name}: {} routes", rendering.rendered.routes.len());
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// The consistent list's error (the cached list's only sends it to the consistent one).
pub async fn list_labelled<T, E>(
    api: &Api<NodeNetworkRendering>,
    value: &str,
    complete: impl Fn(&[NodeNetworkRendering]) -> Result<T, E>,
) -> kube::Result<Result<T, E>> {
    let lp = ListParams::default().labels(&format!("{RENDERING_LABEL}={value}"));
    if let Ok(cached) = api.list(&lp.clone().match_any()).await
        && let Ok(t) = complete(&cached.items)
    {
        return Ok(Ok(t));
    }
    Ok(complete(&api.list(&lp).await?.items))
}

#[cfg(test)]
mod tests {
    use netpolicy_core::fleet::group_name;

    use super::*;
    use crate::api::{FleetGroup, FleetPolicy, RolloutGroup};

    fn edge() -> String {
        group_name(["NodeConfig/edge"])
    }

    fn fleet() -> NetworkFleetSpec {
        NetworkFleetSpec {
            policies: vec![FleetPolicy {
                policy: "NodeConfig/edge".into(),
                node_selector: netpolicy_core::spec::LabelSelector {
                    match_labels: [("role".to_owned(), "edge".to_owned())].into(),
                    ..Default::default()
                },
            }],
            groups: vec![FleetGroup {
                group: edge(),
                rendering: "r-old".into(),
            }],
            sequence: 1,
            report_spread_ms: None,
        }
    }

    fn rollout(through: Option<&str>) -> NetworkRollout {
        NetworkRollout::new(
            "rollout-2",
            NetworkRolloutSpec {
                sequence: 2,
                groups: vec![RolloutGroup {
                    group: edge(),
                    rendering: "r-new".into(),
                    previous: Some("r-old".into()),
                    through: through.map(str::to_owned),
                }],
                rolled_back: false,
            },
        )
    }

    /// A view whose renderings would be read from nowhere (these tests read none).
    fn view() -> FleetView {
        let cfg = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        FleetView::new(kube::Client::try_from(cfg).unwrap(), "n1")
    }

    fn node(labels: &[(&str, &str)]) -> Changed {
        let mut n = NodeMeta::default();
        n.metadata.name = Some("n1".into());
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        Changed::Node(Event::Apply(n))
    }

    fn listed(v: &mut FleetView, group: &str, rollouts: &[NetworkRollout]) -> bool {
        v.on(&Changed::Rollout(group.into(), Event::Init));
        for r in rollouts {
            v.on(&Changed::Rollout(group.into(), Event::InitApply(r.clone())));
        }
        v.on(&Changed::Rollout(group.into(), Event::InitDone))
    }

    #[tokio::test]
    async fn the_report_spread_is_the_fleets() {
        let mut v = view();
        let least = std::time::Duration::from_millis(500);
        assert_eq!(v.report_spread(), least, "no fleet seen");
        assert!(v.on(&Changed::Fleet(Event::Apply(NetworkFleet::new(
            "default",
            fleet()
        )))));
        assert_eq!(v.report_spread(), least, "a fleet that gives none");
        let wide = NetworkFleetSpec {
            report_spread_ms: Some(5_000),
            ..fleet()
        };
        assert!(
            v.on(&Changed::Fleet(Event::Apply(NetworkFleet::new(
                "default", wide
            )))),
            "a new spread is a change"
        );
        assert_eq!(v.report_spread(), std::time::Duration::from_secs(5));
    }

    #[tokio::test]
    async fn the_pick_follows_labels_the_fleet_and_the_groups_rollouts() {
        let mut v = view();
        assert!(v.pick().unwrap_err().contains("labels"));
        assert!(v.on(&node(&[("role", "edge")])));
        assert!(v.pick().unwrap_err().contains("NetworkFleet"));
        assert!(v.on(&Changed::Fleet(Event::Apply(NetworkFleet::new(
            "default",
            fleet()
        )))));
        assert_eq!(v.group, Some(edge()));
        // Its group's rollouts not listed yet: it cannot tell (it keeps what it runs).
        assert!(v.pick().unwrap_err().contains("not listed yet"));
        assert!(listed(&mut v, &edge(), &[]));
        assert_eq!(v.pick(), Ok(Some("r-old".into())), "the settled rendering");
        assert!(v.on(&Changed::Rollout(edge(), Event::Apply(rollout(None)))));
        assert_eq!(v.pick(), Ok(Some("r-old".into())), "no wave open");
        assert!(
            !v.on(&Changed::Rollout(edge(), Event::Apply(rollout(None)))),
            "same spec"
        );
        assert!(v.on(&Changed::Rollout(edge(), Event::Apply(rollout(Some("*"))))));
        assert_eq!(v.pick(), Ok(Some("r-new".into())), "every wave open");
        assert!(v.on(&Changed::Rollout(
            edge(),
            Event::Apply(rollout(Some("bad")))
        )));
        assert!(v.pick().unwrap_err().contains("spec.groups[0].through"));
        assert!(v.on(&Changed::Rollout(edge(), Event::Apply(rollout(Some("*"))))));
        // Deleted before this agent saw the fleet that folds it in (the two come on
        // different watches): the node stays on the new rendering, not the old settled
        // one; the fleet that folds it takes over.
        assert!(!v.on(&Changed::Rollout(edge(), Event::Delete(rollout(None)))));
        assert_eq!(v.pick(), Ok(Some("r-new".into())), "not folded yet");
        let mut folded = fleet();
        folded.sequence = 2;
        folded.groups[0].rendering = "r-new".into();
        assert!(v.on(&Changed::Fleet(Event::Apply(NetworkFleet::new(
            "default",
            folded.clone()
        )))));
        assert!(v.rollouts.is_empty(), "folded in: forgotten");
        assert_eq!(v.pick(), Ok(Some("r-new".into())));
        // The other order: the fleet first, then the delete of what it folded.
        let mut next = rollout(Some("*"));
        next.spec.sequence = 3;
        next.metadata.name = Some("rollout-3".into());
        assert!(v.on(&Changed::Rollout(edge(), Event::Apply(next.clone()))));
        folded.sequence = 3;
        assert!(v.on(&Changed::Fleet(Event::Apply(NetworkFleet::new(
            "default",
            folded.clone()
        )))));
        assert!(v.on(&Changed::Rollout(edge(), Event::Delete(next.clone()))));
        assert!(v.rollouts.is_empty());
        // A rollout gone while the watch was away (a list without it) is deleted too:
        // kept until the fleet folds it.
        let mut gone = rollout(Some("*"));
        gone.spec.sequence = 4;
        gone.metadata.name = Some("rollout-4".into());
        assert!(v.on(&Changed::Rollout(edge(), Event::Apply(gone.clone()))));
        assert!(!listed(&mut v, &edge(), &[]), "relisted without it: kept");
        assert_eq!(v.pick(), Ok(Some("r-new".into())));
        folded.sequence = 4;
        v.on(&Changed::Fleet(Event::Apply(NetworkFleet::new(
            "default", folded,
        ))));
        assert!(v.rollouts.is_empty(), "folded in: forgotten");
        // Back to the first fleet for the rest.
        assert!(v.on(&Changed::Fleet(Event::Apply(NetworkFleet::new(
            "default",
            fleet()
        )))));
        assert_eq!(v.pick(), Ok(Some("r-old".into())));
        // Another group (no label): the rollout watch must list it first, and events of
        // the group it left are not taken.
        assert!(v.on(&node(&[])));
        assert_ne!(v.group, Some(edge()));
        assert!(!v.on(&Changed::Rollout(edge(), Event::Apply(rollout(Some("*"))))));
        assert!(v.pick().unwrap_err().contains("not listed yet"));
        let other = v.group.clone().unwrap();
        assert!(listed(&mut v, &other, &[]));
        assert_eq!(v.pick(), Ok(None), "nothing for its group, nothing run yet");
        v.running = Some("r-mine".into());
        assert_eq!(v.pick(), Ok(Some("r-mine".into())));
    }

    #[tokio::test]
    async fn node_and_fleet_events_count_only_changes() {
        let mut v = view();
        let f = NetworkFleet::new("default", fleet());
        assert!(v.on_fleet(&Event::Apply(f.clone())));
        assert!(!v.on_fleet(&Event::Apply(f.clone())), "same spec");
        assert!(!v.on_fleet(&Event::Init));
        assert!(v.on_fleet(&Event::Delete(f)));
        assert_eq!(v.fleet, None);
    }
}
