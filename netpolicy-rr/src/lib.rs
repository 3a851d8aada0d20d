//! # netpolicy-rr
//!
//! Calico BGP route-reflector topology for netpolicy: how many reflectors per zone,
//! which nodes, which `BGPPeer` objects and node marks, and how to move from the current
//! state to the target without leaving any node without a session. Pure: no I/O, no
//! clock, no randomness.
//!
//! ```toml
//! [dependencies]
//! netpolicy-rr = "0.1"
//! ```
//!
//! Everything its signatures use is re-exported (`FieldError`, `Labels`, `Selector`, and
//! netpolicy-core as `netpolicy_rr::netpolicy_core`). MSRV: Rust 1.89.
//!
//! # Pipeline
//! 1. [`place`]: sizing, eligibility and stable placement with cluster IDs.
//! 2. [`topology()`]: the `simple` or `multi` peering, its `BGPPeer` objects and the
//!    marks on nodes (see [`mod@topology`] for how `multi` balances and groups).
//! 3. [`transition()`]: make-before-break steps from the [`Current`] state.
//! 4. [`sim::verify`]: replays a plan against Calico's selector semantics, its
//!    node-to-node mesh and BIRD's route reflection, counting only the sessions that
//!    are up (BIRD restarts a session whose `rr client`/`rr cluster id` changes): no
//!    node loses its last session or a route it should keep, at any operation, except
//!    a node whose own cluster ID changes (it restarts every session; reported), and at
//!    the end every node learns every other node's route. Live BGP agrees
//!    (netpolicy-operator's `tests/bgp_live.rs`: Calico's confd and BIRD).
//!
//! [`Engine`] keeps a topology and updates it for one node added or removed without
//! recomputing the cluster.
//!
//! # Rules
//! - Sizing: per zone, `clamp(ceil(ready × ratio), min, max)`, never more than the
//!   eligible nodes (a zone short of `min` uses all of them and says so). With
//!   [`Per::Cluster`] the cluster-wide count is spread over zones as evenly as possible.
//! - Eligibility: Ready, schedulable, matching `eligibleNodes`, and every `NoSchedule` /
//!   `NoExecute` taint tolerated.
//! - Stability: a reflector stays while it is eligible and needed. New reflectors are
//!   preferred nodes first, then the oldest (long-lived nodes make stable reflectors),
//!   then by name. Scaling down removes the reflector with the fewest current clients
//!   (fewest peerings to move; counted through reflector sets, so in `simple`, where a
//!   zone's reflectors all serve the same clients, the next rules decide); ties go
//!   against non-preferred, then the youngest, then the last name.
//! - Cluster IDs: a reflector drops a reflected route whose CLUSTER_LIST holds its own
//!   cluster ID (BIRD, RFC 4456), so reflectors share an ID only where they serve the
//!   same clients. `simple` (either `per`): one ID per zone with reflectors, the zone's
//!   reflectors serving its clients alike; a zone keeps the ID its reflectors hold
//!   (a new zone never renumbers the others), new ones count up the last octet from
//!   `clusterID` skipping IDs in use. `multi`: every reflector its own ID (a zone's
//!   reflectors serve different sets there), kept while it holds it alone. With one
//!   shared ID for everything (the old `per: cluster`) or per zone in `multi`, clients
//!   of one reflector never learned routes of clients of another when no path around
//!   existed (one zone, no zone label, `peersPerNode: 1`); [`sim`] shows it.
//! - Marks: reflectors carry the reflector label with value [`reflector_token`] (their
//!   name when it is a valid label value) and the [`CLUSTER_ID_ANNOTATION`]; `multi`
//!   clients carry one `rr.netpolicy.io/set-<id>` label.
//!
//! # Examples
//! ```
//! use netpolicy_rr::{Config, Current, Kind, NodeInfo, sim, topology, transition};
//!
//! let nodes: Vec<NodeInfo> = (0..30)
//!     .map(|i| NodeInfo::ready(&format!("n{i:02}"), ["a", "b", "c"][i % 3], i as i64))
//!     .collect();
//! let config = Config { topology: Kind::Multi, ..Config::default() };
//! let now = Current::default();
//! let t = topology(&nodes, &config, &now)?;
//! assert_eq!(t.placement.zones[0].reflectors, ["n00", "n03", "n06"]); // oldest first
//! assert_eq!(t.clients["n09"].len(), 3);
//! let steps = transition(&nodes, &now, &t);
//! sim::verify(&nodes, &now, &steps, &t, &config.reflector_label).unwrap();
//! # Ok::<(), netpolicy_rr::Error>(())
//! ```
//!
//! # Complexity
//!
//! | operation | cost (n nodes, z zones, R reflectors, p peers per node) |
//! |---|---|
//! | [`place`] | O(n log n + z log z) |
//! | [`topology()`] | O(n log n + n·R·p) for `multi` (R sets checked per new client) |
//! | [`transition()`] | O(n log n) |
//! | [`Engine::add_node`] / [`Engine::remove_node`] | O(R·p + log n) when the reflectors stay |

pub mod calico;
mod config;
mod engine;
mod links;
mod place;
pub mod sim;
mod state;
pub mod topology;
pub mod transition;

pub use config::{
    Config, DEFAULT_REFLECTOR_LABEL, DEFAULT_ZONE_LABEL, Effect, Kind, NodeInfo, Per, Taint,
    Toleration,
};
pub use engine::{Change, Engine};
/// netpolicy-core's types in this crate's signatures ([`FieldError`] in
/// [`Error::Invalid`], [`Labels`] and [`Selector`] in [`NodeInfo`] and [`Config`]),
/// re-exported so that one dependency line is enough; the whole crate as
/// [`netpolicy_core`].
pub use netpolicy_core::{
    self, FieldError,
    selector::{Labels, Selector},
};
pub use place::{Placement, ZonePlacement, place};
pub use state::{
    BGP_PEER_PREFIX, BgpPeer, CLUSTER_ID_ANNOTATION, Current, Marks, SET_LABEL_PREFIX,
    reflector_token,
};
pub use topology::{Topology, balance_bound, topology, topology_for};
pub use transition::{Op, Phase, Step, transition};

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of `netpolicy-rr`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The configuration is invalid; every problem is listed with its field.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
    /// Two different reflector sets hashed to the same 64-bit id (never seen; reported
    /// rather than silently merging two sets).
    #[error("{0}")]
    Collision(String),
}

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
