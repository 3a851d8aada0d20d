//! What a shared NodeNetworkConfig (`spec.shared`, issue 68) runs: the agent's own
//! choice of its group's rendering ([`netpolicy_core::fleet::choose`], from its Node's
//! labels and the NetworkFleet), the rendering read once by its label (renderings never
//! change), and the node's own items laid over it
//! ([`crate::api::NodeNetworkConfigSpec::effective`]).
//!
//! Until the agent knows its labels, the fleet and the rendering, a shared object is not
//! applied: the node keeps what it runs (the last good config). A group with no rollout
//! in the fleet keeps the rendering the node last ran.

use std::collections::BTreeMap;

use futures::{StreamExt, stream::BoxStream};
use kube::{
    Api, ResourceExt,
    api::ListParams,
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher, watcher::Event},
};
use netpolicy_core::{fleet::choose, selector::Labels};
use tracing::{info, warn};

use crate::api::{
    FLEET_NAME, Joined, NetworkFleet, NetworkFleetSpec, NodeNetworkConfig, NodeNetworkRendering,
    RENDERING_LABEL, join,
};

type NodeMeta = PartialObjectMeta<k8s_openapi::api::core::v1::Node>;

/// A change of what a shared object's pick reads: the agent's Node (metadata) or the
/// NetworkFleet.
#[derive(Debug)]
pub(crate) enum Changed {
    Node(Event<NodeMeta>),
    Fleet(Event<NetworkFleet>),
}

/// The watches of what a shared object's pick reads: node `node`'s metadata and the
/// NetworkFleet, each by its name (errors are logged; the watches retry with backoff).
pub(crate) fn watch(client: &kube::Client, node: &str) -> BoxStream<'static, Changed> {
    let by_name = |n: &str| watcher::Config::default().fields(&format!("metadata.name={n}"));
    let nodes = watcher(Api::<NodeMeta>::all(client.clone()), by_name(node))
        .default_backoff()
        .map(|e| e.map(Changed::Node));
    let fleets = watcher(
        Api::<NetworkFleet>::all(client.clone()),
        by_name(FLEET_NAME),
    )
    .default_backoff()
    .map(|e| e.map(Changed::Fleet));
    futures::stream::select(nodes, fleets)
        .filter_map(|e| async move {
            e.map_err(|e| warn!(error = %e, "Node or NetworkFleet watch error (retrying)"))
                .ok()
        })
        .boxed()
}

/// Renderings kept after they were read (the current one and those a rollback or the
/// next wave would want).
const KEEP: usize = 4;

/// What the agent knows of the shared objects.
#[derive(Debug)]
pub(crate) struct FleetView {
    /// Where renderings are read.
    api: Api<NodeNetworkRendering>,
    /// What the last pass ran (a shared object's rendering under its own items, and the
    /// rendering): kept while a new pick cannot be made, so that drift is still
    /// repaired.
    ran: Option<(NodeNetworkConfig, Option<String>)>,
    /// Its Node's labels (`None`: not seen yet).
    labels: Option<Labels>,
    /// The NetworkFleet (`None`: not seen yet, or deleted).
    fleet: Option<NetworkFleetSpec>,
    /// Renderings read, by name, with the order they were last used in.
    renderings: BTreeMap<String, (u64, Joined)>,
    used: u64,
    /// The rendering the node runs (what a group without a rollout keeps).
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
    /// Nothing known yet; renderings read through `client`.
    pub(crate) fn new(client: kube::Client) -> Self {
        Self {
            api: Api::all(client),
            ran: None,
            labels: None,
            fleet: None,
            renderings: BTreeMap::new(),
            used: 0,
            running: None,
            told: None,
        }
    }

    /// Takes a change; whether it may change what a shared object runs.
    pub(crate) fn on(&mut self, ev: &Changed) -> bool {
        match ev {
            Changed::Node(e) => self.on_node(e),
            Changed::Fleet(e) => self.on_fleet(e),
        }
    }

    /// What the last pass ran, if any.
    pub(crate) fn ran(&self) -> Option<&NodeNetworkConfig> {
        self.ran.as_ref().map(|(o, _)| o)
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
        self.fleet = next;
        true
    }

    /// The rendering node `node` runs now, from what the agent knows (`Ok(None)`: its
    /// group has no rollout and it runs nothing shared yet).
    ///
    /// # Errors
    /// Why it cannot tell: its labels or the fleet not seen yet, a fleet field that does
    /// not parse.
    pub(crate) fn pick(&self, node: &str) -> Result<Option<String>, String> {
        let labels = self
            .labels
            .as_ref()
            .ok_or_else(|| format!("the labels of Node {node} are not known yet"))?;
        let fleet = self
            .fleet
            .as_ref()
            .ok_or_else(|| "the NetworkFleet is not there (yet)".to_owned())?;
        let rollouts = fleet
            .rollouts()
            .map_err(|e| format!("NetworkFleet/default: {e}"))?;
        let choice = choose(node, labels, &fleet.index(), &rollouts);
        Ok(choice.rendering.or_else(|| self.running.clone()))
    }

