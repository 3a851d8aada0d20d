//! The traffic-domain kinds' caches: the routing job (which compiles trenches into
//! node policies) and the trench job (which validates them and hands out tables and
//! addresses) watch the same seven kinds with the same fingerprints.

use kube::{
    Api, Client, Resource,
    runtime::reflector::{self, Store},
};

use crate::{
    api::{Attractor, Conduit, Flow, Gateway, Stream, Trench, Vip},
    k8s::{Wake, spec_fingerprint, watched},
};

/// The traffic-domain caches (crate::trench's input).
pub struct TrafficStores {
    /// Trenches.
    pub trenches: Store<Trench>,
    /// Attractors.
    pub attractors: Store<Attractor>,
    /// Gateways.
    pub gateways: Store<Gateway>,
    /// Vips.
    pub vips: Store<Vip>,
    /// Conduits.
    pub conduits: Store<Conduit>,
    /// Streams.
    pub streams: Store<Stream>,
    /// Flows.
    pub flows: Store<Flow>,
}

/// The kinds of [`TrafficStores`], as their watches name them.
pub const TRAFFIC_KINDS: [&str; 7] = [
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
    /// Watches the seven kinds, waking `wake` on the changes that matter.
    pub fn watch(
        client: &Client,
        wake: &Wake,
    ) -> (Self, Vec<futures::stream::BoxStream<'static, ()>>) {
        let (trenches, a) = watched(
            Api::<Trench>::all(client.clone()),
            wake.clone(),
            trench_fingerprint,
            None,
        );
        let (attractors, b) = watched(
            Api::<Attractor>::all(client.clone()),
            wake.clone(),
            child_fingerprint,
            None,
        );
        let (gateways, c) = watched(
            Api::<Gateway>::all(client.clone()),
            wake.clone(),
            child_fingerprint,
            None,
        );
        let (vips, d) = watched(
            Api::<Vip>::all(client.clone()),
            wake.clone(),
            child_fingerprint,
            None,
        );
        let (conduits, e) = watched(
            Api::<Conduit>::all(client.clone()),
            wake.clone(),
            child_fingerprint,
            None,
        );
        let (streams, f) = watched(
            Api::<Stream>::all(client.clone()),
            wake.clone(),
            child_fingerprint,
            None,
        );
        let (flows, g) = watched(
            Api::<Flow>::all(client.clone()),
            wake.clone(),
            child_fingerprint,
            None,
        );
        (
            Self {
                trenches,
                attractors,
                gateways,
                vips,
                conduits,
                streams,
                flows,
            },
            vec![a, b, c, d, e, f, g],
        )
    }

    /// Waits until every cache has its first list.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.trenches.wait_until_ready().await?;
        self.attractors.wait_until_ready().await?;
        self.gateways.wait_until_ready().await?;
        self.vips.wait_until_ready().await?;
        self.conduits.wait_until_ready().await?;
        self.streams.wait_until_ready().await?;
        self.flows.wait_until_ready().await
    }

    /// Copies of every object, in [`crate::trench::Objects`]' shape.
    pub fn snapshot(&self) -> TrafficSnapshot {
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
pub struct TrafficSnapshot {
    /// Trenches.
    pub trenches: Vec<Trench>,
    /// Attractors.
    pub attractors: Vec<Attractor>,
    /// Gateways.
    pub gateways: Vec<Gateway>,
    /// Vips.
    pub vips: Vec<Vip>,
    /// Conduits.
    pub conduits: Vec<Conduit>,
    /// Streams.
    pub streams: Vec<Stream>,
    /// Flows.
    pub flows: Vec<Flow>,
}
