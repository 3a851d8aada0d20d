//! Writes the shared objects a routing pass prepared ([`super::fleet::prepare`]; issue
//! 68): the renderings the fleet refers to that are not stored yet, then the fleet when
//! it changed, then deletes the renderings it no longer refers to (one collection
//! delete). In that order: an
//! agent never reads a fleet naming a rendering that is not there, and a rendering goes
//! only once nothing names it. A pass that found nothing new writes nothing.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    core::PartialObjectMeta,
    runtime::reflector::Store,
};
use tracing::{debug, info};

use super::{
    fleet::{Prepared, referenced},
    shared::{part_name, parts},
};
use crate::{
    api::{FLEET_NAME, NetworkFleet, NetworkFleetSpec, NodeNetworkRendering, RENDERING_LABEL},
    k8s::{FIELD_MANAGER, MANAGED_BY, sent::digest},
};

/// A rendering part's JSON at most (an agent reads small objects; the API server's
/// own limit is ~1.5 MiB): 64 KiB with room for the object's metadata.
pub(crate) const MAX_PART_BYTES: usize = 64 * 1024 - 1024;

/// What writes the shared objects, and the caches it compares with.
pub(crate) struct Publisher {
    pub(crate) fleets: Api<NetworkFleet>,
    pub(crate) renderings: Api<NodeNetworkRendering>,
    pub(crate) fleet_store: Store<NetworkFleet>,
    pub(crate) rendering_store: Store<PartialObjectMeta<NodeNetworkRendering>>,
    /// The last fleet sent and the cached version it went over (not sent again until
    /// the cache moves).
    pub(crate) sent: crate::k8s::Sent,
    /// Renderings whose deletion was asked for, until the cache no longer has them.
    pub(crate) deleted: std::sync::Mutex<BTreeSet<String>>,
}

impl Publisher {
    /// The fleet as stored.
    pub(crate) fn current(&self) -> Option<NetworkFleetSpec> {
        self.stored_fleet().map(|f| f.spec)
    }

    fn stored_fleet(&self) -> Option<NetworkFleet> {
        self.fleet_store
            .state()
            .iter()
            .find(|f| f.name_any() == FLEET_NAME)
            .map(|f| NetworkFleet::clone(f))
    }

    /// Writes what `p` needs, new rendering parts `concurrency` at a time; returns how
    /// many writes it made.
    ///
    /// # Errors
    /// The first refused write: nothing after it is sent (a fleet is not published
    /// over a rendering that failed to be written; renderings are not deleted while the
    /// fleet that stops naming them is not stored).
    pub(crate) async fn publish(
        &self,
        p: &Prepared,
        concurrency: usize,
    ) -> Result<usize, kube::Error> {
        let stored: BTreeSet<String> = self
            .rendering_store
            .state()
            .iter()
            .map(|o| o.name_any())
            .collect();
        let needed = referenced(&p.fleet);
        let mut writes = 0;
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        // The missing parts, `concurrency` at a time (independent objects).
        let mut missing = Vec::new();
        for name in &needed {
            let Some(spec) = p.shared.renderings.get(name) else {
                continue; // Named by the fleet before: stored then.
            };
            for part in parts(name, spec, MAX_PART_BYTES) {
                let object = part_name(name, part.part, part.parts);
                if stored.contains(&object) {
                    continue;
                }
                let mut o = NodeNetworkRendering::new(&object, part);
                o.metadata.labels = Some(BTreeMap::from([
                    (RENDERING_LABEL.to_owned(), name.clone()),
                    (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
                ]));
                missing.push(o);
            }
        }
        let created: Vec<Result<bool, kube::Error>> = futures::stream::iter(missing)
            .map(|o| {
                let pp = &pp;
                async move {
                    match self.renderings.create(pp, &o).await {
                        Ok(_) => Ok(true),
                        // Written before, not in the cache yet: the same content (its
                        // name is its content); no write made.
                        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                        Err(e) => Err(e),
                    }
                }
            })
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        for r in created {
            writes += usize::from(r?);
        }
        // The fleet, when it differs from the stored one and this very fleet was not
        // sent over the stored version already (the cache not showing it yet).
        let stored_fleet = self.stored_fleet();
        let over = stored_fleet
            .as_ref()
            .and_then(|f| f.metadata.resource_version.clone());
        let what = digest(&serde_json::to_string(&p.fleet).unwrap_or_default());
        if stored_fleet.map(|f| f.spec) != Some(p.fleet.clone())
            && !self.sent.unseen(FLEET_NAME, what, over.as_deref())
        {
            let mut f = NetworkFleet::new(FLEET_NAME, p.fleet.clone());
            f.metadata.labels = Some(BTreeMap::from([(
                MANAGED_BY.0.to_owned(),
                MANAGED_BY.1.to_owned(),
            )]));
            let ap = PatchParams::apply(FIELD_MANAGER).force();
            if let Err(e) = self.fleets.patch(FLEET_NAME, &ap, &Patch::Apply(&f)).await {
                self.sent.forget(FLEET_NAME);
                return Err(e);
            }
            self.sent.record(FLEET_NAME, what, over.as_deref());
            writes += 1;
            info!(
                groups = p.fleet.groups.len(),
                renderings = needed.len(),
                "NetworkFleet published"
            );
        }
        // Renderings nothing names any more: one request for all of them (a
        // collection delete by label), once no rollout is under way (groups finish at
        // different passes: one delete per edit, not one per group).
        let under_way = p
            .fleet
            .groups
            .iter()
            .any(|g| g.through.as_deref() != Some("*"));
        if under_way {
            return Ok(writes);
        }
        let unnamed: BTreeSet<String> = self
            .rendering_store
            .state()
            .iter()
            .filter(|o| {
                let labels = o.labels();
                labels.get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1)
                    && labels
                        .get(RENDERING_LABEL)
                        .is_some_and(|r| !needed.contains(r))
                    && o.metadata.deletion_timestamp.is_none()
            })
            .filter_map(|o| o.labels().get(RENDERING_LABEL).cloned())
            .collect();
        // Those asked for already and still in the cache are not asked for again.
        let unnamed = {
            let mut asked = self
                .deleted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            asked.retain(|r| unnamed.contains(r));
            let new: BTreeSet<String> = unnamed.difference(&asked).cloned().collect();
            asked.extend(new.iter().cloned());
            new
        };
        if !unnamed.is_empty() {
            let names: Vec<&str> = unnamed.iter().map(String::as_str).collect();
            let lp = ListParams::default().labels(&format!(
                "{}={},{RENDERING_LABEL} in ({})",
                MANAGED_BY.0,
                MANAGED_BY.1,
                names.join(",")
            ));
            match self
                .renderings
                .delete_collection(&DeleteParams::default(), &lp)
                .await
            {
                Ok(_) => {
                    writes += 1;
                    debug!(
                        renderings = unnamed.len(),
                        "renderings no group runs: deleted"
                    );
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(writes)
    }
}
