//! The floating-IP job's publishing: kube-vip's ConfigMaps in this cluster and in guest
//! clusters (each visited side by side with the others, bounded in time), and where a
//! Rancher Cluster runs on Harvester. The rules that say what to publish are
//! [`crate::floating_ip::pass()`]'s and [`crate::floating_ip::guest`]'s; this is the I/O.

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
    runtime::events::EventType,
};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::{
    api::conditions::events,
    floating_ip::{GuestFailure, GuestState, Install, KubeVipConfigMap, KubeVipPublication, guest},
    k8s::FIELD_MANAGER,
    runtime::{Backoff, ErrorClass, ObjectKey},
};

/// Longest wait between tries of an unreachable guest cluster.
const GUEST_MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Longest a guest publication may take; a slow guest never holds up the others long.
const GUEST_TIMEOUT: Duration = Duration::from_secs(15);

impl super::Writer {
    /// Writes the kube-vip ConfigMaps of this cluster that differ and are not waiting
    /// out a backoff. Returns how many were written, and whether the publication state
    /// of any changed (the FloatingIPs' `Published` follows it).
    pub(super) async fn publish_local(&mut self, maps: &[KubeVipConfigMap]) -> (usize, bool) {
        let now = Instant::now();
        let mut written = 0;
        let mut changed = false;
        let wanted: BTreeSet<String> = maps
            .iter()
            .map(|cm| format!("{}/{}", cm.namespace, cm.name))
            .collect();
        self.published.retain(|k, _| wanted.contains(k));
        self.publish_backoff.retain(|k, _| wanted.contains(k));
        for cm in maps {
            let key = format!("{}/{}", cm.namespace, cm.name);
            if self
                .publish_backoff
                .get(&key)
                .is_some_and(|(at, _, _)| *at > now)
            {
                continue;
            }
            let api = Api::<ConfigMap>::namespaced(self.client.clone(), &cm.namespace);
            let state = match publish(&api, cm).await {
                Ok(wrote) => {
                    written += usize::from(wrote);
                    if self.publish_backoff.remove(&key).is_some() {
                        info!(configmap = key, "kube-vip ConfigMap written again");
                    }
                    Ok(())
                }
                Err(e) => {
                    let class = ErrorClass::of(&e);
                    let b = self
                        .publish_backoff
                        .entry(key.clone())
                        .or_insert_with(|| (now, class.backoff(), false));
                    b.2 = class == ErrorClass::Transient;
                    let delay = b.1.next_delay();
                    b.0 = Instant::now() + delay;
                    warn!(configmap = key, error = %e, retry_in = ?delay, "kube-vip ConfigMap not written");
                    self.metrics.publish_failed(&key);
                    Err(match &e {
                        kube::Error::Api(s) => format!("{} ({})", s.message, s.reason),
                        e => e.to_string(),
                    })
                }
            };
            let before = self.published.get(&key).cloned();
            if before.as_ref() != Some(&state) {
                // An Event on each range publishing there, when the write starts failing
                // (or fails differently) and when it goes through again.
                let event = match (&before, &state) {
                    (_, Err(why)) => Some((
                        EventType::Warning,
                        events::PUBLISH_FAILED,
                        format!(
                            "kube-vip ConfigMap {key} cannot be written: {why} (retrying with backoff)"
                        ),
                    )),
                    (Some(Err(_)), Ok(())) => Some((
                        EventType::Normal,
                        events::PUBLISHED,
                        format!("kube-vip ConfigMap {key} written again"),
                    )),
                    _ => None,
                };
                if let Some((type_, reason, note)) = event {
                    for r in self.stores.ranges.state() {
                        let publishes_here = r.spec.kube_vip.as_ref().is_some_and(|kv| {
                            kv.guest_kubeconfig_secret.is_none() && {
                                let (ns, name) = kv.config_map();
                                format!("{ns}/{name}") == key
                            }
                        });
                        if publishes_here {
                            self.recorder
                                .tell(r.as_ref(), type_, "Allocate", reason, note.clone())
                                .await;
                        }
                    }
                }
                self.published.insert(key, state);
                changed = true;
            }
        }
        (written, changed)
    }

