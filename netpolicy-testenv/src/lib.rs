//! # netpolicy-testenv
//!
//! A real Kubernetes control plane for tests: etcd and kube-apiserver on 127.0.0.1,
//! built by `scripts/test-tools` from pinned Go modules. See the README.
//!
//! The control plane is started once per test binary ([`shared`]) from a thread that
//! lives as long as the process, under `setpriv --pdeathsig KILL`, so the processes end
//! with the test binary however it ends. Each test takes its own object names from
//! [`ControlPlane::unique`]. If the control plane cannot start, [`shared`] panics with
//! the reason and the end of the process logs: a test that needs an API server fails
//! visibly rather than passing without one.

mod audit;
pub mod bgp;
pub mod cloud;
pub mod moto;
pub mod node;
mod ports;

pub use audit::{AuditTail, Write};
pub use ports::free_ports;
use ports::wait_for_port;

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, Config,
    api::{Patch, PatchParams},
    config::Kubeconfig,
};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A running etcd + kube-apiserver.
#[derive(Debug)]
pub struct ControlPlane {
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// etcd's client URL, `http://127.0.0.1:<port>` (the API server keeps its objects
    /// under `/registry`; tests may use other prefixes, as Calico's etcd mode does).
    pub etcd: String,
    /// The same etcd over TLS, requiring a client certificate.
    pub etcd_tls: EtcdTls,
    /// An admin kubeconfig (user `netpolicy-admin` in `system:masters`).
    pub kubeconfig: PathBuf,
    /// Working directory: certificates, etcd data, process logs.
    pub dir: PathBuf,
    ready: AtomicBool,
    counter: AtomicU64,
    /// The supervisor thread's orders: stop or start a process (fault tests).
    orders: std::sync::Mutex<Option<mpsc::Sender<Order>>>,
}

/// A process of the control plane, for tests that stop and start it
/// ([`ControlPlane::stop`], [`ControlPlane::start`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// etcd: the API server stays up and answers 5xx or times out.
    Etcd,
    /// kube-apiserver: every client's connections and watches break.
    ApiServer,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Self::Etcd => "etcd",
            Self::ApiServer => "kube-apiserver",
        }
    }
}

#[derive(Debug)]
enum Order {
    Stop(Part, mpsc::Sender<Result<()>>),
    Start(Part, mpsc::Sender<Result<()>>),
}

/// One process of a control plane and how to start it again.
#[derive(Debug)]
struct Proc {
    part: Part,
    bin: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Proc {
    fn start(&mut self) -> Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        // Appended to, so the log of the run before the restart stays.
        let mut child = spawn_appending(&self.bin, &self.args, &self.log)?;
        let up = wait_for_port(self.port, &mut child, self.part.name(), &self.log);
        self.child = Some(child);
        up
    }

    fn stop(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .map_err(|e| format!("stopping {}: {e}", self.part.name()))?;
            let _ = child.wait();
        }
        Ok(())
    }
}

/// etcd's TLS client endpoint and the PEM files a client needs.
#[derive(Debug, Clone)]
pub struct EtcdTls {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The CA that signed etcd's serving certificate (and the client certificate).
    pub ca: PathBuf,
    /// A client certificate etcd accepts.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

/// An etcd of a test's own (plain HTTP on 127.0.0.1, its own data directory under the
/// control plane's), for tests that change etcd itself — authentication enabled, users
/// and roles — where the API server's etcd must stay as it is. Stopped when dropped.
#[derive(Debug)]
pub struct OwnEtcd {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Its log.
    pub log: PathBuf,
    proc: Proc,
}

impl Drop for OwnEtcd {
    fn drop(&mut self) {
        let _ = self.proc.stop();
    }
}

impl ControlPlane {
    /// Starts an etcd of the test's own, named `name` (its directory and log).
    ///
    /// # Panics
    /// When no ports are free or etcd does not start.
    #[must_use]
    pub fn own_etcd(&self, name: &str) -> OwnEtcd {
        self.own_etcd_with(name, &[])
    }

