//! # netpolicy-core
//!
//! The pure policy engine of [netpolicy](https://github.com/netpolicy/netpolicy): the
//! typed model of a Kubernetes node's routing state (VLANs, addresses, routes, rules),
//! validation with field paths, Kubernetes label selectors, the merge of one
//! ClusterConfig and many NodeConfigs into per-node desired state (from scratch and
//! incrementally), and the plan of kernel operations that takes a node from what it has
//! to what it should have.
//!
//! ```toml
//! [dependencies]
//! netpolicy-core = "0.1"
//! ```
//!
//! MSRV: Rust 1.89. No Kubernetes version to choose: this crate has no kube or
//! k8s-openapi dependency.
//!
//! No I/O: no tokio, no kube, no netlink, no clock. Adapters (`netpolicy-netlink`,
//! `netpolicy-operator`) carry the results out.
//!
//! | module | what |
//! |---|---|
//! | [`spec`] | wire types users write (camelCase, serde, schemars) |
//! | [`model`] | validated, typed items and their identities |
//! | [`validate`] | spec → model, every problem with its field path |
//! | [`selector`] | label selectors with Kubernetes semantics |
//! | [`merge`] | precedence, conflicts, the incremental [`merge::Engine`] |
//! | [`plan`] | observed + desired → ordered kernel operations |
//! | [`render`] | model and merge results → wire form ([`render::RenderedSpec`]) |
//! | [`fleet`] | groups, content-addressed renderings, rollout waves: which rendering a node runs |
//!
//! Modules depend one way: `spec` ← `model` ← `validate` ← `selector` ← `merge` ←
//! `plan`, `render` (no cycles).
//!
//! # Examples
//! ```
//! use netpolicy_core::{
//!     merge::{Engine, Policy},
//!     selector::Labels,
//!     spec::{LabelSelector, RouteSpec, RoutingSpec},
//! };
//!
//! let routes = RoutingSpec {
//!     routes: vec![RouteSpec {
//!         to: "10.20.0.0/16".into(),
//!         via: Some("10.10.0.1".into()),
//!         table: Some(100),
//!         ..Default::default()
//!     }],
//!     ..Default::default()
//! };
//! let selector = LabelSelector {
//!     match_labels: [("zone".to_string(), "a".to_string())].into(),
//!     ..Default::default()
//! };
//! let policy = Policy::node_config(
//!     "zone-a",
//!     0,
//!     selector.validate("spec.nodeSelector")?,
//!     routes.validate("spec")?,
//! );
//! let node = |zone: &str| Labels::from([("zone".to_string(), zone.to_string())]);
//! let engine = Engine::build(
//!     [("n1".to_string(), node("a")), ("n2".to_string(), node("b"))],
//!     [policy],
//! );
//! let n1 = engine.outcome("n1").and_then(|o| o.config()).unwrap();
//! assert_eq!(n1.routes().count(), 1);
//! assert_eq!(n1.routes().next().unwrap().sources[0].to_string(), "NodeConfig/zone-a");
//! assert!(engine.outcome("n2").and_then(|o| o.config()).unwrap().is_empty());
//! # Ok::<(), netpolicy_core::Error>(())
//! ```
//!
//! # Complexity
//!
//! | operation | cost |
//! |---|---|
//! | validation | O(items log items) |
//! | [`merge::merge`] of k policies with n items in all | O(n log n) |
//! | [`merge::Engine::build`] | O(Σ selected nodes + distinct policy sets × merge) |
//! | policy change in the engine | O(nodes it selected or selects + new policy sets × merge) |
//! | node relabel in the engine | O(policies × requirements) |
//! | [`plan::plan`] | O((observed + desired) log) |

pub mod error;
pub mod fleet;
pub mod hash;
pub mod merge;
pub mod model;
pub mod names;
pub mod plan;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod render;
pub mod rollout;
pub mod selector;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod spec;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod validate;

pub use error::{Error, FieldError, Result};

/// What an embedder uses: `use netpolicy_core::prelude::*;` brings in the user-facing
/// spec types, validation's result types, the merge engine and the kernel plan.
pub mod prelude {
    pub use crate::{
        error::{Error, FieldError, Result},
        merge::{Engine, LayeredConfig, MergedConfig, NodeOutcome, Policy, Problem, Source},
        model::RoutingConfig,
        plan::{Observed, Op, Plan, plan},
        selector::{Labels, Selector},
    };
    #[cfg(feature = "serde")]
    pub use crate::{
        render::RenderedSpec,
        spec::{LabelSelector, RouteSpec, RoutingSpec, RuleSpec, VlanSpec},
    };
}

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
