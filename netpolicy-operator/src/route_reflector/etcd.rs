//! Calico's etcdv3 datastore: the objects the route-reflector job writes (`BGPPeer`s,
//! reflector labels and the cluster ID on Calico `Node`s, `BGPConfiguration` `default`)
//! where Calico reads them in etcd mode, in its key layout and JSON:
//! `/calico/resources/v3/projectcalico.org/<plural>/<name>` holding the
//! `projectcalico.org/v3` object without `resourceVersion` (etcd's `mod_revision` is the
//! version), as libcalico-go's etcdv3 backend stores it.
//!
//! etcd is spoken to through its JSON gateway (`POST /v3/kv/...`, served on the client
//! port by every etcd since 3.3): no gRPC stack for a handful of calls. Every write is a
//! transaction conditioned on the `mod_revision` read (as libcalico-go does), so a
//! concurrent writer (calico-node, calicoctl, kube-controllers' label sync) is never
//! overwritten: the edit is re-read and re-applied.
//!
//! In etcd mode the reflector label, the reflector-set labels and
//! `spec.bgp.routeReflectorClusterID` live on the Calico `Node` only (Calico evaluates
//! `BGPPeer` selectors against Calico Node labels there); Kubernetes Nodes are read,
//! never written. A Kubernetes Node is matched to its Calico Node by
//! `spec.orchRefs[orchestrator=k8s].nodeName`, else by name.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use base64::{Engine as _, engine::general_purpose::STANDARD as B64};
use serde_json::{Value, json};

use super::{CalicoBgpPeer, CalicoBgpPeerSpec};

/// Where Calico's v3 resources live in etcd.
pub const PREFIX: &str = "/calico/resources/v3/projectcalico.org/";
/// The API version of the objects stored there.
pub const API_VERSION: &str = "projectcalico.org/v3";

/// How many times an edit is retried when someone else wrote the key in between.
const ATTEMPTS: usize = 5;

/// Why etcd could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No endpoint answered (the last endpoint's error is the source).
    #[error("etcd at {endpoint} could not be reached")]
    Unreachable {
        /// The last endpoint tried.
        endpoint: String,
        /// The transport's error.
        #[source]
        source: reqwest::Error,
    },
    /// etcd answered with an error.
    #[error("etcd at {endpoint} answered {status}: {body}")]
    Refused {
        /// The endpoint.
        endpoint: String,
        /// HTTP status.
        status: u16,
        /// etcd's message.
        body: String,
    },
    /// A stored value or an answer is not what Calico or etcd write.
    #[error("{0}")]
    Invalid(String),
    /// The TLS material does not load.
    #[error("etcd TLS: {0}")]
    Tls(String),
    /// Someone else kept writing the key.
    #[error("{key}: changed by another writer {ATTEMPTS} times in a row")]
    Contended {
        /// The key.
        key: String,
    },
    /// DNS SRV discovery (`discoverySrv`) found no endpoint.
    #[error("spec.datastore.etcdv3.discoverySrv {domain:?}: {message}")]
    Discovery {
        /// The domain looked up.
        domain: String,
        /// What each lookup answered.
        message: String,
    },
}

/// The SRV services etcd's clients look up for a discovery domain, with the scheme of
/// the URLs each yields (etcd's `srv.GetClient("etcd-client", domain, "")`, which
/// Calico's `ETCD_DISCOVERY_SRV` uses): TLS first.
const SRV_SERVICES: [(&str, &str); 2] = [
    ("_etcd-client-ssl._tcp", "https"),
    ("_etcd-client._tcp", "http"),
];