    /// What `nnc` runs now: itself when it is not shared; else its rendering (read
    /// once, by its label) with its own items laid over it.
    async fn effective(&mut self, nnc: &NodeNetworkConfig) -> Effective {
        if !nnc.spec.shared {
            return Effective::Run(Box::new(nnc.clone()), None);
        }
        let node = nnc.name_any();
        let name = match self.pick(&node) {
            Ok(Some(name)) => name,
            Ok(None) => {
                return self
                    .wait("no rollout in the NetworkFleet for this node's group yet".to_owned());
            }
            Err(why) => return self.wait(why),
        };
        self.used += 1;
        let used = self.used;
        if let Some((at, _)) = self.renderings.get_mut(&name) {
            *at = used;
        } else {
            let lp = ListParams::default().labels(&format!("{RENDERING_LABEL}={name}"));
            let parts = match self.api.list(&lp).await {
                Ok(l) => l.items,
                Err(e) => return self.wait(format!("reading rendering {name}: {e}")),
            };
            let joined = match join(&name, parts.iter().map(|p| &p.spec)) {
                Ok(j) => j,
                Err(e) => return self.wait(e.to_string()),
            };
            info!(rendering = %name, parts = parts.len(), "rendering read");
            self.renderings.insert(name.clone(), (used, joined));
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
        }
        let Some((_, joined)) = self.renderings.get(&name) else {
            return self.wait(format!("rendering {name}: not kept"));
        };
        self.told = None;
        let mut out = nnc.clone();
        out.spec = nnc.spec.effective(joined);
        Effective::Run(Box::new(out), Some(name))
    }

    fn wait(&mut self, why: String) -> Effective {
        if self.told.as_ref() != Some(&why) {
            warn!("shared NodeNetworkConfig not applied yet (the node keeps what it runs): {why}");
            self.told = Some(why);
        }
        Effective::Wait
    }
}

#[cfg(test)]
mod tests {
    use netpolicy_core::fleet::group_name;

    use super::*;
    use crate::api::{FleetGroup, FleetPolicy};

    fn fleet(through: Option<&str>) -> NetworkFleetSpec {
        NetworkFleetSpec {
            policies: vec![FleetPolicy {
                policy: "NodeConfig/edge".into(),
                node_selector: netpolicy_core::spec::LabelSelector {
                    match_labels: [("role".to_owned(), "edge".to_owned())].into(),
                    ..Default::default()
                },
            }],
            groups: vec![FleetGroup {
                group: group_name(["NodeConfig/edge"]),
                rollout: "edge-2".into(),
                rendering: "r-new".into(),
                previous: Some("r-old".into()),
                through: through.map(str::to_owned),
                rolled_back: false,
            }],
        }
    }

    /// A view whose renderings would be read from nowhere (these tests read none).
    fn view() -> FleetView {
        let cfg = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        FleetView::new(kube::Client::try_from(cfg).unwrap())
    }

    #[tokio::test]
    async fn the_pick_follows_labels_and_waves_and_keeps_the_running_rendering_without_a_rollout() {
        let mut v = view();
        assert!(v.pick("n1").unwrap_err().contains("labels"));
        v.labels = Some(Labels::from([("role".to_owned(), "edge".to_owned())]));
        assert!(v.pick("n1").unwrap_err().contains("NetworkFleet"));
        v.fleet = Some(fleet(None));
        assert_eq!(v.pick("n1"), Ok(Some("r-old".into())), "no wave open");
        v.fleet = Some(fleet(Some("*")));
        assert_eq!(v.pick("n1"), Ok(Some("r-new".into())), "every wave open");
        v.fleet = Some(fleet(Some("bad")));
        assert!(v.pick("n1").unwrap_err().contains("spec.groups[0].through"));
        // Another group (no label): no rollout, so it keeps what it runs.
        v.fleet = Some(fleet(Some("*")));
        v.labels = Some(Labels::new());
        assert_eq!(v.pick("n1"), Ok(None));
        v.running = Some("r-mine".into());
        assert_eq!(v.pick("n1"), Ok(Some("r-mine".into())));
    }

    #[tokio::test]
    async fn node_and_fleet_events_count_only_changes() {
        let mut v = view();
        let f = NetworkFleet::new("default", fleet(None));
        assert!(v.on_fleet(&Event::Apply(f.clone())));
        assert!(!v.on_fleet(&Event::Apply(f.clone())), "same spec");
        assert!(!v.on_fleet(&Event::Init));
        assert!(v.on_fleet(&Event::Delete(f)));
        assert_eq!(v.fleet, None);
    }
}
