//! A Node as the operator caches it ([`CachedNode`]: only the fields its jobs read),
//! and [`NodeView`], what [`super::NodeFacts`] needs of a Node of either type.

use std::borrow::Cow;

use k8s_openapi::{
    api::core::v1::{Node, NodeCondition, Taint},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
};
use kube::Resource;
use serde::{Deserialize, Deserializer, Serialize};

/// A Node with only what the operator's jobs read: its metadata, `spec.taints`,
/// `spec.unschedulable`, `spec.providerID`, and the `Ready` condition's type, status and
/// transition time. It watches the same resource as `k8s_openapi`'s `Node`
/// (`v1/nodes`), and every other field of the API server's answer (images, system info,
/// capacity, addresses, a condition's message) is skipped while it is read, never
/// allocated.
///
/// At 10,000 Nodes the operator's cache held 1,512 bytes a Node before any string (a
/// whole `Node` is mostly an 888-byte `NodeStatus` of empty fields); this is about a
/// third of that, and the other conditions' messages (a kubelet reports five) are not
/// kept either.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CachedNode {
    /// The Node's metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the jobs read of `spec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<CachedNodeSpec>,
    /// What the jobs read of `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CachedNodeStatus>,
}

/// What the jobs read of a Node's `spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedNodeSpec {
    /// `spec.providerID`.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// `spec.taints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<Taint>>,
    /// `spec.unschedulable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unschedulable: Option<bool>,
}

/// What the jobs read of a Node's `status`: its `Ready` condition.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CachedNodeStatus {
    /// The `Ready` condition alone (type, status, `lastTransitionTime`): the reason,
    /// the message and the heartbeat are skipped while the answer is read, the other
    /// conditions dropped.
    #[serde(
        default,
        deserialize_with = "ready_only",
        skip_serializing_if = "Option::is_none"
    )]
    pub conditions: Option<Vec<NodeCondition>>,
}

/// The conditions a kubelet reports, down to what [`super::NodeFacts`] reads. Each is
/// read as its type, status and transition time: the reason, the message and the
/// heartbeat are skipped by the parser, never allocated, and every condition but
/// `Ready` is dropped.
fn ready_only<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<NodeCondition>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Head {
        #[serde(rename = "type")]
        type_: String,
        status: String,
        #[serde(default)]
        last_transition_time: Option<Time>,
    }
    let all: Option<Vec<Head>> = Option::deserialize(d)?;
    Ok(all.map(|cs| {
        cs.into_iter()
            .filter(|c| c.type_ == "Ready")
            .map(|c| NodeCondition {
                type_: c.type_,
                status: c.status,
                last_transition_time: c.last_transition_time,
                ..NodeCondition::default()
            })
            .collect()
    }))
}

impl Resource for CachedNode {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        <Node as Resource>::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        <Node as Resource>::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        <Node as Resource>::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        <Node as Resource>::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What [`super::NodeFacts`] reads of a Node: implemented by `k8s_openapi`'s `Node`
/// (manifests, `netpolicy plan`) and by [`CachedNode`] (the operator's cache), and
/// through references and `Arc`s to either (a cache's `Arc<CachedNode>`).
pub trait NodeView {
    /// The Node's metadata.
    fn node_meta(&self) -> &ObjectMeta;
    /// The `Ready` condition's status (`True`, `False`, `Unknown`), if it has one.
    fn ready_status(&self) -> Option<&str>;
    /// `spec.unschedulable`.
    fn unschedulable(&self) -> bool;
    /// `spec.taints`.
    fn taints(&self) -> &[Taint];
    /// `spec.providerID`.
    fn provider_id(&self) -> Option<&str>;
}

fn ready_of(conditions: Option<&Vec<NodeCondition>>) -> Option<&str> {
    conditions
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str())
}

/// `k8s_openapi`'s `Node` and [`CachedNode`] spell every field [`NodeView`] reads alike.
macro_rules! node_view_by_fields {
    ($($node:ty),*) => {$(
        impl NodeView for $node {
            fn node_meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn ready_status(&self) -> Option<&str> {
                ready_of(self.status.as_ref().and_then(|s| s.conditions.as_ref()))
            }
            fn unschedulable(&self) -> bool {
                self.spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
            }
            fn taints(&self) -> &[Taint] {
                self.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_deref())
                    .unwrap_or_default()
            }
            fn provider_id(&self) -> Option<&str> {
                self.spec.as_ref().and_then(|s| s.provider_id.as_deref())
            }
        }
    )*};
}
node_view_by_fields!(Node, CachedNode);