/// etcd's client URLs under `domain`, from DNS SRV records as Calico's
/// `ETCD_DISCOVERY_SRV` finds them: `_etcd-client-ssl._tcp.<domain>` as `https://`,
/// then `_etcd-client._tcp.<domain>` as `http://`, each by priority (lowest first), then
/// weight (highest first). The system's resolver configuration (`/etc/resolv.conf`) is
/// read at each call, so a discovery after a failure sees what DNS says then.
///
/// # Errors
/// [`Error::Discovery`] when neither service has a record (each lookup's answer said),
/// or the resolver configuration does not load.
pub async fn discover(domain: &str) -> Result<Vec<String>, Error> {
    let failed = |message: String| Error::Discovery {
        domain: domain.to_owned(),
        message,
    };
    let resolver = hickory_resolver::TokioResolver::builder_tokio()
        .and_then(hickory_resolver::ResolverBuilder::build)
        .map_err(|e| failed(format!("the system's DNS configuration: {e}")))?;
    let domain = domain.trim_end_matches('.');
    let mut endpoints = Vec::new();
    let mut answers = Vec::new();
    for (service, scheme) in SRV_SERVICES {
        // Fully qualified: no search-domain guesses.
        let name = format!("{service}.{domain}.");
        match resolver.srv_lookup(name.as_str()).await {
            Ok(lookup) => {
                let mut srvs: Vec<_> = lookup
                    .answers()
                    .iter()
                    .filter_map(|r| match &r.data {
                        hickory_resolver::proto::rr::RData::SRV(srv) => Some(srv.clone()),
                        _ => None,
                    })
                    .collect();
                srvs.sort_by_key(|s| (s.priority, std::cmp::Reverse(s.weight)));
                for srv in srvs {
                    let host = srv.target.to_ascii();
                    let host = host.trim_end_matches('.');
                    // "." says the service is not available there (RFC 2782).
                    if !host.is_empty() {
                        endpoints.push(format!("{scheme}://{host}:{}", srv.port));
                    }
                }
            }
            Err(e) => answers.push(format!("{name}: {e}")),
        }
    }
    if endpoints.is_empty() {
        answers.push("no endpoint".into());
        return Err(failed(answers.join("; ")));
    }
    Ok(endpoints)
}

/// TLS material for etcd (PEM): the server's CA, and a client certificate and key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// The CA that signed etcd's serving certificate (absent: the system's roots).
    pub ca: Option<Vec<u8>>,
    /// Client certificate (with `key`).
    pub cert: Option<Vec<u8>>,
    /// Client key (with `cert`).
    pub key: Option<Vec<u8>>,
}

/// etcd user credentials (Calico's `ETCD_USERNAME` and `ETCD_PASSWORD`). Its `Debug`
/// never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The etcd user.
    pub username: String,
    /// Its password.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// One key as etcd holds it.
#[derive(Debug, Clone)]
struct Kv {
    key: String,
    value: Vec<u8>,
    mod_revision: i64,
}

/// A Calico `Node` as the route-reflector job reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalicoNode {
    /// The Calico Node's name.
    pub name: String,
    /// The Kubernetes Node it stands for.
    pub kube_name: String,
    /// Its labels (what Calico's selectors see).
    pub labels: BTreeMap<String, String>,
    /// `spec.bgp.routeReflectorClusterID`.
    pub cluster_id: Option<String>,
}

/// A client of Calico's etcd.
#[derive(Debug, Clone)]
pub struct Etcd {
    http: reqwest::Client,
    endpoints: Vec<String>,
    credentials: Option<Credentials>,
    /// The auth token per endpoint (etcd's default "simple" tokens are known only to
    /// the member that issued them), taken on first use, renewed when etcd says it
    /// expired. An endpoint whose etcd has no authentication enabled holds `None`.
    tokens: Arc<Mutex<BTreeMap<String, Option<String>>>>,
}

/// What a gateway call ended with on one endpoint.
enum Answer {
    /// The JSON answer.
    Json(Value),
    /// The endpoint did not answer (try the next one).
    Unreachable(reqwest::Error),
    /// etcd refused it: status and body.
    Refused(u16, String),
    /// It answered something that is not JSON.
    NotJson(String),
}

fn key_of(plural: &str, name: &str) -> String {
    format!("{PREFIX}{plural}/{name}")
}

/// `range_end` for every key under `prefix` (the prefix with its last byte + 1).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

