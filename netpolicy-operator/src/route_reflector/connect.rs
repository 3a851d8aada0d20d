//! Which of Calico's datastores a pass uses, and the connections behind them: this
//! cluster's watches; another cluster's (`datastore.kubernetes.kubeconfigSecretRef`: its
//! own informers, from the kubeconfig in a Secret, waking the job); Calico's etcd
//! (`datastore.etcdv3`: a client made from its TLS and credentials Secrets and, with
//! `discoverySrv`, its SRV records, and polled for changes, since etcd has no watch the
//! runtime follows).

use std::{sync::Arc, time::Duration};

use kube::{Api, Client, ResourceExt, api::DynamicObject};
use tokio::sync::watch;
use tracing::info;

use super::{
    datastore::{Calico, EtcdStore, Kubernetes},
    etcd::{self, Etcd},
};
use crate::{
    api::{
        EtcdDatastore, KubeconfigSecretRef, NamespacedRef, RouteReflectorConfigSpec,
        calico::bgp_peer_resource, conditions::route_reflector as rc,
    },
    k8s::{CachedNode, NodeFacts},
    runtime::{ErrorClass, Informer, Informers, KindHealth, KindState, Next, ObjectKey, Wake},
};

/// How often Calico's etcd is checked for changes (`datastore.etcdv3`).
const ETCD_POLL: Duration = Duration::from_secs(2);

/// What of a Node placement reads: identity, labels, the cluster-ID annotation,
/// readiness, schedulability, taints.
pub(super) fn node_fingerprint(n: &CachedNode) -> String {
    let f = NodeFacts::of(n, false);
    format!(
        "{}|{:?}|{:?}|{}|{}|{:?}",
        n.uid().unwrap_or_default(),
        f.labels,
        n.annotations().get(netpolicy_rr::CLUSTER_ID_ANNOTATION),
        f.ready,
        f.unschedulable,
        f.taints
            .iter()
            .map(|t| (&t.key, &t.value, &t.effect))
            .collect::<Vec<_>>()
    )
}

/// What of a `BGPPeer` the job reads: its spec.
pub(super) fn peer_fingerprint(p: &DynamicObject) -> String {
    format!("{:?}", p.data.get("spec"))
}

/// The datastore a pass uses.
pub(crate) enum Picked {
    Kubernetes(Kubernetes),
    Etcd(EtcdStore),
}

/// Why a datastore cannot be used yet: the `Ready` reason, its message, and when to
/// look again.
pub(crate) type Unusable = (&'static str, String, Next);

/// The connections to Calico's datastores, kept from pass to pass.
pub(crate) struct Connections {
    client: Client,
    /// The job's wake (the remote informers and the etcd poll are subscribed to it).
    wake: Wake,
    /// This cluster's.
    local: Calico,
    /// Whether this cluster serves Calico's BGPPeer.
    peers_health: Arc<KindHealth>,
    /// `datastore.kubernetes.kubeconfigSecretRef`: the other cluster.
    remote: Option<Remote>,
    /// `datastore.etcdv3`: the client and its poll.
    etcd: Option<EtcdPoll>,
}

/// Another cluster's Kubernetes datastore: its own informers (stopped when dropped),
/// subscribed to the job's wake.
struct Remote {
    settings: KubeconfigSecretRef,
    calico: Calico,
    _informers: Informers,
    nodes: Informer<CachedNode>,
    peers: Informer<DynamicObject>,
}

/// Calico's etcd: the client, the settings it was made from, and a task that polls its
/// fingerprint every [`ETCD_POLL`] and wakes the job when it differs from what the last
/// pass read (stopped when dropped).
struct EtcdPoll {
    settings: EtcdDatastore,
    client: Etcd,
    /// The fingerprint the last pass read from (`None`: no pass has read yet).
    seen: watch::Sender<Option<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl EtcdPoll {
    fn start(settings: EtcdDatastore, client: Etcd, wake: Wake) -> Self {
        let (seen, mut last) = watch::channel(None::<String>);
        let etcd = client.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(ETCD_POLL).await;
                let Some(read) = last.borrow_and_update().clone() else {
                    continue;
                };
                // An error wakes the job too: the pass reports it.
                if etcd.fingerprint().await.ok().as_ref() != Some(&read) {
                    wake.changed("CalicoEtcd", ObjectKey::cluster("etcd"));
                    // One wake per change: wait for a pass to read again.
                    if last.changed().await.is_err() {
                        return;
                    }
                }
            }
        });
        Self {
            settings,
            client,
            seen,
            task,
        }
    }
}

