//! # netpolicy-operator
//!
//! The Kubernetes side of netpolicy: the runtime that runs jobs, the five jobs, the node
//! agent and `netpolicy plan`. One folder per job (docs/architecture.md, operator
//! layout); each job's folder holds its rules (`mod.rs`, pure) and its reconcile
//! (`controller.rs`), nothing about how it is driven. The jobs are internal to the
//! `netpolicy` binary:
//!
//! - `routing`: ClusterConfig + NodeConfigs → NodeNetworkConfigs (a global job);
//! - `floating_ip`: FloatingIPRanges, FloatingIPs and Namespaces → one FloatingIPClaim
//!   per address, statuses, kube-vip ConfigMaps (the rule is `netpolicy_ipam::assign`; a
//!   global job);
//! - `route_reflector`: the RouteReflectorConfig, Nodes and Calico objects →
//!   reflector marks and `BGPPeer`s, applied step by step (a global job);
//! - `routed_ip`: RoutedIPs → the node that holds each, cloud IPs and firewalls
//!   (a per-object job: one reconcile per RoutedIP);
//! - `trench`: Meridio-style traffic domains → validated, tables and node addresses
//!   recorded in each Trench's status, compiled into per-node policies that the routing
//!   job renders (a global job).
//!
//! Jobs do not import each other, with one exception: the routing job compiles trenches
//! with the trench job's pure functions from what it recorded in each Trench's status.
//!
//! What other operators may reuse:
//!
//! - [`runtime`]: how a job runs — one shared informer per kind
//!   ([`runtime::Informers`]: one WATCH per resource whatever the number of jobs), one
//!   runner for global jobs ([`runtime::Runner`], [`runtime::Job`]) and per-object jobs
//!   ([`runtime::ObjectJob`], [`runtime::Runner::run_each`]), error classes and backoff
//!   ([`runtime::ErrorClass`], [`runtime::Backoff`]), readiness and the metrics it
//!   serves ([`runtime::Shared`]). See [`runtime::runner`] and [`runtime::per_object`]
//!   for a job written against each shape, and [`runtime::informer`] for a
//!   subscription. The runtime imports no job;
//! - [`process`]: what a netpolicy process shares (logs, client, probes, signals);
//!   [`operator`]: `netpolicy operator`, the jobs wired to the runtime;
//! - [`NodeFacts`]: what every job reads of a Node;
//! - [`plan`]: `netpolicy plan`, reading manifests from disk ([`manifest`]) and calling
//!   each job's pure functions;
//! - [`cli`]: the `netpolicy` command line (`netpolicy agent` runs the node agent);
//! - [`api`]: the custom resources (the `netpolicy-api` crate).

pub(crate) mod agent;
/// The custom resources: the `netpolicy-api` crate, re-exported.
pub use netpolicy_api as api;
pub mod cli;
pub(crate) mod convert;
pub mod error;
pub(crate) mod floating_ip;
pub(crate) mod k8s;
pub mod operator;
pub mod plan;
pub mod process;
pub(crate) mod route_reflector;
pub(crate) mod routed_ip;
pub(crate) mod routing;
pub mod runtime;
pub mod status;
pub(crate) mod telemetry;
pub(crate) mod trench;

/// What the end-to-end tests read of the operator's internals (not an API: it changes
/// with them). The route-reflector test computes the cluster's reflector state as the
/// job does, and the etcd test drives the job's etcd client.
#[doc(hidden)]
pub mod testing {
    pub use crate::route_reflector::{current, etcd, node_info};
}

/// The node agent's options (`netpolicy agent`), and how it reads a shared rendering's
/// objects (for a custom agent reading them as the agent does).
pub use agent::{AgentOptions, list_labelled};

/// Reading manifests from disk (`netpolicy plan`'s input).
pub use plan::manifest;

pub use error::{Error, Result};
/// What every job reads of a Node (one type, so the jobs agree on "Ready" or "tainted").
pub use k8s::{CachedNode, CachedNodeSpec, CachedNodeStatus, NodeFacts, NodeView};

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
