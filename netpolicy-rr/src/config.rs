//! Inputs: nodes, taints and tolerations, and the validated configuration.

use std::net::Ipv4Addr;

use netpolicy_core::{
    FieldError,
    selector::{Labels, Selector},
};

use crate::{Error, Result};

/// A taint's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effect {
    /// `NoSchedule`.
    NoSchedule,
    /// `PreferNoSchedule` (does not affect eligibility).
    PreferNoSchedule,
    /// `NoExecute`.
    NoExecute,
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value (empty when none).
    pub value: String,
    /// Effect.
    pub effect: Effect,
}

/// A toleration, with Kubernetes' matching rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Toleration {
    /// Key; empty with `exists` tolerates every key.
    pub key: String,
    /// `Exists` (any value) instead of `Equal`.
    pub exists: bool,
    /// Value for `Equal`.
    pub value: String,
    /// Effect; `None` tolerates every effect.
    pub effect: Option<Effect>,
}

impl Toleration {
    /// Whether this toleration tolerates `taint` (Kubernetes `ToleratesTaint`).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if self.exists {
            self.key.is_empty() || self.key == taint.key
        } else {
            self.key == taint.key && self.value == taint.value
        }
    }
}

/// What the topology needs to know about a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Labels (the zone is read from `Config::zone_label`).
    pub labels: Labels,
    /// The Ready condition is True.
    pub ready: bool,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Creation time, seconds since the epoch (only its order matters).
    pub created: i64,
}

impl NodeInfo {
    /// A Ready, schedulable, untainted node in `zone` (label
    /// `topology.kubernetes.io/zone`), for examples and tests.
    pub fn ready(name: &str, zone: &str, created: i64) -> Self {
        Self {
            name: name.to_owned(),
            labels: Labels::from([(DEFAULT_ZONE_LABEL.to_owned(), zone.to_owned())]),
            ready: true,
            unschedulable: false,
            taints: Vec::new(),
            created,
        }
    }
}

/// Reflectors sized per zone or for the whole cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Per {
    /// Each zone sized on its own.
    #[default]
    Zone,
    /// One cluster-wide count, spread over zones.
    Cluster,
}

/// How clients peer with reflectors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Kind {
    /// Every client peers with every reflector of its zone.
    #[default]
    Simple,
    /// Every client peers with `peers_per_node` reflectors, one in its zone and one in
    /// another zone where one exists, balanced over reflectors.
    Multi,
}

/// The default reflector label key.
pub const DEFAULT_REFLECTOR_LABEL: &str = "calico-route-reflector";

/// The default zone label.
pub const DEFAULT_ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The validated `RouteReflectorConfig` as far as placement needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Fewest reflectors per zone (or cluster).
    pub min: u32,
    /// Most reflectors per zone (or cluster).
    pub max: u32,
    /// Reflectors per Ready node.
    pub ratio: f64,
    /// Zone or cluster sizing.
    pub per: Per,
    /// Label holding the zone.
    pub zone_label: String,
    /// Nodes that may be reflectors.
    pub eligible: Selector,
    /// Nodes chosen first; `None` prefers none (an empty selector would prefer all).
    pub preferred: Option<Selector>,
    /// Taints reflectors may have.
    pub tolerations: Vec<Toleration>,
    /// Base cluster ID.
    pub cluster_id: Ipv4Addr,
    /// Label key set on reflector nodes.
    pub reflector_label: String,
    /// `simple` or `multi`.
    pub topology: Kind,
    /// Reflectors per client (`multi`).
    pub peers_per_node: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            min: 3,
            max: 10,
            ratio: 0.005,
            per: Per::Zone,
            zone_label: DEFAULT_ZONE_LABEL.to_owned(),
            eligible: Selector::everything(),
            preferred: None,
            tolerations: Vec::new(),
            cluster_id: Ipv4Addr::new(224, 0, 0, 1),
            reflector_label: DEFAULT_REFLECTOR_LABEL.to_owned(),
            topology: Kind::Simple,
            peers_per_node: 3,
        }
    }
}

impl Config {
    /// Checks the numbers; field paths are those of the `RouteReflectorConfig` spec.
    ///
    /// # Errors
    /// [`Error::Invalid`] listing every problem.
    pub fn check(&self) -> Result<()> {
        let mut p = Vec::new();
        if self.min > self.max {
            p.push(FieldError::new(
                "spec.min",
                format!("min {} is larger than max {}", self.min, self.max),
            ));
        }
        if !(self.ratio.is_finite() && self.ratio > 0.0 && self.ratio <= 1.0) {
            p.push(FieldError::new(
                "spec.ratio",
                format!("ratio {} is not in (0, 1]", self.ratio),
            ));
        }
        // An empty zone label: no zones, the whole cluster is one (the Calico
        // route-reflector operator without ROUTE_REFLECTOR_ZONE_LABEL).
        for (path, key) in [
            ("spec.zoneLabel", &self.zone_label),
            ("spec.reflectorLabel", &self.reflector_label),
        ] {
            if let Some(bad) = key
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || "_./-".contains(*c)))
            {
                p.push(FieldError::new(
                    path,
                    format!("label key {key:?} contains {bad:?}; keys are [A-Za-z0-9_./-]"),
                ));
            }
        }
        if self.reflector_label.is_empty() {
            p.push(FieldError::new(
                "spec.reflectorLabel",
                "the reflector label must not be empty",
            ));
        }
        if self.peers_per_node == 0 {
            p.push(FieldError::new(
                "spec.peersPerNode",
                "peersPerNode must be at least 1",
            ));
        }
        if p.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid(p))
        }
    }

    /// The zone of `node` (empty when it has no zone label).
    pub fn zone_of<'a>(&self, node: &'a NodeInfo) -> &'a str {
        node.labels.get(&self.zone_label).map_or("", String::as_str)
    }

    /// Whether `node` may be a reflector.
    pub fn is_eligible(&self, node: &NodeInfo) -> bool {
        node.ready
            && !node.unschedulable
            && self.eligible.matches(&node.labels)
            && node.taints.iter().all(|t| {
                t.effect == Effect::PreferNoSchedule
                    || self.tolerations.iter().any(|tol| tol.tolerates(t))
            })
    }

    /// Reflectors wanted for `ready` Ready nodes, before the eligible-node cap.
    pub fn wanted(&self, ready: usize) -> u32 {
        let raw = (ready as f64 * self.ratio).ceil();
        let raw = if raw >= f64::from(u32::MAX) {
            u32::MAX
        } else {
            raw as u32
        };
        raw.clamp(self.min, self.max)
    }
}
