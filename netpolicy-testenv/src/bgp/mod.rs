//! Live BGP for the route-reflector tests: N "nodes", each a network namespace on one
//! bridge with an address, running what calico-node runs for BGP:
//!
//! - **confd** (Calico's own, built by `scripts/test-tools` from the Calico monorepo) in
//!   KDD mode against the test API server, with `NODENAME` set, rendering BIRD's
//!   configuration from Calico's templates; it reloads BIRD when it rewrites it
//!   (`birdc configure`, where calico-node's runit service sends a HUP). confd only talks
//!   to the API server and writes files: it runs in the machine's network (the API server
//!   listens on 127.0.0.1), BIRD in the node's.
//! - **BIRD 1.6** (Debian's `bird`, the line Calico's fork follows) on that configuration,
//!   in the node's network namespace.
//!
//! Each node is a Kubernetes Node (Ready, a zone label, `projectcalico.org/IPv4Address`
//! as calico-node annotates it) with one IPAM block of the pool affine to it, and the
//! block's blackhole route in its kernel as Felix programs it (`proto 80`): BIRD's kernel
//! protocol learns it and exports it to its peers, so every node's kernel should hold
//! every other node's block route. [`RouteChecker`] samples that every 100 ms.
//!
//! Two adaptations of Calico's templates, said here and in the test output: Debian's
//! BIRD lacks the `krt_tunnel` route attribute of Calico's fork (the IPIP device of a
//! route), so those assignments are removed (the pool here has `ipipMode: Never`, where
//! Calico sets it to `""`, no tunnel, anyway); and Calico's kernel protocol gets
//! `debug { routes }`, so that every node's BIRD logs each kernel route it adds, replaces
//! and removes (`bird.err.log` in the node's directory, stamped to the millisecond). The
//! route checker reads that log to tell a route BIRD removed (a loss) from one it was
//! replacing: BIRD 1.6 replaces a kernel route by delete + add, and with `merge paths on`
//! and ADD-PATH in Calico's templates every change among a prefix's paths re-exports it
//! (340,061 replacements against 789 adds and 680 removals in one 12-node run of the
//! five scenarios, up to 52 of one prefix within a millisecond while reflectors re-sent
//! their paths).
//!
//! `NETPOLICY_BGP_TRACE=1` (a diagnosis, not for measured runs): the checker prints
//! every window a route was missing in as it closes, and for one missing three samples
//! what the node's kernel (`ip route`) and BIRD (`birdc show route … all`) hold for it
//! then.
//!
//! Every process is bounded in time (`timeout`), gets SIGTERM if the test process dies
//! (`setpriv --pdeathsig`), and is stopped by pid when the [`BgpLab`] is dropped, which
//! also removes the namespaces and the bridge.

