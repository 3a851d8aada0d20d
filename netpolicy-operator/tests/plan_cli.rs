//! `netpolicy plan` end to end: the real binary over the examples and over bad input,
//! checking exit codes, output and messages.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{fs, io::Write, path::PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/cluster")
}

/// `Kind/name` of each object in a JSON list (`plan`'s workloads and installs).
fn kinds_and_names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["name"].as_str().unwrap()
            )
        })
        .collect()
}

fn netpolicy() -> Command {
    Command::cargo_bin("netpolicy").unwrap()
}

const NODES: &str = "---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {zone: a}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {zone: b}}
";

fn node_config(name: &str, priority: i64, selector: &str, via: &str) -> String {
    format!(
        "---
apiVersion: netpolicy.io/v1alpha1
kind: NodeConfig
metadata: {{name: {name}}}
spec:
  nodeSelector: {selector}
  priority: {priority}
  routes:
    - to: 10.20.0.0/16
      via: {via}
"
    )
}

/// Writes `text` to a temporary file and runs `plan -o json` on it.
fn plan_json(text: &str) -> (i32, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("in.yaml");
    fs::write(&f, text).unwrap();
    let out = netpolicy()
        .args(["plan", "-o", "json", "-f"])
        .arg(&f)
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap(),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_example_cluster_plans_without_errors() {
    let out = netpolicy()
        .args(["plan", "-o", "json", "-f"])
        .arg(examples())
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["nodes"].as_object().unwrap().len(), 12);
    assert_eq!(v["errors"], Value::Array(vec![]));
    // Priority 20 beats 10 on the zone-c edge node only.
    let default_300 = |node: &str| {
        v["nodes"][node]["routes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["to"] == "0.0.0.0/0" && r["table"] == 300)
            .cloned()
            .unwrap()
    };
    assert_eq!(default_300("edge-c1")["via"], "192.0.2.2");
    assert_eq!(
        default_300("edge-c1")["sources"][0]["name"],
        "edge-zone-c-backup"
    );
    assert_eq!(default_300("edge-a1")["via"], "192.0.2.1");
    // The NodeConfig's route replaced the ClusterConfig's with the same identity.
    let d200 = v["nodes"]["edge-a1"]["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["to"] == "0.0.0.0/0" && r["table"] == 200)
        .cloned()
        .unwrap();
    assert_eq!(d200["sources"][0]["kind"], "NodeConfig");
    assert!(
        v["nodes"]["general-a1"]["routes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["table"] != 300)
    );
}

#[test]
fn the_table_output_names_nodes_items_and_sources() {
    netpolicy()
        .args(["plan", "-f"])
        .arg(examples())
        .assert()
        .success()
        .stdout(predicate::str::contains("NODES general-a1, general-a2"))
        .stdout(predicate::str::contains("NodeConfig/edge-zone-c-backup"))
        .stdout(predicate::str::contains("hard-synced tables: 200"))
        .stdout(predicate::str::contains("No errors."));
}

#[test]
fn yaml_output_has_the_same_content_as_json() {
    let json = netpolicy()
        .args(["plan", "-o", "json", "-f"])
        .arg(examples())
        .output()
        .unwrap();
    let yaml = netpolicy()
        .args(["plan", "-o", "yaml", "-f"])
        .arg(examples())
        .output()
        .unwrap();
    assert!(yaml.status.success());
    let from_json: Value = serde_json::from_slice(&json.stdout).unwrap();
    let from_yaml: Value =
        serde_saphyr::from_str(std::str::from_utf8(&yaml.stdout).unwrap()).unwrap();
    assert_eq!(from_json, from_yaml);
}

#[test]
fn an_invalid_cidr_exits_1_and_names_the_field() {
    let text = format!(
        "{NODES}---
apiVersion: netpolicy.io/v1alpha1
kind: NodeConfig
metadata: {{name: bad}}
spec:
  routes:
    - to: 10.20.0.1/16
      dev: eth0
    - to: not-a-prefix
      dev: eth0
"
    );
    let (code, v, stderr) = plan_json(&text);
    assert_eq!(code, 1, "{stderr}");
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors[0]["kind"], "NodeConfig");
    assert_eq!(errors[0]["name"], "bad");
    assert_eq!(errors[0]["field"], "spec.routes[0].to");
    assert_eq!(
        errors[0]["message"],
        "10.20.0.1/16 has host bits set; did you mean 10.20.0.0/16?"
    );
    assert_eq!(errors[1]["field"], "spec.routes[1].to");
    // The invalid NodeConfig selects every node: all are held, none rendered.
    assert_eq!(v["nodes"], serde_json::json!({}));
    assert_eq!(v["heldNodes"].as_object().unwrap().len(), 2);
}

#[test]
fn a_conflict_exits_1_names_both_sources_and_holds_only_affected_nodes() {
    let text = format!(
        "{NODES}{}{}",
        node_config("x", 5, "{matchLabels: {zone: a}}", "10.0.0.1"),
        node_config("y", 5, "{}", "10.0.0.2"),
    );
    let (code, v, _) = plan_json(&text);
    assert_eq!(code, 1);
    let e = &v["errors"][0];
    assert_eq!(e["field"], "spec.routes");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("NodeConfig/x and NodeConfig/y"), "{msg}");
    assert!(msg.contains("1 node (n1)"), "{msg}");
    assert!(v["nodes"].get("n1").is_none());
    assert_eq!(v["nodes"]["n2"]["routes"][0]["via"], "10.0.0.2");
    assert!(
        v["heldNodes"]["n1"][0]
            .as_str()
            .unwrap()
            .contains("equal precedence")
    );

    // Swapping the documents gives the same result: no list-order tie-break.
    let swapped = format!(
        "{}{}{NODES}",
        node_config("y", 5, "{}", "10.0.0.2"),
        node_config("x", 5, "{matchLabels: {zone: a}}", "10.0.0.1"),
    );
    let (code2, v2, _) = plan_json(&swapped);
    assert_eq!((code, &v), (code2, &v2));
}

#[test]
fn a_higher_priority_resolves_what_would_conflict() {
    let text = format!(
        "{NODES}{}{}",
        node_config("x", 6, "{matchLabels: {zone: a}}", "10.0.0.1"),
        node_config("y", 5, "{}", "10.0.0.2"),
    );
    let (code, v, _) = plan_json(&text);
    assert_eq!(code, 0);
    assert_eq!(v["nodes"]["n1"]["routes"][0]["via"], "10.0.0.1");
}

#[test]
fn malformed_yaml_names_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("broken.yaml");
    fs::write(
        &f,
        format!("{NODES}---\napiVersion: v1\nkind: Node\nmetadata:\n  name: [n3\n"),
    )
    .unwrap();
    netpolicy()
        .args(["plan", "-f"])
        .arg(&f)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("broken.yaml:13:"))
        .stdout(predicate::str::contains("malformed YAML"));
}

#[test]
fn unknown_kinds_are_ignored_with_a_warning() {
    let text =
        format!("{NODES}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\n");
    let (code, v, stderr) = plan_json(&text);
    assert_eq!(code, 0);
    assert!(
        stderr.contains("warning:") && stderr.contains("Deployment"),
        "{stderr}"
    );
    assert_eq!(v["nodes"].as_object().unwrap().len(), 2);
}

#[test]
fn a_misspelt_field_is_an_error_not_silently_dropped() {
    let text = format!(
        "{NODES}---
apiVersion: netpolicy.io/v1alpha1
kind: NodeConfig
metadata: {{name: typo}}
spec:
  nodeSelecter: {{matchLabels: {{zone: a}}}}
"
    );
    let (code, v, _) = plan_json(&text);
    assert_eq!(code, 1);
    assert_eq!(v["errors"][0]["field"], "spec.nodeSelecter");
}

#[test]
fn a_cluster_config_not_named_default_is_refused() {
    let text = format!(
        "{NODES}---
apiVersion: netpolicy.io/v1alpha1
kind: ClusterConfig
metadata: {{name: prod}}
spec: {{}}
"
    );
    let (code, v, _) = plan_json(&text);
    assert_eq!(code, 1);
    assert_eq!(v["errors"][0]["field"], "metadata.name");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("\"default\"")
    );
}

#[test]
fn a_missing_file_is_a_usage_error() {
    netpolicy()
        .args(["plan", "-f", "/nonexistent/netpolicy.yaml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "cannot read /nonexistent/netpolicy.yaml",
        ));
}

#[test]
fn missing_arguments_are_a_usage_error() {
    netpolicy().arg("plan").assert().code(2);
    netpolicy()
        .args(["plan", "-o", "xml", "-f"])
        .arg(examples())
        .assert()
        .code(2);
}

#[test]
fn garbage_input_never_panics() {
    for text in [
        "\u{0}\u{1}",
        "- a\n- b\n",
        "apiVersion: netpolicy.io/v1alpha1\nkind: NodeConfig\nmetadata: {name: a}\nspec: 5\n",
        "apiVersion: netpolicy.io/v1alpha1\nkind: NodeConfig\nmetadata: {name: a}\nspec:\n  routes: [{to: 99999}]\n  priority: x\n",
        "apiVersion: netpolicy.io/v1alpha1\nkind: NodeConfig\nmetadata: {name: a}\nspec:\n  vlans: [{link: eth0, id: -1}]\n",
        "apiVersion: v1\nkind: Node\n",
        ": : :\n",
    ] {
        let (code, _, stderr) = plan_json(text);
        assert!(code == 0 || code == 1, "{text:?} exited {code}: {stderr}");
        assert!(!stderr.contains("panicked"), "{text:?}: {stderr}");
    }
}

#[test]
fn crds_are_printed() {
    netpolicy()
        .arg("crds")
        .assert()
        .success()
        .stdout(predicate::str::contains("name: nodeconfigs.netpolicy.io"))
        .stdout(predicate::str::contains("x-kubernetes-int-or-string: true"));
}

const RANGES: &str = "---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIPRange
metadata: {name: blue}
spec:
  cidrs: [10.135.10.192/26]
  exclude: [10.135.10.193]
---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIPRange
metadata: {name: old}
spec:
  ranges: [{start: 10.9.0.1, end: 10.9.0.2}]
  draining: true
";

fn fip(ns: &str, name: &str, range: &str, address: Option<&str>) -> String {
    let address = address.map_or(String::new(), |a| format!("\n  address: {a}"));
    format!(
        "---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIP
metadata: {{name: {name}, namespace: {ns}}}
spec:
  range: {range}{address}
"
    )
}

