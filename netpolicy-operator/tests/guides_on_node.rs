//! The guides, followed step by step on a real node (`scripts/node-cluster`), as a
//! platform engineer follows them: every shell block of docs/guides/*.md in order (and
//! the README's real-node block), each command run by bash in a working directory
//! holding the repository's `examples/`, `deploy/` and `charts/` and the guide's own
//! YAML blocks (a block whose first line is `# <file>.yaml` is that file), with
//! `netpolicy`, `kubectl` and `helm` on `PATH` and `ip` run in the node's network.
//!
//! A guide states what a step prints with `# → text` (on the command's line or on the
//! lines right after it): the command must exit 0 and print every such text (spaces
//! collapsed), within [`SETTLE`] (the operator and the agent work in the background).
//! Other comments are prose.
//!
//! What a reader adapts is adapted here, and only that: `<node>`/`<holder>` name this
//! node, the guides' interface names become this node's (`eth0`), a cloud provider is
//! the local server that follows its documented API (the issuer's `endpoint`). A step
//! that cannot run on this machine (the chart repository or a registry on the
//! internet, Rancher, a kernel without 802.1Q) prints a SKIP line saying why.
//!
//! Run by `scripts/test` after it built the image (`NETPOLICY_NODE_IMAGE`):
//! `cargo test -p netpolicy-operator --test integration -- --ignored --nocapture guides_on_node::`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use kube::api::{Api, Patch, PatchParams};
use netpolicy_testenv::{
    cloud,
    node::{HOST_IP, NETNS, NODE, NodeCluster},
};
use serde_json::json;

/// How long a step may take to show what the guide says it prints.
const SETTLE: Duration = Duration::from_secs(90);

/// The guides in the order a platform team meets the product.
const GUIDES: &[&str] = &[
    "docs/guides/install.md",
    "docs/guides/routing.md",
    "docs/guides/floating-ips.md",
    "docs/guides/traffic-domains.md",
    "docs/guides/route-reflectors.md",
    "docs/guides/routed-ips.md",
    "README.md",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// One command of a guide, with what it must print.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    line: usize,
    command: String,
    expect: Vec<String>,
}

/// A guide read: its YAML files (name, text) and its commands, in order.
#[derive(Debug, Default)]
struct Guide {
    files: Vec<(String, String)>,
    steps: Vec<Step>,
}

/// `# → text` in a comment: the text.
fn expectation(comment: &str) -> Option<String> {
    comment
        .trim()
        .strip_prefix('#')?
        .trim()
        .strip_prefix('→')
        .map(|t| t.trim().to_owned())
}

/// Splits a shell line into its code and its comment (a `#` after a space, outside
/// single quotes).
fn split_comment(line: &str) -> (&str, Option<&str>) {
    let t = line.trim();
    if t.starts_with('#') {
        return ("", Some(t));
    }
    let mut quoted = false;
    let bytes = t.as_bytes();
    for (i, c) in t.char_indices() {
        match c {
            '\'' => quoted = !quoted,
            '#' if !quoted && i > 0 && bytes[i - 1] == b' ' => {
                return (t[..i].trim_end(), Some(&t[i..]));
            }
            _ => {}
        }
    }
    (t, None)
}

fn read_guide(text: &str) -> Guide {
    let mut g = Guide::default();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].trim().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let lang = lang.trim().to_owned();
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && !lines[end].trim().starts_with("```") {
            end += 1;
        }
        let body = &lines[start..end];
        match lang.as_str() {
            "yaml" => {
                if let Some(name) = body
                    .first()
                    .and_then(|l| l.trim().strip_prefix("# "))
                    .filter(|n| n.ends_with(".yaml") && !n.contains(' '))
                {
                    g.files.push((name.to_owned(), body.join("\n") + "\n"));
                }
            }
            "sh" => read_shell(body, start, &mut g.steps),
            _ => {}
        }
        i = end + 1;
    }
    g
}

fn read_shell(body: &[&str], first_line: usize, steps: &mut Vec<Step>) {
    let mut k = 0;
    let mut pending: Option<Step> = None;
    while k < body.len() {
        let (code, comment) = split_comment(body[k]);
        let expect = comment.and_then(expectation);
        if code.is_empty() {
            // A comment line: an expectation of the command before it, or prose.
            if let (Some(e), Some(last)) = (expect, steps.last_mut())
                && pending.is_none()
            {
                last.expect.push(e);
            }
            k += 1;
            continue;
        }
        let step = pending.get_or_insert_with(|| Step {
            line: first_line + k + 1,
            command: String::new(),
            expect: Vec::new(),
        });
        step.expect.extend(expect);
        if let Some(head) = code.strip_suffix('\\') {
            step.command.push_str(head.trim_end());
            step.command.push(' ');
            k += 1;
            continue;
        }
        step.command.push_str(code);
        // A here-document: its lines, to the delimiter, are part of the command.
        if let Some(word) = code
            .split("<<")
            .nth(1)
            .map(|w| w.trim().trim_matches(['\'', '"']).to_owned())
            .filter(|w| !w.is_empty())
        {
            while k + 1 < body.len() {
                k += 1;
                step.command.push('\n');
                step.command.push_str(body[k]);
                if body[k].trim() == word {
                    break;
                }
            }
        }
        steps.extend(pending.take());
        k += 1;
    }
}

