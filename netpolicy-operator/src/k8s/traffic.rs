//! The traffic-domain kinds' caches: the routing job (which compiles trenches into
//! node policies) and the trench job (which validates them and hands out tables and
//! addresses) watch the same seven kinds with the same fingerprints.

use kube::{Resource, runtime::reflector::Store};

use crate::{
    api::{Attractor, Conduit, Flow, Gateway, Stream, Trench, Vip},
    k8s::spec_fingerprint,
    runtime::{Informers, InputKinds, Inputs},
};

/// The traffic-domain caches (crate::trench's input).
pub(crate) struct TrafficStores {
    /// The seven kinds, as changes name them.
    pub(crate) kinds: InputKinds,
    /// Trenches.
    pub(crate) trenches: Store<Trench>,
    /// Attractors.
    pub(crate) attractors: Store<Attractor>,
    /// Gateways.
    pub(crate) gateways: Store<Gateway>,
    /// Vips.
    pub(crate) vips: Store<Vip>,
    /// Conduits.
    pub(crate) conduits: Store<Conduit>,
    /// Streams.
    pub(crate) streams: Store<Stream>,
    /// Flows.
    pub(crate) flows: Store<Flow>,
}

/// The traffic-domain kinds, as manifests name them.
pub(crate) const TRAFFIC_KINDS: [&str; 7] = [
    "Trench",
    "Attractor",
    "Gateway",
    "Vip",
    "Conduit",
    "Stream",
    "Flow",
];

/// A child's spec generation and trench label (the label groups it, and a label change
/// bumps no generation).
fn child_fingerprint<K: Resource>(o: &K) -> String {
    format!(
        "{}|{:?}",
        spec_fingerprint(o),
        o.meta()
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::api::TRENCH_LABEL))
    )
}

/// A Trench's spec generation and what its job handed out (its status, not its
/// conditions).
fn trench_fingerprint(t: &Trench) -> String {
    let st = t.status.clone().unwrap_or_default();
    format!(
        "{}|{:?}|{:?}|{:?}",
        spec_fingerprint(t),
        st.table,
        st.stream_tables,
        st.node_addresses
    )
}

impl TrafficStores {
    /// Reads the seven kinds' shared informers as inputs of a job (the changes that
    /// matter); returns the caches.
    pub(crate) fn subscribe(informers: &Informers, inputs: &mut Inputs) -> Self {
        fn one<K>(informers: &Informers, inputs: &mut Inputs, fp: fn(&K) -> String) -> Store<K>
        where
            K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
                + Clone
                + std::fmt::Debug
                + serde::de::DeserializeOwned
                + Send
                + Sync
                + 'static,
        {
            inputs.read(&informers.get_namespaced::<K>(), fp)
        }
        let ((trenches, attractors, gateways, vips, conduits, streams, flows), kinds) = inputs
            .group(|inputs| {
                (
                    one(informers, inputs, trench_fingerprint),
                    one(informers, inputs, child_fingerprint::<Attractor>),
                    one(informers, inputs, child_fingerprint::<Gateway>),
                    one(informers, inputs, child_fingerprint::<Vip>),
                    one(informers, inputs, child_fingerprint::<Conduit>),
                    one(informers, inputs, child_fingerprint::<Stream>),
                    one(informers, inputs, child_fingerprint::<Flow>),
                )
            });
        Self {
            kinds,
            trenches,
            attractors,
            gateways,
            vips,
            conduits,
            streams,
            flows,
        }
    }

    /// Copies of every object, in [`crate::trench::Objects`]' shape.
    pub(crate) fn snapshot(&self) -> TrafficSnapshot {
        fn all<K: Clone + Resource<DynamicType = ()> + 'static>(s: &Store<K>) -> Vec<K> {
            s.state().iter().map(|o| (**o).clone()).collect()
        }
        TrafficSnapshot {
            trenches: all(&self.trenches),
            attractors: all(&self.attractors),
            gateways: all(&self.gateways),
            vips: all(&self.vips),
            conduits: all(&self.conduits),
            streams: all(&self.streams),
            flows: all(&self.flows),
        }
    }
}

/// Owned copies of the traffic-domain objects.
#[derive(Debug, Default)]
pub(crate) struct TrafficSnapshot {
    /// Trenches.
    pub(crate) trenches: Vec<Trench>,
    /// Attractors.
    pub(crate) attractors: Vec<Attractor>,
    /// Gateways.
    pub(crate) gateways: Vec<Gateway>,
    /// Vips.
    pub(crate) vips: Vec<Vip>,
    /// Conduits.
    pub(crate) conduits: Vec<Conduit>,
    /// Streams.
    pub(crate) streams: Vec<Stream>,
    /// Flows.
    pub(crate) flows: Vec<Flow>,
}