    /// [`Self::own_etcd`] with more of etcd's flags (`--auth-token-ttl=1`).
    ///
    /// # Panics
    /// When no ports are free or etcd does not start.
    #[must_use]
    pub fn own_etcd_with(&self, name: &str, flags: &[&str]) -> OwnEtcd {
        let ports = free_ports(2).unwrap_or_else(|e| panic!("{e}"));
        let (client, peer) = (
            format!("http://127.0.0.1:{}", ports[0]),
            format!("http://127.0.0.1:{}", ports[1]),
        );
        let dir = self.dir.join(format!(
            "{name}-{}",
            self.counter.fetch_add(1, Ordering::Relaxed)
        ));
        let log = dir.with_extension("log");
        let mut proc = Proc {
            part: Part::Etcd,
            bin: tool("etcd"),
            log: log.clone(),
            port: ports[0],
            child: None,
            args: vec![
                format!("--name={name}"),
                format!("--data-dir={}", dir.display()),
                format!("--listen-client-urls={client}"),
                format!("--advertise-client-urls={client}"),
                format!("--listen-peer-urls={peer}"),
                format!("--initial-advertise-peer-urls={peer}"),
                format!("--initial-cluster={name}={peer}"),
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
        };
        proc.args.extend(flags.iter().map(|f| (*f).to_owned()));
        proc.start().unwrap_or_else(|e| panic!("etcd {name}: {e}"));
        OwnEtcd {
            url: client,
            log,
            proc,
        }
    }
}

/// Where [`TestDns`] answers: a loopback address of its own (all of 127/8 is the
/// host's), on port 53 because `/etc/resolv.conf` names no port.
pub const TEST_DNS: &str = "127.0.53.53";

/// A DNS server of a test's own: dnsmasq (Debian's `dnsmasq-base`, installed by
/// `scripts/test`) answering only the records it was given, on [`TEST_DNS`], with a
/// `resolv.conf` naming it. A process sees it through [`TestDns::command`], which runs
/// the process in a mount namespace of its own where that file is `/etc/resolv.conf`
/// (the host's stays as it was). Stopped when dropped; one at a time per host.
#[derive(Debug)]
pub struct TestDns {
    /// The `resolv.conf` naming this server.
    pub resolv_conf: PathBuf,
    /// dnsmasq's log (every query).
    pub log: PathBuf,
    child: Child,
}

impl Drop for TestDns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TestDns {
    /// `program` run with this server as its resolver (`unshare --mount`, then
    /// `/etc/resolv.conf` bind-mounted over in that namespace only; needs root).
    #[must_use]
    pub fn command(&self, program: &Path) -> Command {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#)
            .arg(&self.resolv_conf)
            .arg(program);
        c
    }
}

impl ControlPlane {
    /// Starts a [`TestDns`] named `name` serving dnsmasq's record options, such as
    /// `--srv-host=_etcd-client._tcp.etcd.test,etcd-0.etcd.test,2379,10` and
    /// `--host-record=etcd-0.etcd.test,127.0.0.1`.
    ///
    /// # Panics
    /// When dnsmasq is missing or does not answer within 10 s (its log is shown).
    #[must_use]
    pub fn dns(&self, name: &str, records: &[String]) -> TestDns {
        let dir = self.dir.join(format!(
            "{name}-{}",
            self.counter.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let resolv_conf = dir.join("resolv.conf");
        fs::write(
            &resolv_conf,
            format!("nameserver {TEST_DNS}\noptions timeout:1\n"),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", resolv_conf.display()));
        let log = dir.join("dnsmasq.log");
        let bin = ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.is_file())
            .unwrap_or_else(|| {
                panic!("no dnsmasq: scripts/test installs Debian's dnsmasq-base; run it once")
            });
        let mut args: Vec<String> = [
            "--keep-in-foreground",
            "--no-daemon",
            "--no-resolv",
            "--no-hosts",
            "--conf-file=/dev/null",
            "--user=root",
            "--bind-interfaces",
            "--port=53",
            "--log-queries",
        ]
        .map(str::to_owned)
        .into();
        args.push(format!("--listen-address={TEST_DNS}"));
        args.extend(records.iter().cloned());
        let mut child = spawn_appending(bin, &args, &log).unwrap_or_else(|e| panic!("{e}"));
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr: std::net::SocketAddr = format!("{TEST_DNS}:53")
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            let exited = child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "dnsmasq did not answer on {addr} ({exited:?}): {}",
                    fs::read_to_string(&log).unwrap_or_default()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
        TestDns {
            resolv_conf,
            log,
            child,
        }
    }
}

static SHARED: OnceLock<ControlPlane> = OnceLock::new();

/// The control plane of this test binary, started on first use.
///
/// # Panics
/// When the binaries cannot be built or found, or a process does not start; the message
/// says why and shows the end of its log.
pub fn shared() -> &'static ControlPlane {
    SHARED.get_or_init(|| match start() {
        Ok(cp) => cp,
        Err(e) => panic!("netpolicy-testenv: the test control plane did not start: {e}"),
    })
}

static SECOND: OnceLock<ControlPlane> = OnceLock::new();

/// A second, independent control plane of this test binary (its own etcd and API
/// server), started on first use: a guest cluster, a remote cluster.
///
/// # Panics
/// As [`shared`].
pub fn second() -> &'static ControlPlane {
    SECOND.get_or_init(|| match start() {
        Ok(cp) => cp,
        Err(e) => panic!("netpolicy-testenv: the second control plane did not start: {e}"),
    })
}

static THIRD: OnceLock<ControlPlane> = OnceLock::new();

/// A third, independent control plane of this test binary, started on first use: a
/// second guest cluster.
///
/// # Panics
/// As [`shared`].
pub fn third() -> &'static ControlPlane {
    THIRD.get_or_init(|| match start() {
        Ok(cp) => cp,
        Err(e) => panic!("netpolicy-testenv: the third control plane did not start: {e}"),
    })
}

/// A control plane of its own for the caller (never shared): for a test that stops and
/// starts its processes ([`ControlPlane::stop`]). Its processes end with the test
/// binary.
///
/// # Panics
/// As [`shared`].
pub fn dedicated() -> &'static ControlPlane {
    match start() {
        Ok(cp) => Box::leak(Box::new(cp)),
        Err(e) => panic!("netpolicy-testenv: a dedicated control plane did not start: {e}"),
    }
}