use std::{
    collections::BTreeSet,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

mod checker;
mod kernel_log;

pub use checker::{Missing, RouteChecker, Samples};

/// The bridge all nodes are on.
const BRIDGE: &str = "np-bgp";
/// The IP pool the nodes' blocks are taken from.
pub const POOL: &str = "10.78.0.0/16";
/// The AS every node is in.
pub const AS_NUMBER: u32 = 64512;

/// One node of the lab.
#[derive(Debug, Clone)]
pub struct BgpNode {
    /// Node name, also its network namespace.
    pub name: String,
    /// Its address on the segment.
    pub ip: Ipv4Addr,
    /// Its IPAM block (`10.78.<n>.0/26`), the route it originates.
    pub block: String,
    /// Its zone label's value.
    pub zone: String,
    dir: PathBuf,
}

impl BgpNode {
    /// BIRD's control socket.
    #[must_use]
    pub fn socket(&self) -> PathBuf {
        self.dir.join("bird.ctl")
    }

    /// BIRD's process id, once it wrote its pid file.
    #[must_use]
    pub fn bird_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.join("bird.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// `birdc show protocols`: the BGP sessions that are Established (protocol names).
    #[must_use]
    pub fn established(&self) -> BTreeSet<String> {
        self.bgp_protocols()
            .into_iter()
            .filter(|(_, up)| *up)
            .map(|(name, _)| name)
            .collect()
    }

    /// `birdc show protocols`: every BGP protocol BIRD is configured with, and whether
    /// its session is Established. Empty when BIRD does not answer.
    #[must_use]
    pub fn bgp_protocols(&self) -> Vec<(String, bool)> {
        let out = Command::new("birdc")
            .arg("-s")
            .arg(self.socket())
            .args(["show", "protocols"])
            .output();
        let Ok(out) = out else {
            return Vec::new();
        };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(" BGP "))
            .filter_map(|l| {
                let name = l.split_whitespace().next()?;
                Some((name.to_owned(), l.contains("Established")))
            })
            .collect()
    }

    /// TCP connections on BGP's port that are established in the node's namespace
    /// (`/proc/<bird>/net/tcp`): its BGP sessions, read without starting a process.
    pub(crate) fn bgp_connections(&self) -> usize {
        let Some(pid) = self.bird_pid() else { return 0 };
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
        text.lines()
            .skip(1)
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let port = |a: Option<&&str>| a.is_some_and(|a| a.ends_with(":00B3"));
                f.get(3) == Some(&"01") && (port(f.get(1)) || port(f.get(2)))
            })
            .count()
    }

    /// What confd last rendered into the node's `bird.cfg`: the route-reflector cluster
    /// ID the node is configured with (Calico's template writes "This node (…) is
    /// configured as a route reflector with cluster ID …;") and the BGP protocols it
    /// declares. `None` when the file cannot be read.
    #[must_use]
    pub fn rendered(&self) -> Option<(Option<String>, BTreeSet<String>)> {
        let text = std::fs::read_to_string(self.dir.join("config").join("bird.cfg")).ok()?;
        let mut cluster_id = None;
        let mut protocols = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line
                .split("configured as a route reflector with cluster ID ")
                .nth(1)
            {
                cluster_id = Some(rest.trim_end().trim_end_matches(';').to_owned());
            }
            if let Some(rest) = line.trim_start().strip_prefix("protocol bgp ")
                && let Some(name) = rest.split_whitespace().next()
            {
                protocols.insert(name.to_owned());
            }
        }
        Some((cluster_id, protocols))
    }

    /// The destinations of the IPv4 routes in the node's main table, from
    /// `/proc/<bird>/net/route` (no process started per sample).
    pub(crate) fn routes(&self) -> Option<BTreeSet<String>> {
        let text = std::fs::read_to_string(format!("/proc/{}/net/route", self.bird_pid()?)).ok()?;
        let hex = |s: &str| {
            u32::from_str_radix(s, 16)
                .ok()
                .map(|v| Ipv4Addr::from(v.swap_bytes()))
        };
        Some(
            text.lines()
                .skip(1)
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    let (dst, mask) = (hex(f.get(1)?)?, hex(f.get(7)?)?);
                    Some(format!("{dst}/{}", u32::from(mask).count_ones()))
                })
                .collect(),
        )
    }
}

/// `NETPOLICY_BGP_TRACE` is set: BIRD logs its kernel routes, the checker its windows.
pub(crate) fn trace() -> bool {
    std::env::var_os("NETPOLICY_BGP_TRACE").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Milliseconds since midnight, UTC: the time of day [`clock`] writes.
pub(crate) fn day_ms() -> u64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    u64::try_from(ms % 86_400_000).unwrap_or(0)
}

/// The wall clock, UTC, `HH:MM:SS.mmm`.
pub(crate) fn clock() -> String {
    let day = day_ms();
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day / 3_600_000,
        day / 60_000 % 60,
        day / 1000 % 60,
        day % 1000
    )
}

/// A command bounded in time (`timeout`, KILL 5 s after TERM) that gets TERM when the
/// test process dies (`setpriv --pdeathsig`); the program and its arguments follow.
fn bounded(lifetime_secs: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--pdeathsig",
        "TERM",
        "--",
        "timeout",
        "-k",
        "5",
        lifetime_secs,
    ]);
    cmd
}