/// Rancher guests in `plan`: found through the Rancher Clusters among the manifests,
/// kube-vip installed only where the Cluster is labelled, each guest's `cidr-global`;
/// a `c-m-…` namespace without a Cluster is a warning naming it.
#[test]
fn plan_shows_each_rancher_guest_with_what_it_would_install_and_publish() {
    let dir = examples().join("../rancher-guests");
    let out = netpolicy()
        .args(["plan", "-o", "json", "-f"])
        .arg(&dir)
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let guests = v["guests"].as_array().unwrap();
    assert_eq!(guests.len(), 2, "{v}");
    let shop = &guests[0];
    assert_eq!(shop["namespace"], "c-m-ngd5hs2r");
    assert_eq!(shop["cluster"], "shop");
    assert_eq!(shop["kubeconfig"], "fleet-default/shop-kubeconfig");
    let installs = kinds_and_names(&shop["install"]);
    assert!(
        installs.contains(&"DaemonSet/kube-vip-ds".to_owned()),
        "{installs:?}"
    );
    assert!(
        installs.contains(&"Deployment/kube-vip-cloud-provider".to_owned()),
        "{installs:?}"
    );
    let address = |ns: &str| {
        v["floatingIPs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["namespace"] == ns)
            .map(|f| f["address"].as_str().unwrap().to_owned())
            .unwrap()
    };
    assert_eq!(
        shop["kubeVip"],
        serde_json::json!({"cidr-global": format!("{}/32", address("c-m-ngd5hs2r"))})
    );
    let analytics = &guests[1];
    assert_eq!(analytics["cluster"], "analytics");
    assert_eq!(
        analytics["install"],
        serde_json::json!([]),
        "not labelled kube-vip=true"
    );
    assert_eq!(
        analytics["kubeVip"]["cidr-global"],
        format!("{}/32", address("c-m-x7lqz4bw"))
    );
    // A guest namespace no Cluster names: a warning, not a guess.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(dir.join("guests.yaml"), tmp.path().join("guests.yaml")).unwrap();
    std::fs::write(
        tmp.path().join("orphan.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: c-m-orphan}\n",
    )
    .unwrap();
    let out = netpolicy()
        .args(["plan", "-o", "json", "-f"])
        .arg(tmp.path())
        .assert()
        .success();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr
            .lines()
            .any(|w| w.starts_with("warning: FloatingIP c-m-orphan/")
                && w.contains("status.clusterName")),
        "{stderr}"
    );
}

#[test]
fn the_floating_ip_example_allocates_without_errors() {
    let out = netpolicy()
        .args(["plan", "-o", "json", "-f"])
        .arg(examples().join("../floating-ips"))
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let ranges = v["floatingIPRanges"].as_array().unwrap();
    let v4 = ranges.iter().find(|r| r["name"] == "public-v4").unwrap();
    assert_eq!(v4["capacity"], 61);
    let v6 = ranges.iter().find(|r| r["name"] == "public-v6").unwrap();
    // Above 2^53: an exact string (a JSON number would be rounded by jq and JavaScript).
    assert_eq!(v6["capacity"], "18446744073709551615");
    let fips = v["floatingIPs"].as_array().unwrap();
    let addr = |ns: &str, n: &str| {
        fips.iter()
            .find(|f| f["namespace"] == ns && f["name"] == n)
            .map(|f| f["address"].as_str().unwrap().to_owned())
            .unwrap()
    };
    assert_eq!(addr("team-a", "web"), "203.0.113.200");
    assert_eq!(addr("team-c", "old-gateway"), "198.51.100.12");
    assert!(
        fips.iter()
            .all(|f| f["namespace"] != "team-c" || f["auto"].is_null())
    );
    // A namespace that asks for an address from the range by name gets no automatic one.
    let auto: Vec<&str> = fips
        .iter()
        .filter(|f| f["auto"] == true)
        .map(|f| f["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(auto, ["guest-1"]);
    // The FloatingIPs that exist are served first; the one autoAllocate makes exists
    // only in the operator's next pass and gets what is left (as on a live cluster:
    // floating_ips.rs applies this example and checks exactly these addresses).
    // kube-vip-cloud-provider's ConfigMap, as the operator would keep it.
    assert_eq!(
        v["kubeVip"],
        serde_json::json!([{
            "cluster": "local", "namespace": "kube-system", "name": "kubevip",
            "data": {"cidr-guest-1": "203.0.113.195/32", "cidr-team-a": "203.0.113.200/32",
                     "cidr-team-b": "203.0.113.194/32"}
        }])
    );
}

#[test]
fn dynamic_requests_go_by_namespace_then_name_after_static_ones() {
    let text = format!(
        "{RANGES}{}{}{}",
        fip("ns-b", "x", "blue", None),
        fip("ns-a", "y", "blue", None),
        fip("ns-z", "s", "blue", Some("10.135.10.194")),
    );
    let (code, v, _) = plan_json(&text);
    assert_eq!(code, 0, "{v}");
    let got: Vec<(String, String)> = v["floatingIPs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                format!(
                    "{}/{}",
                    f["namespace"].as_str().unwrap(),
                    f["name"].as_str().unwrap()
                ),
                f["address"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("ns-a/y".to_owned(), "10.135.10.195".to_owned()),
            ("ns-b/x".to_owned(), "10.135.10.196".to_owned()),
            ("ns-z/s".to_owned(), "10.135.10.194".to_owned()),
        ]
    );
}

#[test]
fn a_taken_or_invalid_static_request_is_an_error_never_another_address() {
    let text = format!(
        "{RANGES}{}{}{}{}{}",
        fip("a", "first", "blue", Some("10.135.10.200")),
        fip("b", "second", "blue", Some("10.135.10.200")),
        fip("c", "excluded", "blue", Some("10.135.10.193")),
        fip("d", "outside", "blue", Some("10.0.0.1")),
        fip("e", "nowhere", "green", None),
    );
    let (code, v, _) = plan_json(&text);
    assert_eq!(code, 1);
    let errors: Vec<(String, String, String)> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["field"].as_str().unwrap().to_owned(),
                e["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(errors.contains(&(
        "b/second".into(),
        "spec.address".into(),
        "10.135.10.200 is taken by a/first".into()
    )));
    assert!(errors.contains(&(
        "c/excluded".into(),
        "spec.address".into(),
        "10.135.10.193 is excluded from the pool".into()
    )));
    assert!(errors.contains(&(
        "d/outside".into(),
        "spec.address".into(),
        "10.0.0.1 is outside the pool".into()
    )));
    assert!(errors.contains(&(
        "e/nowhere".into(),
        "spec.range".into(),
        "there is no FloatingIPRange named \"green\"".into()
    )));
    for f in v["floatingIPs"].as_array().unwrap() {
        if f["name"] != "first" {
            assert_eq!(f["address"], "", "{f}");
        }
    }
}

#[test]
fn a_draining_range_keeps_what_it_has_and_gives_nothing_new() {
    let kept = "---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIP
metadata: {name: kept, namespace: a}
spec: {range: old}
status: {address: 10.9.0.2}
";
    let text = format!("{RANGES}{kept}{}", fip("b", "new", "old", None));
    let (code, v, _) = plan_json(&text);
    assert_eq!(code, 1);
    assert_eq!(v["floatingIPs"][0]["address"], "10.9.0.2");
    assert_eq!(v["floatingIPs"][1]["address"], "");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("draining")
    );
}

#[test]
fn overlapping_ranges_are_reported_naming_both() {
    let text = format!(
        "{RANGES}---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIPRange
metadata: {{name: green}}
spec:
  cidrs: [10.135.10.0/24]
"
    );
    let (code, v, _) = plan_json(&text);
    assert_eq!(code, 1);
    let msg = v["errors"][0]["message"].as_str().unwrap();
    assert_eq!(
        msg,
        "pools blue and green overlap (both contain 10.135.10.194)"
    );
}

#[test]
fn a_persisted_address_held_twice_is_reported_and_neither_owner_gets_another() {
    let held = |ns: &str| {
        format!(
            "---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIP
metadata: {{name: ip, namespace: {ns}}}
spec: {{range: blue}}
status: {{address: 10.135.10.210}}
"
        )
    };
    let kept = "---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIP
metadata: {name: kept, namespace: d}
spec: {range: blue}
status: {address: 10.135.10.194}
";
    let text = format!(
        "{RANGES}{}{}{}{kept}",
        held("a"),
        held("b"),
        fip("c", "new", "blue", None)
    );
    let (code, v, _) = plan_json(&text);
    assert_eq!(code, 1);
    let msg = v["errors"][0]["message"].as_str().unwrap();
    assert!(
        msg.contains("10.135.10.210 is held by both a/ip and b/ip"),
        "{msg}"
    );
    let fips = v["floatingIPs"].as_array().unwrap();
    assert_eq!(fips[0]["address"], "", "{fips:?}");
    assert_eq!(fips[1]["address"], "", "{fips:?}");
    // The rest of the range is restored (d/kept keeps .194), the contested .210 stays
    // reserved, and new requests allocate around both.
    assert_eq!(fips[2]["address"], "10.135.10.195", "{fips:?}");
    assert_eq!(fips[3]["address"], "10.135.10.194", "{fips:?}");
    let blue = v["floatingIPRanges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "blue")
        .unwrap()
        .clone();
    assert_eq!(blue["allocated"], 3, "kept, contested, new");
}

#[test]
fn a_floating_ip_defined_twice_keeps_the_first_and_says_where() {
    let text = format!(
        "{RANGES}{}{}",
        fip("a", "web", "blue", Some("10.135.10.200")),
        fip("a", "web", "blue", Some("10.135.10.201")),
    );
    let (code, v, _) = plan_json(&text);
    assert_eq!(code, 1);
    assert_eq!(v["errors"][0]["name"], "a/web");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("defined twice")
    );
    assert_eq!(v["floatingIPs"].as_array().unwrap().len(), 1);
    assert_eq!(v["floatingIPs"][0]["address"], "10.135.10.200");
}