/// Why a step cannot run on this machine, if it cannot.
fn cannot_run(cmd: &str, vlans: bool) -> Option<&'static str> {
    let rules: &[(&str, &str)] = &[
        (
            "helm repo add",
            "the chart repository is on the internet; the checkout's chart is installed",
        ),
        (
            "netpolicy/netpolicy",
            "the chart repository is on the internet; the checkout's chart is installed",
        ),
        (
            "oci://",
            "the OCI registry is on the internet; the checkout's chart is installed",
        ),
        ("skopeo", "no registry to push to here"),
        (
            "registry.example",
            "no registry here; the image is imported into containerd",
        ),
        (
            "scripts/image",
            "the image is built already (NETPOLICY_NODE_IMAGE)",
        ),
        ("scripts/node-cluster up", "this node cluster is up already"),
        (
            "scripts/node-cluster down",
            "this node cluster goes down when the run ends",
        ),
        ("scripts/test", "the test suite is not a guide step"),
        ("cargo ", "building and benchmarking are not guide steps"),
        ("cd fuzz", "fuzzing is not a guide step"),
        ("rancher", "needs a cluster that runs Rancher"),
        ("c-m-abc123", "needs a cluster that runs Rancher"),
        (
            "lookup 400",
            "needs kube-vip announcing the address from this node",
        ),
    ];
    if let Some((_, why)) = rules.iter().find(|(p, _)| cmd.contains(p)) {
        return Some(why);
    }
    if !vlans && (cmd.contains("eth0.100") || cmd.contains("ext-vlan")) {
        return Some("this kernel has no 802.1Q VLAN support");
    }
    None
}

