//! # netpolicy-api
//!
//! The `netpolicy.io/v1alpha1` custom resources, their condition types and reasons,
//! and [`crds`]. This crate holds the kinds and nothing else (serde, schemars, kube's
//! derive, k8s-openapi, netpolicy-core's routing items): an operator author who wants
//! our kinds depends on it without pulling in a runtime, HTTP, CLI, metrics or netlink.
//!
//! ```toml
//! [dependencies]
//! netpolicy-api = "0.1"
//! # Your operator's own kube, and the Kubernetes version it targets: this crate picks
//! # none (k8s-openapi allows one per build; `latest`, or `v1_33` … `v1_37`).
//! kube = { version = "5", features = ["runtime", "client", "derive"] }
//! k8s-openapi = { version = "0.29", features = ["latest"] }
//! ```
//!
//! Every type a kind's fields use is reachable from here: the routing items are
//! netpolicy-core's wire types, re-exported as [`spec`] and [`render`] (and the whole
//! crate as [`netpolicy_core`]), so one dependency line builds every kind. MSRV: Rust
//! 1.89 (kube 5's; `scripts/test` builds with it).
//!
//! # Examples
//!
//! A NodeConfig built in Rust, as an operator would create it:
//!
//! ```
//! use netpolicy_api::{
//!     NodeConfig, NodeConfigSpec, conditions,
//!     spec::{LabelSelector, RouteSpec, RoutingSpec},
//! };
//!
//! let edge = NodeConfig::new(
//!     "edge",
//!     NodeConfigSpec {
//!         node_selector: LabelSelector {
//!             match_labels: [("role".to_owned(), "edge".to_owned())].into(),
//!             ..LabelSelector::default()
//!         },
//!         priority: 10,
//!         routing: RoutingSpec {
//!             routes: vec![RouteSpec {
//!                 to: "10.20.0.0/16".into(),
//!                 via: Some("192.0.2.1".into()),
//!                 table: Some(100),
//!                 ..RouteSpec::default()
//!             }],
//!             ..RoutingSpec::default()
//!         },
//!         ..NodeConfigSpec::default()
//!     },
//! );
//! // What `kubectl apply` would send, and the checks the operator runs on it.
//! let json = serde_json::to_value(&edge).unwrap();
//! assert_eq!(json["spec"]["routes"][0]["via"], "192.0.2.1");
//! assert!(edge.spec.routing.validate("spec").is_ok());
//! assert_eq!(conditions::APPLIED, "Applied");
//! ```
//!
//! The routing, floating-IP range, route-reflector and routed-IP kinds are
//! cluster-scoped; `FloatingIP` and the traffic-domain kinds ([`traffic`]) are
//! namespaced.

/// netpolicy-core, whose routing items ([`spec`]) and renderings ([`render`]) the kinds
/// hold: a consumer names them through this crate and keeps one version in step.
pub use netpolicy_core;
pub use netpolicy_core::{render, spec};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// API group of every netpolicy kind.
pub const GROUP: &str = "netpolicy.io";
/// API version of every netpolicy kind.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every netpolicy kind.
pub const API_VERSION: &str = "netpolicy.io/v1alpha1";
/// The only allowed name of the ClusterConfig.
pub const CLUSTER_CONFIG_NAME: &str = "default";

/// Every netpolicy CRD, in the order `netpolicy crds` prints them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        ClusterConfig::crd(),
        NodeConfig::crd(),
        NodeNetworkConfig::crd(),
        NodeNetworkRendering::crd(),
        NetworkFleet::crd(),
        NetworkRollout::crd(),
        FloatingIPRange::crd(),
        FloatingIP::crd(),
        FloatingIPClaim::crd(),
        RouteReflectorConfig::crd(),
        RoutedIPIssuer::crd(),
        RoutedIP::crd(),
        Trench::crd(),
        Attractor::crd(),
        Gateway::crd(),
        Vip::crd(),
        Conduit::crd(),
        Stream::crd(),
        Flow::crd(),
    ]
}

mod fleet;
mod floating_ip;
mod route_reflector;
mod routed_ip;
mod routing;

pub mod calico;
pub mod traffic;
pub use fleet::*;
pub use floating_ip::*;
pub use route_reflector::*;
pub use routed_ip::*;
pub use routing::*;
pub use traffic::*;

