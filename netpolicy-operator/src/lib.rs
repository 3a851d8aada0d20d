//! # netpolicy-operator
//!
//! The Kubernetes side of netpolicy, one folder per job (DESIGN.md, operator layout):
//!
//! - [`routing`]: ClusterConfig + NodeConfigs → NodeNetworkConfigs (`mod.rs` pure,
//!   `controller.rs` the only part that awaits);
//! - [`route_reflector`]: route reflectors from Nodes and Calico objects;
//! - [`k8s`]: shared Kubernetes plumbing (watches, field managers, the problem type);
//! - [`runtime`]: the operator process (leader election, metrics, health);
//! - [`plan`]: `netpolicy plan`, reading manifests from disk ([`manifest`]) and calling
//!   each job's pure functions;
//! - [`agent`]: the node agent; [`cli`]: the `netpolicy` command line;
//! - [`api`]: the custom resources (the `netpolicy-api` crate).

pub mod agent;
/// The custom resources: the `netpolicy-api` crate, re-exported.
pub use netpolicy_api as api;
pub mod cli;
pub mod k8s;
pub mod plan;
pub mod route_reflector;
pub mod routing;
pub mod runtime;

/// Reading manifests from disk (`netpolicy plan`'s input).
pub use plan::manifest;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