fn rr_examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn plan_dir_json(dir: &std::path::Path) -> Value {
    let out = netpolicy()
        .args(["plan", "-o", "json", "-f"])
        .arg(dir)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The project's own examples are what it recommends: they plan with no error and no
/// warning.
#[test]
fn the_examples_plan_without_a_warning() {
    let v = plan_dir_json(&rr_examples());
    assert_eq!(v["errors"], serde_json::json!([]), "{:#}", v["errors"]);
    assert_eq!(v["warnings"], serde_json::json!([]), "{:#}", v["warnings"]);
}

#[test]
fn the_route_reflector_example_plans_a_multi_topology() {
    let v = plan_dir_json(&rr_examples());
    let rr = &v["routeReflectors"];
    let reflectors = rr["reflectors"].as_array().unwrap();
    assert_eq!(reflectors.len(), 6, "{rr}");
    // Preferred (general) nodes first; `multi` gives every reflector its own cluster ID
    // (reflectors of a zone serve different clients there), counting up.
    assert_eq!(reflectors[0]["node"], "general-a1");
    assert_eq!(reflectors[0]["clusterID"], "224.0.0.1");
    let ids: std::collections::BTreeSet<&str> = reflectors
        .iter()
        .map(|r| r["clusterID"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 6, "{rr}");
    assert_eq!(reflectors[5]["clusterID"], "224.0.0.6");
    // The machine-readable end state of every node's marks.
    let nodes = rr["nodes"].as_object().unwrap();
    assert_eq!(
        nodes["general-a1"],
        serde_json::json!({
            "labels": {"calico-route-reflector": "general-a1"},
            "annotations": {"projectcalico.org/RouteReflectorClusterID": "224.0.0.1"}
        })
    );
    let client = &nodes["edge-a1"]["labels"];
    assert_eq!(client.as_object().unwrap().len(), 1, "{client}");
    assert!(
        client
            .as_object()
            .unwrap()
            .keys()
            .all(|k| k.starts_with("rr.netpolicy.io/set-"))
    );
    let zone_of = |n: &str| n.chars().rev().nth(1).unwrap(); // general-a1 -> 'a'
    for (client, rs) in rr["clients"].as_object().unwrap() {
        let rs: Vec<&str> = rs
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        assert_eq!(rs.len(), 2, "{client}");
        assert!(
            rs.iter().any(|r| zone_of(r) == zone_of(client)),
            "{client}: {rs:?}"
        );
        assert!(
            rs.iter().any(|r| zone_of(r) != zone_of(client)),
            "{client}: {rs:?}"
        );
    }
    // Reflectors peer over a ring with chords, each named in its own link object (no
    // full mesh: with an ID per reflector, every path through it is passed on).
    let peers = rr["bgpPeers"].as_array().unwrap();
    assert!(!peers.iter().any(|p| p["name"] == "netpolicy-rr-mesh"));
    let links: Vec<&serde_json::Value> = peers
        .iter()
        .filter(|p| {
            p["name"]
                .as_str()
                .unwrap()
                .starts_with("netpolicy-rr-link-")
        })
        .collect();
    assert_eq!(links.len(), 6, "{rr}");
    for l in &links {
        let to = l["spec"]["peerSelector"].as_str().unwrap();
        assert_eq!(to.matches(", ").count(), 3, "four peers: {to}");
        assert!(
            l["spec"]["nodeSelector"]
                .as_str()
                .unwrap()
                .starts_with("calico-route-reflector == "),
            "{l}"
        );
    }
    assert!(peers.len() <= 12);
    let phases: Vec<&str> = rr["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["phase"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases,
        ["createPeers", "promote", "addClientLabels", "setClusterIDs"]
    );
}

/// Writes the cluster as the plan leaves it (labels, annotations, BGPPeers) and plans
/// again: the operator reading its own work back must find nothing to do.
#[test]
fn a_cluster_in_the_planned_state_needs_no_route_reflector_steps() {
    let v = plan_dir_json(&rr_examples());
    let rr = &v["routeReflectors"];
    let dir = tempfile::tempdir().unwrap();
    let src = rr_examples();
    let ring = rr["ring"].as_array().unwrap();
    assert_eq!(ring.len(), 6);
    // The operator keeps the ring in the config's status; reversed, it must be honoured
    // (a fresh ring would be built in round-robin order instead).
    let reversed: Vec<Value> = ring.iter().rev().cloned().collect();
    fs::write(
        dir.path().join("rr.yaml"),
        format!(
            "{}status:\n  ring: {}\n",
            fs::read_to_string(src.join("route-reflectors/routereflectorconfig.yaml")).unwrap(),
            Value::Array(reversed.clone())
        ),
    )
    .unwrap();
    let mut docs = String::new();
    let mut ops = Vec::new();
    for s in rr["steps"].as_array().unwrap() {
        for op in s["ops"].as_array().unwrap() {
            ops.push(op.as_str().unwrap().to_owned());
        }
    }
    let nodes = fs::read_to_string(src.join("cluster/nodes.yaml")).unwrap();
    for doc in nodes.split("\n---\n").filter(|d| d.contains("kind: Node")) {
        let name = doc
            .lines()
            .find_map(|l| l.trim().strip_prefix("name: "))
            .unwrap()
            .to_owned();
        let mut labels = Vec::new();
        let mut annotations = Vec::new();
        for r in rr["reflectors"].as_array().unwrap() {
            if r["node"] == name.as_str() {
                labels.push(format!("calico-route-reflector: {name}"));
                annotations.push(format!(
                    "projectcalico.org/RouteReflectorClusterID: \"{}\"",
                    r["clusterID"].as_str().unwrap()
                ));
            }
        }
        for op in &ops {
            // "label node N as reflector (N)" is the reflector label set above;
            // the others name a set label key.
            if let Some(key) = op.strip_prefix(&format!("label node {name} "))
                && !key.starts_with("as reflector")
            {
                labels.push(format!("{key}: \"\""));
            }
        }
        let mut d = doc.replace(
            "  labels:\n",
            &format!(
                "  annotations: {{{}}}\n  labels:\n{}",
                annotations.join(", "),
                labels
                    .iter()
                    .map(|l| format!("    {l}\n"))
                    .collect::<String>()
            ),
        );
        d.insert_str(0, "---\n");
        docs.push_str(&d);
        docs.push('\n');
    }
    for p in rr["bgpPeers"].as_array().unwrap() {
        docs.push_str(&format!(
            "---\napiVersion: crd.projectcalico.org/v1\nkind: BGPPeer\nmetadata: {{name: {}}}\nspec:\n  nodeSelector: {}\n  peerSelector: {}\n",
            p["name"].as_str().unwrap(),
            serde_json::to_string(&p["spec"]["nodeSelector"]).unwrap(),
            serde_json::to_string(&p["spec"]["peerSelector"]).unwrap(),
        ));
    }
    fs::write(dir.path().join("state.yaml"), docs).unwrap();
    let again = plan_dir_json(dir.path());
    let rr2 = &again["routeReflectors"];
    assert_eq!(
        rr2["ring"],
        Value::Array(reversed),
        "the ring in the status is kept"
    );
    // With p = 2 the reversed ring has the same sets: nothing to do.
    assert_eq!(rr2["steps"], serde_json::json!([]), "{rr2}");
    assert_eq!(rr2["clients"], rr["clients"]);
    assert_eq!(rr2["bgpPeers"], rr["bgpPeers"]);
}

#[test]
fn an_invalid_route_reflector_config_names_every_bad_field() {
    let text = format!(
        "{NODES}---
apiVersion: netpolicy.io/v1alpha1
kind: RouteReflectorConfig
metadata: {{name: default}}
spec:
  min: 5
  max: 2
  clusterID: not-an-ip
  tolerations:
    - {{key: a, operator: Maybe}}
    - {{key: b, effect: NoWhere}}
  eligibleNodes:
    matchExpressions:
      - {{key: pool, operator: In}}
---
apiVersion: netpolicy.io/v1alpha1
kind: RouteReflectorConfig
metadata: {{name: second}}
spec: {{}}
"
    );
    let (code, v, _) = plan_json(&text);
    assert_eq!(code, 1);
    let fields: Vec<(&str, &str)> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["field"].as_str().unwrap()))
        .collect();
    for want in [
        ("default", "spec.clusterID"),
        ("default", "spec.tolerations[0].operator"),
        ("default", "spec.tolerations[1].effect"),
        ("default", "spec.eligibleNodes.matchExpressions[0].values"),
        ("second", "metadata.name"),
    ] {
        assert!(fields.contains(&want), "{want:?} not in {fields:?}");
    }
    assert!(v.get("routeReflectors").is_none());
    // min > max is found once the selectors and cluster ID are valid.
    let text = format!(
        "{NODES}---
apiVersion: netpolicy.io/v1alpha1
kind: RouteReflectorConfig
metadata: {{name: default}}
spec: {{min: 5, max: 2, peersPerNode: 0}}
"
    );
    let (code, v, _) = plan_json(&text);
    assert_eq!(code, 1);
    let fields: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["spec.min", "spec.peersPerNode"]);
}

#[test]
fn route_reflectors_are_in_the_table_output() {
    netpolicy()
        .args(["plan", "-f"])
        .arg(rr_examples())
        .assert()
        .success()
        .stdout(predicate::str::contains("ROUTE REFLECTOR"))
        .stdout(predicate::str::contains("netpolicy-rr-link-"))
        .stdout(predicate::str::contains("make-before-break"));
}

/// `deploy/crds.yaml` is what `netpolicy crds` prints: regenerate it with
/// `cargo run -p netpolicy-operator --bin netpolicy -- crds > deploy/crds.yaml`.
#[test]
fn the_committed_crds_match_the_generated_ones() {
    let out = netpolicy().arg("crds").output().unwrap();
    assert!(out.status.success());
    let committed =
        fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds.yaml"))
            .unwrap();
    assert!(
        committed == String::from_utf8(out.stdout).unwrap(),
        "deploy/crds.yaml is stale: run `cargo run -p netpolicy-operator --bin netpolicy -- crds > deploy/crds.yaml`"
    );
}