/// Condition types and reasons, as named constants (one place, typed: no status
/// literals scattered through the code).
pub mod conditions {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    /// The condition of type `type_` in `conds`.
    ///
    /// ```
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    /// use netpolicy_api::conditions::{self, READY};
    ///
    /// let ready: Condition = serde_json::from_value(serde_json::json!({
    ///     "type": READY, "status": "True", "reason": "Applied", "message": "",
    ///     "lastTransitionTime": "2026-11-27T00:00:00Z",
    /// }))?;
    /// let conds = vec![ready];
    /// assert!(conditions::is_true(&conds, READY));
    /// assert!(!conditions::is_false(&conds, READY));
    /// assert!(conditions::find(&conds, conditions::CONFLICT).is_none());
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn find<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
        conds.iter().find(|c| c.type_ == type_)
    }

    /// Whether `conds` has condition `type_` with status `True`.
    pub fn is_true(conds: &[Condition], type_: &str) -> bool {
        find(conds, type_).is_some_and(|c| c.status == STATUS_TRUE)
    }

    /// Whether `conds` has condition `type_` with status `False` (absent is neither).
    pub fn is_false(conds: &[Condition], type_: &str) -> bool {
        find(conds, type_).is_some_and(|c| c.status == STATUS_FALSE)
    }

    /// A condition's `status` when it holds.
    pub const STATUS_TRUE: &str = "True";
    /// A condition's `status` when it does not hold.
    pub const STATUS_FALSE: &str = "False";

    /// Condition type: the node holds its NodeNetworkConfig's desired state.
    pub const APPLIED: &str = "Applied";
    /// Condition type of a policy: valid, conflict-free and applied on every node it
    /// selects.
    pub const READY: &str = "Ready";
    /// Condition type of a policy: it defines an item differently from another policy
    /// of equal precedence on some node.
    pub const CONFLICT: &str = "Conflict";

    /// Condition type: a node failed its probes after a change and restored its last
    /// good config (on a NodeNetworkConfig); a policy's rollout is halted because of
    /// that (on a ClusterConfig or NodeConfig).
    pub const DEGRADED: &str = "Degraded";
    /// Reasons of the `Degraded` condition.
    pub mod degraded {
        /// A probe failed within `rollbackSeconds`.
        pub const PROBE_FAILED: &str = "ProbeFailed";
        /// The API server could not be reached within `rollbackSeconds`.
        pub const API_SERVER_UNREACHABLE: &str = "APIServerUnreachable";
        /// Probes passed (or nothing failed since the last change).
        pub const HEALTHY: &str = "Healthy";
        /// A policy's rollout is halted: a node it selects is Degraded.
        pub const ROLLOUT_HALTED: &str = "RolloutHalted";
    }

    /// Condition type of a NodeNetworkConfig: something on the node keeps changing
    /// netpolicy's objects back (each restored [`fighting::AFTER`] times within a
    /// minute); their notifications start no repair, the agent looks at them again with
    /// backoff (5 s, doubling to 5 min) while it repairs every other object at once. Absent on a node
    /// that never fought; `False` once a pass finds them intact.
    pub const FIGHTING: &str = "Fighting";
    /// Reasons and limits of the `Fighting` condition.
    pub mod fighting {
        /// Objects are being changed back against netpolicy.
        pub const FIGHTING: &str = "Fighting";
        /// The last pass found every object it had fought over intact.
        pub const STOPPED: &str = "Stopped";
        /// Repairs of one object within a minute that make it a fight.
        pub const AFTER: usize = 10;
    }

    /// Condition type of a policy: a node it selects would get a NodeNetworkConfig
    /// larger than the operator writes (`--max-object-bytes`); that node keeps its last
    /// config.
    pub const TOO_LARGE: &str = "TooLarge";

    /// Condition status strings.
    pub const TRUE: &str = "True";
    /// Condition status strings.
    pub const FALSE: &str = "False";

    /// Reasons of the `Applied` condition.
    pub mod reasons {
        /// Every item is in the kernel as desired.
        pub const APPLIED: &str = "Applied";
        /// Some items are not (see `status.itemErrors`).
        pub const ITEMS_NOT_APPLIED: &str = "ItemsNotApplied";
        /// The revision failed its probes and the last good config was restored
        /// (`Degraded` says which probe).
        pub const ROLLED_BACK: &str = "RolledBack";
        /// The spec does not validate; nothing was changed.
        pub const INVALID: &str = "Invalid";
    }

    /// Reasons of a policy's `Ready` and `Conflict` conditions.
    pub mod policy {
        /// Applied on every node it selects.
        pub const APPLIED: &str = "Applied";
        /// Rendered; some selected nodes have not applied it yet.
        pub const APPLYING: &str = "Applying";
        /// The spec does not validate: it changes no node.
        pub const INVALID: &str = "Invalid";
        /// It conflicts with another policy on some nodes (they keep their last good
        /// config).
        pub const CONFLICT: &str = "Conflict";
        /// No conflict.
        pub const NO_CONFLICT: &str = "NoConflict";
        /// A selected node's NodeNetworkConfig would exceed the size limit (`TooLarge`
        /// condition, and `Ready` False).
        pub const TOO_LARGE: &str = "TooLarge";
        /// Every selected node's NodeNetworkConfig fits (`TooLarge` False).
        pub const FITS: &str = "Fits";
    }

    /// Condition types and reasons of FloatingIPRanges and FloatingIPs.
    pub mod floating_ip {
        /// Range condition type: every address is allocated.
        pub const EXHAUSTED: &str = "Exhausted";
        /// Range condition type: it shares addresses with another range.
        pub const OVERLAP: &str = "Overlap";
        /// Range condition type: allocations outside the range as it is now (it
        /// shrank, or an exclusion covers them); they are kept.
        pub const OUTSIDE: &str = "AllocationsOutside";
        /// FloatingIP condition type: the address is published to kube-vip.
        pub const PUBLISHED: &str = "Published";

        /// Reason: the FloatingIP holds its address.
        pub const ALLOCATED: &str = "Allocated";
        /// Reason: no address yet (the operator is working on it).
        pub const PENDING: &str = "Pending";
        /// Reason: the static request is held by another FloatingIP (named in the
        /// message).
        pub const TAKEN: &str = "Taken";
        /// Reason: the static request is outside the range, excluded or unusable.
        pub const OUT_OF_RANGE: &str = "OutOfRange";
        /// Reason: the range has no free address.
        pub const EXHAUSTED_REASON: &str = "RangeExhausted";
        /// Reason: the range is draining.
        pub const DRAINING: &str = "RangeDraining";
        /// Reason: the range does not exist or is invalid.
        pub const NO_RANGE: &str = "NoRange";
        /// Reason: the spec does not validate.
        pub const INVALID: &str = "Invalid";
        /// Reason: the range is valid and has free addresses (range `Ready`).
        pub const AVAILABLE: &str = "Available";
        /// Reason: kube-vip never hands out this address (IPv4 ending in .0 or .255).
        pub const NOT_PUBLISHABLE: &str = "NotPublishable";
        /// Reason: published.
        pub const PUBLISHED_REASON: &str = "Published";
        /// Reason: the guest cluster could not be reached (retried with backoff).
        pub const GUEST_UNREACHABLE: &str = "GuestUnreachable";
        /// FloatingIP condition type: kube-vip and kube-vip-cloud-provider are installed
        /// in its guest cluster (only when the range's `kubeVip.guests.install` asks).
        pub const INSTALLED: &str = "Installed";
        /// Reason: installed.
        pub const INSTALLED_REASON: &str = "Installed";
        /// Reason: the guest's API server refused (401/403: the kubeconfig's account
        /// may not do it, or the cluster is still being deployed).
        pub const GUEST_FORBIDDEN: &str = "GuestForbidden";
        /// Reason: the guest's kubeconfig Secret, or its key, is missing or unusable.
        pub const KUBECONFIG_MISSING: &str = "KubeconfigMissing";
        /// Reason: discovery `rancher` found no Cluster for the FloatingIP's namespace.
        pub const GUEST_NOT_FOUND: &str = "GuestNotFound";
        /// Reason: the guest answered but refused an object (its message).
        pub const INSTALL_FAILED: &str = "InstallFailed";
        /// Reason: the kube-vip ConfigMap could not be written (the API server's answer
        /// in the message; retried with backoff).
        pub const PUBLISH_FAILED: &str = "PublishFailed";
        /// Reason of a condition that does not hold (no overlap, nothing outside).
        pub const NONE: &str = "None";
    }

    /// Condition reasons of RoutedIPs and RoutedIPIssuers.
    pub mod routed_ip {
        /// Reason: the IP is on its node and the firewall is in step.
        pub const SETTLED: &str = "Settled";
        /// Reason: a failover step is being applied.
        pub const APPLYING: &str = "ApplyingStep";
        /// Reason: no node may hold the IP (it stays where it is).
        pub const NO_CANDIDATE: &str = "NoEligibleNode";
        /// Reason: the issuer is missing, its token cannot be read, or its provider's
        /// API does not answer (no connection within seconds).
        pub const ISSUER_UNAVAILABLE: &str = "IssuerUnavailable";
        /// Reason: the provider refused or failed (retried).
        pub const PROVIDER_ERROR: &str = "ProviderError";
        /// Reason: the provider asks to slow down (retried after its delay).
        pub const RATE_LIMITED: &str = "RateLimited";
        /// Reason: `spec.address` names an IP the provider does not have.
        pub const NOT_FOUND: &str = "AddressNotFound";
        /// Reason: a quota of the cloud account is used up (AWS `AddressLimitExceeded`):
        /// retried slowly; raise the quota or free what holds it.
        pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";
        /// Reason: the issuer's token is readable and the provider answers.
        pub const READY: &str = "Ready";
        /// Condition type (RoutedIPIssuer): IPs tagged for this cluster whose RoutedIP is
        /// gone (reported, never deleted).
        pub const ORPHANS: &str = "Orphans";
        /// Reason: orphaned IPs found.
        pub const ORPHANED: &str = "OrphanedIPs";
        /// Reason: no orphan.
        pub const NONE: &str = "None";
    }

    /// Reasons of the traffic-domain kinds' `Ready` condition.
    pub mod traffic {
        /// Valid, references resolve, compiled into the attractor nodes' routing.
        pub const COMPILED: &str = "Compiled";
        /// The object (or one it needs) fails validation: nothing of its trench changes
        /// on any node (the nodes keep their last good config).
        pub const INVALID: &str = "Invalid";
        /// The object has no `trench` label, or its trench does not exist.
        pub const NO_TRENCH: &str = "TrenchNotFound";
        /// A BGP gateway of a `node` trench: accepted, not programmable (no BGP speaker
        /// on the node; in the `meridio` data plane Meridio's frontends speak BGP).
        pub const NOT_PROGRAMMABLE: &str = "NotProgrammable";
        /// Valid, but nothing uses it (no attractor serves it).
        pub const UNUSED: &str = "Unused";
        /// An item clashes with a ClusterConfig/NodeConfig item on some node.
        pub const CONFLICT: &str = "Conflict";
        /// The trench's IPAM or table range ran out.
        pub const EXHAUSTED: &str = "Exhausted";
        /// `meridio` data plane: Meridio's workloads and configuration ConfigMap are
        /// kept as Meridio's operator keeps them.
        pub const DEPLOYED: &str = "Deployed";
        /// `meridio` data plane: Meridio's workloads are applied but not all rolled
        /// out (the message names each and what is missing: `0/1 ready`).
        pub const WORKLOADS_NOT_READY: &str = "WorkloadsNotReady";
        /// `meridio` data plane: the object is in the trench's configuration ConfigMap
        /// that Meridio's components read.
        pub const CONFIGURED: &str = "Configured";
        /// A `resource-template` annotation names no template of some container.
        pub const UNKNOWN_RESOURCE_TEMPLATE: &str = "UnknownResourceTemplate";
    }

    /// Condition types and reasons of the RouteReflectorConfig.
    pub mod route_reflector {
        /// Condition type: a transition is being applied.
        pub const PROGRESSING: &str = "Progressing";
        /// Condition type: Calico's full node-to-node mesh is on.
        pub const NODE_TO_NODE_MESH: &str = "NodeToNodeMesh";
        /// Reason: the cluster holds the topology.
        pub const SETTLED: &str = "Settled";
        /// Reason: a step of a transition is being applied.
        pub const APPLYING: &str = "ApplyingStep";
        /// Reason: the spec does not validate.
        pub const INVALID: &str = "Invalid";
        /// Reason: the mesh is on (`report`: nothing is changed).
        pub const MESH_ON: &str = "MeshEnabled";
        /// Reason: the mesh is off.
        pub const MESH_OFF: &str = "MeshDisabled";
        /// Reason: Calico's API (BGPPeer, BGPConfiguration) is not installed.
        pub const NO_CALICO: &str = "CalicoNotInstalled";
        /// Reason: Calico's etcd (`datastore.etcdv3`) cannot be reached or its TLS
        /// Secret cannot be read.
        pub const DATASTORE_UNREACHABLE: &str = "DatastoreUnreachable";
    }

    /// Reasons of the Kubernetes Events the operator records (`kubectl describe`),
    /// beside the condition reasons above, which Events reuse where they say the same.
    pub mod events {
        /// A policy defines an item differently from another on some node.
        pub const CONFLICT: &str = "Conflict";
        /// A node's NodeNetworkConfig would exceed `--max-object-bytes`: not written.
        pub const TOO_LARGE: &str = "TooLarge";
        /// A FloatingIP's address was released.
        pub const RELEASED: &str = "Released";
        /// A static request is held by another FloatingIP.
        pub const TAKEN: &str = "Taken";
        /// A range holds allocations outside its addresses.
        pub const ALLOCATIONS_OUTSIDE: &str = "AllocationsOutside";
        /// A range has no free address.
        pub const EXHAUSTED: &str = "Exhausted";
        /// A kube-vip ConfigMap could not be written.
        pub const PUBLISH_FAILED: &str = "PublishFailed";
        /// A kube-vip ConfigMap is written again after failures.
        pub const PUBLISHED: &str = "Published";
        /// A routed IP's failover step was applied at the provider.
        pub const FAILOVER_STEP: &str = "FailoverStep";
        /// A routed IP found on another node than its status said (an operator stopped
        /// mid-assignment): the status follows the provider.
        pub const HOLDER_CORRECTED: &str = "HolderCorrected";
        /// A trench was compiled.
        pub const COMPILED: &str = "Compiled";
        /// A node address was handed out on an attractor.
        pub const ADDRESS_ASSIGNED: &str = "AddressAssigned";
        /// A node left an attractor and its address was freed.
        pub const ADDRESS_FREED: &str = "AddressFreed";
        /// A route-reflector transition started.
        pub const TRANSITION_STARTED: &str = "TransitionStarted";
        /// A route-reflector transition step was applied.
        pub const STEP_APPLIED: &str = "StepApplied";
        /// The cluster holds the route-reflector topology.
        pub const SETTLED: &str = "Settled";
        /// Calico's node-to-node mesh was turned off.
        pub const MESH_DISABLED: &str = "MeshDisabled";
        /// A transition went on without calico-node's word that every reflector's BGP
        /// sessions were up (no reports, or sessions down too long; the message says).
        pub const SESSIONS_UNSEEN: &str = "SessionsUnseen";
        /// The route-reflector config cannot be acted on (invalid, no Calico, datastore).
        pub const NOT_READY: &str = "NotReady";
        /// The agent restored objects someone changed behind netpolicy's back (at most
        /// one Event a minute per node, naming them).
        pub const DRIFT_REPAIRED: &str = "DriftRepaired";
        /// The agent keeps restoring the same objects: something fights over them.
        pub const FIGHTING: &str = "Fighting";
    }

    /// Reasons of one entry of `status.itemErrors`.
    pub mod item {
        /// The kernel refused the operation (`errno` says why).
        pub const REFUSED: &str = "Refused";
        /// A foreign object with the item's identity and other content holds it.
        pub const BLOCKED_BY_FOREIGN: &str = "BlockedByForeignObject";
        /// A desired VLAN's name is held by another kind of link.
        pub const NAME_TAKEN: &str = "NameTakenByOtherLink";
        /// Applied without error, but a fresh read of the kernel still differs.
        pub const NOT_CONVERGED: &str = "NotConverged";
        /// An address another host on the segment uses (answered the ARP probe, or
        /// the IPv6 duplicate address detection failed): not added; the message names
        /// the host's MAC when known. Probed again on the next spec change or resync.
        pub const DUPLICATE_ADDRESS: &str = "DuplicateAddress";
        /// Every reason above.
        pub const ALL: [&str; 5] = [
            REFUSED,
            BLOCKED_BY_FOREIGN,
            NAME_TAKEN,
            NOT_CONVERGED,
            DUPLICATE_ADDRESS,
        ];
    }
}

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
