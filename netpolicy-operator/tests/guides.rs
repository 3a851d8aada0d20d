//! The guides' offline commands, run as a reader runs them: every `netpolicy plan`,
//! `convert` and `crds` line of a shell block in README.md, docs/*.md and
//! docs/guides/*.md (`cargo run … --bin netpolicy --` counts as `netpolicy`), with its
//! pipes (`jq -e`, so a path that yields nothing fails), from a directory where
//! `examples/` is the repository's. A guide whose command stops working, or whose `jq`
//! path no longer exists in the output, fails here. Commands that need a cluster
//! (`kubectl`, `helm`) are the node cluster's to run; a command naming files a reader
//! has and the repository does not (`old-manifests/`) prints a SKIP line.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::Command,
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every guide: README.md, docs/*.md, docs/guides/*.md.
fn guides() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    for dir in ["docs", "docs/guides"] {
        let mut md: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        md.sort();
        out.extend(md);
    }
    out
}

/// The logical lines (continuations joined, comments dropped) of the shell blocks of
/// `text`, with their line numbers.
fn shell_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_shell = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(lang) = t.strip_prefix("```") {
            in_shell = !in_shell && matches!(lang.trim(), "sh" | "bash" | "shell" | "console");
            continue;
        }
        if !in_shell {
            continue;
        }
        let code = match t.find(" #") {
            Some(k) if !t[..k].contains('\'') || t[..k].matches('\'').count() % 2 == 0 => &t[..k],
            _ if t.starts_with('#') => "",
            _ => t,
        };
        let code = code.trim_end();
        let (start, mut acc) = pending.take().unwrap_or((i + 1, String::new()));
        match code.strip_suffix('\\') {
            Some(head) => {
                acc.push_str(head.trim_end());
                acc.push(' ');
                pending = Some((start, acc));
            }
            None => {
                acc.push_str(code);
                if !acc.trim().is_empty() {
                    out.push((start, acc.trim().to_owned()));
                }
            }
        }
    }
    out
}

/// The command as this test runs it, or `None` when it is not an offline netpolicy
/// command.
fn offline(line: &str) -> Option<String> {
    let line = line.replace(
        "cargo run -p netpolicy-operator --bin netpolicy --",
        "netpolicy",
    );
    let mut words = line.split_whitespace();
    if words.next() != Some("netpolicy") {
        return None;
    }
    matches!(words.next(), Some("plan" | "convert" | "crds"))
        .then(|| line.replace("| jq '", "| jq -e '"))
}

/// The `-f` paths a command names that the repository does not have.
fn missing_files(cmd: &str, dir: &Path) -> Vec<String> {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "-f" || w[0] == "--filename")
        .map(|w| w[1])
        .filter(|p| !dir.join(p).exists())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_offline_command_of_the_guides_runs_and_its_jq_paths_exist() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_netpolicy"));
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root().join("examples"), dir.path().join("examples")).unwrap();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    let mut failed = Vec::new();
    for guide in guides() {
        let text = std::fs::read_to_string(&guide).unwrap();
        let name = guide
            .strip_prefix(root())
            .unwrap_or(&guide)
            .display()
            .to_string();
        for (line, cmd) in shell_lines(&text) {
            let Some(cmd) = offline(&cmd) else { continue };
            let missing = missing_files(&cmd, dir.path());
            if !missing.is_empty() {
                // Not `eprintln!`: the harness captures that; scripts/test counts these.
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIP {name}:{line}: `{cmd}` names files a reader has, not the repository: {}",
                    missing.join(", ")
                );
                continue;
            }
            let out = Command::new("bash")
                .args(["-o", "pipefail", "-c", &cmd])
                .current_dir(dir.path())
                .env("PATH", &path)
                .output()
                .unwrap();
            ran += 1;
            if !out.status.success() {
                failed.push(format!(
                    "{name}:{line}: `{cmd}` exited {:?}\n{}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    // The guides held 9 such commands when this test was written: fewer means the
    // parser lost some.
    assert!(ran >= 9, "only {ran} offline commands found in the guides");
}

#[test]
fn shell_blocks_are_read_as_a_reader_types_them() {
    let text = "text\n```sh\nnetpolicy plan -f a -o json \\\n  | jq '.x'   # a comment\n\
                kubectl get nodes\n```\n```yaml\nnetpolicy: no\n```\n";
    let lines = shell_lines(text);
    assert_eq!(
        lines,
        [
            (3, "netpolicy plan -f a -o json | jq '.x'".to_owned()),
            (5, "kubectl get nodes".to_owned())
        ]
    );
    assert_eq!(
        offline(&lines[0].1).as_deref(),
        Some("netpolicy plan -f a -o json | jq -e '.x'")
    );
    assert_eq!(offline(&lines[1].1), None);
}

/// Issue 39: the migration guide said Meridio's `network-attachment` has no counterpart
/// while `convert` maps it, and the CLI and README said `convert` reads ipruler and
/// kube-fip only. Every seed `convert` reads is named by `convert --help`, the README and
/// a section of the migration guide, and no row of the guide calls something `convert`
/// maps "no counterpart".
#[test]
fn the_cli_readme_and_migration_guide_name_every_seed_convert_reads() {
    let help = Command::new(env!("CARGO_BIN_EXE_netpolicy"))
        .args(["--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).to_lowercase();
    let readme = std::fs::read_to_string(root().join("README.md"))
        .unwrap()
        .to_lowercase();
    let guide = std::fs::read_to_string(root().join("docs/migration.md")).unwrap();
    let headings: Vec<String> = guide
        .lines()
        .filter(|l| l.starts_with("# ") || l.starts_with("## "))
        .map(str::to_lowercase)
        .collect();
    for seed in ["ipruler", "kube-fip", "meridio", "route-reflector"] {
        assert!(
            help.contains(seed),
            "`netpolicy --help` does not name {seed}:\n{help}"
        );
        assert!(readme.contains(seed), "README.md does not name {seed}");
        assert!(
            headings
                .iter()
                .filter(|h| h.starts_with("## "))
                .any(|h| h.contains(seed)),
            "docs/migration.md has no section for {seed}: {headings:?}"
        );
    }
    // What convert maps is never "no counterpart" in the guide.
    let meridio = "apiVersion: meridio.nordix.org/v1
kind: Attractor
metadata: {name: a1, namespace: red, labels: {trench: t}}
spec:
  replicas: 2
  composites: [c]
  gateways: [g]
  vips: [v]
  interface:
    name: ext
    type: network-attachment
    network-attachments: [{name: macvlan-nad, namespace: red}]
";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.yaml"), meridio).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_netpolicy"))
        .args(["convert", "-f"])
        .arg(dir.path().join("m.yaml"))
        .output()
        .unwrap();
    let converted = String::from_utf8_lossy(&out.stdout);
    assert!(converted.contains("networkAttachments"), "{converted}");
    for row in guide.lines().filter(|l| l.contains("network-attachment")) {
        assert!(
            !row.contains("no counterpart"),
            "docs/migration.md says convert cannot do what it does: {row}"
        );
    }
}

/// The YAML files of `dir` in the order `kubectl apply -f dir` reads them (by name,
/// recursively).
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for e in entries {
        if e.is_dir() {
            out.extend(yaml_files(&e));
        } else if e.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            out.push(e);
        }
    }
    out
}

/// Issue 40: `kubectl apply -f examples/floating-ips/` failed on a first apply (the
/// FloatingIPs' file sorts before the Namespaces'), and `examples/return-routing/` had
/// no `dmz` namespace. Every example directory applies in one `kubectl apply -f`: each
/// namespaced object's namespace is created before it, in kubectl's order (files by
/// name, documents in order), unless it is one every cluster has.
#[test]
fn every_example_directory_applies_in_one_kubectl_apply() {
    const CLUSTER_SCOPED: &[&str] = &[
        "Namespace",
        "Node",
        "ClusterConfig",
        "NodeConfig",
        "FloatingIPRange",
        "RouteReflectorConfig",
        "RoutedIPIssuer",
        "RoutedIP",
        "BGPPeer",
    ];
    let mut problems = Vec::new();
    let examples = root().join("examples");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&examples)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && !yaml_files(p).is_empty())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 7, "{dirs:?}");
    for dir in dirs {
        // Namespaces every cluster has, and Rancher's own (examples/rancher-guests is for
        // a cluster that runs Rancher: its Clusters live there).
        let mut namespaces: Vec<String> = ["default", "kube-system", "fleet-default"]
            .map(str::to_owned)
            .to_vec();
        for file in yaml_files(&dir) {
            let text = std::fs::read_to_string(&file).unwrap();
            for doc in text.split("\n---") {
                let Ok(v) = serde_saphyr::from_str::<serde_json::Value>(doc) else {
                    continue;
                };
                let kind = v["kind"].as_str().unwrap_or_default();
                let name = v["metadata"]["name"].as_str().unwrap_or_default();
                if kind == "Namespace" {
                    namespaces.push(name.to_owned());
                    continue;
                }
                if kind.is_empty() || CLUSTER_SCOPED.contains(&kind) {
                    continue;
                }
                let ns = v["metadata"]["namespace"].as_str().unwrap_or("default");
                if !namespaces.iter().any(|n| n == ns) {
                    problems.push(format!(
                        "{}: {kind} {ns}/{name}: namespace {ns} is not created before it",
                        file.strip_prefix(root()).unwrap_or(&file).display()
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
