//! How a job runs: one shared informer per kind ([`informer`]: one WATCH per resource
//! whatever the number of jobs), the global jobs under one [`Runner`] ([`runner`]), the
//! per-object jobs on kube-runtime's `Controller` under the same runner
//! ([`per_object`]), error classes and backoff, readiness and metrics.
//!
//! The runtime imports no job and nothing of the process that runs it: `netpolicy
//! operator` ([`crate::operator`]) wires the jobs to it, and the process plumbing (logs,
//! client, probes, signals) is [`crate::process`]'s.

mod backoff;
mod changes;
pub mod informer;
pub mod per_object;
mod registry;
pub mod runner;

pub use changes::{Changes, ObjectKey, Wake};
pub use informer::{Informer, InputKinds, Inputs, KindHealth, KindState};
pub use per_object::{ObjectJob, ObjectSetup};
pub use registry::Informers;
pub use runner::{Backoff, ErrorClass, Job, JobError, JobReadiness, Next, Runner, Setup};

pub use crate::telemetry::{ControllerLabel, Metrics, Shared};

/// The configuration of the per-object jobs' kube-runtime `Controller`s: the same
/// debounce as the [`Runner`]'s (a burst of related changes, such as 10,000 Nodes listed
/// at start, is one reconcile per object, not one per event).
pub fn controller_config() -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default().debounce(runner::DEBOUNCE)
}

/// A client that is never connected (for tests that start no watch).
#[cfg(test)]
pub(crate) fn offline_client() -> kube::Client {
    let config = kube::Config::new(
        "http://127.0.0.1:9"
            .parse()
            .unwrap_or_else(|_| unreachable!("a valid URI")),
    );
    kube::Client::try_from(config).unwrap_or_else(|e| panic!("{e}"))
}
