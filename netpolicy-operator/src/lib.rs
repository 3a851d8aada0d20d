//! # netpolicy-operator
//!
//! The Kubernetes side of netpolicy, one folder per job (docs/architecture.md, operator layout):
//!
//! - [`routing`]: ClusterConfig + NodeConfigs → NodeNetworkConfigs (`mod.rs` pure,
//!   `controller.rs` the only part that awaits);
//! - [`floating_ip`]: FloatingIPRanges, FloatingIPs and Namespaces → one
//!   FloatingIPClaim per address, statuses, kube-vip ConfigMaps (the rule is
//!   `netpolicy_ipam::assign`; a controller);
//! - [`route_reflector`]: the RouteReflectorConfig, Nodes and Calico objects →
//!   reflector marks and `BGPPeer`s, applied step by step (a controller);
//! - [`routed_ip`]: RoutedIPs → the node that holds each, cloud IPs and firewalls (a
//!   controller);
//! - [`trench`]: Meridio-style traffic domains → validated, tables and node addresses
//!   recorded in each Trench's status, compiled into per-node policies that the routing
//!   job renders (a controller);
//!
//! Each job folder's `mod.rs` is pure and `controller.rs` is the only part that awaits;
//! jobs do not import each other, with one exception: the routing job compiles
//! trenches with [`trench`]'s pure functions from what the trench job recorded in each
//! Trench's status (docs/architecture.md). The runtime runs every controller while it holds the
//! lease.
//! - [`k8s`]: shared Kubernetes plumbing (watches, field managers, the problem type,
//!   the Node facts every job reads);
//! - [`runtime`]: how a job runs — one shared informer per kind
//!   ([`runtime::Informers`]), one runner for global jobs ([`runtime::Runner`],
//!   [`runtime::Job`]), error classes and backoff ([`runtime::ErrorClass`]) — and the
//!   operator process (leader election, health and metrics endpoints). Other operators
//!   may reuse the informers and the runner for their own jobs: see [`runtime::runner`]'s
//!   example;
//! - [`telemetry`]: the metrics and health flags controllers and the agent update;
//! - [`plan`]: `netpolicy plan`, reading manifests from disk ([`manifest`]) and calling
//!   each job's pure functions;
//! - [`agent`]: the node agent; [`cli`]: the `netpolicy` command line;
//! - [`api`]: the custom resources (the `netpolicy-api` crate).

pub mod agent;
/// The custom resources: the `netpolicy-api` crate, re-exported.
pub use netpolicy_api as api;
pub mod cli;
pub mod convert;
pub mod error;
pub mod floating_ip;
pub mod k8s;
pub mod plan;
pub mod route_reflector;
pub mod routed_ip;
pub mod routing;
pub mod runtime;
pub mod telemetry;
pub mod trench;

/// Reading manifests from disk (`netpolicy plan`'s input).
pub use plan::manifest;

pub use error::{Error, Result};

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