fn int(v: &Value) -> i64 {
    // The gateway writes int64 as strings; absent means 0.
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn kvs(answer: &Value) -> Result<Vec<Kv>, Error> {
    let Some(items) = answer.get("kvs").and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    items
        .iter()
        .map(|kv| {
            let bytes = |field: &str| {
                kv.get(field)
                    .and_then(Value::as_str)
                    .map_or(Ok(Vec::new()), |s| B64.decode(s))
                    .map_err(|e| {
                        Error::Invalid(format!("etcd answered a {field} not in base64: {e}"))
                    })
            };
            Ok(Kv {
                key: String::from_utf8_lossy(&bytes("key")?).into_owned(),
                value: bytes("value")?,
                mod_revision: int(&kv["mod_revision"]),
            })
        })
        .collect()
}

impl Etcd {
    /// A client for `endpoints` (tried in order).
    ///
    /// # Errors
    /// [`Error::Tls`] when the PEM material does not load, [`Error::Invalid`] without an
    /// endpoint.
    pub fn new(endpoints: Vec<String>, tls: Option<&Tls>) -> Result<Self, Error> {
        if endpoints.is_empty() {
            return Err(Error::Invalid(
                "spec.datastore.etcdv3.endpoints: no endpoint".into(),
            ));
        }
        let mut b = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30));
        if let Some(tls) = tls {
            if let Some(ca) = &tls.ca {
                let certs = reqwest::Certificate::from_pem_bundle(ca)
                    .map_err(|e| Error::Tls(format!("ca.crt: {e}")))?;
                if certs.is_empty() {
                    return Err(Error::Tls("ca.crt holds no certificate".into()));
                }
                b = b.tls_built_in_root_certs(false);
                for c in certs {
                    b = b.add_root_certificate(c);
                }
            }
            match (&tls.cert, &tls.key) {
                (Some(cert), Some(key)) => {
                    let mut pem = cert.clone();
                    pem.push(b'\n');
                    pem.extend_from_slice(key);
                    let id = reqwest::Identity::from_pem(&pem)
                        .map_err(|e| Error::Tls(format!("tls.crt/tls.key: {e}")))?;
                    b = b.identity(id);
                }
                (None, None) => {}
                _ => {
                    return Err(Error::Tls(
                        "a client certificate needs both tls.crt and tls.key".into(),
                    ));
                }
            }
        }
        let http = b
            .build()
            .map_err(|e| Error::Tls(format!("building the client: {e}")))?;
        Ok(Self {
            http,
            endpoints: endpoints
                .into_iter()
                .map(|e| e.trim_end_matches('/').to_owned())
                .collect(),
            credentials: None,
            tokens: Arc::default(),
        })
    }

    /// The same client authenticating as an etcd user (`POST /v3/auth/authenticate`,
    /// then the token on every call, as etcd's Go client does).
    #[must_use]
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self.tokens = Arc::default();
        self
    }

    /// One POST to `endpoint`, with `token` when there is one.
    async fn post(&self, endpoint: &str, path: &str, body: &Value, token: Option<&str>) -> Answer {
        let mut request = self.http.post(format!("{endpoint}{path}")).json(body);
        if let Some(token) = token {
            request = request.header(reqwest::header::AUTHORIZATION, token);
        }
        match request.send().await {
            Err(e) => Answer::Unreachable(e),
            Ok(r) => {
                let status = r.status();
                match r.text().await {
                    Err(e) => Answer::Unreachable(e),
                    Ok(text) if !status.is_success() => Answer::Refused(status.as_u16(), text),
                    Ok(text) => match serde_json::from_str(&text) {
                        Ok(v) => Answer::Json(v),
                        Err(e) => Answer::NotJson(e.to_string()),
                    },
                }
            }
        }
    }

    /// The token for `endpoint`: the one taken before, or a new one (`renew`: the old
    /// one expired). `Ok(None)`: no credentials, or etcd has no authentication enabled
    /// (etcd's Go client goes on without a token then too).
    async fn token(&self, endpoint: &str, renew: bool) -> Result<Option<String>, Answer> {
        let Some(c) = &self.credentials else {
            return Ok(None);
        };
        if !renew
            && let Some(known) = self
                .tokens
                .lock()
                .ok()
                .and_then(|t| t.get(endpoint).cloned())
        {
            return Ok(known);
        }
        let body = json!({"name": c.username, "password": c.password});
        let token = match self
            .post(endpoint, "/v3/auth/authenticate", &body, None)
            .await
        {
            Answer::Json(v) => Some(v["token"].as_str().unwrap_or_default().to_owned()),
            Answer::Refused(_, text) if text.contains("authentication is not enabled") => None,
            Answer::Refused(status, text) => {
                return Err(Answer::Refused(
                    status,
                    format!(
                        "authenticating as etcd user {:?} (spec.datastore.etcdv3.\
                         credentialsSecretRef): {text}",
                        c.username
                    ),
                ));
            }
            other => return Err(other),
        };
        if let Ok(mut t) = self.tokens.lock() {
            t.insert(endpoint.to_owned(), token.clone());
        }
        Ok(token)
    }

    /// One gateway call on `endpoint`, authenticated when there are credentials (a
    /// token etcd calls invalid, its TTL over, is renewed once).
    async fn call_on(&self, endpoint: &str, path: &str, body: &Value) -> Answer {
        let mut renew = false;
        loop {
            let token = match self.token(endpoint, renew).await {
                Ok(t) => t,
                Err(answer) => return answer,
            };
            match self.post(endpoint, path, body, token.as_deref()).await {
                Answer::Refused(_, text)
                    if token.is_some() && !renew && text.contains("invalid auth token") =>
                {
                    renew = true;
                }
                answer => return answer,
            }
        }
    }

    /// One gateway call, on the first endpoint that answers.
    async fn call(&self, path: &str, body: &Value) -> Result<Value, Error> {
        let mut last = None;
        for endpoint in &self.endpoints {
            match self.call_on(endpoint, path, body).await {
                Answer::Json(v) => return Ok(v),
                Answer::Refused(status, text) => {
                    return Err(Error::Refused {
                        endpoint: endpoint.clone(),
                        status,
                        body: text.chars().take(300).collect(),
                    });
                }
                Answer::NotJson(e) => {
                    return Err(Error::Invalid(format!(
                        "etcd at {endpoint} answered no JSON: {e}"
                    )));
                }
                Answer::Unreachable(source) => last = Some((endpoint.clone(), source)),
            }
        }
        Err(match last {
            Some((endpoint, source)) => Error::Unreachable { endpoint, source },
            None => Error::Invalid("no etcd endpoint".into()),
        })
    }

    async fn get(&self, key: &str) -> Result<Option<Kv>, Error> {
        let answer = self
            .call("/v3/kv/range", &json!({"key": B64.encode(key)}))
            .await?;
        Ok(kvs(&answer)?.into_iter().next())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Kv>, Error> {
        let answer = self
            .call(
                "/v3/kv/range",
                &json!({"key": B64.encode(prefix), "range_end": B64.encode(prefix_end(prefix))}),
            )
            .await?;
        kvs(&answer)
    }

    /// Writes `value` if the key is still at `mod_revision` (0: absent). Whether it did.
    async fn put_if(&self, key: &str, value: &Value, mod_revision: i64) -> Result<bool, Error> {
        let k = B64.encode(key);
        let answer = self
            .call(
                "/v3/kv/txn",
                &json!({
                    "compare": [{"key": k, "target": "MOD", "result": "EQUAL",
                                 "mod_revision": mod_revision.to_string()}],
                    "success": [{"request_put": {"key": k, "value": B64.encode(value.to_string())}}],
                }),
            )
            .await?;
        Ok(answer["succeeded"].as_bool().unwrap_or(false))
    }

    /// Deletes the key if it is still at `mod_revision`. Whether it did.
    async fn delete_if(&self, key: &str, mod_revision: i64) -> Result<bool, Error> {
        let k = B64.encode(key);
        let answer = self
            .call(
                "/v3/kv/txn",
                &json!({
                    "compare": [{"key": k, "target": "MOD", "result": "EQUAL",
                                 "mod_revision": mod_revision.to_string()}],
                    "success": [{"request_delete_range": {"key": k}}],
                }),
            )
            .await?;
        Ok(answer["succeeded"].as_bool().unwrap_or(false))
    }

    /// A cheap fingerprint of what the job reads (Calico Nodes, BGPPeers,
    /// BGPConfigurations): per prefix, the key count and the newest `mod_revision`. Any
    /// create or update raises the latter, any delete lowers the count.
    ///
    /// # Errors
    /// When etcd cannot be reached.
    pub async fn fingerprint(&self) -> Result<String, Error> {
        let mut out = String::new();
        for plural in ["nodes", "bgppeers", "bgpconfigurations"] {
            let prefix = format!("{PREFIX}{plural}/");
            let answer = self
                .call(
                    "/v3/kv/range",
                    &json!({
                        "key": B64.encode(&prefix), "range_end": B64.encode(prefix_end(&prefix)),
                        "limit": "1", "sort_order": "DESCEND", "sort_target": "MOD",
                        "keys_only": true,
                    }),
                )
                .await?;
            let newest = kvs(&answer)?.first().map_or(0, |kv| kv.mod_revision);
            out.push_str(&format!("{plural}:{}:{newest};", int(&answer["count"])));
        }
        Ok(out)
    }

    /// Every Calico Node.
    ///
    /// # Errors
    /// When etcd cannot be reached or a value is not JSON.
    pub async fn nodes(&self) -> Result<Vec<CalicoNode>, Error> {
        let mut out = Vec::new();
        for kv in self.list(&format!("{PREFIX}nodes/")).await? {
            let v: Value = serde_json::from_slice(&kv.value)
                .map_err(|e| Error::Invalid(format!("{}: not JSON: {e}", kv.key)))?;
            let name = v["metadata"]["name"].as_str().map_or_else(
                || kv.key.rsplit('/').next().unwrap_or("").to_owned(),
                str::to_owned,
            );
            let kube_name = v["spec"]["orchRefs"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["orchestrator"] == "k8s")
                .and_then(|r| r["nodeName"].as_str())
                .map_or_else(|| name.clone(), str::to_owned);
            let labels = v["metadata"]["labels"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect();
            let cluster_id = v["spec"]["bgp"]["routeReflectorClusterID"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned);
            out.push(CalicoNode {
                name,
                kube_name,
                labels,
                cluster_id,
            });
        }
        Ok(out)
    }

    /// Every Calico BGPPeer (only the selector fields are read).
    ///
    /// # Errors
    /// When etcd cannot be reached or a value is not a BGPPeer.
    pub async fn bgp_peers(&self) -> Result<Vec<CalicoBgpPeer>, Error> {
        self.list(&format!("{PREFIX}bgppeers/"))
            .await?
            .into_iter()
            .map(|kv| {
                serde_json::from_slice(&kv.value)
                    .map_err(|e| Error::Invalid(format!("{}: not a BGPPeer: {e}", kv.key)))
            })
            .collect()
    }

    /// Reads the JSON at `key`, lets `edit` change it (`None`: absent; return `None` to
    /// leave it alone or delete nothing) and writes it back only when it changed,
    /// conditioned on the revision read. Whether it wrote.
    async fn edit(
        &self,
        key: &str,
        edit: impl Fn(Option<Value>) -> Option<Value>,
    ) -> Result<bool, Error> {
        for _ in 0..ATTEMPTS {
            let (old, rev) = match self.get(key).await? {
                Some(kv) => (
                    Some(
                        serde_json::from_slice::<Value>(&kv.value)
                            .map_err(|e| Error::Invalid(format!("{key}: not JSON: {e}")))?,
                    ),
                    kv.mod_revision,
                ),
                None => (None, 0),
            };
            let Some(new) = edit(old.clone()) else {
                return Ok(false);
            };
            if old.as_ref() == Some(&new) {
                return Ok(false);
            }
            if self.put_if(key, &new, rev).await? {
                return Ok(true);
            }
        }
        Err(Error::Contended {
            key: key.to_owned(),
        })
    }

    /// Creates or updates our BGPPeer `name` (its selectors; other fields kept).
    ///
    /// # Errors
    /// When etcd cannot be reached or keeps changing under us.
    pub async fn apply_bgp_peer(
        &self,
        name: &str,
        spec: &CalicoBgpPeerSpec,
        labels: &BTreeMap<String, String>,
    ) -> Result<bool, Error> {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        self.edit(&key_of("bgppeers", name), |old| {
            let mut v = old.unwrap_or_else(|| {
                json!({"kind": "BGPPeer", "apiVersion": API_VERSION,
                       "metadata": {"name": name, "creationTimestamp": now}, "spec": {}})
            });
            for (k, val) in labels {
                v["metadata"]["labels"][k] = json!(val);
            }
            v["spec"]["nodeSelector"] = json!(spec.node_selector);
            v["spec"]["peerSelector"] = json!(spec.peer_selector);
            Some(v)
        })
        .await
    }

    /// Deletes BGPPeer `name` (absent is fine).
    ///
    /// # Errors
    /// When etcd cannot be reached or keeps changing under us.
    pub async fn delete_bgp_peer(&self, name: &str) -> Result<(), Error> {
        let key = key_of("bgppeers", name);
        for _ in 0..ATTEMPTS {
            let Some(kv) = self.get(&key).await? else {
                return Ok(());
            };
            if self.delete_if(&key, kv.mod_revision).await? {
                return Ok(());
            }
        }
        Err(Error::Contended { key })
    }

    /// Sets (`Some`) or removes (`None`) label `key` on Calico Node `node`. A Node that is
    /// gone is left gone.
    ///
    /// # Errors
    /// When etcd cannot be reached or keeps changing under us.
    pub async fn label_node(
        &self,
        node: &str,
        key: &str,
        value: Option<&str>,
    ) -> Result<bool, Error> {
        self.edit(&key_of("nodes", node), |old| {
            let mut v = old?;
            match value {
                Some(val) => v["metadata"]["labels"][key] = json!(val),
                None => {
                    if let Some(l) = v["metadata"]["labels"].as_object_mut() {
                        l.remove(key);
                    }
                }
            }
            Some(v)
        })
        .await
    }

    /// Sets (`Some`) or removes (`None`) `spec.bgp.routeReflectorClusterID` on Calico
    /// Node `node`. A Node that is gone is left gone.
    ///
    /// # Errors
    /// When etcd cannot be reached or keeps changing under us.
    pub async fn set_cluster_id(&self, node: &str, id: Option<&str>) -> Result<bool, Error> {
        self.edit(&key_of("nodes", node), |old| {
            let mut v = old?;
            match id {
                Some(id) => v["spec"]["bgp"]["routeReflectorClusterID"] = json!(id),
                None => {
                    if let Some(b) = v["spec"]["bgp"].as_object_mut() {
                        b.remove("routeReflectorClusterID");
                    }
                }
            }
            Some(v)
        })
        .await
    }

    /// Whether Calico's node-to-node mesh is on (`BGPConfiguration` `default`; Calico's
    /// default is on).
    ///
    /// # Errors
    /// When etcd cannot be reached or the value is not JSON.
    pub async fn mesh_on(&self) -> Result<bool, Error> {
        let key = key_of("bgpconfigurations", "default");
        let Some(kv) = self.get(&key).await? else {
            return Ok(true);
        };
        let v: Value = serde_json::from_slice(&kv.value)
            .map_err(|e| Error::Invalid(format!("{key}: not JSON: {e}")))?;
        Ok(v["spec"]["nodeToNodeMeshEnabled"].as_bool().unwrap_or(true))
    }

    /// Turns Calico's node-to-node mesh off (`BGPConfiguration` `default`, created if
    /// absent; its other fields kept).
    ///
    /// # Errors
    /// When etcd cannot be reached or keeps changing under us.
    pub async fn disable_mesh(&self) -> Result<bool, Error> {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        self.edit(&key_of("bgpconfigurations", "default"), |old| {
            let mut v = old.unwrap_or_else(|| {
                json!({"kind": "BGPConfiguration", "apiVersion": API_VERSION,
                       "metadata": {"name": "default", "creationTimestamp": now}, "spec": {}})
            });
            v["spec"]["nodeToNodeMeshEnabled"] = json!(false);
            Some(v)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_range_ends_just_after_the_prefix() {
        assert_eq!(prefix_end("/calico/a/"), b"/calico/a0".to_vec());
    }

    #[test]
    fn int64_from_the_gateway_is_a_string_or_absent() {
        assert_eq!(int(&json!("42")), 42);
        assert_eq!(int(&Value::Null), 0);
    }

    #[test]
    fn no_endpoint_and_half_a_client_certificate_are_refused() {
        assert!(matches!(Etcd::new(vec![], None), Err(Error::Invalid(_))));
        let half = Tls {
            cert: Some(b"x".to_vec()),
            ..Tls::default()
        };
        assert!(matches!(
            Etcd::new(vec!["http://127.0.0.1:1".into()], Some(&half)),
            Err(Error::Tls(_))
        ));
        let bad_ca = Tls {
            ca: Some(b"not a certificate".to_vec()),
            ..Tls::default()
        };
        assert!(matches!(
            Etcd::new(vec!["http://127.0.0.1:1".into()], Some(&bad_ca)),
            Err(Error::Tls(_))
        ));
    }
}