impl Drop for EtcdPoll {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Connections {
    pub(crate) fn new(
        client: Client,
        wake: Wake,
        local: Calico,
        peers_health: Arc<KindHealth>,
    ) -> Self {
        Self {
            client,
            wake,
            local,
            peers_health,
            remote: None,
            etcd: None,
        }
    }

    /// The cluster Calico's Kubernetes datastore is in (and calico-node reports in):
    /// the remote one while it is configured, else this one.
    pub(crate) fn calico(&self) -> &Calico {
        self.remote.as_ref().map_or(&self.local, |r| &r.calico)
    }

    /// Drops the etcd client after a failure: the next pass makes it again (reading its
    /// Secrets and SRV records again).
    pub(crate) fn forget_etcd(&mut self) {
        self.etcd = None;
    }

    /// Where Calico's objects are this pass; `Err` when that datastore cannot be used
    /// yet (the status says why).
    pub(crate) async fn pick(
        &mut self,
        spec: &RouteReflectorConfigSpec,
    ) -> Result<Picked, Unusable> {
        let label = spec.reflector_label.clone();
        let wanted = spec
            .datastore
            .kubernetes
            .as_ref()
            .and_then(|k| k.kubeconfig_secret_ref.clone());
        if let Some(message) = self.use_remote(wanted.as_ref()).await {
            // Backed off by the runner (a missing Secret or an unreachable cluster is not
            // retried every few seconds for ever); the remote watches wake the job sooner.
            return Err((
                rc::DATASTORE_UNREACHABLE,
                message,
                Next::Backoff(ErrorClass::Transient),
            ));
        }
        if let Some(settings) = &spec.datastore.etcdv3 {
            return match self.etcd_client(settings).await {
                Ok((client, seen)) => Ok(Picked::Etcd(EtcdStore::new(
                    client,
                    self.calico().nodes.clone(),
                    label,
                    seen,
                ))),
                // An unreadable Secret or bad endpoints: backed off, not every 10 s.
                Err(message) => Err((
                    rc::DATASTORE_UNREACHABLE,
                    message,
                    Next::Backoff(ErrorClass::Transient),
                )),
            };
        }
        self.etcd = None;
        let peers_served = match &self.remote {
            Some(r) => r.peers.health().state() == KindState::Synced,
            None => self.peers_health.state() == KindState::Synced,
        };
        if !peers_served {
            let whose = if self.remote.is_some() {
                " in the cluster of datastore.kubernetes.kubeconfigSecretRef"
            } else {
                ""
            };
            return Err((
                rc::NO_CALICO,
                format!(
                    "Calico's crd.projectcalico.org/v1 BGPPeer is not served{whose}: install \
                     Calico (or its CRDs); the operator notices on its next pass"
                ),
                Next::Resync,
            ));
        }
        Ok(Picked::Kubernetes(Kubernetes {
            calico: self.calico().clone(),
            label,
        }))
    }

    /// Points the job at the cluster Calico's Kubernetes datastore is in: `wanted` (a
    /// kubeconfig Secret) or this one. A new remote cluster is watched from then on
    /// (its own [`Informers`], waking this job); the same settings keep their watches (a
    /// changed kubeconfig in the same Secret is read when the RouteReflectorConfig
    /// changes or the operator restarts). `Some(why)` while the remote cluster cannot be
    /// used yet.
    async fn use_remote(&mut self, wanted: Option<&KubeconfigSecretRef>) -> Option<String> {
        let Some(r) = wanted else {
            if self.remote.take().is_some() {
                info!("route reflectors: Calico's datastore is this cluster again");
            }
            return None;
        };
        if self.remote.as_ref().is_none_or(|x| x.settings != *r) {
            self.remote = None;
            // Watches: the default read timeout (a watch outlives a short one).
            let client = match crate::k8s::client_from_secret(
                self.client.clone(),
                &r.namespace,
                &r.name,
                r.key.as_deref(),
                None,
            )
            .await
            {
                Ok(c) => c,
                Err(
                    crate::k8s::KubeconfigError::Missing(m)
                    | crate::k8s::KubeconfigError::Client(m),
                ) => return Some(format!("datastore.kubernetes.kubeconfigSecretRef: {m}")),
            };
            let informers = Informers::new(client.clone());
            let nodes = informers.get::<CachedNode>();
            let peers = informers.dynamic(&bgp_peer_resource(), true);
            nodes.subscribe(&self.wake, node_fingerprint);
            peers.subscribe(&self.wake, peer_fingerprint);
            informers.start();
            info!(
                secret = %format!("{}/{}", r.namespace, r.name),
                "route reflectors: Calico's datastore is another cluster's"
            );
            self.remote = Some(Remote {
                settings: r.clone(),
                calico: Calico {
                    client,
                    nodes: nodes.store(),
                    peers: peers.store(),
                },
                _informers: informers,
                nodes,
                peers,
            });
        }
        let remote = self.remote.as_ref()?;
        (remote.nodes.health().state() != KindState::Synced).then(|| {
            format!(
                "datastore.kubernetes.kubeconfigSecretRef: listing the Nodes of the cluster \
                 of Secret {}/{} has not succeeded yet",
                r.namespace, r.name
            )
        })
    }