/// Whether this kernel makes 802.1Q VLANs (in a scratch namespace).
fn kernel_has_vlans() -> bool {
    let ns = format!("np-vlan-probe-{}", std::process::id());
    let ip = |args: &[&str]| {
        Command::new("ip")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let _ = ip(&["netns", "add", &ns]);
    let ok = ip(&[
        "-n", &ns, "link", "add", "link", "lo", "name", "v.5", "type", "vlan", "id", "5",
    ]);
    let _ = ip(&["netns", "del", &ns]);
    ok
}

/// What a reader on this node writes in place of the guides' names.
struct Adapt {
    pairs: Vec<(String, String)>,
}

impl Adapt {
    fn apply(&self, text: &str) -> String {
        let mut t = text.to_owned();
        for (from, to) in &self.pairs {
            t = t.replace(from.as_str(), to);
        }
        t
    }
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Copies `from` into `to`, adapting every text file.
fn copy_adapted(from: &Path, to: &Path, adapt: &Adapt) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_adapted(&p, &dest, adapt);
        } else if let Ok(text) = std::fs::read_to_string(&p) {
            std::fs::write(&dest, adapt.apply(&text)).unwrap();
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

/// The working directory and `PATH` a reader has: the repository's directories, the
/// binaries, `ip` in the node's network.
fn workdir(cluster: &NodeCluster, adapt: &Adapt) -> (PathBuf, PathBuf) {
    let work = cluster.dir.join("guides");
    let _ = std::fs::remove_dir_all(&work);
    let bin = work.join(".bin");
    std::fs::create_dir_all(&bin).unwrap();
    for d in ["examples", "deploy"] {
        copy_adapted(&root().join(d), &work.join(d), adapt);
    }
    for d in ["charts", "scripts"] {
        std::os::unix::fs::symlink(root().join(d), work.join(d)).unwrap();
    }
    let script = root().join("scripts/node-cluster");
    let wrap = |name: &str, body: String| {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/usr/bin/env bash\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    };
    let dir = cluster.dir.display();
    for tool in ["kubectl", "helm"] {
        wrap(
            tool,
            format!(
                "NETPOLICY_NODE_DIR={dir} exec {} {tool} \"$@\"",
                script.display()
            ),
        );
    }
    let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap();
    wrap(
        "ip",
        format!("exec nsenter --net=/run/netns/{NETNS} -- {ip} \"$@\""),
    );
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_netpolicy"), bin.join("netpolicy")).unwrap();
    (work, bin)
}

struct Runner {
    work: PathBuf,
    path: String,
    kubeconfig: PathBuf,
    node_dir: PathBuf,
    adapt: Adapt,
    vlans: bool,
    background: Vec<Child>,
    ran: usize,
    skipped: usize,
}

impl Drop for Runner {
    fn drop(&mut self) {
        for c in &mut self.background {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Runner {
    /// `cmd` in bash, in the reader's shell: what earlier steps set (`leader=$(…)`)
    /// is set (kept in `.shell-state` between steps).
    fn bash(&self, cmd: &str) -> Command {
        let script = format!(
            "set -a; [ -f .shell-state ] && . ./.shell-state; set +a\n{{\n{cmd}\n}}\n\
             rc=$?; export -p | grep -v -E '^declare -x (PATH|PWD|OLDPWD|SHLVL|_)=' \
             > .shell-state; exit $rc"
        );
        let mut c = Command::new("bash");
        c.args(["-o", "pipefail", "-c", &script])
            .current_dir(&self.work)
            .env("PATH", &self.path)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("NETPOLICY_NODE_DIR", &self.node_dir)
            .env_remove("COLUMNS")
            .stdin(Stdio::null());
        c
    }

    fn run(&mut self, guide: &str, step: &Step) {
        let cmd = self.adapt.apply(&step.command);
        let at = format!("{guide}:{}", step.line);
        if let Some(why) = cannot_run(&cmd, self.vlans) {
            eprintln!("SKIP guides on a real node: {at}: `{cmd}`: {why}");
            self.skipped += 1;
            return;
        }
        self.ran += 1;
        // Assignments are exported, so the next step's shell has them.
        let cmd = match cmd.split_once('=') {
            Some((name, _))
                if !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                format!("export {cmd}")
            }
            _ => cmd,
        };
        if let Some(bg) = cmd.trim_end().strip_suffix('&') {
            let child = self
                .bash(bg)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            self.background.push(child);
            std::thread::sleep(Duration::from_secs(2));
            eprintln!("  {at}: {cmd}");
            return;
        }
        let expect: Vec<String> = step
            .expect
            .iter()
            .map(|e| collapse(&self.adapt.apply(e)))
            .collect();
        let t = Instant::now();
        loop {
            let out = self.bash(&cmd).output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let flat = collapse(&text);
            let missing: Vec<&String> = expect.iter().filter(|e| !flat.contains(*e)).collect();
            if out.status.success() && missing.is_empty() {
                eprintln!("  {at}: {cmd} ({:.1} s)", t.elapsed().as_secs_f64());
                // What the reader sees, shortened.
                for l in text.lines().take(12) {
                    eprintln!("    | {l}");
                }
                return;
            }
            assert!(
                t.elapsed() < SETTLE,
                "{at}: `{cmd}` ({}) after {} s: missing {missing:?}; it printed:\n{text}",
                out.status,
                SETTLE.as_secs()
            );
            std::thread::sleep(Duration::from_secs(2));
        }
    }
}

/// What the guides assume a cluster has: Calico's CRDs (the route-reflector guide), a
/// cloud provider (the local Hetzner API the routed-IP guide's issuer is pointed at) that
/// knows this node as server 1, and the routed-IP guide's Service with its endpoint on
/// this node. Returns the provider's base URL and its state.
async fn what_a_reader_has(client: &kube::Client) -> (String, cloud::Shared) {
    use k8s_openapi::api::{
        core::v1::{Namespace, Node, Service},
        discovery::v1::EndpointSlice,
    };
    use kube::api::PostParams;

    netpolicy_testenv::install_crds(client, common::calico_crds()).await;
    let provider = cloud::serve_on(HOST_IP, cloud::hetzner::api, "/v1").await;
    Api::<Node>::all(client.clone())
        .patch(
            NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerID": "hcloud://1"}})),
        )
        .await
        .unwrap();
    let pp = PostParams::default();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "web"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&pp, &ns)
        .await
        .unwrap();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "ingress", "namespace": "web"},
        "spec": {"ports": [{"port": 443, "protocol": "TCP"}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), "web")
        .create(&pp, &svc)
        .await
        .unwrap();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "ingress-1", "namespace": "web",
                     "labels": {"kubernetes.io/service-name": "ingress"}},
        "addressType": "IPv4",
        "ports": [{"port": 443, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.232.0.50"], "nodeName": NODE,
                       "conditions": {"ready": true}}]
    }))
    .unwrap();
    Api::<EndpointSlice>::namespaced(client.clone(), "web")
        .create(&pp, &slice)
        .await
        .unwrap();
    provider
}