impl ControlPlane {
    /// Stops `part` (SIGKILL, as a crash or a node lost): clients see connections
    /// refused, or, for etcd, an API server answering errors.
    ///
    /// # Errors
    /// When the supervisor is gone or the process cannot be signalled.
    pub fn stop(&self, part: Part) -> Result<()> {
        self.order(|tx| Order::Stop(part, tx))
    }

    /// Starts `part` again with the same arguments and data; returns once it listens.
    /// The next [`ControlPlane::client`] waits for `/readyz` again.
    ///
    /// # Errors
    /// When it does not start (with the end of its log).
    pub fn start(&self, part: Part) -> Result<()> {
        let r = self.order(|tx| Order::Start(part, tx));
        self.ready.store(false, Ordering::Release);
        r
    }

    /// Compacts etcd's history up to its current revision (what etcd does on its own
    /// every few minutes): a watch that resumes from an older resource version can then
    /// only be answered `410 Gone`, once the API server's watch cache no longer holds
    /// it (after [`ControlPlane::start`] of the API server). Returns the revision.
    ///
    /// # Errors
    /// When etcd does not answer or refuses.
    pub fn compact_etcd(&self) -> Result<i64> {
        let key = b64("\0");
        let range = etcd_post(
            &self.etcd,
            "/v3/kv/range",
            &format!(r#"{{"key":"{key}","range_end":"{key}","count_only":true}}"#),
        )?;
        let rev: i64 = range["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| format!("etcd's range answer has no revision: {range}"))?;
        etcd_post(
            &self.etcd,
            "/v3/kv/compaction",
            &format!(r#"{{"revision":"{rev}","physical":true}}"#),
        )?;
        Ok(rev)
    }

    fn order(&self, order: impl FnOnce(mpsc::Sender<Result<()>>) -> Order) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        self.orders
            .lock()
            .map_err(|_| "the supervisor's lock is poisoned".to_owned())?
            .as_ref()
            .ok_or("no supervisor")?
            .send(order(tx))
            .map_err(|_| "the supervisor thread is gone".to_owned())?;
        rx.recv()
            .map_err(|_| "the supervisor thread is gone".to_owned())?
    }

    /// A name no other test of this binary gets: `<prefix>-<n>` (lowercase, valid as a
    /// Kubernetes object name).
    pub fn unique(&self, prefix: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}-{n}")
    }

    /// A fresh Namespace named [`ControlPlane::unique`]`(prefix)`, created; its name.
    ///
    /// # Panics
    /// When the API server refuses it.
    pub async fn namespace(&self, prefix: &str) -> String {
        let name = self.unique(prefix);
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
                .unwrap_or_else(|e| panic!("namespace {name}: {e}"));
        Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client().await)
            .create(&Default::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        name
    }

    /// An admin client, once the API server reports ready (first call waits up to 60 s).
    ///
    /// # Panics
    /// When the kubeconfig cannot be read or the server never becomes ready.
    pub async fn client(&self) -> Client {
        let client = self.client_as(None).await;
        if !self.ready.load(Ordering::Acquire) {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let req = http_get("/readyz");
                match client.request_text(req).await {
                    Ok(body) if body.trim() == "ok" => break,
                    other => {
                        assert!(
                            Instant::now() < deadline,
                            "kube-apiserver not ready after 60 s ({other:?}); log:\n{}",
                            tail(&self.dir.join("kube-apiserver.log"))
                        );
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
            self.ready.store(true, Ordering::Release);
        }
        client
    }

    /// A client that impersonates `user` (and `groups`), for RBAC checks: the admin's
    /// credentials with `Impersonate-User` / `Impersonate-Group`.
    ///
    /// # Panics
    /// When the kubeconfig cannot be read.
    pub async fn client_impersonating(&self, user: &str, groups: &[&str]) -> Client {
        // Make sure the server is up first.
        drop(self.client().await);
        self.client_as(Some((user, groups))).await
    }

    /// A client that authenticates with `token` (a ServiceAccount token) and nothing
    /// else, as a pod would.
    pub async fn client_with_token(&self, token: &str) -> Client {
        drop(self.client().await);
        token_client(&self.kubeconfig, token).await
    }

    /// A token of ServiceAccount `namespace/account` bound to a Pod on node `node`, as
    /// the kubelet gets one for a pod's projected volume: the API server adds the node
    /// (`authentication.kubernetes.io/node-name`) to the identity it authenticates. The
    /// Node (if missing) and the Pod are created for it; no kubelet runs the Pod.
    ///
    /// # Panics
    /// When the API server refuses any of it.
    pub async fn pod_token(&self, namespace: &str, account: &str, node: &str) -> String {
        use k8s_openapi::api::{
            authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec},
            core::v1::{Node, Pod, ServiceAccount},
        };
        let admin = self.client().await;
        let node_obj: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": node}
        }))
        .unwrap_or_default();
        match Api::<Node>::all(admin.clone())
            .create(&Default::default(), &node_obj)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("creating Node {node}: {e}"),
        }
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": self.unique(&format!("{account}-on-{node}"))},
            "spec": {"nodeName": node, "serviceAccountName": account,
                     "containers": [{"name": "c", "image": "pause"}]}
        }))
        .unwrap_or_default();
        let pod = Api::<Pod>::namespaced(admin.clone(), namespace)
            .create(&Default::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("creating a Pod of {account} on {node}: {e}"));
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![],
                expiration_seconds: Some(3600),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
            },
            ..Default::default()
        };
        let out = Api::<ServiceAccount>::namespaced(admin, namespace)
            .create_token_request(account, &Default::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("a token of {namespace}/{account}: {e}"));
        out.status.map(|s| s.token).unwrap_or_default()
    }

    async fn config(&self) -> Config {
        config_of(&self.kubeconfig).await
    }

    async fn client_as(&self, who: Option<(&str, &[&str])>) -> Client {
        let mut config = self.config().await;
        if let Some((user, groups)) = who {
            config.auth_info.impersonate = Some(user.to_owned());
            config.auth_info.impersonate_groups =
                Some(groups.iter().map(|g| (*g).to_owned()).collect());
        }
        Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"))
    }
}