#[test]
fn routed_ips_elect_an_eligible_node_keep_their_holder_and_name_bad_references() {
    let v = plan_dir_json(&rr_examples());
    assert_eq!(
        v["routedIPs"],
        serde_json::json!([
            {"name": "lab-ingress", "node": "edge-a1"},
            {"name": "ingress", "node": "edge-a1"}
        ])
    );

    let nodes = "---
apiVersion: v1
kind: Node
metadata: {name: old, labels: {role: edge}, creationTimestamp: '2024-01-01T00:00:00Z'}
spec: {providerID: 'hcloud://1'}
---
apiVersion: v1
kind: Node
metadata: {name: young, labels: {role: edge}, creationTimestamp: '2025-01-01T00:00:00Z'}
spec: {providerID: 'hcloud://2'}
---
apiVersion: v1
kind: Node
metadata: {name: tainted, labels: {role: edge}, creationTimestamp: '2020-01-01T00:00:00Z'}
spec:
  providerID: 'hcloud://3'
  taints: [{key: maintenance, effect: NoExecute}]
---
apiVersion: netpolicy.io/v1alpha1
kind: RoutedIPIssuer
metadata: {name: hz}
spec: {hetzner: {tokenSecretRef: {namespace: ns, name: hz}, location: fsn1}}
";
    let rip = |name: &str, issuer: &str, holder: Option<&str>| {
        let status = holder.map_or(String::new(), |h| {
            format!("status: {{node: {h}, address: 198.51.100.7}}\n")
        });
        format!(
            "---
apiVersion: netpolicy.io/v1alpha1
kind: RoutedIP
metadata: {{name: {name}}}
spec: {{issuerRef: {{name: {issuer}}}, nodeSelector: {{matchLabels: {{role: edge}}}}}}
{status}"
        )
    };
    let text = format!(
        "{nodes}{}{}{}",
        rip("fresh", "hz", None),
        rip("held", "hz", Some("young")),
        rip("lost", "nope", None)
    );
    let (code, v, _) = plan_json(&text);
    assert_eq!(code, 1);
    let by_name: std::collections::BTreeMap<&str, &str> = v["routedIPs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["node"].as_str().unwrap()))
        .collect();
    // The oldest eligible node (the tainted one is older but not eligible).
    assert_eq!(by_name["fresh"], "old");
    // The current holder stays while eligible.
    assert_eq!(by_name["held"], "young");
    // A Hetzner IP's address goes on its holder's `lo` (the routing job's item); a
    // RoutedIP whose address is not known yet adds nothing.
    assert_eq!(
        v["nodes"]["young"]["addresses"],
        serde_json::json!([{"dev": "lo", "address": "198.51.100.7/32",
                            "sources": [{"kind": "RoutedIP", "name": "held"}]}])
    );
    assert!(
        v["nodes"]["old"].get("addresses").is_none(),
        "{}",
        v["nodes"]["old"]
    );
    let e = &v["errors"][0];
    assert_eq!(e["name"], "lost");
    assert_eq!(e["field"], "spec.issuerRef.name");
}

#[test]
fn an_aws_routed_ip_is_elected_on_instances_and_a_node_of_another_cloud_is_warned_about() {
    let text = "---
apiVersion: v1
kind: Node
metadata: {name: gcp, labels: {role: edge}, creationTimestamp: '2020-01-01T00:00:00Z'}
spec: {providerID: 'gce://p/europe-west1-b/n1'}
---
apiVersion: v1
kind: Node
metadata: {name: ec2-a, labels: {role: edge}, creationTimestamp: '2024-01-01T00:00:00Z'}
spec: {providerID: 'aws:///eu-west-1a/i-0123456789abcdef0'}
---
apiVersion: netpolicy.io/v1alpha1
kind: RoutedIPIssuer
metadata: {name: aws}
spec:
  aws: {region: eu-west-1, vpcId: vpc-0abc}
  firewall: {name: web}
---
apiVersion: netpolicy.io/v1alpha1
kind: RoutedIP
metadata: {name: web}
spec: {issuerRef: {name: aws}, nodeSelector: {matchLabels: {role: edge}}}
---
apiVersion: netpolicy.io/v1alpha1
kind: RoutedIP
metadata: {name: held}
spec: {issuerRef: {name: aws}, nodeSelector: {matchLabels: {role: edge}}}
status: {node: ec2-a, address: 198.51.100.9}
";
    let (code, v, stderr) = plan_json(text);
    assert_eq!(code, 0, "{v}");
    // The oldest eligible node is not an EC2 instance: elected (plan does not know the
    // provider's machines), with a warning that AWS will refuse it.
    assert_eq!(
        v["routedIPs"],
        serde_json::json!([{"name": "web", "node": "gcp"}, {"name": "held", "node": "ec2-a"}])
    );
    let warnings = stderr;
    assert!(
        warnings.contains("RoutedIP web: spec.issuerRef: elected node gcp has spec.providerID")
            && warnings.contains("aws:///<zone>/<instance-id>"),
        "{warnings}"
    );
    assert!(!warnings.contains("RoutedIP held"), "{warnings}");
    // The same warning in the JSON, as an object a pipeline can read.
    let json: Vec<&serde_json::Value> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["kind"] == "RoutedIP")
        .collect();
    assert_eq!(json.len(), 1, "{v}");
    assert_eq!(json[0]["name"], "web");
    assert_eq!(json[0]["field"], "spec.issuerRef");
    // An Elastic IP is NATed to the instance: nothing goes on the holder's interfaces.
    assert!(v["nodes"]["ec2-a"].get("addresses").is_none(), "{v}");

    // Two providers in one issuer: an error naming the rule.
    let (code, v, _) = plan_json(
        "apiVersion: netpolicy.io/v1alpha1
kind: RoutedIPIssuer
metadata: {name: both}
spec:
  aws: {region: eu-west-1}
  memory: {}
",
    );
    assert_eq!(code, 1, "{v}");
    assert!(
        v["errors"].to_string().contains("exactly one provider"),
        "{v}"
    );
}

/// Regression: a plain label map where a LabelSelector belongs became the empty
/// selector, and the NodeConfig's items landed on every node. Now it is an error
/// naming the field, and the NodeConfig selects nothing.
#[test]
fn a_node_config_with_a_plain_label_map_selector_selects_nothing_and_names_the_field() {
    let text = format!(
        "{NODES}{}{}",
        node_config("plain", 0, "{zone: a}", "10.0.0.1"),
        "---
apiVersion: netpolicy.io/v1alpha1
kind: NodeConfig
metadata: {name: good}
spec:
  nodeSelector: {matchLabels: {zone: b}}
  routes:
    - to: 10.30.0.0/16
      via: 10.0.0.2
"
    );
    let (code, v, stderr) = plan_json(&text);
    assert_eq!(code, 1, "{stderr}");
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["kind"], "NodeConfig");
    assert_eq!(errors[0]["name"], "plain");
    assert_eq!(errors[0]["field"], "spec.nodeSelector.zone");
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("matchLabels"),
        "{errors:?}"
    );
    // n1 gets nothing from "plain"; n2 gets only "good"'s route.
    let routes = |n: &str| {
        v["nodes"][n]["routes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    assert!(routes("n1").is_empty(), "{v}");
    assert_eq!(routes("n2").len(), 1, "{v}");
    assert_eq!(routes("n2")[0]["to"], "10.30.0.0/16");
    assert!(v.get("heldNodes").is_none(), "no node is held: {v}");
}

/// Regression: a directory with two links to `.` made `plan -f DIR` loop for ever,
/// and one link reported every object twice.
#[test]
fn plan_over_a_directory_with_symlink_loops_reads_every_file_once() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("nodes.yaml"),
        format!(
            "{NODES}{}",
            node_config("x", 0, "{matchLabels: {zone: a}}", "10.0.0.1")
        ),
    )
    .unwrap();
    std::os::unix::fs::symlink(".", dir.path().join("again")).unwrap();
    std::os::unix::fs::symlink(".", dir.path().join("more")).unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    std::os::unix::fs::symlink("..", dir.path().join("sub/up")).unwrap();
    let out = netpolicy()
        .timeout(std::time::Duration::from_secs(30))
        .args(["plan", "-o", "json", "-f"])
        .arg(dir.path())
        .arg("-f")
        .arg(dir.path().join("nodes.yaml"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["errors"],
        serde_json::json!([]),
        "no false duplicates: {v}"
    );
    assert_eq!(v["nodes"]["n1"]["routes"].as_array().unwrap().len(), 1);
}

/// Numbers where a string or an integer belongs are refused, each naming its field
/// path and place; one bad field does not hide the others; duplicate keys name their
/// object.
#[test]
fn every_bad_value_of_an_object_is_reported_with_its_field_path() {
    let text = format!(
        "{NODES}---
apiVersion: netpolicy.io/v1alpha1
kind: NodeConfig
metadata: {{name: numbers}}
spec:
  nodeSelector: {{matchLabels: {{zone: a}}}}
  vlans:
    - link: eth0
      id: 0100
      mtu: .nan
  routes:
    - to: 10.0.0.0/8
      dev: 0100
      table: -1
      metric: \"abc\"
    - to: not-a-prefix
      dev: eth0
---
apiVersion: netpolicy.io/v1alpha1
kind: NodeConfig
metadata: {{name: twice}}
spec:
  priority: 1
  priority: 2
"
    );
    let (code, v, stderr) = plan_json(&text);
    assert_eq!(code, 1, "{stderr}");
    let errors = v["errors"].as_array().unwrap();
    let got: Vec<(&str, &str)> = errors
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["field"].as_str().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            ("numbers", "spec.vlans[0].id"),
            ("numbers", "spec.vlans[0].mtu"),
            ("numbers", "spec.routes[0].dev"),
            ("numbers", "spec.routes[0].table"),
            ("numbers", "spec.routes[0].metric"),
            // Checked too, though the object's types are wrong: one bad field does not
            // hide the others.
            ("numbers", "spec.routes[1].to"),
            ("twice", "spec.priority"),
        ],
        "{errors:#?}"
    );
    assert!(errors.iter().all(|e| e["kind"] == "NodeConfig"));
    let msg = |i: usize| errors[i]["message"].as_str().unwrap();
    assert!(
        msg(0).contains("leading zero") && msg(0).contains("in.yaml:17:"),
        "{}",
        msg(0)
    );
    assert!(msg(1).contains(".nan"), "{}", msg(1));
    assert!(msg(2).contains("quote it"), "{}", msg(2));
    assert!(msg(3).contains("-1 is outside"), "{}", msg(3));
    assert!(msg(4).contains("\"abc\""), "{}", msg(4));
    assert!(msg(6).contains("written twice"), "{}", msg(6));
    // Neither object is used: no node gets anything from them.
    assert_eq!(v["nodes"]["n1"]["routes"], serde_json::json!([]));
}