/// Spawns `cmd` from a thread that lives as long as the test process: `setpriv
/// --pdeathsig` signals a child when the *thread* that spawned it ends, and tokio's
/// blocking threads end after 10 s idle (which stopped every confd and BIRD 10 s in).
fn spawn_kept(cmd: Command) -> std::io::Result<Child> {
    use std::sync::{Mutex, OnceLock, mpsc};
    type Job = (Command, mpsc::Sender<std::io::Result<Child>>);
    static KEEPER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            for (mut cmd, reply) in rx {
                let _ = reply.send(cmd.spawn());
            }
        });
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    keeper
        .lock()
        .map_err(|_| std::io::Error::other("the spawning thread is gone"))?
        .send((cmd, tx))
        .map_err(|_| std::io::Error::other("the spawning thread is gone"))?;
    rx.recv()
        .map_err(|_| std::io::Error::other("the spawning thread is gone"))?
}

/// The lab: nodes, their confd and BIRD processes.
#[derive(Debug)]
pub struct BgpLab {
    /// The nodes, in name order.
    pub nodes: Vec<BgpNode>,
    /// Working directory (each node's configuration and logs under `<node>/`).
    pub dir: PathBuf,
    kubeconfig: PathBuf,
    procs: Vec<(String, Child)>,
    zones: usize,
    lifetime_secs: u64,
    /// Nodes created so far (the next one's index).
    created: usize,
    /// The nodes a [`RouteChecker`] samples (shared with it).
    checked: Arc<Mutex<Vec<BgpNode>>>,
}

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    crate::stdout_of(
        Command::new(cmd).args(args).stdin(Stdio::null()),
        &format!("{cmd} {args:?}"),
    )
}

/// A node's Kubernetes objects as calico-node and Calico's IPAM leave them: the Node
/// (zone label, `projectcalico.org/IPv4Address`), its IPAM block and the affinity.
fn node_manifest(node: &BgpNode) -> String {
    let block_name = node.block.replace(['.', '/'], "-");
    format!(
        "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: {n}\n  labels: {{kubernetes.io/hostname: {n}, \
         topology.kubernetes.io/zone: {z}}}\n  annotations: {{projectcalico.org/IPv4Address: {ip}/16}}\n\
         ---\napiVersion: crd.projectcalico.org/v1\nkind: IPAMBlock\nmetadata: {{name: {block_name}}}\n\
         spec: {{cidr: {b}, affinity: 'host:{n}', allocations: [], unallocated: [], attributes: [], \
         strictAffinity: false, deleted: false}}\n\
         ---\napiVersion: crd.projectcalico.org/v1\nkind: BlockAffinity\nmetadata: {{name: {n}-{block_name}}}\n\
         spec: {{cidr: {b}, node: {n}, state: confirmed, deleted: 'false'}}\n",
        n = node.name,
        z = node.zone,
        ip = node.ip,
        b = node.block,
    )
}

/// Node `i` (0-based) of a lab: its name, address and block.
fn node_of(i: usize, zones: usize, dir: &Path) -> BgpNode {
    let name = format!("bgp-{:02}", i + 1);
    BgpNode {
        dir: dir.join(&name),
        ip: Ipv4Addr::new(10, 77, 0, u8::try_from(i + 1).unwrap_or(u8::MAX)),
        block: format!("10.78.{}.0/26", i + 1),
        zone: format!(
            "zone-{}",
            char::from(b'a' + u8::try_from(i % zones.max(1)).unwrap_or(0))
        ),
        name,
    }
}

impl BgpLab {
    /// Why the lab cannot run here (not root, no BIRD, no confd), if it cannot.
    #[must_use]
    pub fn unavailable() -> Option<String> {
        if !crate::is_root() {
            return Some("not root: the nodes are network namespaces".into());
        }
        // Not found is the only failure that matters (`bird --version` prints to stderr).
        if Command::new("bird").arg("--version").output().is_err() {
            return Some("BIRD is not installed: `apt-get install bird` (Debian's, 1.6)".into());
        }
        if !crate::tool("confd").exists() || !crate::tool("calico-status-reporter").exists() {
            return Some(
                "Calico's confd and status reporter are not built: run `scripts/test-tools --bgp` \
                 (about 3 min once)"
                    .into(),
            );
        }
        None
    }

