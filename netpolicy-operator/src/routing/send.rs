//! One NodeNetworkConfig write carried out by the verb [`super::writes::verb`] chose, with
//! the server-side apply it falls back to.

use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use tracing::debug;

use super::writes::Verb;
use crate::{api::NodeNetworkConfig, k8s::FIELD_MANAGER};

/// Writes `obj`, the NodeNetworkConfig of `node`, by `how` (over `stored`, the cache's
/// copy, for an update). A create that finds one stored after all (the cache was behind),
/// an update over a version that is no longer the stored one (an agent's status write
/// came in between) or of one gone are applied instead, in the same call: the outcome is
/// the apply's whichever verb was tried.
pub(crate) async fn send(
    api: &Api<NodeNetworkConfig>,
    node: &str,
    obj: &serde_json::value::RawValue,
    how: Verb,
    stored: Option<&NodeNetworkConfig>,
    apply: &PatchParams,
) -> Result<(), kube::Error> {
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let ours = || serde_json::from_str::<NodeNetworkConfig>(obj.get()).ok();
    let tried = match (how, stored) {
        (Verb::Create, _) => match ours() {
            Some(o) => Some(api.create(&pp, &o).await),
            None => None,
        },
        (Verb::Update, Some(stored)) => match ours() {
            // The stored object as the cache has it (its managedFields are not sent: the
            // API server keeps them), with our spec; a status sent with an update is
            // ignored (it is a subresource).
            Some(o) => {
                let mut next = stored.clone();
                next.spec = o.spec;
                next.status = None;
                Some(api.replace(node, &pp, &next).await)
            }
            None => None,
        },
        _ => None,
    };
    match tried {
        Some(Ok(_)) => Ok(()),
        Some(Err(kube::Error::Api(e))) if matches!(e.code, 404 | 409 | 422) => {
            debug!(
                node,
                code = e.code,
                ?how,
                "NodeNetworkConfig applied instead"
            );
            api.patch(node, apply, &Patch::Apply(obj)).await.map(|_| ())
        }
        Some(Err(e)) => Err(e),
        None => api.patch(node, apply, &Patch::Apply(obj)).await.map(|_| ()),
    }
}