/// Through a reference or an `Arc` (a cache's `Arc<CachedNode>`).
macro_rules! node_view_through {
    ($($pointer:ty),*) => {$(
        impl<T: NodeView + ?Sized> NodeView for $pointer {
            fn node_meta(&self) -> &ObjectMeta {
                (**self).node_meta()
            }
            fn ready_status(&self) -> Option<&str> {
                (**self).ready_status()
            }
            fn unschedulable(&self) -> bool {
                (**self).unschedulable()
            }
            fn taints(&self) -> &[Taint] {
                (**self).taints()
            }
            fn provider_id(&self) -> Option<&str> {
                (**self).provider_id()
            }
        }
    )*};
}
node_view_through!(&T, std::sync::Arc<T>);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::k8s::NodeFacts;

    /// A Node as a kubelet reports it: five conditions, images, capacity, system info.
    fn kubelet_node() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "7",
                         "creationTimestamp": "2026-11-29T00:00:00Z",
                         "labels": {"kubernetes.io/hostname": "n1", "zone": "a"},
                         "annotations": {"projectcalico.org/IPv4Address": "10.0.0.1/24"}},
            "spec": {"providerID": "hcloud://42", "unschedulable": true, "podCIDR": "10.244.0.0/24",
                     "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                     "message": "kubelet has sufficient memory available",
                     "lastHeartbeatTime": "2026-11-29T00:01:00Z", "lastTransitionTime": "2026-11-29T00:00:00Z"},
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "kubelet is posting ready status",
                     "lastHeartbeatTime": "2026-11-29T00:01:00Z", "lastTransitionTime": "2026-11-29T00:00:30Z"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "capacity": {"cpu": "2"},
                "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 1}],
                "nodeInfo": {"architecture": "amd64", "bootID": "b", "containerRuntimeVersion": "c",
                             "kernelVersion": "k", "kubeProxyVersion": "", "kubeletVersion": "v1.34.4",
                             "machineID": "m", "operatingSystem": "linux", "osImage": "o", "systemUUID": "s"}
            }
        })
    }

    #[test]
    fn a_cached_node_has_the_facts_of_the_whole_node_and_only_the_ready_condition() {
        let whole: Node = serde_json::from_value(kubelet_node()).unwrap();
        let cached: CachedNode = serde_json::from_value(kubelet_node()).unwrap();
        assert_eq!(NodeFacts::of(&cached, false), NodeFacts::of(&whole, false));
        assert_eq!(cached.metadata, whole.metadata);
        assert_eq!(cached.provider_id(), Some("hcloud://42"));
        assert!(cached.unschedulable());
        let conditions = cached.status.unwrap().conditions.unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].type_, "Ready");
        assert_eq!(conditions[0].message, None);
        assert_eq!(conditions[0].last_heartbeat_time, None);
        assert!(conditions[0].last_transition_time.is_some());
    }

    #[test]
    fn not_ready_and_no_status_read_as_the_whole_node_does() {
        let mut v = kubelet_node();
        v["status"]["conditions"][1]["status"] = "Unknown".into();
        let whole: Node = serde_json::from_value(v.clone()).unwrap();
        let cached: CachedNode = serde_json::from_value(v).unwrap();
        assert!(!NodeFacts::of(&cached, false).ready);
        assert_eq!(NodeFacts::of(&cached, false), NodeFacts::of(&whole, false));
        let bare = serde_json::json!({"metadata": {"name": "n2"}, "status": {"conditions": null}});
        let whole: Node = serde_json::from_value(bare.clone()).unwrap();
        let cached: CachedNode = serde_json::from_value(bare).unwrap();
        for assume in [false, true] {
            assert_eq!(
                NodeFacts::of(&cached, assume),
                NodeFacts::of(&whole, assume)
            );
        }
    }

    #[test]
    fn it_watches_what_a_node_watches() {
        assert_eq!(CachedNode::kind(&()), "Node");
        assert_eq!(CachedNode::api_version(&()), "v1");
        assert_eq!(CachedNode::plural(&()), "nodes");
        assert_eq!(
            CachedNode::url_path(&(), None),
            <Node as Resource>::url_path(&(), None)
        );
        assert!(std::mem::size_of::<CachedNode>() * 2 < std::mem::size_of::<Node>());
    }
}
