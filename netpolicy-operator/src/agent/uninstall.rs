//! `--cleanup-on-uninstall`: the agent watches its own DaemonSet, so that on a stop it
//! can tell an uninstall (the DaemonSet gone or being deleted: remove what netpolicy
//! made) from a rolling update or a drain (keep the node's configuration).

use std::time::Duration;

use futures::StreamExt;
use kube::{
    Api,
    runtime::{WatchStreamExt, watcher, watcher::Event},
};
use tracing::warn;

/// What the agent last saw of its own DaemonSet (`--cleanup-on-uninstall`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Owner {
    /// Not known yet (the first list has not answered).
    Unknown,
    /// There, not being deleted: a stop is a rolling update or a node drain.
    Present,
    /// Gone or being deleted: a stop is the uninstall.
    Leaving,
}

/// Watches the DaemonSet `namespace/name` (a watch of one name, which the chart's
/// Role allows by `resourceNames`); `None` when `ds` is not `NAMESPACE/NAME`.
pub(super) fn watch_owner(
    client: &kube::Client,
    ds: &str,
) -> Option<tokio::sync::watch::Receiver<Owner>> {
    let Some((namespace, name)) = ds.split_once('/') else {
        warn!(
            daemonset = ds,
            "--cleanup-on-uninstall wants NAMESPACE/NAME; the node will not be cleaned up"
        );
        return None;
    };
    let api: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(client.clone(), namespace);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (tx, rx) = tokio::sync::watch::channel(Owner::Unknown);
    tokio::spawn(async move {
        let of = |d: &k8s_openapi::api::apps::v1::DaemonSet| {
            if d.metadata.deletion_timestamp.is_some() {
                Owner::Leaving
            } else {
                Owner::Present
            }
        };
        let mut events = watcher(api, cfg).default_backoff().boxed();
        let mut listed = false;
        while let Some(ev) = events.next().await {
            let now = match ev {
                Ok(Event::Apply(d)) => of(&d),
                Ok(Event::Delete(_)) => Owner::Leaving,
                Ok(Event::Init) => {
                    listed = false;
                    continue;
                }
                Ok(Event::InitApply(d)) => {
                    listed = true;
                    of(&d)
                }
                Ok(Event::InitDone) if !listed => Owner::Leaving,
                Ok(Event::InitDone) => continue,
                // Not allowed or not reachable: what was last seen stands.
                Err(e) => {
                    warn!(error = %e, "watching the agent's DaemonSet (retrying)");
                    continue;
                }
            };
            tx.send_if_modified(|o| std::mem::replace(o, now) != now);
        }
    });
    Some(rx)
}

/// Whether the DaemonSet `namespace/name` is gone or being deleted: as the watch last
/// saw it (waiting up to 3 s for a deletion in flight), else as the API server says
/// now. When neither can say, the answer is no: a node is never cleaned up on a guess.
pub(super) async fn uninstalled(
    client: &kube::Client,
    ds: &str,
    owner: Option<&mut tokio::sync::watch::Receiver<Owner>>,
) -> bool {
    if let Some(rx) = owner {
        let seen = tokio::time::timeout(
            Duration::from_secs(3),
            rx.wait_for(|o| *o == Owner::Leaving),
        )
        .await;
        if matches!(seen, Ok(Ok(_))) {
            return true;
        }
    }
    let Some((namespace, name)) = ds.split_once('/') else {
        return false;
    };
    let api: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(None) => true,
        Ok(Some(d)) => d.metadata.deletion_timestamp.is_some(),
        Err(e) => {
            warn!(error = %e, "could not read the agent's DaemonSet; not cleaning up");
            false
        }
    }
}