    /// The etcd client for `settings` and where its poll takes the fingerprint a pass
    /// read, made (Secrets read, SRV records looked up) when they changed or the last
    /// pass failed on etcd. `Err` says why it cannot be made, for the status.
    async fn etcd_client(
        &mut self,
        settings: &EtcdDatastore,
    ) -> Result<(Etcd, watch::Sender<Option<String>>), String> {
        if let Some(poll) = &self.etcd
            && poll.settings == *settings
        {
            return Ok((poll.client.clone(), poll.seen.clone()));
        }
        let tls = match &settings.tls_secret_ref {
            None => None,
            Some(r) => {
                let data = self.secret(r, "spec.datastore.etcdv3.tlsSecretRef").await?;
                let field = |k: &str| data.get(k).map(|b| b.0.clone());
                Some(etcd::Tls {
                    ca: field("ca.crt"),
                    cert: field("tls.crt"),
                    key: field("tls.key"),
                })
            }
        };
        let endpoints = match &settings.discovery_srv {
            // Found again whenever the client is made: after a change or a failure.
            Some(domain) => etcd::discover(domain).await.map_err(|e| e.to_string())?,
            None => settings.endpoints.clone(),
        };
        let mut client = Etcd::new(endpoints.clone(), tls.as_ref())
            .map_err(|e| format!("spec.datastore.etcdv3: {e}"))?;
        if let Some(r) = &settings.credentials_secret_ref {
            client = client.with_credentials(self.etcd_credentials(r).await?);
        }
        info!(?endpoints, discovery_srv = ?settings.discovery_srv,
              "route reflectors: Calico's etcd datastore");
        let poll = EtcdPoll::start(settings.clone(), client.clone(), self.wake.clone());
        let seen = poll.seen.clone();
        self.etcd = Some(poll);
        Ok((client, seen))
    }

    /// A Secret's data; `Err` names `field` and the Secret.
    async fn secret(
        &self,
        r: &NamespacedRef,
        field: &str,
    ) -> Result<std::collections::BTreeMap<String, k8s_openapi::ByteString>, String> {
        let api: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), &r.namespace);
        let secret = api.get(&r.name).await.map_err(|e| {
            format!(
                "{field}: Secret {}/{} cannot be read: {e}",
                r.namespace, r.name
            )
        })?;
        Ok(secret.data.unwrap_or_default())
    }

    /// etcd's user and password from `r`'s `username` and `password` (the Secret's
    /// values never appear in what this returns or logs).
    async fn etcd_credentials(&self, r: &NamespacedRef) -> Result<etcd::Credentials, String> {
        let data = self
            .secret(r, "spec.datastore.etcdv3.credentialsSecretRef")
            .await?;
        let at = format!(
            "spec.datastore.etcdv3.credentialsSecretRef: Secret {}/{}",
            r.namespace, r.name
        );
        let field = |k: &str| -> Result<String, String> {
            let v = data
                .get(k)
                .ok_or_else(|| format!("{at} has no key {k:?}"))?;
            String::from_utf8(v.0.clone()).map_err(|_| format!("{at}: {k} is not UTF-8"))
        };
        Ok(etcd::Credentials {
            username: field("username")?,
            password: field("password")?,
        })
    }
}