/// What a reader on this node writes in place of the guides' names (`hetzner`: the
/// provider's base URL; `vlans`: whether this kernel makes them).
fn adaptations(cluster: &NodeCluster, hetzner: &str, vlans: bool) -> Adapt {
    let mut pairs: Vec<(String, String)> = vec![
        ("<node>".into(), NODE.into()),
        ("<holder>".into(), NODE.into()),
        // This node's uplink is eth0; the guides' eth1/eth2 are a second NIC.
        ("eth1".into(), "eth0".into()),
        ("eth2".into(), "eth0".into()),
        ("<Hetzner API token>".into(), cloud::hetzner::TOKEN.into()),
        (
            "    location: fsn1\n".into(),
            format!("    location: fsn1\n    endpoint: {hetzner}\n"),
        ),
        // The route-reflector example's pools: this node's is `edge`.
        (
            "values: [general, storage]".into(),
            "values: [general, storage, edge]".into(),
        ),
        // The chart from this checkout, its agent state inside the cluster's directory
        // (this node shares the machine's filesystem).
        (
            "helm install netpolicy charts/netpolicy -n netpolicy-system --create-namespace".into(),
            format!(
                "helm install netpolicy charts/netpolicy -n netpolicy-system \
                 --create-namespace --wait --timeout 5m --set agent.stateDir={}/agent-state",
                cluster.dir.display()
            ),
        ),
    ];
    if !vlans {
        // Without 802.1Q the routing guide's VLAN goes, and its gateway is the node's.
        pairs.extend([
            (
                "  vlans:\n    - {link: eth0, id: 100, addresses: [10.10.0.5/24]}\n".into(),
                String::new(),
            ),
            ("10.10.0.1".into(), HOST_IP.into()),
            ("10.10.0.0/24".into(), "10.231.0.0/24".into()),
        ]);
    }
    Adapt { pairs }
}

#[test]
fn guides_read_their_steps_files_and_expectations() {
    let g = read_guide(
        "```yaml\n# a.yaml\nkind: X\n```\n\n```sh\nkubectl get x   # → NAME READY\n\
         ip route show table 100 \\\n  proto 203\n# → 10.0.0.0/8 via 192.0.2.1\n\
         # prose\nkubectl apply -f - <<'YAML'\nkind: Y\nYAML\necho 'a # b'\n```\n",
    );
    assert_eq!(
        g.files,
        [("a.yaml".to_owned(), "# a.yaml\nkind: X\n".to_owned())]
    );
    let cmds: Vec<(&str, Vec<&str>)> = g
        .steps
        .iter()
        .map(|s| {
            (
                s.command.as_str(),
                s.expect.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        cmds,
        [
            ("kubectl get x", vec!["NAME READY"]),
            (
                "ip route show table 100 proto 203",
                vec!["10.0.0.0/8 via 192.0.2.1"]
            ),
            ("kubectl apply -f - <<'YAML'\nkind: Y\nYAML", vec![]),
            ("echo 'a # b'", vec![]),
        ]
    );
    // Every guide reads, and the ones a node can follow state what they print.
    for guide in GUIDES {
        let g = read_guide(&std::fs::read_to_string(root().join(guide)).unwrap());
        assert!(!g.steps.is_empty(), "{guide}: no shell steps");
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a real node: run by scripts/test with NETPOLICY_NODE_IMAGE"]
async fn every_guide_followed_step_by_step_on_a_real_node() {
    if let Some(why) = NodeCluster::unavailable() {
        common::skip(&format!("guides on a real node: {why}"));
        return;
    }
    let t0 = Instant::now();
    let cluster = NodeCluster::up(2400).unwrap_or_else(|e| panic!("{e}"));
    let client = cluster.client().await;
    let (hetzner, _cloud) = what_a_reader_has(&client).await;
    let vlans = kernel_has_vlans();
    if !vlans {
        common::skip(
            "guides on a real node: VLAN steps (this kernel has no 802.1Q; the guides' \
             VLAN items are left out of their files here, scripts/vm-test runs VLANs)",
        );
    }
    let adapt = adaptations(&cluster, &hetzner, vlans);
    let (work, bin) = workdir(&cluster, &adapt);
    let mut runner = Runner {
        work,
        path: format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        kubeconfig: cluster.kubeconfig.clone(),
        node_dir: cluster.dir.clone(),
        adapt,
        vlans,
        background: Vec::new(),
        ran: 0,
        skipped: 0,
    };
    for guide in GUIDES {
        let t = Instant::now();
        let g = read_guide(&std::fs::read_to_string(root().join(guide)).unwrap());
        eprintln!("== {guide}");
        for (name, text) in &g.files {
            std::fs::write(runner.work.join(name), runner.adapt.apply(text)).unwrap();
        }
        for step in &g.steps {
            runner.run(guide, step);
        }
        eprintln!("   {guide}: {:.0} s", t.elapsed().as_secs_f64());
    }
    eprintln!(
        "guides on a real node: {} steps ran, {} skipped (each said why), in {:.0} s",
        runner.ran,
        runner.skipped,
        t0.elapsed().as_secs_f64()
    );
}