/// Names and labels the API server would refuse are refused by `plan` too, including
/// the names it would generate itself.
#[test]
fn names_and_labels_the_api_server_refuses_are_errors() {
    let text = "---
apiVersion: v1
kind: Node
metadata: {name: Edge_1, labels: {zone: \"a b\"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team.one}
---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIPRange
metadata: {name: blue}
spec:
  cidrs: [10.135.10.192/26]
  autoAllocate: {floatingIPName: Auto_}
";
    let (code, v, stderr) = plan_json(text);
    assert_eq!(code, 1, "{stderr}");
    let errors = v["errors"].as_array().unwrap();
    let got: Vec<(&str, &str)> = errors
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), e["field"].as_str().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            ("Node", "metadata.name"),
            ("Node", "metadata.labels.zone"),
            ("Namespace", "metadata.name"),
            ("FloatingIPRange", "spec.autoAllocate.floatingIPName"),
        ],
        "{errors:#?}"
    );
    assert!(
        errors[3]["message"].as_str().unwrap().contains("\"Auto_\""),
        "{errors:#?}"
    );
}

/// A NodeConfig with 50,000 routes parses and renders (and is reported as too large for
/// one NodeNetworkConfig); an alias bomb is refused, and the error names the object, the
/// file and the limit.
#[test]
fn realistic_sizes_parse_and_alias_bombs_are_refused_by_name() {
    let mut text = format!(
        "{NODES}---
apiVersion: netpolicy.io/v1alpha1
kind: NodeConfig
metadata: {{name: big}}
spec:
  nodeSelector: {{matchLabels: {{zone: a}}}}
  routes:
"
    );
    for i in 0..50_000u32 {
        text.push_str(&format!(
            "    - {{to: 10.{}.{}.0/24, via: 192.0.2.1, table: 100}}\n",
            i / 256,
            i % 256
        ));
    }
    let (code, v, stderr) = plan_json(&text);
    assert_eq!(v["nodes"]["n1"]["routes"].as_array().unwrap().len(), 50_000);
    // It parses and renders; the NodeConfig itself is over what the API server stores
    // (kubectl apply would fail on it: an error on it, by name), and so is the
    // rendering the operator would write into one NodeNetworkConfig (--max-object-bytes),
    // which names the policy that fills it.
    assert_eq!(code, 1, "{stderr}");
    let errors = v["errors"].as_array().unwrap();
    let kinds: Vec<&str> = errors.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(
        kinds.contains(&"NodeConfig") && kinds.contains(&"NodeNetworkConfig"),
        "{errors:#?}"
    );
    for e in errors {
        let message = e["message"].as_str().unwrap();
        assert!(message.starts_with("TooLarge: "), "{e}");
        match e["kind"].as_str().unwrap() {
            "NodeConfig" => assert_eq!(e["name"], "big", "{e}"),
            "NodeNetworkConfig" => assert!(
                message.contains("most items from NodeConfig/big (50000 items)"),
                "{e}"
            ),
            other => panic!("unexpected error on {other}: {e}"),
        }
    }

    let mut bomb = String::from(
        "apiVersion: netpolicy.io/v1alpha1\nkind: NodeConfig\nmetadata:\n  name: bomb\nspec:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n",
    );
    for i in 1..12 {
        let p = i - 1;
        bomb.push_str(&format!(
            "  a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let (code, v, stderr) = plan_json(&bomb);
    assert_eq!(code, 1, "{stderr}");
    let e = &v["errors"][0];
    assert_eq!(e["kind"], "NodeConfig", "{e}");
    assert_eq!(e["name"], "bomb", "{e}");
    assert!(e["field"].as_str().unwrap().contains("in.yaml:"), "{e}");
    assert!(e["message"].as_str().unwrap().contains("limit"), "{e}");
}

/// Counts a double cannot hold exactly are strings in JSON (as in the CRD status), and
/// the whole IPv6 space has 2^128 addresses, not 2^128 - 1.
#[test]
fn large_counts_are_exact_strings_and_all_of_ipv6_is_two_to_the_128() {
    let range = |name: &str, spec: &str| {
        format!(
            "---\napiVersion: netpolicy.io/v1alpha1\nkind: FloatingIPRange\nmetadata: {{name: {name}}}\nspec: {spec}\n"
        )
    };
    let (code, v, stderr) = plan_json(&format!(
        "{}{}",
        range("v6", "{cidrs: [\"2001:db8::/64\"]}"),
        range("v4", "{cidrs: [10.135.10.192/26]}")
    ));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        v["floatingIPRanges"],
        serde_json::json!([
            {"name": "v4", "capacity": 62, "allocated": 0},
            {"name": "v6", "capacity": "18446744073709551615", "allocated": 0}
        ])
    );
    let (code, v, stderr) = plan_json(&range(
        "all",
        "{ranges: [{start: \"::\", end: \"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff\"}]}",
    ));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        v["floatingIPRanges"][0]["capacity"],
        "340282366920938463463374607431768211456"
    );
}

#[test]
fn auto_allocation_takes_namespaces_by_selector_and_name_prefix() {
    let text = "---
apiVersion: v1
kind: Namespace
metadata: {name: c-m-one, labels: {fip: 'yes'}}
---
apiVersion: v1
kind: Namespace
metadata: {name: c-m-two}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {fip: 'yes'}}
---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIPRange
metadata: {name: blue}
spec:
  cidrs: [10.135.10.192/26]
  autoAllocate:
    namespaceSelector: {matchLabels: {fip: 'yes'}}
    namespaceNamePrefix: c-m-
---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIPRange
metadata: {name: green}
spec:
  cidrs: [10.135.11.0/29]
  autoAllocate: {floatingIPName: lb}
";
    let (code, v, stderr) = plan_json(text);
    assert_eq!(code, 0, "{stderr}");
    let got: Vec<String> = v["floatingIPs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            format!(
                "{}/{} {} {}",
                f["namespace"].as_str().unwrap(),
                f["name"].as_str().unwrap(),
                f["address"].as_str().unwrap(),
                f["auto"]
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            "c-m-one/auto-blue 10.135.10.193 true",
            "c-m-one/lb 10.135.11.1 true",
            "c-m-two/lb 10.135.11.2 true",
            "team-a/lb 10.135.11.3 true",
        ]
    );
}

/// `netpolicy convert` turns ipruler's and kube-fip's objects into netpolicy's; the
/// result is checked by `netpolicy plan` against the CRD schemas (so every field it
/// writes exists and validates), and what needs a person is said on stderr.
#[test]
fn convert_turns_ipruler_and_kube_fip_objects_into_ones_plan_accepts() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("old.yaml"),
        "apiVersion: ipruler.pegah.tech/v1
kind: ClusterConfig
metadata: {name: nodes-routing}
spec:
  config:
    settings: {table-hard-sync: [102]}
    rules:
    - {from: 172.31.201.11/32, table: 102}
---
apiVersion: ipruler.pegah.tech/v1
kind: NodeConfig
metadata: {name: eth2-vlan-104}
spec:
  nodeSelector: {networking.type: eth2-vlan-104}
  config:
    vlans: [{name: eth2.104, link: eth2, id: 104}]
    routes:
    - {to: 172.31.201.0/24, dev: eth2.104, scope: link, protocol: static}
    - {to: default, via: 172.31.201.1, dev: eth2.104, table: 102, protocol: static, on-link: true}
---
apiVersion: kubefip.k8s.binbash.org/v1
kind: FloatingIPRange
metadata: {name: guest-vlan, annotations: {cloudCredentialSecret: cc-bsvdq}}
spec: {iprange: 10.135.10.192/26}
---
apiVersion: kubefip.k8s.binbash.org/v1
kind: FloatingIP
metadata:
  name: demo-vip
  namespace: c-m-ngd5hs2r
  annotations: {clustername: demo, fiprange: guest-vlan, updateConfigMap: 'true'}
spec: {ipaddress: 10.135.10.200}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {networking.type: eth2-vlan-104}}
",
    )
    .unwrap();
    let out = netpolicy()
        .args(["convert", "-f"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("gets priority 1000"), "{stderr}");
    assert!(stderr.contains("cloudCredentialSecret"), "{stderr}");
    let converted = String::from_utf8(out.stdout).unwrap();
    assert!(converted.contains("netpolicy.io/v1alpha1"), "{converted}");
    let new = tempfile::tempdir().unwrap();
    fs::write(new.path().join("new.yaml"), &converted).unwrap();
    let v = plan_dir_json(new.path());
    assert_eq!(v["errors"], serde_json::json!([]), "{converted}");
    let n1 = &v["nodes"]["n1"];
    assert_eq!(n1["vlans"][0]["name"], "eth2.104", "{n1}");
    assert_eq!(n1["routes"].as_array().unwrap().len(), 2, "{n1}");
    assert_eq!(n1["rules"][0]["priority"], 1000, "{n1}");
    assert_eq!(v["floatingIPs"][0]["address"], "10.135.10.200", "{v}");

    // What cannot be converted as it is: an error naming the object, exit 1 (an on-link
    // gateway without its device, which the kernel refuses too; a FloatingIP without
    // its range).
    fs::write(
        dir.path().join("bad.yaml"),
        "apiVersion: kubefip.k8s.binbash.org/v1\nkind: FloatingIP\nmetadata: {name: lost, namespace: x}\nspec: {}\n\
         ---\napiVersion: ipruler.pegah.tech/v1\nkind: NodeConfig\nmetadata: {name: nodev}\n\
         spec: {config: {routes: [{to: default, via: 10.0.0.1, on-link: true}]}}\n",
    )
    .unwrap();
    netpolicy()
        .args(["convert", "-f"])
        .arg(dir.path())
        .assert()
        .code(1)
        .stderr(predicate::str::contains("FloatingIP/lost"))
        .stderr(predicate::str::contains("NodeConfig/nodev"))
        .stderr(predicate::str::contains("on-link without dev"));
}

/// examples/traffic-domains (Meridio's sample trench-a) over the example cluster's nodes.
fn traffic_plan(edit: impl Fn(String) -> String) -> (i32, Value, String) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let trench = edit(fs::read_to_string(root.join("traffic-domains/trench-a.yaml")).unwrap());
    let nodes = fs::read_to_string(root.join("cluster/nodes.yaml")).unwrap();
    plan_json(&format!("{nodes}\n---\n{trench}"))
}