/// The client configuration a kubeconfig file describes.
///
/// # Panics
/// When it cannot be read or is not valid.
pub async fn config_of(kubeconfig: &Path) -> Config {
    let kc = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("reading {}: {e}", kubeconfig.display()));
    Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", kubeconfig.display()))
}

/// A client of the cluster in `kubeconfig` that authenticates with `token` (a
/// ServiceAccount token, as a pod's) instead of the kubeconfig's user.
///
/// # Panics
/// When the kubeconfig cannot be read.
pub async fn token_client(kubeconfig: &Path, token: &str) -> Client {
    let mut config = config_of(kubeconfig).await;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_owned().into()),
        ..Default::default()
    };
    Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"))
}

/// A client of the cluster in `kubeconfig` whose requests are streams of one HTTP/2
/// connection. kube's own client speaks HTTP/1.1, where each watch holds a connection of
/// its own: a harness of thousands of simulated agents with four watches each runs out
/// of the API server's open files (20,000 here) before anything else. One connection
/// carries at most 100 streams at once here (more wait for one to end, and a watch
/// does not end): give one client at most ~80 watches and their requests.
///
/// # Panics
/// When the kubeconfig cannot be read or gives no TLS configuration.
pub async fn http2_client(kubeconfig: &Path) -> Client {
    use kube::client::ConfigExt;
    let config = config_of(kubeconfig).await;
    let tls = config
        .rustls_client_config()
        .unwrap_or_else(|e| panic!("TLS of {}: {e}", kubeconfig.display()));
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http2()
        .wrap_connector(http);
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build::<_, kube::client::Body>(https);
    let auth = config
        .auth_layer()
        .unwrap_or_else(|e| panic!("credentials of {}: {e}", kubeconfig.display()));
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(auth)
        .map_err(|e: hyper_util::client::legacy::Error| {
            Box::new(e) as Box<dyn std::error::Error + Send + Sync>
        })
        .service(hyper);
    Client::new(service, config.default_namespace)
}

