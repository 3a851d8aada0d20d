//! The Calico objects netpolicy's route reflectors read and write, for operators that
//! read them too: a `BGPPeer` as the Kubernetes datastore stores it
//! (`crd.projectcalico.org/v1`, only the fields netpolicy writes) and the
//! `ApiResource`s of `BGPPeer` and `BGPConfiguration` for dynamic clients.
//!
//! ```
//! use netpolicy_api::calico::{CalicoBgpPeer, bgp_peer_resource};
//!
//! let peer: CalicoBgpPeer = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "netpolicy-rr-zone-a"},
//!     "spec": {"nodeSelector": "!has(rr)", "peerSelector": "has(rr)"},
//! }))?;
//! assert_eq!(peer.spec.peer_selector.as_deref(), Some("has(rr)"));
//! assert_eq!(bgp_peer_resource().plural, "bgppeers");
//! # Ok::<(), serde_json::Error>(())
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, GroupVersionKind};
use serde::{Deserialize, Serialize};

/// A Calico `BGPPeer` as read from manifests or the API (only the fields netpolicy
/// writes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CalicoBgpPeer {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    #[serde(default)]
    pub spec: CalicoBgpPeerSpec,
}

/// The selector fields of a Calico `BGPPeer` spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CalicoBgpPeerSpec {
    /// Nodes that open the sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<String>,
    /// Nodes they peer with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_selector: Option<String>,
}

/// Calico's `BGPPeer` (`crd.projectcalico.org/v1`, as the Kubernetes datastore stores
/// it).
pub fn bgp_peer_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("crd.projectcalico.org", "v1", "BGPPeer"),
        "bgppeers",
    )
}

/// Calico's `CalicoNodeStatus`: calico-node reports a node's BGP sessions in it when
/// asked (Calico ≥ 3.22).
pub fn calico_node_status_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("crd.projectcalico.org", "v1", "CalicoNodeStatus"),
        "caliconodestatuses",
    )
}

/// Calico's `BGPConfiguration`.
pub fn bgp_configuration_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("crd.projectcalico.org", "v1", "BGPConfiguration"),
        "bgpconfigurations",
    )
}