#[test]
fn the_meridio_sample_trench_plans_onto_the_attractor_nodes() {
    let (code, json, stderr) = traffic_plan(|t| t);
    assert_eq!(code, 0, "{stderr}\n{json:#}");
    let t = &json["trenches"][0];
    assert_eq!(
        (t["namespace"].as_str(), t["name"].as_str()),
        (Some("red"), Some("trench-a"))
    );
    let a = &t["attractors"][0];
    assert_eq!(a["name"], "attractor-a-1");
    assert_eq!(
        a["nodes"],
        serde_json::json!(["edge-a1", "edge-b1", "edge-c1"])
    );
    // One address per node and family, all different, none a gateway's.
    let mut seen = std::collections::BTreeSet::new();
    for (_, addrs) in a["addresses"].as_object().unwrap() {
        for ad in addrs.as_array().unwrap() {
            let ad = ad.as_str().unwrap();
            assert!(seen.insert(ad.to_owned()), "{ad} handed out twice");
            assert!(!ad.starts_with("169.254.100.15"), "{ad}");
        }
    }
    assert_eq!(seen.len(), 6);
    let table = t["table"].as_u64().unwrap();
    let s1 = t["streamTables"]["stream-a-i"].as_u64().unwrap();
    // An edge node carries the VLAN, the routes and the rules, sourced from the trench.
    let edge = &json["nodes"]["edge-a1"];
    let from_trench = |field: &str| -> Vec<Value> {
        edge[field]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| {
                i["sources"][0]["kind"] == "Trench" && i["sources"][0]["name"] == "red/trench-a"
            })
            .cloned()
            .collect()
    };
    let vlan = &from_trench("vlans")[0];
    assert_eq!(
        (
            vlan["link"].as_str(),
            vlan["id"].as_u64(),
            vlan["name"].as_str()
        ),
        (Some("eth2"), Some(100), Some("ext-vlan.100"))
    );
    let routes = from_trench("routes");
    assert!(routes.iter().any(|r| r["to"] == "0.0.0.0/0"
        && r["table"] == table
        && r["nexthops"].as_array().is_some_and(|n| n.len() == 2)));
    assert!(
        routes
            .iter()
            .any(|r| r["to"] == "::/0" && r["table"] == table && r["via"] == "100:100::150")
    );
    // A stream's table delivers the VIPs to the node, never to a gateway.
    let in_s1: Vec<&Value> = routes.iter().filter(|r| r["table"] == s1).collect();
    assert!(!in_s1.is_empty());
    assert!(
        in_s1
            .iter()
            .all(|r| r["type"] == "local" && r["dev"] == "lo" && r["via"].is_null()),
        "{in_s1:?}"
    );
    let rules = from_trench("rules");
    assert!(rules.iter().any(|r| r["to"] == "2000::1/128"
        && r["ipProto"] == "tcp"
        && r["dport"] == "4000"
        && r["table"] == s1));
    assert!(
        rules
            .iter()
            .any(|r| r["from"] == "20.0.0.1/32" && r["table"] == table)
    );
    // Nodes outside the attractor get nothing of it.
    let general = serde_json::to_string(&json["nodes"]["general-a1"]).unwrap();
    assert!(!general.contains("Trench"), "{general}");
}

#[test]
fn a_broken_trench_exits_1_naming_kind_object_and_field_and_changes_no_node() {
    let cases: [(&str, &str, &str, &str, &str); 5] = [
        (
            "stream: stream-a-i",
            "stream: stream-a-x",
            "Flow",
            "red/flow-a-z-tcp",
            "spec.stream",
        ),
        (
            "destinationPorts: [\"4000\", \"80\"]",
            "destinationPorts: [\"4000-4100\", \"4050\"]",
            "Flow",
            "red/flow-a-z-tcp",
            "spec.destinationPorts[1]",
        ),
        (
            "address: 20.0.0.1/32",
            "address: 20.0.0.1/24",
            "Vip",
            "red/vip-a-1-v4",
            "spec.address",
        ),
        (
            "conduit: conduit-a-1\n  maxTargets: 100",
            "conduit: conduit-a-9\n  maxTargets: 100",
            "Stream",
            "red/stream-a-i",
            "spec.conduit",
        ),
        (
            "  address: 169.254.100.151",
            "  address: 10.0.0.1",
            "Attractor",
            "red/attractor-a-1",
            "spec.gateways[1]",
        ),
    ];
    for (from, to, kind, name, field) in cases {
        let (code, json, stderr) = traffic_plan(|t| {
            assert!(t.contains(from), "{from}");
            t.replacen(from, to, 1)
        });
        assert_eq!(code, 1, "{to}: {stderr}");
        let errs = json["errors"].as_array().unwrap();
        assert!(
            errs.iter()
                .any(|e| e["kind"] == kind && e["name"] == name && e["field"] == field),
            "{to}: no {kind} {name} {field} in {errs:#?}"
        );
        let edge = serde_json::to_string(&json["nodes"]["edge-a1"]).unwrap_or_default();
        assert!(
            !edge.contains("Trench"),
            "{to}: a broken trench reached a node"
        );
    }
}

/// The netlink kernel suite (which runs in the VM, where 802.1Q exists) applies a
/// trench's compiled items: examples/traffic-domains' trench-a as `netpolicy plan`
/// compiles it for one edge node, its link `eth2` renamed to the test namespace's `v0`.
/// This test keeps that file equal to what `plan` makes now;
/// `NETPOLICY_WRITE_FIXTURES=1` rewrites it.
#[test]
fn the_kernel_suites_trench_fixture_is_what_plan_compiles() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let trench = fs::read_to_string(root.join("examples/traffic-domains/trench-a.yaml")).unwrap();
    let node = "---\napiVersion: v1\nkind: Node\nmetadata: {name: node-1, labels: {node.netpolicy.io/pool: edge}}\n";
    let (code, json, stderr) = plan_json(&format!("{trench}\n{node}"));
    assert_eq!(code, 0, "{stderr}");
    let mut spec = json["nodes"]["node-1"].clone();
    for field in ["vlans", "routes", "addresses", "rules"] {
        for item in spec
            .get_mut(field)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            item.as_object_mut().unwrap().remove("sources");
        }
    }
    let text = serde_json::to_string_pretty(&spec)
        .unwrap()
        .replace("\"eth2\"", "\"v0\"")
        + "\n";
    let path = root.join("netpolicy-netlink/tests/data/trench-a-node.json");
    if std::env::var_os("NETPOLICY_WRITE_FIXTURES").is_some() {
        fs::write(&path, &text).unwrap();
    }
    assert!(
        fs::read_to_string(&path).unwrap_or_default() == text,
        "{} is stale: NETPOLICY_WRITE_FIXTURES=1 cargo test -p netpolicy-operator --test integration plan_cli::the_kernel_suites_trench_fixture",
        path.display()
    );
}

#[test]
fn plan_shows_each_policys_rollout_waves_and_refuses_a_bad_rollout() {
    let nodes: String = (1..=5)
        .map(|i| {
            format!(
                "---\napiVersion: v1\nkind: Node\nmetadata: {{name: n{i}, labels: {{pool: p}}}}\n"
            )
        })
        .collect();
    let nc = |rollout: &str| {
        format!(
            "---\napiVersion: netpolicy.io/v1alpha1\nkind: NodeConfig\nmetadata: {{name: probed}}\nspec:\n  nodeSelector: {{matchLabels: {{pool: p}}}}\n  rollout: {rollout}\n  probes: [{{ping: 10.0.0.1}}, {{tcp: \"10.0.0.1:6443\"}}]\n  routes: [{{to: 10.20.0.0/16, via: 10.0.0.1}}]\n"
        )
    };
    let (code, json, stderr) = plan_json(&format!(
        "{nodes}{}",
        nc("{maxUnavailable: 2, rollbackSeconds: 12}")
    ));
    assert_eq!(code, 0, "{stderr}");
    let r = &json["rollout"][0];
    assert_eq!(r["policy"], "NodeConfig/probed");
    assert_eq!(r["nodesAtOnce"], 2);
    assert_eq!(r["rollbackSeconds"], 12);
    assert_eq!(
        r["probes"],
        serde_json::json!(["ping 10.0.0.1", "tcp 10.0.0.1:6443"])
    );
    assert_eq!(
        r["waves"],
        serde_json::json!([["n1", "n2"], ["n3", "n4"], ["n5"]])
    );
    // The default: 25% of 5 rounds down to 1, at least one.
    let (_, json, _) = plan_json(&format!("{nodes}{}", nc("{}")));
    assert_eq!(json["rollout"][0]["waves"].as_array().unwrap().len(), 5);
    // A maxUnavailable of 0 never lets a node change: an error naming the field.
    let (code, json, _) = plan_json(&format!("{nodes}{}", nc("{maxUnavailable: \"0%\"}")));
    assert_eq!(code, 1);
    let errs = json["errors"].as_array().unwrap();
    assert!(
        errs.iter()
            .any(|e| e["kind"] == "NodeConfig" && e["field"] == "spec.rollout.maxUnavailable"),
        "{errs:#?}"
    );
}

#[test]
fn a_node_config_too_large_to_store_is_an_error_naming_the_node_and_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: big\n  labels:\n    kubernetes.io/hostname: big\n",
    );
    for p in 0..3u32 {
        text.push_str(&format!(
            "---\napiVersion: netpolicy.io/v1alpha1\nkind: NodeConfig\nmetadata:\n  name: huge{p}\nspec:\n  nodeSelector:\n    matchLabels:\n      kubernetes.io/hostname: big\n  routes:\n"
        ));
        for i in 0..12_000u32 {
            let a = p * 12_000 + i;
            text.push_str(&format!(
                "  - {{to: 10.{}.{}.{}/32, via: 192.0.2.1}}\n",
                100 + (a >> 16),
                (a >> 8) & 255,
                a & 255
            ));
        }
    }
    let path = dir.path().join("big.yaml");
    std::fs::write(&path, text).unwrap();
    let out = netpolicy()
        .args(["plan", "-o", "json", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "NodeNetworkConfig")
        .unwrap_or_else(|| panic!("no size error: {}", v["errors"]));
    assert_eq!(e["name"], "big");
    let m = e["message"].as_str().unwrap();
    assert!(m.starts_with("TooLarge: ") && m.contains("bytes"), "{m}");
}