/// Installs `crds` with server-side apply (idempotent; safe to call from every test)
/// and waits until each is Established.
///
/// # Panics
/// When the server refuses a CRD or one is not Established within 10 s.
pub async fn install_crds(client: &Client, crds: Vec<CustomResourceDefinition>) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply("netpolicy-testenv").force();
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        // A freshly started API server can answer a plain `404 page not found` (or 503)
        // for a short while after `/readyz` says ok, until its aggregator routes
        // apiextensions.k8s.io (kubernetes/kubernetes#115241): retried for up to 30 s.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match api.patch(&name, &pp, &Patch::Apply(crd)).await {
                Ok(_) => break,
                Err(kube::Error::Api(e))
                    if (e.code == 503
                        || (e.code == 404 && e.message.contains("page not found")))
                        && Instant::now() < deadline =>
                {
                    eprintln!("installing {name}: {} {}, retried", e.code, e.message);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => panic!("installing {name}: {e}"),
            }
        }
    }
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let c = api
                .get(&name)
                .await
                .unwrap_or_else(|e| panic!("reading {name}: {e}"));
            let established = c
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name} not Established after 10 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn http_get(path: &str) -> http::Request<Vec<u8>> {
    let mut req = http::Request::new(Vec::new());
    *req.uri_mut() = path.parse().unwrap_or_default();
    req
}

/// The last 40 lines of a log file.
pub(crate) fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

pub(crate) type Result<T> = std::result::Result<T, String>;

/// Waits until `f` says yes, checking every 200 ms; fails the test naming `what` when
/// `secs` seconds pass first.
pub async fn eventually<F, Fut>(what: &str, secs: u64, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_for(what, secs, String::new, || {
        let fut = f();
        async move { fut.await.then_some(()) }
    })
    .await;
}

/// Waits until `f` gives `Some` (checking every 200 ms) and returns it, printing how long
/// it took; fails the test naming `what` when `secs` seconds pass first, with `why()`
/// (logs, the last status seen) in the message. [`eventually`] is this for a yes/no.
pub async fn eventually_some<T, F, Fut>(what: &str, secs: u64, why: impl Fn() -> String, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let t = Instant::now();
    let v = wait_for(what, secs, why, f).await;
    eprintln!("  {what}: {:.1} s", t.elapsed().as_secs_f64());
    v
}

