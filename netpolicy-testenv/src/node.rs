//! A real Kubernetes cluster of one or more nodes for end-to-end tests:
//! `scripts/node-cluster` (per node a kubelet, containerd and kube-proxy, its host
//! network the network namespace `np-node`, `np-node-2`, ...; controller manager and
//! scheduler beside the API server; the nodes and a client namespace on one bridge),
//! brought up without the chart so that a test installs it with `helm` exactly as a
//! user does, and torn down when the [`NodeCluster`] is dropped (also when the test
//! panics). Every
//! process is also bounded in time by the script (`NETPOLICY_NODE_LIFETIME`), so a
//! killed test binary leaves nothing running for long; the next `up` tears a leftover
//! cluster down first.
//!
//! Needs root and netpolicy's image as an OCI layout (`NETPOLICY_NODE_IMAGE`, made by
//! `scripts/image`); [`NodeCluster::unavailable`] says why a test cannot run here.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use kube::Client;

/// The node's name.
pub const NODE: &str = "np-node";
/// The network namespace that is the node's host network.
pub const NETNS: &str = "np-node";
/// The machine's address on the link to the node (the API server listens there; a
/// server a pod must reach listens there too).
pub const HOST_IP: &str = "10.231.0.1";
/// The node's InternalIP (its `eth0` in [`NETNS`]).
pub const NODE_IP: &str = "10.231.0.2";
/// The network namespace of a machine on the nodes' segment (not a node).
pub const CLIENT_NETNS: &str = "np-client";
/// The client's address on the segment.
pub const CLIENT_IP: &str = "10.231.0.100";
/// The node lifecycle controller's grace period in this cluster, in seconds
/// (`--node-monitor-grace-period`; Kubernetes' default is 50).
pub const NODE_MONITOR_GRACE_SECS: u64 = 20;

/// Node `i` (1-based) of a cluster: its name (also its network namespace) and address.
#[must_use]
pub fn node(i: usize) -> (String, String) {
    let name = if i == 1 {
        NODE.to_owned()
    } else {
        format!("{NODE}-{i}")
    };
    (name, format!("10.231.0.{}", 1 + i))
}

/// A running cluster; dropping it tears it down.
#[derive(Debug)]
pub struct NodeCluster {
    /// The script's working directory (logs in `logs/`, the API server's audit log in
    /// `logs/audit.log`).
    pub dir: PathBuf,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    script: PathBuf,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/node-cluster")
}

impl NodeCluster {
    /// Why the cluster cannot run on this machine (not root, no image), if it cannot.
    #[must_use]
    pub fn unavailable() -> Option<String> {
        if !crate::is_root() {
            return Some("not root: a node needs network namespaces, mounts and cgroups".into());
        }
        match std::env::var("NETPOLICY_NODE_IMAGE") {
            Ok(p) if Path::new(&p).join("index.json").exists() => None,
            Ok(p) => Some(format!("NETPOLICY_NODE_IMAGE={p} is not an OCI layout")),
            Err(_) => Some(
                "NETPOLICY_NODE_IMAGE is not set (scripts/test sets it to scripts/image's \
                 layout after building it)"
                    .into(),
            ),
        }
    }

    /// Brings the cluster up (a node Ready, no chart), bounded to `lifetime_secs`.
    ///
    /// # Errors
    /// The script failed; the error holds its output's end.
    pub fn up(lifetime_secs: u64) -> Result<Self, String> {
        Self::up_nodes(1, lifetime_secs)
    }

