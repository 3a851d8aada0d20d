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
//! - [`route_reflector`]: the RouteReflectorConfig, Nodes and Calico objects →
//!   reflector marks and `BGPPeer`s, applied step by step (kube-runtime `Controller`);
//! - `routed_ip`: RoutedIPs → the node that holds each, cloud IPs and firewalls
//!   (kube-runtime `Controller`, one reconcile per RoutedIP);
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
//!   runner for global jobs ([`runtime::Runner`], [`runtime::Job`]), error classes and
//!   backoff ([`runtime::ErrorClass`], [`runtime::Backoff`]), readiness. See
//!   [`runtime::runner`] for a job written against it, and [`runtime::informer`] for a
//!   subscription;
//! - [`NodeFacts`]: what every job reads of a Node;
//! - [`telemetry`]: the metrics and readiness state the runtime serves;
//! - [`plan`]: `netpolicy plan`, reading manifests from disk ([`manifest`]) and calling
//!   each job's pure functions;
//! - [`agent`]: the node agent; [`cli`]: the `netpolicy` command line;
//! - [`api`]: the custom resources (the `netpolicy-api` crate).

pub mod agent;
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
pub mod route_reflector;
pub(crate) mod routed_ip;
pub(crate) mod routing;
pub mod runtime;
pub mod telemetry;
pub(crate) mod trench;

/// Reading manifests from disk (`netpolicy plan`'s input).
pub use plan::manifest;

pub use error::{Error, Result};
/// What every job reads of a Node (one type, so the jobs agree on "Ready" or "tainted").
pub use k8s::NodeFacts;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
