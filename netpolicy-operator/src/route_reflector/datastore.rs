//! Where Calico keeps what the route-reflector job reads and writes: one [`Datastore`]
//! trait and its adapters. [`Kubernetes`] is Calico's Kubernetes datastore, this
//! cluster's or another's (`datastore.kubernetes.kubeconfigSecretRef`: the same adapter
//! over that cluster's client and watches); [`EtcdStore`] is Calico's etcd
//! (`datastore.etcdv3`, its key layout in [`super::etcd`]). The controller reads and
//! writes Calico's objects only through them; [`super::connect`] picks the one a pass
//! uses.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams},
    runtime::reflector::{ObjectRef, Store},
};
use netpolicy_rr::{Current, NodeInfo, Op};
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info};

use super::{
    CalicoBgpPeer, CalicoBgpPeerSpec, current, current_of,
    etcd::{self, Etcd},
    marks_of, node_info,
};
use crate::{
    api::calico::{bgp_configuration_resource, bgp_peer_resource},
    k8s::{CachedNode, FIELD_MANAGER, MANAGED_BY, NodeFacts},
};

/// Why a pass failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failed {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Etcd(#[from] etcd::Error),
}

/// Calico's datastore as the job uses it.
pub(crate) trait Datastore {
    /// The nodes placement reads and the marks and `BGPPeer`s the datastore holds now
    /// (`ring`: the `multi` ring the status keeps).
    async fn observe(&mut self, ring: &[String]) -> Result<(Vec<NodeInfo>, Current), Failed>;

    /// Whether Calico's node-to-node mesh is on (`None`: Calico serves no
    /// BGPConfiguration here).
    async fn mesh_on(&self) -> Result<Option<bool>, Failed>;

    /// Turns Calico's node-to-node mesh off.
    async fn disable_mesh(&self) -> Result<(), Failed>;

    /// One operation of a step (a node that left meanwhile is skipped).
    async fn apply(&self, op: &Op) -> Result<(), Failed>;

    /// Whether [`Self::observe`] would read every operation of `ops` back. The next plan
    /// waits until it does: a plan made from a state that is gone undoes the step.
    fn shows(&self, ops: &[Op]) -> bool;

    /// Where calico-node reports the reflectors' BGP sessions (`CalicoNodeStatus`);
    /// `None` where it does not (etcd).
    fn session_reports(&self) -> Option<Api<DynamicObject>>;
}

/// The cluster Calico's Kubernetes datastore is in: its client and its Nodes and
/// BGPPeers as watched.
#[derive(Clone)]
pub(crate) struct Calico {
    pub client: Client,
    pub nodes: Store<CachedNode>,
    pub peers: Store<DynamicObject>,
}

/// Calico's Kubernetes datastore: the reflector label, `rr.netpolicy.io/set-*` labels and
/// the cluster-ID annotation on Nodes, `BGPPeer`s as `crd.projectcalico.org/v1` objects,
/// all read from the watches.
pub(crate) struct Kubernetes {
    pub calico: Calico,
    /// `spec.reflectorLabel`.
    pub label: String,
}

impl Kubernetes {
    async fn set_label(
        &self,
        node: &str,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), kube::Error> {
        let patch = json!({"metadata": {"labels": {key: value}}});
        Api::<Node>::all(self.calico.client.clone())
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }

    async fn cluster_id(&self, node: &str, id: Option<String>) -> Result<(), kube::Error> {
        let patch = json!({"metadata": {"annotations": {
            netpolicy_rr::CLUSTER_ID_ANNOTATION: id}}});
        Api::<Node>::all(self.calico.client.clone())
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }

    fn peers(&self) -> Api<DynamicObject> {
        Api::all_with(self.calico.client.clone(), &bgp_peer_resource())
    }

    fn bgp_configuration(&self) -> Api<DynamicObject> {
        Api::all_with(self.calico.client.clone(), &bgp_configuration_resource())
    }
}

impl Datastore for Kubernetes {
    async fn observe(&mut self, ring: &[String]) -> Result<(Vec<NodeInfo>, Current), Failed> {
        let nodes = self.calico.nodes.state();
        let infos = nodes
            .iter()
            .map(|n| node_info(&NodeFacts::of(n, false)))
            .collect();
        let peers: Vec<CalicoBgpPeer> = self
            .calico
            .peers
            .state()
            .iter()
            .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect();
        let now = current(
            nodes.iter().map(AsRef::as_ref),
            peers.iter(),
            ring,
            &self.label,
        );
        Ok((infos, now))
    }