    /// Brings up `n` nodes over `zones` zones (`zone-a`, `zone-b`, ...) in Calico's
    /// default state, the node-to-node mesh on: Calico's CRDs, the BGPConfiguration
    /// `default` written as Calico's docs have users write it (`kubectl apply`), the IP
    /// pool, each node's Node, block and affinity, then confd and BIRD per node. Returns
    /// once every node's kernel holds every other node's block route (the mesh works).
    ///
    /// # Panics
    /// When a step fails (with its output), or the mesh does not converge in 120 s.
    #[must_use]
    pub fn start(
        kubeconfig: &Path,
        dir: &Path,
        n: usize,
        zones: usize,
        lifetime_secs: u64,
    ) -> Self {
        assert!((1..=200).contains(&n), "1..=200 nodes");
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let nodes: Vec<BgpNode> = (0..n).map(|i| node_of(i, zones, dir)).collect();
        let mut lab = Self {
            checked: Arc::new(Mutex::new(nodes.clone())),
            nodes,
            dir: dir.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            procs: Vec::new(),
            zones,
            lifetime_secs,
            created: n,
        };
        lab.cleanup_network();
        lab.kubectl(&[
            "apply",
            "--server-side",
            "-f",
            // The directory itself: kubectl does not follow a link to one.
            &std::fs::canonicalize(crate::tool("calico-crd"))
                .unwrap_or_else(|e| panic!("calico-crd: {e}"))
                .display()
                .to_string(),
        ]);
        let t = Instant::now();
        while lab
            .try_kubectl(&["get", "ippools.crd.projectcalico.org"])
            .is_err()
        {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "Calico's CRDs are not served"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        // `NETPOLICY_BGP_DEBUG=1`: BIRD logs every BGP event (`debug all`), not only states.
        let severity = if std::env::var_os("NETPOLICY_BGP_DEBUG").is_some() {
            "Debug"
        } else {
            "Info"
        };
        let mut manifest = format!(
            "apiVersion: crd.projectcalico.org/v1\nkind: BGPConfiguration\nmetadata: {{name: default}}\n\
             spec: {{asNumber: {AS_NUMBER}, nodeToNodeMeshEnabled: true, logSeverityScreen: {severity}}}\n---\n\
             apiVersion: crd.projectcalico.org/v1\nkind: IPPool\nmetadata: {{name: default-ipv4-ippool}}\n\
             spec: {{cidr: {POOL}, blockSize: 26, ipipMode: Never, vxlanMode: Never, natOutgoing: false, nodeSelector: all()}}\n"
        );
        for node in &lab.nodes {
            manifest.push_str(&node_manifest(node));
        }
        let file = dir.join("calico-objects.yaml");
        std::fs::write(&file, manifest).unwrap_or_else(|e| panic!("{e}"));
        lab.kubectl(&["apply", "-f", &file.display().to_string()]);
        for node in lab.nodes.clone() {
            lab.set_ready(&node.name, true);
        }

        run("ip", &["link", "add", BRIDGE, "type", "bridge"]).unwrap_or_else(|e| panic!("{e}"));
        run("ip", &["link", "set", BRIDGE, "up"]).unwrap_or_else(|e| panic!("{e}"));
        for node in lab.nodes.clone() {
            lab.node_up(&node);
        }
        let t = Instant::now();
        loop {
            let missing = lab.missing_now();
            if missing.is_empty() {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "the mesh did not converge in 120 s; missing (origin → node): {:?}\n{}",
                &missing[..missing.len().min(10)],
                lab.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!(
            "bgp lab: {n} nodes over {zones} zones, full mesh converged in {:.1} s (Calico's \
             templates less krt_tunnel, which Debian's BIRD lacks, and with `debug {{ routes }}` \
             on the kernel protocol, for the route checker)",
            t.elapsed().as_secs_f64()
        );
        lab
    }

    /// One node: its namespace on the bridge, its block's blackhole route, its confd
    /// configuration (Calico's, with the node's paths), confd and BIRD.
    fn node_up(&mut self, node: &BgpNode) {
        let (ns, host_end) = (node.name.as_str(), format!("{}h", node.name));
        let ip = format!("{}/16", node.ip);
        for args in [
            vec!["netns", "add", ns],
            vec![
                "link", "add", &host_end, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ],
            vec!["link", "set", &host_end, "master", BRIDGE, "up"],
            vec!["-n", ns, "addr", "add", &ip, "dev", "eth0"],
            vec!["-n", ns, "link", "set", "eth0", "up"],
            vec!["-n", ns, "link", "set", "lo", "up"],
            // What Felix programs for the node's own block: BIRD's kernel protocol
            // learns it and exports it.
            vec![
                "-n",
                ns,
                "route",
                "add",
                "blackhole",
                &node.block,
                "proto",
                "80",
            ],
        ] {
            run("ip", &args).unwrap_or_else(|e| panic!("{e}"));
        }
        let confd = node.dir.join("confd");
        let config = node.dir.join("config");
        confd_files(node, &confd, &config);
        let lifetime = self.lifetime_secs.to_string();
        let log = |name: &str| {
            std::fs::File::create(node.dir.join(name)).unwrap_or_else(|e| panic!("{e}"))
        };
        let mut confd_cmd = bounded(&lifetime);
        confd_cmd
            .arg(crate::tool("confd"))
            .arg(format!("-confdir={}", confd.display()))
            .env("NODENAME", &node.name)
            .env("DATASTORE_TYPE", "kubernetes")
            .env("KUBECONFIG", &self.kubeconfig)
            .current_dir(&node.dir)
            .stdin(Stdio::null())
            .stdout(log("confd.log"))
            .stderr(log("confd.err.log"));
        let confd_child = spawn_kept(confd_cmd).unwrap_or_else(|e| panic!("confd: {e}"));
        self.procs
            .push((format!("confd {}", node.name), confd_child));
        // BIRD starts once confd wrote its configuration (confd's first reload finds no
        // BIRD yet, as when calico-node starts).
        let t = Instant::now();
        while ![
            "bird.cfg",
            "bird_ipam.cfg",
            "bird_aggr.cfg",
            "bird6.cfg",
            "bird6_ipam.cfg",
            "bird6_aggr.cfg",
        ]
        .iter()
        .all(|f| config.join(f).exists())
        {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "confd of {} wrote no bird.cfg in 30 s:\n{}",
                node.name,
                std::fs::read_to_string(node.dir.join("confd.err.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        self.daemons_up(node, &config);
    }

    /// The node's BIRD for IPv4 and IPv6 in its namespace, and calico-node's status
    /// reporter.
    fn daemons_up(&mut self, node: &BgpNode, config: &Path) {
        let lifetime = self.lifetime_secs.to_string();
        let log = |name: &str| {
            std::fs::File::create(node.dir.join(name)).unwrap_or_else(|e| panic!("{e}"))
        };
        for daemon in ["bird", "bird6"] {
            let mut bird_cmd = bounded(&lifetime);
            bird_cmd
                .arg("nsenter")
                .arg(format!("--net=/run/netns/{}", node.name))
                .args(["--", daemon, "-d", "-c"])
                .arg(config.join(format!("{daemon}.cfg")))
                .arg("-s")
                .arg(node.dir.join(format!("{daemon}.ctl")))
                .arg("-P")
                .arg(node.dir.join(format!("{daemon}.pid")))
                .current_dir(config)
                .stdin(Stdio::null())
                .stdout(log(&format!("{daemon}.log")))
                .stderr(Stdio::piped());
            let mut bird = spawn_kept(bird_cmd).unwrap_or_else(|e| panic!("{daemon}: {e}"));
            // BIRD's debug output has no times: each line gets the wall clock (UTC), to
            // line it up with confd's and the operator's logs.
            if let Some(err) = bird.stderr.take() {
                let mut out = log(&format!("{daemon}.err.log"));
                std::thread::spawn(move || {
                    use std::io::{BufRead, Write};
                    for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                        let _ = writeln!(out, "{} {line}", clock());
                    }
                });
            }
            self.procs.push((format!("{daemon} {}", node.name), bird));
        }
        // calico-node's status reporter: it fills the node's CalicoNodeStatus objects from
        // BIRD's control socket, which it finds at /var/run/calico/bird.ctl — here in a
        // mount namespace of its own, over a private tmpfs (the host's /run is untouched).
        // It ignores arguments: the node's directory is one, so that the lab's clean-up
        // finds it by its command line.
        let mut reporter_cmd = bounded(&lifetime);
        reporter_cmd
            .args([
                "unshare",
                "-m",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                "mount -t tmpfs none /run && mkdir -p /run/calico && mount --bind \"$1\" \
                 /run/calico && exec \"$2\" \"$1\"",
                "sh",
            ])
            .arg(&node.dir)
            .arg(crate::tool("calico-status-reporter"))
            .env("NODENAME", &node.name)
            .env("DATASTORE_TYPE", "kubernetes")
            .env("KUBECONFIG", &self.kubeconfig)
            .env("CALICO_NETWORKING_BACKEND", "bird")
            .current_dir(&node.dir)
            .stdin(Stdio::null())
            .stdout(log("status-reporter.log"))
            .stderr(log("status-reporter.err.log"));
        let reporter = spawn_kept(reporter_cmd).unwrap_or_else(|e| panic!("status reporter: {e}"));
        self.procs
            .push((format!("status-reporter {}", node.name), reporter));
    }

    /// A new node joins (the next name and block, zones in turn): its objects, Ready,
    /// confd and BIRD. Returns once every node's kernel holds its route and its kernel
    /// every other's; from then on the route checker samples its pairs too.
    ///
    /// # Panics
    /// When a step fails, or routes do not converge in 60 s.
    pub fn add_node(&mut self) -> BgpNode {
        let node = node_of(self.created, self.zones, &self.dir);
        self.created += 1;
        let file = self.dir.join(format!("{}.yaml", node.name));
        std::fs::write(&file, node_manifest(&node)).unwrap_or_else(|e| panic!("{e}"));
        self.kubectl(&["apply", "-f", &file.display().to_string()]);
        self.set_ready(&node.name, true);
        self.node_up(&node);
        self.nodes.push(node.clone());
        let t = Instant::now();
        loop {
            let missing: Vec<(String, String)> = self
                .missing_now()
                .into_iter()
                .filter(|(o, n)| *o == node.name || *n == node.name)
                .collect();
            if missing.is_empty() {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{} joined but routes are missing after 60 s: {missing:?}",
                node.name
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        self.checked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(node.clone());
        node
    }

    /// Node `name` leaves: the route checker stops sampling its pairs, its BIRD and
    /// confd stop (BIRD tells its peers), its namespace goes, and its Node, block and
    /// affinity are deleted (as when a node is removed from the cluster).
    ///
    /// # Panics
    /// When kubectl fails.
    pub fn remove_node(&mut self, name: &str) {
        self.checked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|n| n.name != name);
        let Some(i) = self.nodes.iter().position(|n| n.name == name) else {
            return;
        };
        let node = self.nodes.remove(i);
        let mine = [
            format!("bird {name}"),
            format!("bird6 {name}"),
            format!("confd {name}"),
            format!("status-reporter {name}"),
        ];
        for (what, child) in &mut self.procs {
            if mine.contains(what) {
                let _ = run("kill", &["-TERM", &child.id().to_string()]);
                let _ = child.wait();
            }
        }
        self.procs.retain(|(what, _)| !mine.contains(what));
        let _ = run("ip", &["netns", "del", name]);
        let _ = run("ip", &["link", "del", &format!("{name}h")]);
        let block_name = node.block.replace(['.', '/'], "-");
        self.kubectl(&[
            "delete",
            "--ignore-not-found",
            &format!("node/{name}"),
            &format!("ipamblocks.crd.projectcalico.org/{block_name}"),
            &format!("blockaffinities.crd.projectcalico.org/{name}-{block_name}"),
        ]);
    }

    /// `kubectl ARGS` against the lab's API server.
    ///
    /// # Panics
    /// When it fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.try_kubectl(args).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_kubectl(&self, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["--kubeconfig", self.kubeconfig.to_str().unwrap_or_default()];
        all.extend_from_slice(args);
        run(crate::tool("kubectl").to_str().unwrap_or("kubectl"), &all)
    }

    /// The Node `name` Ready (`true`: as its kubelet reports it and with no taint, as
    /// the node lifecycle controller leaves it) or not Ready (a lost kubelet).
    ///
    /// # Panics
    /// When kubectl fails.
    pub fn set_ready(&self, name: &str, ready: bool) {
        let status = if ready { "True" } else { "Unknown" };
        let now = "2026-01-01T00:00:00Z";
        self.kubectl(&[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!(
                "{{\"status\":{{\"conditions\":[{{\"type\":\"Ready\",\"status\":\"{status}\",\
                 \"reason\":\"Test\",\"message\":\"bgp lab\",\"lastHeartbeatTime\":\"{now}\",\
                 \"lastTransitionTime\":\"{now}\"}}]}}}}"
            ),
        ]);
        let taints = if ready {
            "[]".to_owned()
        } else {
            "[{\"key\":\"node.kubernetes.io/unreachable\",\"effect\":\"NoSchedule\"}]".to_owned()
        };
        self.kubectl(&[
            "patch",
            "node",
            name,
            "--type=merge",
            "-p",
            &format!("{{\"spec\":{{\"taints\":{taints}}}}}"),
        ]);
    }

    /// (origin, node) pairs whose route is not in the node's kernel now.
    #[must_use]
    pub fn missing_now(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for node in &self.nodes {
            let routes = node.routes().unwrap_or_default();
            for origin in &self.nodes {
                if origin.name != node.name && !routes.contains(&origin.block) {
                    out.push((origin.name.clone(), node.name.clone()));
                }
            }
        }
        out
    }

    /// Whether the lab is at rest with the cluster IDs the API holds (`cluster_ids`:
    /// node name → its route-reflector cluster ID annotation, as the job wrote it):
    /// every node's confd rendered its cluster ID, its BIRD runs exactly the BGP
    /// protocols confd rendered, every one of them Established, and every node's kernel
    /// has every other node's route. What a wait for BIRD to bring a step's sessions up
    /// ends on: a lab that looks whole while a node's confd has not yet rendered the
    /// job's last write (its restart still to come) is not at rest.
    #[must_use]
    pub fn at_rest(
        &self,
        cluster_ids: &std::collections::BTreeMap<String, Option<String>>,
    ) -> bool {
        self.nodes.iter().all(|n| {
            let Some((rendered_id, rendered)) = n.rendered() else {
                return false;
            };
            let protocols = n.bgp_protocols();
            let running: BTreeSet<String> = protocols.iter().map(|(p, _)| p.clone()).collect();
            cluster_ids.get(&n.name).is_none_or(|id| *id == rendered_id)
                && !protocols.is_empty()
                && running == rendered
                && protocols.iter().all(|(_, up)| *up)
        }) && self.missing_now().is_empty()
    }

    /// Every node's Established BGP sessions, `(node, protocol)`.
    #[must_use]
    pub fn sessions(&self) -> BTreeSet<(String, String)> {
        self.nodes
            .iter()
            .flat_map(|n| n.established().into_iter().map(|p| (n.name.clone(), p)))
            .collect()
    }

    /// The end of every node's confd and BIRD logs, for failure messages.
    #[must_use]
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for node in self.nodes.iter().take(4) {
            for f in ["confd.err.log", "bird.err.log", "bird.log"] {
                let text = std::fs::read_to_string(node.dir.join(f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(8).collect();
                out.push_str(&format!("--- {} {f}\n", node.name));
                for l in tail.into_iter().rev() {
                    out.push_str(l);
                    out.push('\n');
                }
            }
        }
        out
    }

    /// Starts sampling every (origin, node) pair every 100 ms.
    #[must_use]
    pub fn check_routes(&self) -> RouteChecker {
        RouteChecker::start(Arc::clone(&self.checked))
    }

    fn cleanup_network(&self) {
        for node in &self.nodes {
            let _ = run("ip", &["netns", "del", &node.name]);
            let _ = run("ip", &["link", "del", &format!("{}h", node.name)]);
        }
        let _ = run("ip", &["link", "del", BRIDGE]);
    }
}

/// The node's confd: Calico's templates (less `krt_tunnel`) and its template resources,
/// with the node's paths and `birdc … configure` as the reload command.
fn confd_files(node: &BgpNode, confd: &Path, config: &Path) {
    std::fs::create_dir_all(confd.join("conf.d")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(confd.join("templates")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(config).unwrap_or_else(|e| panic!("{e}"));
    let calico = crate::tool("calico-confd");
    for e in std::fs::read_dir(calico.join("templates"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        let text: String = text
            .lines()
            .filter(|l| !l.contains("krt_tunnel"))
            .map(|l| {
                if l.trim_start().starts_with("merge paths on;") {
                    // Calico's kernel protocol; its `debug` is not set by the template.
                    // Its log of every kernel route added, replaced and removed is how
                    // the route checker tells BIRD's kernel replacements from losses.
                    // `NETPOLICY_BGP_TRACE`: its scans too (each route it finds in
                    // the kernel, and what it updates or deletes there).
                    let what = if trace() { "routes, packets" } else { "routes" };
                    format!("{l}\n  debug {{ {what} }};\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        assert!(
            e.file_name() != "bird.cfg.template" || text.contains("  debug { routes"),
            "no `merge paths on;` (Calico's kernel protocol) in bird.cfg.template: BIRD's \
             kernel routes would not be logged, and the route checker needs that log"
        );
        std::fs::write(confd.join("templates").join(e.file_name()), text)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // bird.cfg and bird6.cfg with the files they include. calico-node runs BIRD for
    // IPv6 too (its configuration says "IPv6 disabled" here), and its status
    // reporter reads both.
    for t in [
        "bird",
        "bird_aggr",
        "bird_ipam",
        "bird6",
        "bird6_aggr",
        "bird6_ipam",
    ] {
        let text =
            std::fs::read_to_string(calico.join(format!("conf.d/{t}.toml"))).unwrap_or_default();
        let (birdc, ctl) = if t.starts_with("bird6") {
            ("birdc6", "bird6.ctl")
        } else {
            ("birdc", "bird.ctl")
        };
        let text: String = text
            .lines()
            .map(|l| {
                if l.starts_with("reload_cmd") {
                    format!(
                        "reload_cmd = \"{birdc} -s {} configure\"\n",
                        node.dir.join(ctl).display()
                    )
                } else {
                    format!(
                        "{}\n",
                        l.replace(
                            "/etc/calico/confd/config/",
                            &format!("{}/", config.display())
                        )
                    )
                }
            })
            .collect();
        std::fs::write(confd.join(format!("conf.d/{t}.toml")), text)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

impl Drop for BgpLab {
    fn drop(&mut self) {
        // TERM to each `timeout`, which passes it on; KILL whatever is left.
        for (_, child) in &self.procs {
            let _ = run("kill", &["-TERM", &child.id().to_string()]);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for (what, child) in &mut self.procs {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        eprintln!("bgp lab: {what} did not stop on TERM; killed");
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        let _ = run("pkill", &["-KILL", "-f", &self.dir.display().to_string()]);
        self.cleanup_network();
    }
}