/// The loop of [`eventually`] and [`eventually_some`].
async fn wait_for<T, F, Fut>(what: &str, secs: u64, why: impl Fn() -> String, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {secs} s\n{}",
            why()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A tool built by `scripts/test-tools` (`etcd`, `kube-apiserver`, `helm`).
///
/// # Panics
/// When the tools cannot be built or found.
pub fn tool(name: &str) -> PathBuf {
    static DIR: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    match DIR.get_or_init(binaries) {
        Ok(dir) => dir.join(name),
        Err(e) => panic!("netpolicy-testenv: no test tools: {e}"),
    }
}

/// The directory holding `etcd` and `kube-apiserver`.
fn binaries() -> Result<PathBuf> {
    tool_dir("NETPOLICY_CONTROL_PLANE", "test-tools")
}

/// The directory `$var` names, else the one `scripts/<script>` builds or finds and prints.
pub(crate) fn tool_dir(var: &str, script: &str) -> Result<PathBuf> {
    if let Ok(dir) = std::env::var(var) {
        return Ok(PathBuf::from(dir));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(script);
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed ({})", script.display(), out.status));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Removes working directories left by test binaries that are gone.
fn sweep(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.split('-').next().unwrap_or_default();
        if !pid.is_empty() && !Path::new("/proc").join(pid).exists() {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

struct Pki {
    ca: String,
    serving: (String, String),
    admin: (String, String),
    sa: (String, String),
}

fn pki() -> std::result::Result<Pki, rcgen::Error> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "netpolicy-testenv-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
    let leaf = |sans: Vec<String>,
                cn: &str,
                org: Option<&str>,
                usage: Vec<ExtendedKeyUsagePurpose>|
     -> std::result::Result<(String, String), rcgen::Error> {
        let mut p = CertificateParams::new(sans)?;
        p.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            p.distinguished_name.push(DnType::OrganizationName, o);
        }
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        p.extended_key_usages = usage;
        let key = KeyPair::generate()?;
        let cert = p.signed_by(&key, &ca)?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    let serving = leaf(
        vec!["127.0.0.1".into(), "localhost".into()],
        "kube-apiserver",
        None,
        // Client use too: etcd's JSON gateway dials etcd's own TLS listener with the
        // serving certificate, and etcd requires client certificates there.
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    )?;
    let admin = leaf(
        Vec::new(),
        "netpolicy-admin",
        Some("system:masters"),
        vec![ExtendedKeyUsagePurpose::ClientAuth],
    )?;
    let sa = KeyPair::generate()?;
    Ok(Pki {
        ca: ca.pem(),
        serving,
        admin,
        sa: (sa.serialize_pem(), sa.public_key_pem()),
    })
}

/// POSTs `body` to etcd's JSON gateway at `url` (plain HTTP), its answer as JSON.
fn etcd_post(url: &str, path: &str, body: &str) -> Result<serde_json::Value> {
    use std::io::{Read, Write as _};
    let host = url.trim_start_matches("http://");
    let mut conn =
        std::net::TcpStream::connect(host).map_err(|e| format!("connecting to etcd: {e}"))?;
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    write!(
        conn,
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| format!("writing to etcd: {e}"))?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer)
        .map_err(|e| format!("reading etcd's answer: {e}"))?;
    let (head, rest) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("etcd {path}: {head}\n{rest}"));
    }
    // Chunked or not, the JSON object is between the first '{' and the last '}'.
    let json = rest
        .find('{')
        .zip(rest.rfind('}'))
        .map_or("", |(a, b)| &rest[a..=b]);
    serde_json::from_str(json).map_err(|e| format!("etcd {path}: {e}: {rest}"))
}

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// Spawns `bin args` with its output appended to `log`, killed when this thread's
/// process dies.
fn spawn_appending(bin: &Path, args: &[String], log: &Path) -> Result<Child> {
    let out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = if Path::new("/usr/bin/setpriv").exists() {
        let mut c = Command::new("/usr/bin/setpriv");
        c.args(["--pdeathsig", "KILL", "--"]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", bin.display()))
}

fn start() -> Result<ControlPlane> {
    let (tx, rx) = mpsc::channel();
    let (orders, inbox) = mpsc::channel::<Order>();
    // The processes' parent thread must outlive every test: PR_SET_PDEATHSIG fires when
    // the thread that spawned a child exits. It also restarts them (fault tests), so
    // that a restarted process has the same parent.
    thread::Builder::new()
        .name("netpolicy-testenv".into())
        .spawn(move || {
            let mut procs = match launch() {
                Ok((cp, procs)) => {
                    let _ = tx.send(Ok(cp));
                    procs
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            // Never returns while the process lives: the senders live in statics.
            while let Ok(order) = inbox.recv() {
                let (part, reply, start) = match order {
                    Order::Stop(p, r) => (p, r, false),
                    Order::Start(p, r) => (p, r, true),
                };
                let result = procs.iter_mut().find(|p| p.part == part).map_or_else(
                    || Err(format!("no {}", part.name())),
                    |p| if start { p.start() } else { p.stop() },
                );
                let _ = reply.send(result);
            }
            loop {
                thread::park();
                let _ = &procs;
            }
        })
        .map_err(|e| format!("starting the supervisor thread: {e}"))?;
    let cp = rx
        .recv()
        .map_err(|_| "the supervisor thread died".to_owned())??;
    if let Ok(mut o) = cp.orders.lock() {
        *o = Some(orders);
    }
    Ok(cp)
}

/// Starts etcd and kube-apiserver; on ports that another process took first (see
/// [`free_ports`]), stops what started and tries again on other ports (three tries).
fn launch() -> Result<(ControlPlane, Vec<Proc>)> {
    let bin = binaries()?;
    for b in ["etcd", "kube-apiserver"] {
        if !bin.join(b).is_file() {
            return Err(format!("{} has no {b}", bin.display()));
        }
    }
    let mut tries = 0;
    loop {
        tries += 1;
        let mut procs = Vec::new();
        match launch_once(&bin, &mut procs) {
            Ok(cp) => return Ok((cp, procs)),
            Err(e) => {
                for p in &mut procs {
                    let _ = p.stop();
                }
                if tries == 3 || !e.contains("address already in use") {
                    return Err(e);
                }
                eprintln!(
                    "netpolicy-testenv: a port was taken before the control plane bound it; \
                     starting it again on other ports: {}",
                    e.lines().next().unwrap_or_default()
                );
            }
        }
    }
}

fn launch_once(bin: &Path, procs: &mut Vec<Proc>) -> Result<ControlPlane> {
    let base = std::env::temp_dir().join("netpolicy-testenv");
    let _ = fs::create_dir_all(&base);
    sweep(&base);
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = base.join(format!("{}-{stamp}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: &str, text: &str| -> Result<PathBuf> {
        let p = dir.join(name);
        fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(p)
    };
    let pki = pki().map_err(|e| format!("generating certificates: {e}"))?;
    let ca = write("ca.crt", &pki.ca)?;
    let serving_crt = write("apiserver.crt", &pki.serving.0)?;
    let serving_key = write("apiserver.key", &pki.serving.1)?;
    let sa_key = write("sa.key", &pki.sa.0)?;
    let sa_pub = write("sa.pub", &pki.sa.1)?;
    // Every write request is audited (metadata only), so tests can count the writes a
    // component made to one object: `ControlPlane::writes`.
    let audit_policy = write(
        "audit-policy.yaml",
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
         - level: Metadata\n  verbs: [create, update, patch, delete, deletecollection]\n\
         - level: None\n",
    )?;

    let etcd_client_crt = write("etcd-client.crt", &pki.admin.0)?;
    let etcd_client_key = write("etcd-client.key", &pki.admin.1)?;
    let [client_port, peer_port, api_port, tls_port] = free_ports(4)?[..] else {
        return Err("free_ports(4) gave another count".into());
    };
    let tls_url = format!("https://127.0.0.1:{tls_port}");
    let s = |p: &Path| p.display().to_string();
    let client_url = format!("http://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let mut etcd = Proc {
        part: Part::Etcd,
        bin: bin.join("etcd"),
        log: dir.join("etcd.log"),
        port: client_port,
        child: None,
        args: vec![
            format!("--data-dir={}", s(&dir.join("etcd"))),
            // Plain for the API server, TLS with client certificates for clients that
            // test it (one certificate setting serves both: http ignores it).
            format!("--listen-client-urls={client_url},{tls_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--cert-file={}", s(&serving_crt)),
            format!("--key-file={}", s(&serving_key)),
            format!("--trusted-ca-file={}", s(&ca)),
            "--client-cert-auth=true".into(),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            "--unsafe-no-fsync=true".into(),
            "--log-level=warn".into(),
        ],
    };
    let _ = fs::File::create(&etcd.log);
    let up = etcd.start();
    procs.push(etcd);
    up?;

    let mut api = Proc {
        part: Part::ApiServer,
        bin: bin.join("kube-apiserver"),
        log: dir.join("kube-apiserver.log"),
        port: api_port,
        child: None,
        args: vec![
            format!("--etcd-servers={client_url}"),
            format!("--audit-policy-file={}", s(&audit_policy)),
            format!("--audit-log-path={}", s(&dir.join("audit.log"))),
            "--audit-log-mode=blocking".into(),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={api_port}"),
            format!("--cert-dir={}", s(&dir)),
            format!("--tls-cert-file={}", s(&serving_crt)),
            format!("--tls-private-key-file={}", s(&serving_key)),
            format!("--client-ca-file={}", s(&ca)),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", s(&sa_pub)),
            format!("--service-account-signing-key-file={}", s(&sa_key)),
            "--authorization-mode=RBAC".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            "--allow-privileged=true".into(),
            "--enable-priority-and-fairness=false".into(),
            "--v=1".into(),
        ],
    };
    let _ = fs::File::create(&api.log);
    let up = api.start();
    procs.push(api);
    up?;

    let server = format!("https://127.0.0.1:{api_port}");
    let mut kc = String::new();
    let _ = write!(
        kc,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    \
         client-key-data: {}\ncontexts:\n- name: testenv\n  context: {{cluster: testenv, user: admin}}\n\
         current-context: testenv\n",
        b64(&pki.ca),
        b64(&pki.admin.0),
        b64(&pki.admin.1)
    );
    let kubeconfig = write("kubeconfig", &kc)?;
    Ok(ControlPlane {
        server,
        etcd: client_url.clone(),
        etcd_tls: EtcdTls {
            url: tls_url,
            ca: ca.clone(),
            cert: etcd_client_crt,
            key: etcd_client_key,
        },
        kubeconfig,
        dir,
        ready: AtomicBool::new(false),
        counter: AtomicU64::new(0),
        orders: std::sync::Mutex::new(None),
    })
}

/// Serves the files of `dir` over HTTP on `host` (GET only, a port of its own) until
/// the process ends: a chart repository as a web server holds one. Returns the port.
///
/// # Panics
/// When nothing can listen on `host`.
#[must_use]
pub fn serve_dir(host: &str, dir: PathBuf) -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind((host, 0))
        .unwrap_or_else(|e| panic!("listening on {host}: {e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(&stream);
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            // Drain the headers.
            let mut h = String::new();
            while reader.read_line(&mut h).is_ok_and(|n| n > 2) {
                h.clear();
            }
            let path = line
                .split_whitespace()
                .nth(1)
                .unwrap_or("/")
                .trim_start_matches('/');
            let mut stream = &stream;
            match std::fs::read(dir.join(path))
                .ok()
                .filter(|_| !path.contains(".."))
            {
                Some(body) => {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(&body);
                }
                None => {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                }
            }
        }
    });
    port
}

/// Whether this process runs as root (the effective user in `/proc/self/status`): what
/// network namespaces, mounts and cgroups need.
#[must_use]
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        == Some("0")
}

/// A chart published as a release publishes it (`helm package`, `helm repo index`),
/// served over HTTP on 127.0.0.1, and a `helm` with a home of its own (repositories
/// added here touch no one's `~/.config/helm`). Lives as long as the value.
#[derive(Debug)]
pub struct HelmRepo {
    /// The repository's URL (`helm repo add <name> <url>`).
    pub url: String,
    dir: PathBuf,
}

impl HelmRepo {
    /// Packages `chart` into a served repository.
    ///
    /// # Panics
    /// When helm fails (with its output).
    #[must_use]
    pub fn publish(chart: &Path) -> Self {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "netpolicy-helm-repo-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let repo = dir.join("repo");
        std::fs::create_dir_all(&repo).unwrap_or_else(|e| panic!("{}: {e}", repo.display()));
        let mut this = Self {
            url: String::new(),
            dir,
        };
        this.run(&[
            "package",
            &chart.display().to_string(),
            "-d",
            &repo.display().to_string(),
        ]);
        let port = serve_dir("127.0.0.1", repo.clone());
        this.url = format!("http://127.0.0.1:{port}");
        let url = this.url.clone();
        this.run(&["repo", "index", &repo.display().to_string(), "--url", &url]);
        this
    }

    /// `helm ARGS` with this repository's own helm home; its standard output.
    ///
    /// # Panics
    /// When helm fails (with its output).
    pub fn run(&self, args: &[&str]) -> String {
        self.try_run(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`HelmRepo::run`], the failure as an error (helm's output).
    ///
    /// # Errors
    /// helm could not run or failed.
    pub fn try_run(&self, args: &[&str]) -> std::result::Result<String, String> {
        let home = self.dir.join("home");
        let mut out = Command::new(tool("helm"));
        out.args(args)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .stdin(Stdio::null());
        stdout_of(&mut out, &format!("helm {args:?}"))
    }
}

impl Drop for HelmRepo {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `cmd` and returns its stdout; a failure names `what` with its stdout and stderr.
pub(crate) fn stdout_of(cmd: &mut Command, what: &str) -> std::result::Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{what}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