    /// Reads where each Rancher Cluster runs on Harvester, as kube-fip does: its cloud
    /// credential Secret's `harvestercredentialConfig-clusterId` names the Harvester
    /// cluster's `management.cattle.io/v3` Cluster (its `spec.displayName`), its first
    /// Harvester machine pool's `HarvesterConfig` the network. Once per Cluster
    /// generation; a failure is logged and tried again at the next full pass.
    pub(super) async fn resolve_harvester(&mut self, objects: &[Arc<kube::core::DynamicObject>]) {
        use guest::{Harvester, RancherCluster, harvester_network};
        let live: BTreeSet<String> = objects
            .iter()
            .filter_map(|o| o.metadata.uid.clone())
            .collect();
        self.harvester.retain(|uid, _| live.contains(uid));
        for o in objects {
            let (Some(uid), generation) =
                (o.metadata.uid.clone(), o.metadata.generation.unwrap_or(0))
            else {
                continue;
            };
            if self
                .harvester
                .get(&uid)
                .is_some_and(|(g, _)| *g == generation)
            {
                continue;
            }
            let name = format!(
                "{}/{}",
                o.metadata.namespace.as_deref().unwrap_or_default(),
                o.metadata.name.as_deref().unwrap_or_default()
            );
            let found: Result<Option<Harvester>, String> = async {
                let Some((ns, secret)) = RancherCluster::cloud_credential(o) else {
                    return Ok(None);
                };
                let data =
                    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.client.clone(), &ns)
                        .get(&secret)
                        .await
                        .map_err(|e| format!("cloud credential {ns}/{secret}: {e}"))?
                        .data
                        .unwrap_or_default();
                let Some(id) = data.get("harvestercredentialConfig-clusterId") else {
                    return Ok(None); // not a Harvester credential
                };
                let id = String::from_utf8_lossy(&id.0).into_owned();
                let mgmt = kube::core::ApiResource::from_gvk_with_plural(
                    &kube::core::GroupVersionKind::gvk("management.cattle.io", "v3", "Cluster"),
                    "clusters",
                );
                let cluster =
                    Api::<kube::core::DynamicObject>::all_with(self.client.clone(), &mgmt)
                        .get(&id)
                        .await
                        .map_err(|e| {
                            format!("Harvester cluster {id} (management.cattle.io/v3): {e}")
                        })?;
                let display = cluster.data["spec"]["displayName"]
                    .as_str()
                    .unwrap_or(&id)
                    .to_owned();
                let network = match RancherCluster::harvester_config(o) {
                    None => None,
                    Some(config) => {
                        let hc = kube::core::ApiResource::from_gvk_with_plural(
                            &kube::core::GroupVersionKind::gvk(
                                "rke-machine-config.cattle.io",
                                "v1",
                                "HarvesterConfig",
                            ),
                            "harvesterconfigs",
                        );
                        let ns = o.metadata.namespace.as_deref().unwrap_or_default();
                        let c = Api::<kube::core::DynamicObject>::namespaced_with(
                            self.client.clone(),
                            ns,
                            &hc,
                        )
                        .get(&config)
                        .await
                        .map_err(|e| format!("HarvesterConfig {ns}/{config}: {e}"))?;
                        harvester_network(&c.data)
                    }
                };
                Ok(Some(Harvester {
                    cluster: display,
                    network,
                }))
            }
            .await;
            match &found {
                Ok(Some(h)) => {
                    debug!(cluster = name, harvester = h.cluster, network = ?h.network, "Harvester guest")
                }
                Ok(None) => {}
                Err(e) => warn!(
                    cluster = name,
                    error = e,
                    "cannot tell which Harvester cluster runs this guest (tried again at the next resync)"
                ),
            }
            self.harvester.insert(uid, (generation, found));
        }
    }

    /// Visits every guest cluster that is due — its publication changed, its
    /// `intervalSeconds` passed since the last good visit, or its backoff ended — side by
    /// side, each within [`GUEST_TIMEOUT`]: kube-vip installed when asked, the ConfigMap
    /// kept (repaired when someone edited it). A change of a guest's state wakes another
    /// pass (its FloatingIPs' conditions).
    pub(super) async fn publish_guests(&mut self, wanted: &[KubeVipPublication]) {
        let now = Instant::now();
        let interval = |g: &KubeVipPublication| {
            Duration::from_secs(u64::from(
                g.guest.as_ref().map_or(60, |t| t.interval_seconds),
            ))
        };
        let due: Vec<KubeVipPublication> = wanted
            .iter()
            .filter(|g| {
                self.guest_published.get(&g.cluster) != Some(*g)
                    || self.guest_due.get(&g.cluster).is_none_or(|at| *at <= now)
            })
            .filter(|g| {
                self.guest_backoff
                    .get(&g.cluster)
                    .is_none_or(|(at, _)| *at <= now)
            })
            .cloned()
            .collect();
        let results: Vec<(KubeVipPublication, Visit)> = futures::stream::iter(due)
            .map(|g| {
                let client = self.client.clone();
                async move {
                    let v = tokio::time::timeout(GUEST_TIMEOUT, visit_guest(client, &g))
                        .await
                        .unwrap_or_else(|_| {
                            Visit::failed(
                                &g,
                                unreachable(format!("no answer within {GUEST_TIMEOUT:?}")),
                            )
                        });
                    (g, v)
                }
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        let mut changed = false;
        for (g, v) in results {
            let name = g
                .guest
                .as_ref()
                .map_or(g.cluster.as_str(), |t| t.name.as_str());
            let metrics = &self.metrics;
            metrics.guest_up(name, v.answered);
            for kind in &v.events {
                metrics.guest_event(name, kind);
            }
            let failure = v
                .state
                .installed
                .clone()
                .and_then(Result::err)
                .or_else(|| v.state.published.clone().err());
            match failure {
                None => {
                    if v.wrote_config_map {
                        info!(
                            guest = name,
                            "kube-vip ConfigMap in the guest cluster written"
                        );
                    }
                    if v.applied > 0 {
                        info!(
                            guest = name,
                            objects = v.applied,
                            "kube-vip installed in the guest cluster"
                        );
                    }
                    self.guest_backoff.remove(&g.cluster);
                    self.guest_published.insert(g.cluster.clone(), g.clone());
                    // Visit again after the interval (see `pass`: the runner's timer).
                    self.guest_due
                        .insert(g.cluster.clone(), Instant::now() + interval(&g));
                }
                Some(f) => {
                    let (at, backoff) =
                        self.guest_backoff
                            .entry(g.cluster.clone())
                            .or_insert_with(|| {
                                (
                                    Instant::now(),
                                    Backoff::new(Duration::from_secs(2), GUEST_MAX_BACKOFF),
                                )
                            });
                    let delay = backoff.next_delay();
                    *at = Instant::now() + delay;
                    warn!(guest = name, reason = f.reason, error = f.message, retry_in = ?delay, "guest cluster not served");
                    metrics.guest_publish_failed(&g.cluster);
                    self.guest_published.remove(&g.cluster);
                    // Tried again when the backoff ends (see `pass`).
                    self.guest_due.remove(&g.cluster);
                }
            }
            if self.guests.get(&g.cluster) != Some(&v.state) {
                self.guests.insert(g.cluster.clone(), v.state);
                changed = true;
            }
        }
        // Guests no range asks for any more are forgotten.
        let wanted_clusters: BTreeSet<&str> = wanted.iter().map(|g| g.cluster.as_str()).collect();
        let gone: Vec<String> = self
            .guests
            .keys()
            .filter(|c| !wanted_clusters.contains(c.as_str()))
            .cloned()
            .collect();
        for c in &gone {
            self.metrics.guest_gone(c);
        }
        self.guests
            .retain(|c, _| wanted_clusters.contains(c.as_str()));
        self.guest_published
            .retain(|c, _| wanted_clusters.contains(c.as_str()));
        self.guest_due
            .retain(|c, _| wanted_clusters.contains(c.as_str()));
        self.guest_backoff
            .retain(|c, _| wanted_clusters.contains(c.as_str()));
        if changed {
            self.wake.changed("Guest", ObjectKey::cluster(""));
        }
    }
}

/// The `data` keys field manager [`FIELD_MANAGER`] owns in a ConfigMap.
fn owned_keys(cm: &ConfigMap) -> BTreeSet<String> {
    cm.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(FIELD_MANAGER))
        .filter_map(|m| m.fields_v1.as_ref())
        .filter_map(|f| f.0.get("f:data")?.as_object().cloned())
        .flat_map(|d| {
            d.keys()
                .filter_map(|k| k.strip_prefix("f:").map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Keeps the operator's keys of one kube-vip ConfigMap: only when they differ from
/// what is there, and never touching keys it does not own.
async fn publish(api: &Api<ConfigMap>, cm: &KubeVipConfigMap) -> Result<bool, kube::Error> {
    let current = api.get_opt(&cm.name).await?;
    let owned = current.as_ref().map(owned_keys).unwrap_or_default();
    let data = current
        .as_ref()
        .and_then(|c| c.data.clone())
        .unwrap_or_default();
    let same = cm.data.iter().all(|(k, v)| data.get(k) == Some(v))
        && owned.iter().all(|k| cm.data.contains_key(k));
    if same && (current.is_some() || cm.data.is_empty()) {
        return Ok(false);
    }
    let patch = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": cm.name, "namespace": cm.namespace},
        "data": cm.data,
    });
    api.patch(
        &cm.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    info!(
        namespace = cm.namespace,
        name = cm.name,
        keys = cm.data.len(),
        "kube-vip ConfigMap updated"
    );
    Ok(true)
}

/// What one visit to a guest found and did.
struct Visit {
    state: GuestState,
    /// The guest's API server answered.
    answered: bool,
    /// The ConfigMap was written (created or repaired).
    wrote_config_map: bool,
    /// Objects of kube-vip applied.
    applied: usize,
    /// Events for `netpolicy_guestcluster_events_total` (kube-fip's names).
    events: Vec<&'static str>,
}

impl Visit {
    fn failed(g: &KubeVipPublication, f: GuestFailure) -> Self {
        let install = g.guest.as_ref().and_then(|t| t.install.as_ref());
        Self {
            state: GuestState {
                published: Err(f.clone()),
                installed: install.map(|_| Err(f.clone())),
            },
            answered: false,
            wrote_config_map: false,
            applied: 0,
            events: vec!["api_connection_error"],
        }
    }
}

fn unreachable(message: String) -> GuestFailure {
    GuestFailure {
        reason: crate::api::conditions::floating_ip::GUEST_UNREACHABLE,
        message,
    }
}

/// A guest API server's answer as a failure: refused (401/403), unreachable (no
/// answer), or `otherwise` (it answered and said no).
fn classify(e: &kube::Error, otherwise: &'static str) -> GuestFailure {
    use crate::api::conditions::floating_ip as fc;
    let reason = match e {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => fc::GUEST_FORBIDDEN,
        kube::Error::Api(_) => otherwise,
        _ => fc::GUEST_UNREACHABLE,
    };
    GuestFailure {
        reason,
        message: e.to_string(),
    }
}

use crate::k8s::applied::{self, HASH_ANNOTATION as APPLIED_HASH};

/// Visits one guest: its client from the kubeconfig Secret, kube-vip installed when
/// asked (missing objects created; with `update`, changed renderings re-applied),
/// then its kube-vip ConfigMap kept.
async fn visit_guest(client: Client, g: &KubeVipPublication) -> Visit {
    use crate::api::conditions::floating_ip as fc;
    let target = g.guest.clone().unwrap_or_default();
    let guest = match guest_client(client, &g.cluster, target.key.as_deref()).await {
        Ok(c) => c,
        Err(f) => {
            let mut v = Visit::failed(g, f);
            if v.state
                .published
                .as_ref()
                .err()
                .is_some_and(|f| f.reason == fc::KUBECONFIG_MISSING)
            {
                v.events.clear();
            }
            return v;
        }
    };
    let mut v = Visit {
        state: GuestState {
            published: Ok(()),
            installed: None,
        },
        answered: true,
        wrote_config_map: false,
        applied: 0,
        events: Vec::new(),
    };
    if let Some(install) = &target.install {
        let r = install_in_guest(&guest, install).await;
        match &r {
            Ok(n) => {
                v.applied = *n;
                if *n > 0 {
                    v.events.push("kubevip_install");
                }
            }
            Err(f) => {
                v.events.push("kubevip_install_error");
                if f.reason == fc::GUEST_UNREACHABLE {
                    v.answered = false;
                }
            }
        }
        v.state.installed = Some(r.map(|_| ()));
    }
    let api = Api::<ConfigMap>::namespaced(guest, &g.namespace);
    let cm = KubeVipConfigMap {
        namespace: g.namespace.clone(),
        name: g.name.clone(),
        data: g.data.clone(),
    };
    match publish(&api, &cm).await {
        Ok(wrote) => {
            v.wrote_config_map = wrote;
            if wrote {
                v.events.push("configmap_management");
            }
        }
        Err(e) => {
            let f = classify(&e, fc::PUBLISH_FAILED);
            if f.reason == fc::GUEST_UNREACHABLE {
                v.answered = false;
                v.events.push("api_connection_error");
            } else {
                v.events.push("configmap_management_error");
            }
            v.state.published = Err(f);
        }
    }
    v
}

/// Installs kube-vip and kube-vip-cloud-provider in a guest: each object read, created
/// by server-side apply when missing, re-applied when `update` and its rendering
/// changed (the hash annotation). Returns how many were applied.
async fn install_in_guest(guest: &Client, install: &Install) -> Result<usize, GuestFailure> {
    use crate::api::conditions::floating_ip as fc;
    let mut applied = 0;
    for o in &install.objects {
        let Some((ar, namespaced)) = o["kind"].as_str().and_then(applied::resource) else {
            continue;
        };
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<kube::core::DynamicObject> = if namespaced {
            Api::namespaced_with(
                guest.clone(),
                o["metadata"]["namespace"].as_str().unwrap_or("kube-system"),
                &ar,
            )
        } else {
            Api::all_with(guest.clone(), &ar)
        };
        let hash = applied::hash(o);
        let live = api
            .get_opt(name)
            .await
            .map_err(|e| classify(&e, fc::INSTALL_FAILED))?;
        let current = live
            .as_ref()
            .and_then(|l| l.annotations().get(APPLIED_HASH).cloned());
        let apply = match &live {
            None => true,
            Some(_) => install.update && current.as_deref() != Some(hash.as_str()),
        };
        if !apply {
            continue;
        }
        let mut obj = o.clone();
        obj["metadata"]["annotations"][APPLIED_HASH] = json!(hash);
        let dynamic: kube::core::DynamicObject =
            serde_json::from_value(obj).map_err(|e| GuestFailure {
                reason: fc::INSTALL_FAILED,
                message: format!("{}: {e}", guest::key_of(o)),
            })?;
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&dynamic),
        )
        .await
        .map_err(|e| {
            let mut f = classify(&e, fc::INSTALL_FAILED);
            f.message = format!("{}: {}", guest::key_of(o), f.message);
            f
        })?;
        debug!(object = guest::key_of(o), "applied in the guest cluster");
        applied += 1;
    }
    Ok(applied)
}

/// A client of a guest cluster, from the kubeconfig in the Secret `secret`
/// (`<namespace>/<name>`), key `key` (default: `value`, `kubeconfig` or `config`,
/// the first present).
async fn guest_client(
    client: Client,
    secret: &str,
    key: Option<&str>,
) -> Result<Client, GuestFailure> {
    use crate::api::conditions::floating_ip as fc;
    let (namespace, name) = secret.split_once('/').ok_or_else(|| GuestFailure {
        reason: fc::KUBECONFIG_MISSING,
        message: format!("{secret:?} is not <namespace>/<secret>"),
    })?;
    crate::k8s::client_from_secret(client, namespace, name, key, Some(Duration::from_secs(10)))
        .await
        .map_err(|e| match e {
            crate::k8s::KubeconfigError::Missing(message) => GuestFailure {
                reason: fc::KUBECONFIG_MISSING,
                message,
            },
            crate::k8s::KubeconfigError::Client(m) => unreachable(format!("guest client: {m}")),
        })
}
