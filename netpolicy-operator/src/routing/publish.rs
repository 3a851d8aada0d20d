//! Writes the shared objects a routing pass prepared ([`super::fleet::prepare`]; issue
//! 68): the renderings they name that are not stored yet, then the rollouts that are
//! new or moved on, then the fleet when it changed, then deletes the rollouts folded
//! into it, then the renderings nothing names (one collection delete, once no rollout
//! is under way). In that order: an agent never reads a rollout or a fleet naming a
//! rendering that is not there, never finds its group without a rendering between a
//! rollout's folding and its deletion, and a rendering goes only once nothing names
//! it. A pass that found nothing new writes nothing.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use futures::StreamExt;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
    core::PartialObjectMeta,
    runtime::reflector::Store,
};
use tracing::{debug, info};

use super::{
    fleet::{Prepared, Published},
    shared::{layer_parts, part_name, parts, source_key},
};
use crate::{
    api::{
        FLEET_NAME, LAYER_LABEL_PREFIX, LayerDelta, NetworkFleet, NetworkRollout,
        NodeNetworkRendering, NodeNetworkRenderingSpec, RENDERING_LABEL, delta_name, group_label,
        layer_label, render::RenderedSpec,
    },
    k8s::{FIELD_MANAGER, MANAGED_BY, sent::digest},
};

/// A rendering part's JSON at most (an agent reads small objects; the API server's
/// own limit is ~1.5 MiB): 64 KiB with room for the object's metadata.
pub(crate) const MAX_PART_BYTES: usize = 64 * 1024 - 1024;

/// The metadata-only answer to a collection request (`PartialObjectMetadataList`).
const METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// What writes the shared objects, and the caches it compares with.
pub(crate) struct Publisher {
    pub(crate) fleets: Api<NetworkFleet>,
    pub(crate) rollouts: Api<NetworkRollout>,
    pub(crate) renderings: Api<NodeNetworkRendering>,
    pub(crate) fleet_store: Store<NetworkFleet>,
    pub(crate) rollout_store: Store<NetworkRollout>,
    pub(crate) rendering_store: Store<PartialObjectMeta<NodeNetworkRendering>>,
    /// The last fleet and rollouts sent and the cached version each went over (not sent
    /// again until the cache moves).
    pub(crate) sent: crate::k8s::Sent,
    /// Renderings whose deletion was asked for, until the cache no longer has them.
    pub(crate) deleted: std::sync::Mutex<BTreeSet<String>>,
    /// Rollouts whose deletion was asked for, until the cache no longer has them.
    pub(crate) deleted_rollouts: std::sync::Mutex<BTreeSet<String>>,
    /// Rendering parts created, until the cache has them.
    pub(crate) created: std::sync::Mutex<BTreeSet<String>>,
    /// How each rendering a pass needed is stored (renderings never change: laid out
    /// once, not on every pass).
    pub(crate) laid: std::sync::Mutex<BTreeMap<String, Laid>>,
    /// The last layer laid out for each set of sources (`ClusterConfig/default`), with
    /// its items: a new layer of the same sources gets a delta from it ([`delta_object`]).
    pub(crate) last_layers: std::sync::Mutex<BTreeMap<String, (String, Arc<RenderedSpec>)>>,
}

/// The objects a rendering is stored as, and its layers ([`super::shared::Rendering`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Laid {
    /// Its parts' and its layers' parts' object names.
    objects: Vec<String>,
    /// Its layers.
    layers: Vec<String>,
}

impl Publisher {
    /// A publisher writing through `client`, comparing with the stores given, having
    /// sent nothing yet.
    pub(crate) fn new(
        client: &kube::Client,
        fleet_store: Store<NetworkFleet>,
        rollout_store: Store<NetworkRollout>,
        rendering_store: Store<PartialObjectMeta<NodeNetworkRendering>>,
    ) -> Self {
        Self {
            fleets: Api::all(client.clone()),
            rollouts: Api::all(client.clone()),
            renderings: Api::all(client.clone()),
            fleet_store,
            rollout_store,
            rendering_store,
            sent: crate::k8s::Sent::default(),
            deleted: std::sync::Mutex::default(),
            deleted_rollouts: std::sync::Mutex::default(),
            created: std::sync::Mutex::default(),
            laid: std::sync::Mutex::default(),
            last_layers: std::sync::Mutex::default(),
        }
    }