    /// Brings a cluster of `nodes` nodes up (all Ready, no chart), bounded to
    /// `lifetime_secs`.
    ///
    /// # Errors
    /// The script failed; the error holds its output's end.
    pub fn up_nodes(nodes: usize, lifetime_secs: u64) -> Result<Self, String> {
        let dir = PathBuf::from(
            std::env::var("NETPOLICY_NODE_DIR")
                .unwrap_or_else(|_| "/var/tmp/netpolicy-node".into()),
        );
        let start = Instant::now();
        let out = Command::new(script())
            .args(["up", "--no-chart", "--nodes", &nodes.to_string()])
            .env("NETPOLICY_NODE_DIR", &dir)
            .env("NETPOLICY_NODE_LIFETIME", lifetime_secs.to_string())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running scripts/node-cluster: {e}"))?;
        let cluster = Self {
            kubeconfig: dir.join("pki/admin.kubeconfig"),
            dir,
            script: script(),
        };
        if !out.status.success() {
            return Err(format!(
                "scripts/node-cluster up failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        eprintln!(
            "node cluster up in {:.1} s:\n{}",
            start.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(cluster)
    }

    /// An admin client.
    ///
    /// # Panics
    /// When the kubeconfig cannot be read.
    pub async fn client(&self) -> Client {
        Client::try_from(crate::config_of(&self.kubeconfig).await)
            .unwrap_or_else(|e| panic!("client: {e}"))
    }

    /// Runs `scripts/node-cluster ARGS` (`helm …`, `ctr …`, `kubectl …`).
    ///
    /// # Errors
    /// The command failed; the error holds its output.
    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(&self.script)
            .args(args)
            .env("NETPOLICY_NODE_DIR", &self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running scripts/node-cluster {args:?}: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(text)
        } else {
            Err(format!(
                "scripts/node-cluster {args:?} failed ({}):\n{text}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// A process log of the cluster (`kubelet`, `kube-apiserver`, ...).
    #[must_use]
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join("logs").join(format!("{name}.log")))
            .unwrap_or_default()
    }

    /// Every request a service account made, from the API server's audit log: (user,
    /// verb, API group, resource with `/subresource`, namespace, name, response code).
    #[must_use]
    pub fn service_account_requests(&self) -> Vec<Request> {
        let text = std::fs::read_to_string(self.dir.join("logs/audit.log")).unwrap_or_default();
        let s = |v: &serde_json::Value, path: &[&str]| {
            path.iter()
                .try_fold(v, |v, k| v.get(k))
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| s(e, &["stage"]) == "ResponseComplete")
            .map(|e| {
                let sub = s(&e, &["objectRef", "subresource"]);
                let resource = s(&e, &["objectRef", "resource"]);
                Request {
                    user: s(&e, &["user", "username"]),
                    // A bound service-account token names its pod.
                    pod: e["user"]["extra"]["authentication.kubernetes.io/pod-name"][0]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    verb: s(&e, &["verb"]),
                    group: s(&e, &["objectRef", "apiGroup"]),
                    resource: if sub.is_empty() {
                        resource
                    } else {
                        format!("{resource}/{sub}")
                    },
                    namespace: s(&e, &["objectRef", "namespace"]),
                    name: s(&e, &["objectRef", "name"]),
                    uri: s(&e, &["requestURI"]),
                    code: e
                        .get("responseStatus")
                        .and_then(|r| r.get("code"))
                        .and_then(serde_json::Value::as_u64)
                        .unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Runs `CMD ARGS` in the node's network namespace (`ip`, ...).
    ///
    /// # Errors
    /// The command failed; the error holds its output.
    pub fn on_node(&self, cmd: &str, args: &[&str]) -> Result<String, String> {
        self.in_netns(NETNS, cmd, args)
    }

    /// Runs `CMD ARGS` in network namespace `netns` (a node's, or [`CLIENT_NETNS`]).
    ///
    /// # Errors
    /// The command failed; the error holds its output.
    pub fn in_netns(&self, netns: &str, cmd: &str, args: &[&str]) -> Result<String, String> {
        crate::stdout_of(
            Command::new("nsenter")
                .arg(format!("--net=/run/netns/{netns}"))
                .arg("--")
                .arg(cmd)
                .args(args),
            &format!("{cmd} {args:?} in {netns}"),
        )
    }
}

/// One audited request (see [`NodeCluster::service_account_requests`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `system:serviceaccount:<namespace>:<name>`.
    pub user: String,
    /// The pod whose service-account token made the request (empty when unknown).
    pub pod: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...
    pub verb: String,
    /// The API group (empty for the core group).
    pub group: String,
    /// The resource, with `/subresource` when there is one.
    pub resource: String,
    /// The object's namespace (empty for cluster-scoped objects and cluster-wide lists).
    pub namespace: String,
    /// The object's name (empty for lists and creates).
    pub name: String,
    /// The request's path and query.
    pub uri: String,
    /// The HTTP status the API server answered.
    pub code: u64,
}

impl Drop for NodeCluster {
    fn drop(&mut self) {
        match Command::new(&self.script)
            .arg("down")
            .env("NETPOLICY_NODE_DIR", &self.dir)
            .stdin(Stdio::null())
            .output()
        {
            Ok(o) if o.status.success() => {
                eprintln!(
                    "node cluster down: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
            }
            Ok(o) => eprintln!(
                "scripts/node-cluster down failed ({}): {}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("running scripts/node-cluster down: {e}"),
        }
    }
}