#[test]
fn a_meridio_trench_plans_its_configmap_and_workloads_not_node_routing() {
    let (code, json, stderr) = traffic_plan(|t| t.replace("  dataPlane: node\n", ""));
    assert_eq!(code, 0, "{stderr}\n{json:#}");
    let t = &json["trenches"][0];
    assert_eq!(t["dataPlane"], "meridio");
    assert_eq!(t["configMap"]["name"], "meridio-configuration-trench-a");
    let keys: Vec<&str> = t["configMap"]["data"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "attractors",
            "conduits",
            "flows",
            "gateways",
            "streams",
            "trench",
            "vips"
        ]
    );
    let workloads = kinds_and_names(&t["workloads"]);
    assert!(
        workloads.contains(&"StatefulSet/nsp-trench-a".to_owned()),
        "{workloads:?}"
    );
    assert!(
        workloads.contains(&"Deployment/stateless-lb-frontend-attractor-a-1".to_owned()),
        "{workloads:?}"
    );
    // Not compiled into node routing: no table, no trench items on the edge nodes.
    assert!(t["table"].is_null(), "{t:#}");
    let edge = json["nodes"]["edge-a1"].to_string();
    assert!(!edge.contains("Trench/red/trench-a"), "{edge}");
}

/// On a terminal the tables fit its width (long cells wrapped); piped they keep their
/// full width, so scripts and files see whole cells. The terminal is a real
/// pseudo-terminal (util-linux's `script`) of 100 columns.
#[test]
fn plan_fits_the_terminal_and_keeps_full_width_when_piped() {
    let all = examples().join("..");
    let widest = |text: &str| {
        text.lines()
            .map(|l| l.trim_end_matches('\r').chars().count())
            .max()
            .unwrap_or(0)
    };
    let piped = netpolicy()
        .args(["plan", "-f"])
        .arg(&all)
        .assert()
        .success();
    let piped = String::from_utf8(piped.get_output().stdout.clone()).unwrap();
    assert!(
        widest(&piped) > 100,
        "the examples have cells wider than 100 columns"
    );
    let Ok(script) = which("script") else {
        // Not `eprintln!`: the test harness captures that, and scripts/test counts SKIP
        // lines in the run's output.
        let _ = writeln!(
            std::io::stderr(),
            "SKIP plan on a terminal: util-linux's script is not installed"
        );
        return;
    };
    let bin = assert_cmd::cargo::cargo_bin("netpolicy");
    let out = std::process::Command::new(script)
        .args([
            "-qec",
            &format!(
                "stty cols 100 rows 60; {} plan -f {}",
                bin.display(),
                all.display()
            ),
            "/dev/null",
        ])
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FLOATING IP"), "{text}");
    assert!(
        widest(&text) <= 100,
        "a line is wider than the terminal:\n{text}"
    );
    // The same words are there, wrapped: nothing is cut.
    for word in ["c-m-ngd5hs2r", "10.135.10.193/32"] {
        assert!(piped.contains(word) && text.contains(word), "{word}");
    }
}

fn which(name: &str) -> Result<PathBuf, ()> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(())
}

/// Every problem of an object at once: a ClusterConfig with an unknown field and the
/// wrong name gets both errors, not the second after the first is fixed.
#[test]
fn an_object_with_a_schema_problem_and_a_rule_problem_gets_both_at_once() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("cc.yaml"),
        "apiVersion: netpolicy.io/v1alpha1
kind: ClusterConfig
metadata: {name: main}
spec:
  routez: []
  routes: [{to: 10.0.0.0/8, via: 192.0.2.1}]
",
    )
    .unwrap();
    let out = netpolicy()
        .args(["plan", "-o", "json", "-f"])
        .arg(dir.path())
        .assert()
        .failure();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let fields: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert!(fields.contains(&"spec.routez"), "{fields:?}");
    assert!(fields.contains(&"metadata.name"), "{fields:?}");
}

#[test]
fn return_routing_is_planned_on_the_node_announcing_the_address_and_a_bad_table_is_named() {
    let out = netpolicy()
        .args(["plan", "-o", "json", "-f"])
        .arg(examples())
        .arg("-f")
        .arg(examples().join("../return-routing"))
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["errors"], Value::Array(vec![]));
    let items = |node: &str, kind: &str, table: u64| -> Vec<Value> {
        v["nodes"][node][kind]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["table"] == table)
            .cloned()
            .collect()
    };
    // kube-vip announces dmz/web from edge-a1 (the Service's vipHost).
    let rules = items("edge-a1", "rules", 400);
    assert_eq!(rules.len(), 1, "{rules:#?}");
    assert_eq!(rules[0]["from"], "203.0.113.70/32");
    assert_eq!(rules[0]["priority"], 10000);
    assert_eq!(rules[0]["sources"][0]["kind"], "FloatingIP");
    assert_eq!(rules[0]["sources"][0]["name"], "dmz/web");
    let routes = items("edge-a1", "routes", 400);
    assert_eq!(
        (&routes[0]["to"], &routes[0]["via"], &routes[0]["dev"]),
        (
            &serde_json::json!("0.0.0.0/0"),
            &serde_json::json!("192.0.2.254"),
            &serde_json::json!("eth1")
        )
    );
    // No other node has it.
    assert!(items("edge-b1", "rules", 400).is_empty());
    // The RoutedIP's holder gets its issuer's.
    let holder = v["routedIPs"]
        .as_array()
        .or_else(|| v["routedIps"].as_array())
        .and_then(|l| l.iter().find(|r| r["name"] == "lab-ingress"))
        .map(|r| r["node"].as_str().unwrap().to_owned())
        .expect("the RoutedIP is planned");
    let rules = items(&holder, "rules", 401);
    assert_eq!(rules[0]["from"], "198.51.100.80/32");
    assert_eq!(rules[0]["priority"], 9000);
    assert_eq!(rules[0]["sources"][0]["name"], "lab-ingress");

    // The kernel's main table is no table of its own: named, exit 1.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(examples().join("../return-routing/return-routing.yaml"))
        .unwrap()
        .replace("table: 400", "table: 254");
    std::fs::write(dir.path().join("rr.yaml"), text).unwrap();
    let out = netpolicy()
        .args(["plan", "-o", "json", "-f"])
        .arg(examples())
        .arg("-f")
        .arg(dir.path())
        .assert()
        .failure();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let errors = v["errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e["kind"] == "FloatingIPRange"
            && e["name"] == "dmz-v4"
            && e["field"] == "spec.returnRouting.table"
            && e["message"].as_str().unwrap().contains("254")),
        "{errors:#?}"
    );
}

/// The repository's examples, with `edit` applied to the traffic domain's text, and
/// the example nodes, planned as JSON.
fn plan_trench_example(edit: impl Fn(&str) -> String, extra: &str) -> (i32, Value, String) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let trench = fs::read_to_string(root.join("traffic-domains/trench-a.yaml")).unwrap();
    let nodes = fs::read_to_string(root.join("cluster/nodes.yaml")).unwrap();
    plan_json(&format!("{nodes}\n---\n{}\n---\n{extra}", edit(&trench)))
}