    /// The fleet and the rollouts as stored.
    pub(crate) fn current(&self) -> Published {
        let fleet = self
            .fleet_store
            .state()
            .iter()
            .find(|f| f.name_any() == FLEET_NAME)
            .map(|f| f.spec.clone())
            .unwrap_or_default();
        let rollouts = self
            .rollout_store
            .state()
            .iter()
            .filter(|r| r.metadata.deletion_timestamp.is_none())
            .map(|r| (r.name_any(), r.spec.clone()))
            .collect();
        Published { fleet, rollouts }
    }

    /// Applies `object` (named `name`, of `api`) by server-side apply when it differs
    /// from `stored` (with its cached version) and was not sent over that version
    /// already; whether it was written.
    async fn apply<K>(
        &self,
        api: &Api<K>,
        name: &str,
        object: &K,
        stored: Option<(bool, Option<String>)>,
    ) -> Result<bool, kube::Error>
    where
        K: kube::Resource<DynamicType = ()>
            + serde::Serialize
            + serde::de::DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        let (same, over) = stored.unwrap_or((false, None));
        let key = format!("{}/{name}", K::kind(&()));
        let what = digest(&serde_json::to_string(object).unwrap_or_default());
        if same || self.sent.unseen(&key, what, over.as_deref()) {
            return Ok(false);
        }
        let ap = PatchParams::apply(FIELD_MANAGER).force();
        if let Err(e) = api.patch(name, &ap, &Patch::Apply(object)).await {
            self.sent.forget(&key);
            return Err(e);
        }
        self.sent.record(&key, what, over.as_deref());
        Ok(true)
    }

    /// Writes what `p` needs, new rendering parts `concurrency` at a time; returns how
    /// many writes it made.
    ///
    /// # Errors
    /// The first refused write: nothing after it is sent (a rollout is not published
    /// over a rendering that failed to be written; renderings are not deleted while the
    /// objects that stop naming them are not stored).
    pub(crate) async fn publish(
        &self,
        p: &Prepared,
        concurrency: usize,
    ) -> Result<usize, kube::Error> {
        let needed = p.published.referenced();
        let mut writes = self.create_renderings(p, &needed, concurrency).await?;
        writes += self.apply_rollouts(p).await?;
        writes += self.apply_fleet(p, needed.len()).await?;
        writes += self.delete_folded(p).await?;
        if p.published.rollouts.is_empty() {
            writes += self.delete_unnamed(&needed).await?;
        }
        Ok(writes)
    }

    /// Creates the parts of the renderings in `needed` that are not stored, and of
    /// their layers, `concurrency` at a time (independent objects); how many were
    /// created. A layer two renderings share is created once.
    async fn create_renderings(
        &self,
        p: &Prepared,
        needed: &BTreeSet<String>,
        concurrency: usize,
    ) -> Result<usize, kube::Error> {
        let stored: BTreeSet<String> = self
            .rendering_store
            .state()
            .iter()
            .map(|o| o.name_any())
            .collect();
        let mut missing = self.missing(p, needed, &stored);
        // Created by an earlier pass and not in the cache yet: not sent again (the
        // cache lags the creates of a large change by seconds).
        let names: BTreeSet<String> = missing.iter().map(ResourceExt::name_any).collect();
        let new = Self::not_asked(&self.created, names);
        missing.retain(|o| new.contains(&o.name_any()));
        let created: Vec<(String, Result<bool, kube::Error>)> = futures::stream::iter(missing)
            .map(|o| {
                async move {
                    let r = match self.create_part(&o).await {
                        Ok(_) => Ok(true),
                        // Written before, not in the cache yet: the same content (its
                        // name is its content); no write made.
                        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                        Err(e) => Err(e),
                    };
                    (o.name_any(), r)
                }
            })
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        let mut writes = 0;
        let mut failed = None;
        for (name, r) in created {
            match r {
                Ok(w) => writes += usize::from(w),
                Err(e) => {
                    // Asked again by the next pass.
                    self.created
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(&name);
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(writes), Err)
    }

    /// The objects of the renderings in `needed` (and of their layers) that are not in
    /// `stored`, each once, laying out those not laid out yet.
    fn missing(
        &self,
        p: &Prepared,
        needed: &BTreeSet<String>,
        stored: &BTreeSet<String>,
    ) -> Vec<NodeNetworkRendering> {
        let mut missing: BTreeMap<String, NodeNetworkRendering> = BTreeMap::new();
        let mut deltas = Vec::new();
        let mut laid = self
            .laid
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        laid.retain(|r, _| needed.contains(r));
        let mut last = self
            .last_layers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Each layer's objects, once a pass (renderings of many groups share it).
        let mut layer_objects: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        let mut add = |of: &str, part: &NodeNetworkRenderingSpec, layers: &[String]| {
            let object = part_name(of, part.part, part.parts);
            if !stored.contains(&object) && !missing.contains_key(&object) {
                let mut labels = BTreeMap::from([
                    (RENDERING_LABEL.to_owned(), of.to_owned()),
                    (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
                ]);
                labels.extend(layers.iter().map(|l| (layer_label(l), "true".to_owned())));
                let mut o = NodeNetworkRendering::new(&object, part.clone());
                o.metadata.labels = Some(labels);
                missing.insert(object.clone(), o);
            }
            object
        };
        for name in needed {
            let Some(r) = p.shared.renderings.get(name) else {
                continue; // Named before: stored then.
            };
            if laid
                .get(name)
                .is_some_and(|l| l.objects.iter().all(|o| stored.contains(o)))
            {
                continue;
            }
            let mut objects = Vec::new();
            for (layer, items) in &r.layers {
                if let Some(o) = layer_objects.get(layer.as_str()) {
                    objects.extend(o.iter().cloned());
                    continue;
                }
                let parts = layer_parts(layer, items, MAX_PART_BYTES);
                let new = !parts
                    .iter()
                    .all(|p| stored.contains(&part_name(layer, p.part, p.parts)));
                let these: Vec<String> = parts.iter().map(|part| add(layer, part, &[])).collect();
                objects.extend(these.iter().cloned());
                layer_objects.insert(layer, these);
                deltas.extend(delta_object(&mut last, layer, items, new));
            }
            let layers: Vec<String> = r.layers.iter().map(|(n, _)| n.clone()).collect();
            for part in &parts(name, &r.own, &layers, MAX_PART_BYTES) {
                objects.push(add(name, part, &layers));
            }
            laid.insert(name.clone(), Laid { objects, layers });
        }
        for d in deltas {
            if !stored.contains(&d.name_any()) {
                missing.insert(d.name_any(), d);
            }
        }
        missing.into_values().collect()
    }

    /// Applies the rollouts that are new or moved on, labelled with each group they
    /// move (an agent watches its group's only); how many were written.
    async fn apply_rollouts(&self, p: &Prepared) -> Result<usize, kube::Error> {
        let stored: BTreeMap<String, (NetworkRollout, Option<String>)> = self
            .rollout_store
            .state()
            .iter()
            .map(|r| {
                (
                    r.name_any(),
                    (NetworkRollout::clone(r), r.resource_version()),
                )
            })
            .collect();
        let mut writes = 0;
        for (name, spec) in &p.published.rollouts {
            let mut labels = BTreeMap::from([(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())]);
            labels.extend(
                spec.groups
                    .iter()
                    .map(|g| (group_label(&g.group), "true".to_owned())),
            );
            let mut o = NetworkRollout::new(name, spec.clone());
            o.metadata.labels = Some(labels);
            let was = stored
                .get(name)
                .map(|(r, v)| (r.spec == *spec && r.labels() == o.labels(), v.clone()));
            if self.apply(&self.rollouts, name, &o, was).await? {
                writes += 1;
                let open = spec.groups.iter().filter(|g| g.through.is_some()).count();
                info!(rollout = %name, groups = spec.groups.len(), open, "NetworkRollout published");
            }
        }
        Ok(writes)
    }

    /// Applies the fleet when it differs from the stored one; 1 when it was written.
    async fn apply_fleet(&self, p: &Prepared, renderings: usize) -> Result<usize, kube::Error> {
        let fleet = &p.published.fleet;
        let stored = self
            .fleet_store
            .state()
            .iter()
            .find(|f| f.name_any() == FLEET_NAME)
            .map(|f| (f.spec == *fleet, f.resource_version()));
        let mut f = NetworkFleet::new(FLEET_NAME, fleet.clone());
        f.metadata.labels = Some(BTreeMap::from([(
            MANAGED_BY.0.to_owned(),
            MANAGED_BY.1.to_owned(),
        )]));
        let written = self.apply(&self.fleets, FLEET_NAME, &f, stored).await?;
        if written {
            info!(
                groups = fleet.groups.len(),
                renderings, "NetworkFleet published"
            );
        }
        Ok(usize::from(written))
    }

    /// Deletes the stored rollouts `p` no longer has (folded into the fleet, or moved
    /// on by newer ones); how many deletes were sent.
    async fn delete_folded(&self, p: &Prepared) -> Result<usize, kube::Error> {
        let gone: BTreeSet<String> = self
            .rollout_store
            .state()
            .iter()
            .filter(|r| {
                !p.published.rollouts.contains_key(&r.name_any())
                    && r.metadata.deletion_timestamp.is_none()
                    && managed(r.labels())
            })
            .map(|r| r.name_any())
            .collect();
        let mut writes = 0;
        for name in Self::not_asked(&self.deleted_rollouts, gone) {
            match self.rollouts.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    writes += 1;
                    debug!(rollout = %name, "NetworkRollout finished: deleted");
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(writes)
    }

    /// Deletes the renderings nothing in `needed` names: one request for all of them (a
    /// collection delete by label). Called once no rollout is under way (rollouts
    /// finish at different passes: one delete per quiet spell, not one per rollout).
    async fn delete_unnamed(&self, needed: &BTreeSet<String>) -> Result<usize, kube::Error> {
        let state = self.rendering_store.state();
        // The layers of the renderings needed, as this process laid them out and as
        // their stored parts' labels say (a rendering named before this process).
        let mut needed = needed.clone();
        let laid = self
            .laid
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(r, _)| needed.contains(*r))
            .flat_map(|(_, l)| l.layers.clone())
            .collect::<Vec<String>>();
        let labelled = state
            .iter()
            .filter(|o| {
                o.labels()
                    .get(RENDERING_LABEL)
                    .is_some_and(|r| needed.contains(r))
            })
            .flat_map(|o| {
                o.labels()
                    .keys()
                    .filter_map(|k| k.strip_prefix(LAYER_LABEL_PREFIX))
                    .map(str::to_owned)
                    .collect::<Vec<String>>()
            })
            .collect::<Vec<String>>();
        needed.extend(laid);
        needed.extend(labelled);
        let unnamed: BTreeSet<String> = state
            .iter()
            .filter(|o| managed(o.labels()) && o.metadata.deletion_timestamp.is_none())
            .filter_map(|o| o.labels().get(RENDERING_LABEL).cloned())
            .filter(|r| !needed.contains(r))
            .collect();
        let unnamed = Self::not_asked(&self.deleted, unnamed);
        if unnamed.is_empty() {
            return Ok(0);
        }
        let names: Vec<&str> = unnamed.iter().map(String::as_str).collect();
        let lp = ListParams::default().labels(&format!(
            "{}={},{RENDERING_LABEL} in ({})",
            MANAGED_BY.0,
            MANAGED_BY.1,
            names.join(",")
        ));
        match self.delete_collection(&lp).await {
            Ok(_) => {
                debug!(
                    renderings = unnamed.len(),
                    "renderings no group runs: deleted"
                );
                Ok(1)
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Creates rendering part `o`. Without strict field checks (`fieldValidation=Ignore`:
    /// the body is serialized from our own types, so it has no unknown or duplicate
    /// field for the API server to look for) and without parsing the answer, which is the
    /// object just sent (60 KB for 500 routes). An error status is an error as from
    /// [`Api::create`].
    async fn create_part(&self, o: &NodeNetworkRendering) -> Result<(), kube::Error> {
        let body = serde_json::to_vec(o).map_err(kube::Error::SerdeError)?;
        let uri = format!(
            "{}?fieldManager={FIELD_MANAGER}&fieldValidation=Ignore",
            self.renderings.resource_url()
        );
        let req = http::Request::post(uri)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .map_err(kube::Error::HttpError)?;
        let client = self.renderings.clone().into_client();
        client
            .request::<serde::de::IgnoredAny>(req)
            .await
            .map(|_| ())
    }

    /// Deletes the renderings `lp` selects, asking for the deleted objects' metadata
    /// only: the API server answers a collection delete with every object it deleted,
    /// which for the renderings a cluster-wide edit leaves is their whole content (6 MB
    /// at 100 groups of 500 routes, ~75 MiB once parsed).
    async fn delete_collection(&self, lp: &ListParams) -> Result<(), kube::Error> {
        let mut req = kube::core::Request::new(self.renderings.resource_url())
            .delete_collection(&DeleteParams::default(), lp)
            .map_err(kube::Error::BuildRequest)?;
        req.headers_mut().insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static(METADATA_LIST),
        );
        req.extensions_mut().insert("delete_collection");
        let client = self.renderings.clone().into_client();
        client
            .request_status::<kube::core::ObjectList<PartialObjectMeta<NodeNetworkRendering>>>(req)
            .await
            .map(|_| ())
    }

    /// Of `names` (deletions, or creates, this pass would ask for), those not in
    /// `asked` (asked for already: one the cache has not caught up with is not asked
    /// again); names not given any more are forgotten.
    fn not_asked(
        asked: &std::sync::Mutex<BTreeSet<String>>,
        names: BTreeSet<String>,
    ) -> BTreeSet<String> {
        let mut asked = asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        asked.retain(|r| names.contains(r));
        let new: BTreeSet<String> = names.difference(&asked).cloned().collect();
        asked.extend(new.iter().cloned());
        new
    }
}

/// The object holding the delta to layer `name` (its `items`) from the last other
/// layer laid out for the same sources, when `name` is `new` (not stored yet) and the
/// delta is under half the layer's size (else a reader may as well read the layer);
/// `name` is remembered as its sources' last layer either way. Agents that hold the old
/// layer then read a few items instead of the whole layer (a ClusterConfig's edit of
/// one route of 500: ~0.4 KB instead of 60 KB each).
fn delta_object(
    last: &mut BTreeMap<String, (String, Arc<RenderedSpec>)>,
    name: &str,
    items: &Arc<RenderedSpec>,
    new: bool,
) -> Option<NodeNetworkRendering> {
    // The layer its sources have last (another rendering names it too): no delta.
    if last.values().any(|(l, _)| l == name) {
        return None;
    }
    let sources = items
        .vlans
        .first()
        .map(|s| &s.sources)
        .or_else(|| items.routes.first().map(|s| &s.sources))
        .or_else(|| items.addresses.first().map(|s| &s.sources))
        .or_else(|| items.rules.first().map(|s| &s.sources))?;
    let previous = last.insert(source_key(sources), (name.to_owned(), Arc::clone(items)));
    let (from, old) = previous.filter(|(from, _)| new && from != name)?;
    let delta = LayerDelta {
        from,
        to: name.to_owned(),
        changes: old.delta_to(items),
    };
    let size = serde_json::to_vec(&delta).map_or(usize::MAX, |b| b.len());
    let whole = serde_json::to_vec(&**items).map_or(0, |b| b.len());
    if size > MAX_PART_BYTES || size.saturating_mul(2) > whole {
        return None;
    }
    let object = delta_name(name);
    let mut o = NodeNetworkRendering::new(
        &object,
        NodeNetworkRenderingSpec {
            rendering: object.clone(),
            part: 0,
            parts: 1,
            delta: Some(delta),
            ..NodeNetworkRenderingSpec::default()
        },
    );
    o.metadata.labels = Some(BTreeMap::from([
        (RENDERING_LABEL.to_owned(), object),
        (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
    ]));
    Some(o)
}

/// Whether `labels` say netpolicy made the object.
fn managed(labels: &BTreeMap<String, String>) -> bool {
    labels.get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1)
}

#[cfg(test)]
mod tests {
    use netpolicy_core::{
        render::{SourceRef, SourcedSpec},
        spec::RouteSpec,
    };

    use super::*;
    use crate::{
        api::{Joined, NodeNetworkConfigSpec, join, layer_address},
        routing::shared::{LAYER_MIN_BYTES, Rendering},
    };

    /// A rendering of a ClusterConfig's 500 routes (a layer) and one NodeConfig route;
    /// `via(i)` gives route `i`'s gateway.
    fn rendering(via: impl Fn(usize) -> &'static str) -> NodeNetworkConfigSpec {
        let source = |kind: &str, name: &str| SourceRef {
            kind: kind.into(),
            name: name.into(),
        };
        let mut routes: Vec<SourcedSpec<RouteSpec>> = (0..500)
            .map(|i| SourcedSpec {
                item: RouteSpec {
                    to: format!("10.{}.{}.0/24", 100 + i / 250, i % 250),
                    via: Some(via(i).into()),
                    ..Default::default()
                },
                sources: vec![source("ClusterConfig", "default")],
            })
            .collect();
        routes.push(SourcedSpec {
            item: RouteSpec {
                to: "10.200.0.0/16".into(),
                via: Some("192.0.2.9".into()),
                ..Default::default()
            },
            sources: vec![source("NodeConfig", "pool-00")],
        });
        NodeNetworkConfigSpec {
            rendered: RenderedSpec {
                routes,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The one layer of `spec`, with its items.
    fn layer(spec: &NodeNetworkConfigSpec) -> (String, Arc<RenderedSpec>) {
        let r = Rendering::of(spec, LAYER_MIN_BYTES, &mut BTreeMap::new());
        assert_eq!(
            r.layers.len(),
            1,
            "the ClusterConfig's routes are one layer"
        );
        r.layers[0].clone()
    }

    #[test]
    fn a_new_layer_of_the_same_sources_gets_a_small_delta_that_gives_it() {
        let mut last = BTreeMap::new();
        let (a, a_parts) = layer(&rendering(|_| "192.0.2.1"));
        assert_eq!(
            delta_object(&mut last, &a, &a_parts, true),
            None,
            "the first layer of its sources has no delta"
        );
        let (b, b_parts) = layer(&rendering(
            |i| if i == 7 { "192.0.2.2" } else { "192.0.2.1" },
        ));
        let o = delta_object(&mut last, &b, &b_parts, true).expect("a delta to the new layer");
        assert_eq!(o.name_any(), delta_name(&b));
        assert_eq!(o.labels().get(RENDERING_LABEL), Some(&delta_name(&b)));
        let d = o.spec.delta.as_ref().unwrap();
        assert_eq!((d.from.as_str(), d.to.as_str()), (a.as_str(), b.as_str()));
        assert_eq!(d.changes.routes.added(), 1, "only the edited route");
        let bytes = serde_json::to_vec(&o).unwrap().len();
        assert!(bytes < 1024, "the delta object is {bytes} bytes");
        // It gives the new layer exactly, as the agent checks.
        // (As stored, in parts, and read back.)
        let old = join(&a, &layer_parts(&a, &a_parts, MAX_PART_BYTES)).unwrap();
        let new = join(&b, &layer_parts(&b, &b_parts, MAX_PART_BYTES)).unwrap();
        assert_eq!(layer_address(&new.rendered), b);
        assert_eq!(Joined::from_delta(d, &old), Ok(new));
        // The same layer again (another group's rendering) or a stored one: no delta.
        assert_eq!(delta_object(&mut last, &b, &b_parts, true), None);
        let (c, c_parts) = layer(&rendering(
            |i| if i == 9 { "192.0.2.3" } else { "192.0.2.1" },
        ));
        assert_eq!(delta_object(&mut last, &c, &c_parts, false), None);
        // Every route changed: the delta is no smaller than the layer, none written.
        let (e, e_parts) = layer(&rendering(|_| "192.0.2.4"));
        assert_eq!(delta_object(&mut last, &e, &e_parts, true), None);
        assert_eq!(last.len(), 1, "one set of sources");
        assert_eq!(last["ClusterConfig/default"].0, e);
    }
}
