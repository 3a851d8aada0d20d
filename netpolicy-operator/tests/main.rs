//! netpolicy-operator's integration tests: one test binary, one module per file of
//! `tests/` (`tests/faults.rs` is the module `faults`).
//!
//! One binary links once: as 37 binaries, each linking kube, tokio, the AWS SDK and the
//! whole workspace, their build was the longest step of `scripts/test` (issue 65).
//!
//! A module is what a test binary was, and it still runs as a process of its own:
//! the control planes of `netpolicy_testenv::shared()`, `second()` and `third()` belong
//! to the process, and modules were written for one each (cluster-scoped singletons such
//! as the ClusterConfig `default`, quiet counts over a whole API server). So run one
//! module at a time, as `scripts/test-binaries` does (each module by its exact test
//! names, in a process of its own, three at a time):
//!
//! ```text
//! cargo test -p netpolicy-operator --all-features --test integration -- faults::
//! cargo test -p netpolicy-operator --all-features --test integration -- --ignored bgp_live::
//! scripts/test-binaries                      # every module of every crate
//! ```
//!
//! A filter is a substring: `agent::` also selects `faults_agent::`, which
//! `scripts/test-binaries` avoids by passing exact names.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// The `netpolicy` binary's allocator (its default feature `mimalloc`), so that what the
/// tests run in this process (the scale runs' simulated agents: `shared_scale`,
/// `agent_scale`) allocates as the agent does. With glibc's malloc the 10,000 simulated
/// agents spent over half their CPU in malloc, free and the kernel's page clearing.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod common;

mod agent;
mod agent_scale;
mod alerts;
mod apiserver_crds;
mod bgp_live;
mod bgp_live_full;
mod docs;
mod faults;
mod faults_agent;
mod floating_ip_scale;
mod floating_ips;
mod fuzz;
mod guest_clusters;
mod guides;
mod guides_on_node;
mod helm_chart;
mod meridio_workloads;
mod node_cleanup;
mod operator_runtime;
mod plan_cli;
mod real_node;
mod return_routing;
mod rollout;
mod route_reflector_scale;
mod route_reflectors;
mod route_reflectors_etcd;
mod route_reflectors_remote;
mod routed_ips;
mod routing_per_node_scale;
mod routing_scale;
mod runtime_jobs;
mod runtime_scale;
mod secrets;
mod shared_renderings;
mod shared_scale;
mod status;
mod three_nodes;
mod traffic_crds;
mod traffic_domains;