/// Issue 39: two `Trench`es `red/trench-a` with different `ipFamily` used to give no
/// error (one was used, silently). Every kind is checked by (namespace, name): the
/// second definition is an error naming both places, in a namespace or not; the same
/// name in another namespace is another object.
#[test]
fn a_second_definition_of_a_namespaced_object_is_an_error_naming_both_places() {
    let again = "apiVersion: netpolicy.io/v1alpha1
kind: Trench
metadata: {name: trench-a, namespace: red}
spec: {ipFamily: ipv4, dataPlane: node}
---
apiVersion: netpolicy.io/v1alpha1
kind: Trench
metadata: {name: trench-a, namespace: blue}
spec: {ipFamily: ipv4, dataPlane: node}
---
apiVersion: v1
kind: Namespace
metadata: {name: blue}
---
apiVersion: netpolicy.io/v1alpha1
kind: Gateway
metadata: {name: gateway-v4-a, namespace: red, labels: {trench: trench-a}}
spec: {address: 169.254.100.152, protocol: static}
";
    let (code, v, stderr) = plan_trench_example(str::to_owned, again);
    assert_eq!(code, 1, "{stderr}");
    let twice: Vec<(String, String)> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["message"].as_str().unwrap().starts_with("defined twice"))
        .map(|e| {
            (
                format!(
                    "{}/{}",
                    e["kind"].as_str().unwrap(),
                    e["name"].as_str().unwrap()
                ),
                e["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let names: Vec<&str> = twice.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["Trench/red/trench-a", "Gateway/red/gateway-v4-a"],
        "{twice:#?}"
    );
    // Both places, by file and line; the first stays in use.
    assert!(twice[0].1.contains("in.yaml:") && twice[0].1.matches(":").count() >= 3);
    let trench = v["trenches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["namespace"] == "red")
        .unwrap();
    assert_eq!(
        trench["attractors"][0]["nodes"].as_array().unwrap().len(),
        3
    );
}

/// Issue 39: warnings were printed on stderr only; a pipeline reading `plan -o json`
/// never learned that a `node` trench's BGP gateway carries no traffic. Now they are in
/// the JSON (and YAML) as objects shaped like `errors`, and every example's JSON has the
/// key.
#[test]
fn warnings_are_in_the_json_as_objects_and_every_example_carries_the_key() {
    let bgp = "apiVersion: netpolicy.io/v1alpha1
kind: Gateway
metadata: {name: gateway-bgp, namespace: red, labels: {trench: trench-a}}
spec: {address: 169.254.100.160, protocol: bgp, bgp: {localAsn: 8103, remoteAsn: 4248829953}}
";
    let (code, v, stderr) = plan_trench_example(
        |t| {
            t.replace(
                "gateways: [gateway-v4-a,",
                "gateways: [gateway-bgp, gateway-v4-a,",
            )
        },
        bgp,
    );
    assert_eq!(code, 0, "{stderr}");
    let w: Vec<&Value> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["kind"] == "Gateway")
        .collect();
    assert_eq!(w.len(), 1, "{v}");
    assert_eq!(w[0]["name"], "red/gateway-bgp");
    assert_eq!(w[0]["field"], "spec.protocol");
    assert!(
        w[0]["message"]
            .as_str()
            .unwrap()
            .contains("no route goes via this gateway"),
        "{w:?}"
    );
    assert!(
        stderr.contains("warning: Gateway red/gateway-bgp: spec.protocol: "),
        "{stderr}"
    );
    // YAML too.
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("in.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
    )
    .unwrap();
    let out = netpolicy()
        .args(["plan", "-o", "yaml", "-f"])
        .arg(dir.path())
        .output()
        .unwrap();
    let yaml = String::from_utf8(out.stdout).unwrap();
    assert!(
        yaml.contains("warnings:") && yaml.contains("kind: Deployment"),
        "{yaml}"
    );
    // Every example directory: the key is there (empty or not).
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    for e in fs::read_dir(&root).unwrap() {
        let e = e.unwrap().path();
        // examples/consumers holds Rust programs, no manifests.
        if e.join("Cargo.toml").exists() || e.join("README.md").exists() {
            continue;
        }
        let out = netpolicy()
            .args(["plan", "-o", "json", "-f"])
            .arg(&e)
            .arg("-f")
            .arg(root.join("cluster/nodes.yaml"))
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["warnings"].is_array(), "{}: {v}", e.display());
    }
}

/// Issue 39: in a `dualstack` node trench whose attractor's IPv4 prefix could not address
/// every node, a node got its VLAN with IPv6 addresses only and `plan` exited 0. A node
/// that cannot get both families gets nothing of that attractor, and the exhausted
/// prefix is an error naming its field; the same when IPv6 runs out first.
#[test]
fn a_node_that_cannot_get_both_families_gets_neither_and_the_prefix_is_named() {
    for (edit, field) in [
        (
            (
                "ipv4Prefix: 169.254.100.0/24",
                "ipv4Prefix: 169.254.100.148/30",
            ),
            "spec.interface.ipv4Prefix",
        ),
        (
            ("ipv6Prefix: 100:100::/64", "ipv6Prefix: 100:100::150/127"),
            "spec.interface.ipv6Prefix",
        ),
    ] {
        let (code, v, stderr) = plan_trench_example(|t| t.replace(edit.0, edit.1), "");
        assert_eq!(code, 1, "{field}: {stderr}");
        let exhausted: Vec<&Value> = v["errors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "Attractor" && e["field"] == field)
            .collect();
        assert_eq!(exhausted.len(), 2, "{field}: {v}");
        let mut with_vlan = 0;
        for n in ["edge-a1", "edge-b1", "edge-c1"] {
            let vlans = v["nodes"][n]["vlans"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for vlan in &vlans {
                let a = vlan["addresses"].as_array().unwrap();
                assert_eq!(a.len(), 2, "{field}: {n} got half a dual stack: {vlan}");
                with_vlan += 1;
            }
        }
        assert_eq!(with_vlan, 1, "{field}: one node fits: {v}");
    }
}

/// Issue 42: `plan` of a `kubectl get -o yaml` export (`kind: List`) read nothing and
/// exited 0. A List's items are read as documents.
#[test]
fn a_list_export_is_read_item_by_item() {
    let text = "apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: Node
    metadata: {name: n1, labels: {zone: a}}
  - apiVersion: netpolicy.io/v1alpha1
    kind: NodeConfig
    metadata: {name: a}
    spec:
      nodeSelector: {matchLabels: {zone: a}}
      routes: [{to: 10.20.0.0/16, via: 192.0.2.1}]
";
    let (code, v, stderr) = plan_json(text);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(v["nodes"]["n1"]["routes"][0]["to"], "10.20.0.0/16", "{v}");
}

/// Issue 42: the migration corpus (tests/data/migration: small files in the seeds' own
/// shapes) converts, plans without errors, and ends where the seed left things: the
/// route-reflector operator's reflectors, cluster ID and peering on nodes carrying zone
/// labels and a control-plane taint; Meridio's NAD quoting, spec-less Trench and
/// network-attachment Attractor, v1alpha1's Conduit replicas and an untagged interface
/// named apart from its link; a kube-fip `List` export; an ipruler ClusterConfig that
/// reaches only the nodes its NodeConfigs select.
#[test]
fn the_migration_corpus_converts_and_plans_to_the_seeds_end_state() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/migration");
    let converted = |file: &str| -> (Value, String) {
        let out = netpolicy()
            .args(["convert", "-f"])
            .arg(corpus.join(file))
            .output()
            .unwrap();
        let notes = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(0), "{file}: {notes}");
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("converted.yaml"), &out.stdout).unwrap();
        let v = plan_dir_json(dir.path());
        assert_eq!(v["errors"], serde_json::json!([]), "{file}: {v:#}");
        (v, notes)
    };

    // The seed's reflectors stay, with its cluster ID; every client keeps peering with
    // all three; no reflector is demoted or another promoted in its place; every
    // BGPPeer selector is one Calico accepts.
    let (v, notes) = converted("rr-seed.yaml");
    let rr = &v["routeReflectors"];
    let reflectors: Vec<(String, String)> = rr["reflectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["node"].as_str().unwrap().to_owned(),
                r["clusterID"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        reflectors,
        [
            ("cp-1", "224.0.0.0"),
            ("w-1", "224.0.0.0"),
            ("w-2", "224.0.0.0")
        ]
        .map(|(n, c)| (n.to_owned(), c.to_owned()))
    );
    for (client, rs) in rr["clients"].as_object().unwrap() {
        assert_eq!(rs, &serde_json::json!(["cp-1", "w-1", "w-2"]), "{client}");
    }
    let ops = rr["steps"].to_string();
    assert!(
        !ops.contains("demote") && !ops.contains("w-3 as reflector"),
        "{ops}"
    );
    for p in rr["bgpPeers"].as_array().unwrap() {
        let s = p["spec"].to_string();
        assert!(!s.contains("has()"), "{s}");
    }
    assert!(notes.contains("224.0.0.1"), "{notes}");
    // The seed's own BGPPeers are named, with what to do about them.
    let w = v["warnings"].to_string();
    assert!(
        w.contains("peer-to-rrs") && w.contains("rrs-to-rrs") && w.contains("delete it once"),
        "{w}"
    );

    // The seed on an etcd with authentication, found through DNS (issue 66): the
    // datastore carries over, the Secret to create is named, the password (from a
    // Secret here) is nowhere, and CALICO_API_GROUP is named as dropped.
    let (v, notes) = converted("rr-seed-etcd.yaml");
    assert_eq!(
        v["routeReflectors"]["reflectors"].as_array().map(Vec::len),
        Some(2),
        "{v:#}"
    );
    let out = netpolicy()
        .args(["convert", "-f"])
        .arg(corpus.join("rr-seed-etcd.yaml"))
        .output()
        .unwrap();
    let rrc: Value = String::from_utf8(out.stdout)
        .unwrap()
        .split("---\n")
        .filter(|d| d.contains("kind: RouteReflectorConfig"))
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .next()
        .expect("a RouteReflectorConfig");
    assert_eq!(
        rrc["spec"]["datastore"],
        serde_json::json!({"etcdv3": {"discoverySrv": "etcd.example.com",
            "credentialsSecretRef": {"namespace": "kube-system", "name": "calico-etcd-credentials"}}}),
        "{rrc:#}"
    );
    for says in [
        "create Secret kube-system/calico-etcd-credentials with keys username=calico and password",
        "CALICO_API_GROUP (a Calico client setting) has no netpolicy counterpart",
    ] {
        assert!(notes.contains(says), "{says}: {notes}");
    }

    // routedip-operator (issue 66): both RoutedIPs and the issuer convert; the one thing
    // the seed never had (the issuer's region) is the only error, and every issuer field
    // without a counterpart is named.
    let out = netpolicy()
        .args(["convert", "-f"])
        .arg(corpus.join("routedip-operator.yaml"))
        .output()
        .unwrap();
    let notes = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{notes}");
    let errors: Vec<&str> = notes.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "{notes}");
    assert!(errors[0].contains("spec.digitalocean.region"), "{notes}");
    for field in [
        "firewallPostAllow",
        "nodePortRange",
        "perNodeIPLimit",
        "updateRoutedIPSpec",
        "updateFirewallSpec",
    ] {
        assert!(
            notes.contains(&format!("spec.{field} has no netpolicy counterpart")),
            "{notes}"
        );
    }
    let yaml = String::from_utf8(out.stdout).unwrap();
    assert_eq!(yaml.matches("kind: RoutedIP\n").count(), 2, "{yaml}");
    assert!(yaml.contains("address: \"203.0.113.10\""), "{yaml}");

    // Meridio: every object read (the NAD's quoting too) and the trench planned.
    let (v, _) = converted("meridio.yaml");
    let t = &v["trenches"][0];
    assert_eq!(t["name"], "trench-a", "{v:#}");
    assert_eq!(t["attractors"][0]["name"], "attractor-a");
    assert!(
        !v["warnings"].to_string().contains("not YAML"),
        "{}",
        v["warnings"]
    );

    let (v, notes) = converted("meridio-v1alpha1.yaml");
    assert_eq!(
        v["trenches"][0]["attractors"][0]["name"], "attractor-a",
        "{v:#}"
    );
    assert!(notes.contains("spec.replicas 2"), "{notes}");

    // kube-fip: a List export, read item by item.
    let (v, _) = converted("kube-fip-list.yaml");
    assert_eq!(v["floatingIPs"][0]["name"], "demo-vip");
    assert_eq!(v["floatingIPs"][0]["address"], "10.135.10.200");

    // kube-fip's ConfigMap: what maps is on the range, every other key is named with
    // where its counterpart lives, and kubevipGuestInstall is not called missing.
    let (v, notes) = converted("kube-fip-config.yaml");
    let range = &v["floatingIPRanges"][0];
    assert_eq!(range["name"], "guest-vlan", "{v:#}");
    for said in [
        "logLevel=\"Debug\" is not converted",
        "operator.logLevel",
        "metricsPort=\"9090\" is not converted",
        "operator.metricsPort",
        "kubevipChartRepoUrl",
        "removeHarvesterCloudProvider",
        "harvesterCloudProviderNamespace",
    ] {
        assert!(notes.contains(said), "{said:?} not in\n{notes}");
    }
    assert!(!notes.contains("not in this input"), "{notes}");

    // ipruler: the ClusterConfig's rule on the NodeConfig's node, and not elsewhere.
    let (v, notes) = converted("ipruler.yaml");
    assert_eq!(v["nodes"]["edge-1"]["rules"][0]["from"], "172.31.201.11/32");
    assert_eq!(v["nodes"]["other-1"]["rules"], serde_json::json!([]));
    assert!(notes.contains("each converted NodeConfig"), "{notes}");
}