    async fn mesh_on(&self) -> Result<Option<bool>, Failed> {
        let obj = match self.bgp_configuration().get_opt("default").await {
            Ok(o) => o,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // Calico's default is on.
        Ok(Some(
            obj.as_ref()
                .and_then(|o| o.data.get("spec")?.get("nodeToNodeMeshEnabled")?.as_bool())
                .unwrap_or(true),
        ))
    }

    async fn disable_mesh(&self) -> Result<(), Failed> {
        let patch = json!({
            "apiVersion": "crd.projectcalico.org/v1",
            "kind": "BGPConfiguration",
            "metadata": {"name": "default"},
            "spec": {"nodeToNodeMeshEnabled": false},
        });
        // Forced: this one field is what `disable` asks for, and whoever wrote the
        // BGPConfiguration (Calico's docs `kubectl apply` it with the mesh on) owns it.
        // Unforced, the apply conflicts with that owner at every pass and the mesh is
        // never turned off (found on live BGP, Calico's confd and BIRD).
        self.bgp_configuration()
            .patch(
                "default",
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
        info!("every node has its reflector sessions: Calico's node-to-node mesh turned off");
        Ok(())
    }

    async fn apply(&self, op: &Op) -> Result<(), Failed> {
        debug!(%op, "route reflectors: operation");
        let result = match op {
            Op::ApplyBgpPeer(p) => {
                let obj = json!({
                    "apiVersion": "crd.projectcalico.org/v1",
                    "kind": "BGPPeer",
                    "metadata": {"name": p.name, "labels": {MANAGED_BY.0: MANAGED_BY.1}},
                    "spec": {"nodeSelector": p.node_selector, "peerSelector": p.peer_selector},
                });
                self.peers()
                    .patch(
                        &p.name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(&obj),
                    )
                    .await
                    .map(|_| ())
            }
            Op::DeleteBgpPeer { name } => self
                .peers()
                .delete(name, &DeleteParams::default())
                .await
                .map(|_| ()),
            Op::SetClusterId { node, id } => self.cluster_id(node, Some(id.to_string())).await,
            Op::RemoveClusterId { node } => self.cluster_id(node, None).await,
            Op::SetReflectorLabel { node, value } => {
                self.set_label(node, &self.label, Some(value)).await
            }
            Op::RemoveReflectorLabel { node } => self.set_label(node, &self.label, None).await,
            Op::AddSetLabel { node, key } => self.set_label(node, key, Some("")).await,
            Op::RemoveSetLabel { node, key } => self.set_label(node, key, None).await,
        };
        match result {
            // A node that left meanwhile, a peer already gone: nothing to do for it.
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            r => r.map_err(Failed::from),
        }
    }

    fn shows(&self, ops: &[Op]) -> bool {
        let label = &self.label;
        let node = |n: &str| self.calico.nodes.get(&ObjectRef::new(n));
        let peer = |name: &str| {
            self.calico
                .peers
                .get(&ObjectRef::new_with(name, bgp_peer_resource()))
        };
        ops.iter().all(|op| match op {
            Op::ApplyBgpPeer(p) => peer(&p.name).is_some_and(|o| {
                o.data["spec"]["nodeSelector"] == p.node_selector.as_str()
                    && o.data["spec"]["peerSelector"] == p.peer_selector.as_str()
            }),
            Op::DeleteBgpPeer { name } => peer(name).is_none(),
            Op::SetClusterId { node: n, id } => node(n).is_none_or(|o| {
                o.annotations().get(netpolicy_rr::CLUSTER_ID_ANNOTATION) == Some(&id.to_string())
            }),
            Op::RemoveClusterId { node: n } => node(n).is_none_or(|o| {
                !o.annotations()
                    .contains_key(netpolicy_rr::CLUSTER_ID_ANNOTATION)
            }),
            Op::SetReflectorLabel { node: n, value } => {
                node(n).is_none_or(|o| o.labels().get(label) == Some(value))
            }
            Op::RemoveReflectorLabel { node: n } => {
                node(n).is_none_or(|o| !o.labels().contains_key(label))
            }
            Op::AddSetLabel { node: n, key } => {
                node(n).is_none_or(|o| o.labels().contains_key(key))
            }
            Op::RemoveSetLabel { node: n, key } => {
                node(n).is_none_or(|o| !o.labels().contains_key(key))
            }
        })
    }

    fn session_reports(&self) -> Option<Api<DynamicObject>> {
        Some(Api::all_with(
            self.calico.client.clone(),
            &netpolicy_api::calico::calico_node_status_resource(),
        ))
    }
}

/// Calico's etcd: the marks on Calico Nodes (labels, `routeReflectorClusterID`) and
/// `BGPPeer`s in its key layout, read afresh each pass (reads are linearizable: a step is
/// read back at once). Kubernetes Nodes stay the source of readiness, taints and labels
/// and are never written; a Kubernetes Node without a Calico Node is not a BGP speaker
/// yet and is left out until calico-node registers it.
pub(crate) struct EtcdStore {
    pub etcd: Etcd,
    /// Kubernetes Nodes, as watched.
    pub nodes: Store<CachedNode>,
    /// `spec.reflectorLabel`.
    pub label: String,
    /// Where the fingerprint a pass read from goes (the poll wakes the job when etcd's
    /// differs from it).
    pub seen: watch::Sender<Option<String>>,
    /// Kubernetes Node name → Calico Node name, as the last [`Datastore::observe`] read.
    names: BTreeMap<String, String>,
}

impl EtcdStore {
    pub(crate) fn new(
        etcd: Etcd,
        nodes: Store<CachedNode>,
        label: String,
        seen: watch::Sender<Option<String>>,
    ) -> Self {
        Self {
            etcd,
            nodes,
            label,
            seen,
            names: BTreeMap::new(),
        }
    }

    /// Labels the Calico Node standing for Kubernetes Node `node` (none: it left).
    async fn set_label(&self, node: &str, key: &str, value: Option<&str>) -> Result<(), Failed> {
        if let Some(c) = self.names.get(node) {
            self.etcd.label_node(c, key, value).await?;
        }
        Ok(())
    }
}

impl Datastore for EtcdStore {
    async fn observe(&mut self, ring: &[String]) -> Result<(Vec<NodeInfo>, Current), Failed> {
        // Fingerprint first: a change while reading starts another pass.
        let seen = self.etcd.fingerprint().await?;
        let calico: BTreeMap<String, etcd::CalicoNode> = self
            .etcd
            .nodes()
            .await?
            .into_iter()
            .map(|c| (c.kube_name.clone(), c))
            .collect();
        let peers = self.etcd.bgp_peers().await?;
        self.seen.send_replace(Some(seen));
        self.names = calico
            .iter()
            .map(|(k, c)| (k.clone(), c.name.clone()))
            .collect();
        let infos = self
            .nodes
            .state()
            .iter()
            .filter(|n| calico.contains_key(&n.name_any()))
            .map(|n| node_info(&NodeFacts::of(n, false)))
            .collect();
        let marks = calico.values().map(|c| {
            let m = marks_of(Some(&c.labels), c.cluster_id.as_deref(), &self.label);
            (c.kube_name.clone(), m)
        });
        Ok((infos, current_of(marks, peers.iter(), ring)))
    }

    async fn mesh_on(&self) -> Result<Option<bool>, Failed> {
        Ok(Some(self.etcd.mesh_on().await?))
    }

    async fn disable_mesh(&self) -> Result<(), Failed> {
        self.etcd.disable_mesh().await?;
        info!(
            "every node has its reflector sessions: Calico's node-to-node mesh turned off (etcd)"
        );
        Ok(())
    }

    async fn apply(&self, op: &Op) -> Result<(), Failed> {
        debug!(%op, "route reflectors: operation (etcd)");
        match op {
            Op::ApplyBgpPeer(p) => {
                let spec = CalicoBgpPeerSpec {
                    node_selector: Some(p.node_selector.clone()),
                    peer_selector: Some(p.peer_selector.clone()),
                };
                let labels = BTreeMap::from([(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())]);
                self.etcd.apply_bgp_peer(&p.name, &spec, &labels).await?;
            }
            Op::DeleteBgpPeer { name } => self.etcd.delete_bgp_peer(name).await?,
            Op::SetClusterId { node, id } => {
                if let Some(c) = self.names.get(node) {
                    self.etcd.set_cluster_id(c, Some(&id.to_string())).await?;
                }
            }
            Op::RemoveClusterId { node } => {
                if let Some(c) = self.names.get(node) {
                    self.etcd.set_cluster_id(c, None).await?;
                }
            }
            Op::SetReflectorLabel { node, value } => {
                self.set_label(node, &self.label, Some(value)).await?;
            }
            Op::RemoveReflectorLabel { node } => self.set_label(node, &self.label, None).await?,
            Op::AddSetLabel { node, key } => self.set_label(node, key, Some("")).await?,
            Op::RemoveSetLabel { node, key } => self.set_label(node, key, None).await?,
        }
        Ok(())
    }

    fn shows(&self, _ops: &[Op]) -> bool {
        // etcd's reads are linearizable: the next pass reads the step back.
        true
    }

    fn session_reports(&self) -> Option<Api<DynamicObject>> {
        None
    }
}
