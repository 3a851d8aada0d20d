//! Writes the shared objects a routing pass prepared ([`super::fleet::prepare`]; issue
//! 68): the renderings the fleet refers to that are not stored yet, then the fleet when
//! it changed, then deletes the renderings it no longer refers to. In that order: an
//! agent never reads a fleet naming a rendering that is not there, and a rendering goes
//! only once nothing names it. A pass that found nothing new writes nothing.

use std::collections::{BTreeMap, BTreeSet};

use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
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
    k8s::{FIELD_MANAGER, MANAGED_BY},
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
}

impl Publisher {
    /// The fleet as stored.
    pub(crate) fn current(&self) -> Option<NetworkFleetSpec> {
        self.fleet_store
            .state()
            .iter()
            .find(|f| f.name_any() == FLEET_NAME)
            .map(|f| f.spec.clone())
    }

    /// Writes what `p` needs; returns how many writes it made.
    ///
    /// # Errors
    /// The first refused write: nothing after it is sent (a fleet is not published
    /// over a rendering that failed to be written; renderings are not deleted while the
    /// fleet that stops naming them is not stored).
    pub(crate) async fn publish(&self, p: &Prepared) -> Result<usize, kube::Error> {
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
        for name in &needed {
            let Some(spec) = p.shared.renderings.get(name) else {
                continue; // Named by the fleet before: stored then.
            };
            let cut = parts(name, spec, MAX_PART_BYTES);
            for part in cut {
                let object = part_name(name, part.part, part.parts);
                if stored.contains(&object) {
                    continue;
                }
                let mut o = NodeNetworkRendering::new(&object, part);
                o.metadata.labels = Some(BTreeMap::from([
                    (RENDERING_LABEL.to_owned(), name.clone()),
                    (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
                ]));
                match self.renderings.create(&pp, &o).await {
                    Ok(_) => writes += 1,
                    // Written before, not in the cache yet: the same content (its name
                    // is its content).
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if self.current().as_ref() != Some(&p.fleet) {
            let mut f = NetworkFleet::new(FLEET_NAME, p.fleet.clone());
            f.metadata.labels = Some(BTreeMap::from([(
                MANAGED_BY.0.to_owned(),
                MANAGED_BY.1.to_owned(),
            )]));
            let ap = PatchParams::apply(FIELD_MANAGER).force();
            self.fleets
                .patch(FLEET_NAME, &ap, &Patch::Apply(&f))
                .await?;
            writes += 1;
            info!(
                groups = p.fleet.groups.len(),
                renderings = needed.len(),
                "NetworkFleet published"
            );
        }
        for o in self.rendering_store.state() {
            let labels = o.labels();
            let ours = labels.get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1);
            let named = labels
                .get(RENDERING_LABEL)
                .is_some_and(|r| needed.contains(r));
            if !ours || named || o.metadata.deletion_timestamp.is_some() {
                continue;
            }
            match self
                .renderings
                .delete(&o.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {
                    writes += 1;
                    debug!(rendering = %o.name_any(), "rendering no group runs: deleted");
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(writes)
    }
}
