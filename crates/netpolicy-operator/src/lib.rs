//! # netpolicy-operator
//!
//! The Kubernetes side of netpolicy: the `netpolicy.io/v1alpha1` custom resources
//! ([`api`]), reading Kubernetes manifests from disk ([`manifest`]), the cluster-less
//! planner behind `netpolicy plan` ([`plan`]), route reflectors from Nodes and Calico
//! objects ([`rr`]), the operator process ([`runtime`]: leader election, metrics, health)
//! and its controllers ([`controllers`]), the node agent ([`agent`]), and the `netpolicy`
//! command line ([`cli`]).

pub mod agent;
pub mod api;
pub mod cli;
pub mod controllers;
pub mod manifest;
pub mod plan;
pub mod rr;
pub mod runtime;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
