//! The Helm chart: `helm lint`, `helm template`, the rendered manifests applied to the
//! real API server (workloads as a server-side dry run: no kubelet runs there), and the
//! RBAC checked by impersonating the operator's and the agent's service accounts.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{path::PathBuf, process::Command};

use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    core::GroupVersionKind,
    discovery,
};
use netpolicy_operator::{api::crds, manifest::split_documents};
use serde_json::{Value, json};

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/netpolicy")
}

fn helm(args: &[&str]) -> String {
    let out = Command::new(netpolicy_testenv::tool("helm"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn render(namespace: &str, extra: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut args = vec![
        "template",
        "t",
        chart.to_str().unwrap(),
        "--namespace",
        namespace,
        "--include-crds",
    ];
    args.extend_from_slice(extra);
    split_documents(&helm(&args))
        .into_iter()
        .filter_map(|(_, doc)| serde_saphyr::from_str::<Value>(&doc).ok())
        .filter(|v| v.is_object())
        .collect()
}

/// The first container's arguments of the first `kind` (DaemonSet, Deployment).
fn container_args(docs: &[Value], kind: &str) -> Vec<String> {
    of_kind(docs, kind)[0]["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

fn numbers_as_f64(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(a) => Value::Array(a.iter().map(numbers_as_f64).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), numbers_as_f64(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// The chart's description names the five jobs (what `helm search` shows).
#[test]
fn the_chart_description_names_all_five_jobs() {
    let chart = std::fs::read_to_string(chart().join("Chart.yaml")).unwrap();
    let description = chart
        .lines()
        .find_map(|l| l.strip_prefix("description:"))
        .unwrap()
        .to_lowercase();
    for job in [
        "routing policy",
        "floating ips",
        "meridio",
        "routed cloud ips",
        "route reflectors",
    ] {
        assert!(
            description.contains(job),
            "{job:?} missing from {description:?}"
        );
    }
}

#[test]
fn the_chart_lints_clean() {
    let chart = chart();
    helm(&["lint", "--strict", chart.to_str().unwrap()]);
}

#[test]
fn the_chart_carries_the_current_crds() {
    let in_chart = std::fs::read_to_string(chart().join("files/netpolicy-crds.yaml")).unwrap();
    let deploy = std::fs::read_to_string(chart().join("../../deploy/crds.yaml")).unwrap();
    assert!(
        in_chart == deploy,
        "charts/netpolicy/files/netpolicy-crds.yaml is stale: copy deploy/crds.yaml there"
    );
    let in_chart =
        std::fs::read_to_string(chart().join("files/traffic-domains-admission.yaml")).unwrap();
    let deploy =
        std::fs::read_to_string(chart().join("../../deploy/traffic-domains-admission.yaml"))
            .unwrap();
    assert!(
        in_chart == deploy,
        "charts/netpolicy/files/traffic-domains-admission.yaml is stale: copy deploy/traffic-domains-admission.yaml there"
    );
    // Rendered, they are the generated CRDs, kept on uninstall; `crds.enabled=false`
    // renders none. The trench-label admission policy and its binding come with them.
    let docs = render("np", &[]);
    let trench_label = |kind: &str| {
        of_kind(&docs, kind)
            .into_iter()
            .filter(|d| d["metadata"]["name"] == "netpolicy-trench-label")
            .count()
    };
    assert_eq!(trench_label("ValidatingAdmissionPolicy"), 1);
    assert_eq!(trench_label("ValidatingAdmissionPolicyBinding"), 1);
    let rendered = of_kind(&docs, "CustomResourceDefinition");
    assert_eq!(rendered.len(), crds().len());
    for (r, c) in rendered.iter().zip(crds()) {
        assert_eq!(r["metadata"]["name"], c.metadata.name.clone().unwrap());
        assert_eq!(
            r["metadata"]["annotations"]["helm.sh/resource-policy"],
            "keep"
        );
        // (helm's toYaml writes 0.0 as 0: compare numbers as numbers.)
        assert_eq!(
            numbers_as_f64(&r["spec"]),
            numbers_as_f64(&serde_json::to_value(&c.spec).unwrap())
        );
    }
    let docs = render("np", &["--set", "crds.enabled=false"]);
    assert!(of_kind(&docs, "CustomResourceDefinition").is_empty());
}

#[test]
fn the_alert_rules_ship_as_a_prometheus_rule_where_the_cluster_serves_the_kind() {
    let in_chart = std::fs::read_to_string(chart().join("files/prometheus-rules.yaml")).unwrap();
    let deploy =
        std::fs::read_to_string(chart().join("../../deploy/prometheus-rules.yaml")).unwrap();
    assert!(
        in_chart == deploy,
        "charts/netpolicy/files/prometheus-rules.yaml is stale: copy deploy/prometheus-rules.yaml there"
    );
    let rules: Value = serde_saphyr::from_str(&deploy).unwrap();
    // Off by default; on, only where the API server serves the kind (or forced).
    assert!(of_kind(&render("np", &[]), "PrometheusRule").is_empty());
    let on = ["--set", "monitoring.prometheusRule.enabled=true"];
    assert!(of_kind(&render("np", &on), "PrometheusRule").is_empty());
    for extra in [
        &["--api-versions", "monitoring.coreos.com/v1/PrometheusRule"][..],
        &["--set", "monitoring.prometheusRule.force=true"][..],
    ] {
        let mut args = on.to_vec();
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--set", "monitoring.prometheusRule.labels.release=kps"]);
        let docs = render("np", &args);
        let rule = of_kind(&docs, "PrometheusRule");
        assert_eq!(rule.len(), 1, "{extra:?}");
        // The same groups, alert templates untouched by Helm.
        assert_eq!(rule[0]["spec"]["groups"], rules["groups"], "{extra:?}");
        assert_eq!(rule[0]["metadata"]["labels"]["release"], "kps");
        assert_eq!(rule[0]["metadata"]["namespace"], "np");
    }
}

#[test]
fn the_agent_cleans_up_on_uninstall_unless_told_not_to() {
    let args = |docs: &[Value]| container_args(docs, "DaemonSet");
    let on = render("np", &[]);
    assert!(args(&on).contains(&"--cleanup-on-uninstall=np/t-agent".to_owned()));
    assert_eq!(
        of_kind(&on, "Role").len(),
        3,
        "leader election, kube-vip's ConfigMaps and the agent's"
    );
    let off = render("np", &["--set", "agent.cleanupOnUninstall=false"]);
    assert!(
        !args(&off)
            .iter()
            .any(|a| a.starts_with("--cleanup-on-uninstall"))
    );
    assert_eq!(of_kind(&off, "Role").len(), 2);
}

#[test]
fn the_agents_report_spread_is_the_fleets_unless_the_chart_gives_one() {
    let args = |docs: &[Value]| container_args(docs, "DaemonSet");
    let default = render("np", &[]);
    assert!(
        !args(&default)
            .iter()
            .any(|a| a.starts_with("--report-spread-ms")),
        "unset: the agents take the NetworkFleet's"
    );
    let wide = render("np", &["--set", "agent.reportSpreadMs=5000"]);
    assert!(args(&wide).contains(&"--report-spread-ms=5000".to_owned()));
    let none = render("np", &["--set", "agent.reportSpreadMs=0"]);
    assert!(args(&none).contains(&"--report-spread-ms=0".to_owned()));
}

#[test]
fn node_cleanup_on_deletion_is_the_operators_flag_not_the_uninstall_switch() {
    let args = |docs: &[Value]| container_args(docs, "Deployment");
    let on = render("np", &[]);
    assert!(args(&on).contains(&"--node-cleanup-on-deletion=true".to_owned()));
    let off = render("np", &["--set", "operator.nodeCleanupOnDeletion=false"]);
    assert!(args(&off).contains(&"--node-cleanup-on-deletion=false".to_owned()));
    let values = std::fs::read_to_string(chart().join("values.yaml")).unwrap();
    let uninstall = values
        .split("cleanupOnUninstall:")
        .next()
        .unwrap()
        .rsplit("enabled: true")
        .next()
        .unwrap();
    assert!(
        !uninstall.contains("ipruler's node-cleanup-on-deletion"),
        "the uninstall switch presents itself as ipruler's option:\n{uninstall}"
    );
}

/// The operator's replicas spread over nodes by default (soft, so one node still runs
/// them all), selecting only this release's operator pods; switched off on request.
#[test]
fn the_operator_replicas_spread_over_nodes_unless_told_not_to() {
    let deployment = |docs: &[Value]| {
        of_kind(docs, "Deployment")
            .into_iter()
            .find(|d| d["metadata"]["name"] == "t-operator")
            .cloned()
            .unwrap()
    };
    let on = deployment(&render("np", &[]));
    assert_eq!(
        on["spec"]["template"]["spec"]["topologySpreadConstraints"],
        json!([{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "t",
                                                  "app.kubernetes.io/component": "operator"}}}])
    );
    // The selector picks the operator's own pods (the Deployment's selector).
    for (k, v) in on["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(on["spec"]["template"]["metadata"]["labels"][k], *v);
    }
    let off = deployment(&render(
        "np",
        &["--set", "operator.spreadAcrossNodes=false"],
    ));
    assert!(off["spec"]["template"]["spec"]["topologySpreadConstraints"].is_null());
}

/// The agent keeps its last good config on the node (a hostPath), unless told not to.
#[test]
fn the_agent_keeps_its_last_good_config_on_the_node() {
    let pod = |docs: &[Value]| of_kind(docs, "DaemonSet")[0]["spec"]["template"]["spec"].clone();
    let on = pod(&render("np", &[]));
    let args = on["containers"][0]["args"].as_array().unwrap().clone();
    assert!(args.contains(&Value::from(
        "--state-file=/var/lib/netpolicy/last-good-$(NODE_NAME).json"
    )));
    assert_eq!(
        on["containers"][0]["volumeMounts"][0]["mountPath"],
        "/var/lib/netpolicy"
    );
    assert_eq!(on["volumes"][0]["hostPath"]["path"], "/var/lib/netpolicy");
    assert_eq!(on["volumes"][0]["hostPath"]["type"], "DirectoryOrCreate");
    let off = pod(&render("np", &["--set", "agent.stateDir="]));
    let args = off["containers"][0]["args"].as_array().unwrap().clone();
    assert!(
        !args
            .iter()
            .any(|a| a.as_str().unwrap().starts_with("--state-file"))
    );
    assert!(off["volumes"].is_null());
}

#[test]
fn the_operator_service_account_takes_the_irsa_role_annotation() {
    let arn = "arn:aws:iam::123456789012:role/netpolicy";
    let docs = render(
        "netpolicy-system",
        &[
            "--set",
            &format!("operator.serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={arn}"),
        ],
    );
    let operator_sa = of_kind(&docs, "ServiceAccount")
        .into_iter()
        .find(|sa| sa["metadata"]["labels"]["app.kubernetes.io/component"] == "operator")
        .expect("the operator's ServiceAccount");
    assert_eq!(
        operator_sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        arn
    );
    // Without the value: no annotations at all.
    let plain = render("netpolicy-system", &[]);
    for sa in of_kind(&plain, "ServiceAccount") {
        assert!(sa["metadata"].get("annotations").is_none(), "{sa}");
    }
}

#[test]
fn the_agent_has_net_admin_only_and_can_be_switched_off() {
    let docs = render("np", &["--set", "agent.enabled=false"]);
    assert!(of_kind(&docs, "DaemonSet").is_empty(), "agent switched off");
    assert_eq!(of_kind(&docs, "Deployment").len(), 1);
    assert_eq!(
        of_kind(&docs, "CustomResourceDefinition").len(),
        crds().len()
    );

    let docs = render("np", &[]);
    let ds = of_kind(&docs, "DaemonSet");
    assert_eq!(ds.len(), 1);
    let pod = &ds[0]["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    let sc = &pod["containers"][0]["securityContext"];
    assert_eq!(sc["privileged"], false);
    // Added capabilities reach only a root process's effective set (the image runs as
    // 65532 by default): the agent runs as 0 with just these two.
    assert_eq!(sc["runAsUser"], 0);
    assert_eq!(sc["runAsNonRoot"], false);
    assert_eq!(sc["capabilities"]["add"], json!(["NET_ADMIN", "NET_RAW"]));
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    // Operator and agent have separate service accounts and roles.
    let sas: Vec<&str> = of_kind(&docs, "ServiceAccount")
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(sas, ["t-agent", "t-operator"]);
    let op = &of_kind(&docs, "Deployment")[0]["spec"]["template"]["spec"];
    assert_eq!(op["serviceAccountName"], "t-operator");
    assert_eq!(
        op["containers"][0]["readinessProbe"]["httpGet"]["path"],
        "/readyz"
    );
}

async fn apply_all(client: &Client, docs: &[Value], namespace: &str) {
    let ssa = PatchParams::apply("netpolicy-tests").force();
    let dry = PatchParams::apply("netpolicy-tests").force().dry_run();
    // CRDs first, then everything else.
    let mut sorted: Vec<&Value> = docs.iter().collect();
    sorted.sort_by_key(|d| d["kind"] != "CustomResourceDefinition");
    for doc in sorted {
        let obj: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
        let types = obj.types.clone().unwrap();
        let gvk = GroupVersionKind::try_from(&types).unwrap();
        let (ar, caps) = discovery::pinned_kind(client, &gvk).await.unwrap();
        let api: Api<DynamicObject> = if caps.scope == discovery::Scope::Namespaced {
            // Objects the chart places in another namespace (kube-vip's Role) keep it.
            let ns = obj.metadata.namespace.as_deref().unwrap_or(namespace);
            Api::namespaced_with(client.clone(), ns, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        let pp = if matches!(types.kind.as_str(), "Deployment" | "DaemonSet") {
            &dry
        } else {
            &ssa
        };
        let name = obj.metadata.name.clone().unwrap();
        api.patch(&name, pp, &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("{} {name}: {e}", types.kind));
        if types.kind == "CustomResourceDefinition" {
            netpolicy_testenv::install_crds(client, crds()).await;
        }
    }
}

fn forbidden<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> bool {
    matches!(r, Err(kube::Error::Api(ref s)) if s.code == 403)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rendered_chart_applies_and_its_rbac_is_least_privilege() {
    let cp = netpolicy_testenv::shared();
    let admin = cp.client().await;
    let ns = cp.namespace("np-release").await;
    // Release names are cluster-wide (ClusterRoles): one release per test binary.
    let kube_vip_ns = cp.namespace("np-kube-vip").await;
    let calico_ns = cp.namespace("np-calico").await;
    let docs = render(
        &ns,
        &[
            "--set",
            "agent.enabled=true",
            "--set",
            &format!("floatingIPs.kubeVipNamespaces={{{kube_vip_ns}}}"),
            "--set",
            &format!("routeReflectors.etcdTlsSecret.namespace={calico_ns}"),
            "--set",
            "routeReflectors.etcdTlsSecret.name=calico-etcd-tls",
            "--set",
            &format!("routedIPs.tokenSecrets[0].namespace={calico_ns}"),
            "--set",
            "routedIPs.tokenSecrets[0].name=hcloud",
            // Meridio's workloads need ConfigMaps (and workloads) in every namespace;
            // without them, ConfigMaps are writable only where kube-vip's live.
            "--set",
            "meridio.enabled=false",
            "--set",
            "operator.sharedRenderings=true",
        ],
    );
    apply_all(&admin, &docs, &ns).await;

    let sa = |name: &str| format!("system:serviceaccount:{ns}:{name}");
    let groups = [
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{ns}"),
    ];
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    let operator = cp.client_impersonating(&sa("t-operator"), &groups).await;
    // The agent as its pod is: a token bound to a Pod on its node (the API server
    // puts the node in the identity; the chart's node restriction keys on it).
    let name = cp.unique("rbac-node");
    let agent = cp
        .client_with_token(&cp.pod_token(&ns, "t-agent", &name).await)
        .await;

    let nc = |name: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeConfig",
            "metadata": {"name": name}, "spec": {"nodeSelector": {}}
        }))
        .unwrap()
    };
    let nnc = |name: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeNetworkConfig",
            "metadata": {"name": name}, "spec": {"revision": "r1"}
        }))
        .unwrap()
    };
    let gvk = |kind: &str| GroupVersionKind::gvk("netpolicy.io", "v1alpha1", kind);
    let (nc_ar, _) = discovery::pinned_kind(&admin, &gvk("NodeConfig"))
        .await
        .unwrap();
    let (nnc_ar, _) = discovery::pinned_kind(&admin, &gvk("NodeNetworkConfig"))
        .await
        .unwrap();
    let pp = PostParams::default();

    // The agent: cannot write policy or NodeNetworkConfig specs, can write its own
    // node's status.
    // Applied, not created: an operator another test runs on this control plane may
    // have written this node's object already.
    Api::<DynamicObject>::all_with(admin.clone(), &nnc_ar)
        .patch(
            &name,
            &PatchParams::apply("netpolicy-tests").force(),
            &Patch::Apply(&nnc(&name)),
        )
        .await
        .unwrap();
    let agent_nc = Api::<DynamicObject>::all_with(agent.clone(), &nc_ar);
    let agent_nnc = Api::<DynamicObject>::all_with(agent.clone(), &nnc_ar);
    assert!(forbidden(
        agent_nc.create(&pp, &nc(&cp.unique("agent-nc"))).await
    ));
    // It watches (list + watch) by field selector; it never reads one object by name.
    let own = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
    assert_eq!(agent_nnc.list(&own).await.unwrap().items.len(), 1);
    assert!(forbidden(agent_nnc.get(&name).await));
    assert!(forbidden(
        agent_nnc
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"revision": "x"}}))
            )
            .await
    ));
    agent_nnc
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"appliedRevision": "r1"}})),
        )
        .await
        .unwrap();
    assert!(forbidden(
        agent_nnc.delete(&name, &Default::default()).await
    ));
    node_restriction(cp, &admin, &agent, &nnc_ar, &name, &ns, &groups).await;
    // The agent reads its own DaemonSet (uninstall or update?), and only that.
    let agent_ds = Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(agent.clone(), &ns);
    // Allowed: the DaemonSet was applied as a dry run, so it is not there (404, not 403).
    assert!(matches!(
        agent_ds.get("t-agent").await,
        Err(kube::Error::Api(ref s)) if s.code == 404
    ));
    assert!(forbidden(agent_ds.get("other").await));
    assert!(forbidden(agent_ds.list(&Default::default()).await));
    // ...and watches it from the start (a list or watch of that one name).
    let own_ds = kube::api::ListParams::default().fields("metadata.name=t-agent");
    assert!(agent_ds.list(&own_ds).await.is_ok());

    // Shared renderings: the agent reads the fleet, renderings (by label) and Nodes'
    // metadata, and writes none of them; the operator applies the fleet, creates and
    // deletes renderings, and never changes one.
    let (fleet_ar, _) = discovery::pinned_kind(&admin, &gvk("NetworkFleet"))
        .await
        .unwrap();
    let (rendering_ar, _) = discovery::pinned_kind(&admin, &gvk("NodeNetworkRendering"))
        .await
        .unwrap();
    let rendering = |name: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeNetworkRendering",
            "metadata": {"name": name, "labels": {"netpolicy.io/rendering": name}},
            "spec": {"rendering": name, "part": 0, "parts": 1}
        }))
        .unwrap()
    };
    let agent_fleet = Api::<DynamicObject>::all_with(agent.clone(), &fleet_ar);
    let agent_rendering = Api::<DynamicObject>::all_with(agent.clone(), &rendering_ar);
    let one = kube::api::ListParams::default().fields("metadata.name=default");
    assert!(agent_fleet.list(&one).await.is_ok());
    let by_label = kube::api::ListParams::default().labels("netpolicy.io/rendering=r-x");
    assert!(agent_rendering.list(&by_label).await.is_ok());
    let own_node = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
    assert!(
        Api::<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Node>>::all(agent.clone())
            .list_metadata(&own_node)
            .await
            .is_ok()
    );
    let r = cp.unique("r-rbac");
    assert!(forbidden(agent_rendering.create(&pp, &rendering(&r)).await));
    let fleet: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "NetworkFleet",
        "metadata": {"name": "default"}, "spec": {}
    }))
    .unwrap();
    assert!(forbidden(
        agent_fleet
            .patch(
                "default",
                &PatchParams::apply("t").dry_run(),
                &Patch::Apply(&fleet)
            )
            .await
    ));
    // (A dry run: the fleet is one object per cluster, other tests use it.)
    Api::<DynamicObject>::all_with(operator.clone(), &fleet_ar)
        .patch(
            "default",
            &PatchParams::apply("t").dry_run(),
            &Patch::Apply(&fleet),
        )
        .await
        .unwrap();
    // Rollouts: the agent lists and watches those of its group (by label) and writes
    // none; the operator applies and deletes them.
    let (rollout_ar, _) = discovery::pinned_kind(&admin, &gvk("NetworkRollout"))
        .await
        .unwrap();
    let agent_rollout = Api::<DynamicObject>::all_with(agent.clone(), &rollout_ar);
    let of_group = kube::api::ListParams::default().labels("group.netpolicy.io/g-0000000000000000");
    assert!(agent_rollout.list(&of_group).await.is_ok());
    let ro = cp.unique("rollout-rbac");
    let rollout: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "NetworkRollout",
        "metadata": {"name": ro}, "spec": {"sequence": 1}
    }))
    .unwrap();
    let apply = PatchParams::apply("t");
    assert!(forbidden(
        agent_rollout
            .patch(&ro, &apply, &Patch::Apply(&rollout))
            .await
    ));
    let op_rollout = Api::<DynamicObject>::all_with(operator.clone(), &rollout_ar);
    op_rollout
        .patch(&ro, &apply, &Patch::Apply(&rollout))
        .await
        .unwrap();
    assert!(forbidden(
        agent_rollout.delete(&ro, &Default::default()).await
    ));
    op_rollout.delete(&ro, &Default::default()).await.unwrap();

    let op_rendering = Api::<DynamicObject>::all_with(operator.clone(), &rendering_ar);
    op_rendering.create(&pp, &rendering(&r)).await.unwrap();
    assert!(forbidden(
        op_rendering
            .patch(
                &r,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"parts": 2}}))
            )
            .await
    ));
    let by_name = kube::api::ListParams::default().labels(&format!("netpolicy.io/rendering={r}"));
    op_rendering
        .delete_collection(&Default::default(), &by_name)
        .await
        .unwrap();
    assert!(forbidden(
        op_rendering.delete(&r, &Default::default()).await
    ));

    // Calico's etcd TLS Secret: that one, read-only (404: allowed, not there).
    let secrets =
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(operator.clone(), &calico_ns);
    assert!(matches!(
        secrets.get("calico-etcd-tls").await,
        Err(kube::Error::Api(ref s)) if s.code == 404
    ));
    assert!(forbidden(secrets.get("other").await));
    assert!(forbidden(secrets.list(&Default::default()).await));
    assert!(forbidden(
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(operator.clone(), &ns)
            .get("calico-etcd-tls")
            .await
    ));

    // A RoutedIPIssuer's token Secret: that one, read-only; Services and EndpointSlices
    // read everywhere (serviceRef).
    assert!(matches!(
        secrets.get("hcloud").await,
        Err(kube::Error::Api(ref s)) if s.code == 404
    ));
    assert!(
        Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::all(operator.clone())
            .list(&Default::default())
            .await
            .is_ok()
    );
    assert!(
        Api::<k8s_openapi::api::core::v1::Service>::all(operator.clone())
            .list(&Default::default())
            .await
            .is_ok()
    );

    // The operator: writes NodeNetworkConfigs, reads (never writes) policies and Nodes,
    // Leases only in its namespace.
    let op_nc = Api::<DynamicObject>::all_with(operator.clone(), &nc_ar);
    let op_nnc = Api::<DynamicObject>::all_with(operator.clone(), &nnc_ar);
    assert!(op_nc.list(&Default::default()).await.is_ok());
    assert!(forbidden(op_nc.create(&pp, &nc(&cp.unique("op-nc"))).await));
    // A policy's status (never its spec), and Events.
    let policy = cp.unique("rbac-nc");
    Api::<DynamicObject>::all_with(admin.clone(), &nc_ar)
        .create(&pp, &nc(&policy))
        .await
        .unwrap();
    op_nc
        .patch_status(
            &policy,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"matchedNodes": 1}})),
        )
        .await
        .unwrap();
    assert!(forbidden(
        op_nc
            .patch(
                &policy,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"priority": 9}}))
            )
            .await
    ));
    let events =
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(operator.clone(), "default");
    let ev: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": cp.unique("rbac-event")},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "netpolicy-operator", "reportingInstance": "t",
        "action": "Render", "reason": "Conflict", "type": "Warning",
        "regarding": {"apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeConfig", "name": policy}
    }))
    .unwrap();
    events.create(&pp, &ev).await.unwrap();
    assert!(forbidden(
        events
            .delete(&ev.metadata.name.clone().unwrap(), &Default::default())
            .await
    ));
    // The agent writes no policy status.
    assert!(forbidden(
        Api::<DynamicObject>::all_with(agent.clone(), &nc_ar)
            .patch_status(
                &policy,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"matchedNodes": 2}})),
            )
            .await
    ));
    op_nnc
        .create(&pp, &nnc(&cp.unique("op-nnc")))
        .await
        .unwrap();
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(operator.clone());
    assert!(nodes.list(&Default::default()).await.is_ok());
    assert!(forbidden(
        nodes.delete("anything", &Default::default()).await
    ));
    let leases = |ns: &str| {
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(operator.clone(), ns)
    };
    // Allowed: the Lease simply does not exist yet (404, not 403).
    assert!(matches!(
        leases(&ns).get("t-operator").await,
        Err(kube::Error::Api(ref s)) if s.code == 404
    ));
    assert!(forbidden(leases("default").get("t-operator").await));

    // Floating IPs: claims (create, delete), FloatingIPs (create, never delete or edit),
    // ranges' status and finalizers, Namespaces read-only, kube-vip ConfigMaps only in
    // the namespaces the chart lists.
    let (claim_ar, _) = discovery::pinned_kind(&admin, &gvk("FloatingIPClaim"))
        .await
        .unwrap();
    let claims = Api::<DynamicObject>::all_with(operator.clone(), &claim_ar);
    let claim_name = "198.51.100.77".to_owned();
    let claim: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPClaim",
        "metadata": {"name": claim_name},
        "spec": {"address": claim_name, "range": "r", "owner": {"namespace": "a", "name": "b", "uid": "u"}}
    }))
    .unwrap();
    claims.create(&pp, &claim).await.unwrap();
    claims
        .delete(&claim_name, &Default::default())
        .await
        .unwrap();
    let (fip_ar, _) = discovery::pinned_kind(&admin, &gvk("FloatingIP"))
        .await
        .unwrap();
    let fips = Api::<DynamicObject>::namespaced_with(operator.clone(), &ns, &fip_ar);
    let fip: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
        "metadata": {"name": "auto-r"}, "spec": {"range": "r"}
    }))
    .unwrap();
    fips.create(&pp, &fip).await.unwrap();
    assert!(forbidden(
        fips.patch(
            "auto-r",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"address": "198.51.100.9"}}))
        )
        .await
    ));
    assert!(forbidden(fips.delete("auto-r", &Default::default()).await));
    let (range_ar, _) = discovery::pinned_kind(&admin, &gvk("FloatingIPRange"))
        .await
        .unwrap();
    let range: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
        "metadata": {"name": cp.unique("rbac-range")}, "spec": {"cidrs": ["198.51.100.0/24"]}
    }))
    .unwrap();
    assert!(forbidden(
        Api::<DynamicObject>::all_with(operator.clone(), &range_ar)
            .create(&pp, &range)
            .await
    ));
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(operator.clone());
    assert!(namespaces.list(&Default::default()).await.is_ok());
    assert!(forbidden(
        namespaces.delete(&kube_vip_ns, &Default::default()).await
    ));
    let cm =
        |ns: &str| Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(operator.clone(), ns);
    let kubevip = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "kubevip"}, "data": {"cidr-a": "198.51.100.7/32"}});
    cm(&kube_vip_ns)
        .patch(
            "kubevip",
            &PatchParams::apply("netpolicy-operator"),
            &Patch::Apply(&kubevip),
        )
        .await
        .unwrap();
    assert!(forbidden(
        cm(&ns)
            .patch(
                "kubevip",
                &PatchParams::apply("netpolicy-operator"),
                &Patch::Apply(&kubevip)
            )
            .await
    ));
    assert!(forbidden(cm(&kube_vip_ns).list(&Default::default()).await));
}

/// The chart's node restriction: the agent of node `own` changes its own
/// NodeNetworkConfig's status and writes Events about it, and nothing of another node;
/// the same account without a node (impersonated: no bound token) changes nothing.
async fn node_restriction(
    cp: &netpolicy_testenv::ControlPlane,
    admin: &Client,
    agent: &Client,
    nnc_ar: &kube::discovery::ApiResource,
    own: &str,
    ns: &str,
    groups: &[&str],
) {
    let other = cp.unique("rbac-other-node");
    let nnc: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeNetworkConfig",
        "metadata": {"name": other}, "spec": {"revision": "r1"}
    }))
    .unwrap();
    Api::<DynamicObject>::all_with(admin.clone(), nnc_ar)
        .create(&PostParams::default(), &nnc)
        .await
        .unwrap();
    let healthy = Patch::Merge(json!({"status": {"appliedRevision": "r1"}}));
    // A new policy takes effect once the API server has compiled it (about a second).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let refused = loop {
        let r = Api::<DynamicObject>::all_with(agent.clone(), nnc_ar)
            .patch_status(&other, &PatchParams::default(), &healthy)
            .await;
        if r.is_err() || std::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(
        matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 403
            && s.message.contains(&format!("the agent of node {own} may change only NodeNetworkConfig {own}, not {other}"))),
        "{refused:?}"
    );
    let event = |about: &str| -> k8s_openapi::api::events::v1::Event {
        serde_json::from_value(json!({
            "metadata": {"name": cp.unique("agent-event")},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "netpolicy-agent", "reportingInstance": own,
            "action": "Repair", "reason": "Repaired", "type": "Normal",
            "regarding": {"apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeNetworkConfig", "name": about}
        }))
        .unwrap()
    };
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(agent.clone(), "default");
    let mine = events
        .create(&PostParams::default(), &event(own))
        .await
        .unwrap();
    // Its Events' series (a patch), as the agent's recorder writes them.
    events
        .patch(
            &mine.metadata.name.clone().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(
                json!({"series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"}}),
            ),
        )
        .await
        .unwrap();
    let refused = events.create(&PostParams::default(), &event(&other)).await;
    assert!(
        matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 403
            && s.message.contains("may write Events only about NodeNetworkConfig")),
        "{refused:?}"
    );
    // The agent's account with no node in its identity: nothing.
    let nodeless = cp
        .client_impersonating(&format!("system:serviceaccount:{ns}:t-agent"), groups)
        .await;
    let refused = Api::<DynamicObject>::all_with(nodeless, nnc_ar)
        .patch_status(own, &PatchParams::default(), &healthy)
        .await;
    assert!(
        matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 403
            && s.message.contains("carries no node")),
        "{refused:?}"
    );
    // What remains readable: every NodeNetworkConfig (admission sees no reads).
    assert!(
        Api::<DynamicObject>::all_with(agent.clone(), nnc_ar)
            .list(&kube::api::ListParams::default().fields(&format!("metadata.name={other}")))
            .await
            .is_ok()
    );
}

/// `operator.watchNamespace` (Meridio's operator's scope): a Role in that namespace
/// and nothing cluster-wide; the operator's account can serve the traffic domains
/// there and reads nothing elsewhere.
#[tokio::test(flavor = "multi_thread")]
async fn limited_to_one_namespace_the_operator_gets_a_role_there_and_nothing_cluster_wide() {
    let cp = netpolicy_testenv::shared();
    let admin = cp.client().await;
    let ns = cp.namespace("np-ns-release").await;
    let watch = cp.namespace("np-meridio").await;
    let elsewhere = cp.namespace("np-elsewhere").await;
    let docs = render(
        &ns,
        &[
            "--set",
            &format!("operator.watchNamespace={watch}"),
            "--set",
            "agent.enabled=false",
        ],
    );
    assert!(of_kind(&docs, "ClusterRole").is_empty(), "a ClusterRole");
    assert!(of_kind(&docs, "ClusterRoleBinding").is_empty());
    let deploy = of_kind(&docs, "Deployment")[0];
    let args = deploy["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert!(
        args.as_array()
            .unwrap()
            .contains(&json!(format!("--watch-namespace={watch}"))),
        "{args}"
    );
    apply_all(&admin, &docs, &ns).await;
    let groups = [
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{ns}"),
    ];
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    let op = cp
        .client_impersonating(&format!("system:serviceaccount:{ns}:t-operator"), &groups)
        .await;
    let (trench_ar, _) = discovery::pinned_kind(
        &admin,
        &GroupVersionKind::gvk("netpolicy.io", "v1alpha1", "Trench"),
    )
    .await
    .unwrap();
    let trenches = |n: &str| Api::<DynamicObject>::namespaced_with(op.clone(), n, &trench_ar);
    let deployments =
        |n: &str| Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(op.clone(), n);
    // Its namespace: the traffic kinds, and Meridio's workloads by name (404: allowed).
    assert!(trenches(&watch).list(&Default::default()).await.is_ok());
    assert!(matches!(
        deployments(&watch).get("stateless-lb-frontend-a").await,
        Err(kube::Error::Api(ref s)) if s.code == 404
    ));
    // A trench's accounts (meridio.nspServiceAccount/.feServiceAccount empty): the
    // ServiceAccount, and the Roles granting watch on ConfigMaps and on Secrets with
    // their RoleBindings, which the API server lets it create only because it holds
    // those verbs itself (created for real: a RoleBinding's check reads its Role).
    let pp = PostParams::default();
    let accounts = |n: &str| -> Vec<Value> {
        ["configmaps", "secrets"]
            .into_iter()
            .flat_map(|resource| {
                let rbac = "rbac.authorization.k8s.io";
                [
                    json!({"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": {"name": format!("sa-{resource}"), "namespace": n}}),
                    json!({"apiVersion": format!("{rbac}/v1"), "kind": "Role",
                           "metadata": {"name": format!("role-{resource}"), "namespace": n},
                           "rules": [{"apiGroups": [""], "resources": [resource], "verbs": ["watch"]}]}),
                    json!({"apiVersion": format!("{rbac}/v1"), "kind": "RoleBinding",
                           "metadata": {"name": format!("binding-{resource}"), "namespace": n},
                           "roleRef": {"apiGroup": rbac, "kind": "Role", "name": format!("role-{resource}")},
                           "subjects": [{"kind": "ServiceAccount", "name": format!("sa-{resource}"), "namespace": n}]}),
                ]
            })
            .collect()
    };
    for (n, allowed) in [(&watch, true), (&elsewhere, false)] {
        for o in accounts(n) {
            let kind = o["kind"].as_str().unwrap().to_owned();
            let (group, version) = o["apiVersion"]
                .as_str()
                .unwrap()
                .rsplit_once('/')
                .unwrap_or(("", "v1"));
            let plural = format!("{}s", kind.to_lowercase());
            let ar = kube::api::ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, &kind),
                &plural,
            );
            let o: DynamicObject = serde_json::from_value(o).unwrap();
            let r = Api::<DynamicObject>::namespaced_with(op.clone(), n, &ar)
                .create(&pp, &o)
                .await;
            if allowed {
                assert!(r.is_ok(), "{kind} in {n}: {r:?}");
            } else {
                assert!(forbidden(r), "{kind} in {n}");
            }
        }
    }
    // With the install's accounts named, the operator holds none of it.
    let named = render(
        &ns,
        &[
            "--set",
            &format!("operator.watchNamespace={watch}"),
            "--set",
            "meridio.nspServiceAccount=meridio-nsp",
            "--set",
            "meridio.feServiceAccount=meridio-fes",
        ],
    );
    let rules = of_kind(&named, "Role")[0]["rules"].clone();
    for r in rules.as_array().unwrap() {
        let has = |k: &str, v: &str| r[k].as_array().unwrap().contains(&json!(v));
        for resource in ["serviceaccounts", "roles", "rolebindings", "secrets"] {
            assert!(!has("resources", resource), "{resource}: {r}");
        }
        assert!(
            !(has("resources", "configmaps") && has("verbs", "watch")),
            "watch on ConfigMaps: {r}"
        );
    }
    // Anywhere else: nothing.
    assert!(forbidden(
        trenches(&elsewhere).list(&Default::default()).await
    ));
    assert!(forbidden(deployments(&elsewhere).get("x").await));
    assert!(forbidden(
        Api::<DynamicObject>::all_with(op.clone(), &trench_ar)
            .list(&Default::default())
            .await
    ));
    assert!(forbidden(
        Api::<k8s_openapi::api::core::v1::Node>::all(op.clone())
            .list(&Default::default())
            .await
    ));
}

/// The chart README's RBAC table is what the roles grant with the default values (plus
/// what each opt-in value adds): generated from `helm template`, so it cannot drift.
/// `NETPOLICY_WRITE_DOCS=1` rewrites it.
#[test]
fn the_readme_rbac_table_lists_what_the_roles_grant() {
    let rows = |extra: &[&str]| -> Vec<String> {
        let mut out = Vec::new();
        for d in render("netpolicy-system", extra) {
            let kind = d["kind"].as_str().unwrap_or_default();
            if kind != "ClusterRole" && kind != "Role" {
                continue;
            }
            let name = d["metadata"]["name"].as_str().unwrap_or_default();
            let account = if name.starts_with("t-agent") {
                "agent"
            } else {
                "operator"
            };
            let scope = if kind == "ClusterRole" {
                "cluster".to_owned()
            } else {
                format!(
                    "namespace `{}`",
                    d["metadata"]["namespace"].as_str().unwrap_or_default()
                )
            };
            for r in d["rules"].as_array().into_iter().flatten() {
                let list = |k: &str| -> String {
                    r[k].as_array()
                        .into_iter()
                        .flatten()
                        .map(|v| v.as_str().unwrap_or_default())
                        .map(|v| {
                            if v.is_empty() {
                                "core".to_owned()
                            } else {
                                v.to_owned()
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                // The release is `t` here: a name it prefixes reads <release>-…
                let names = list("resourceNames")
                    .split(", ")
                    .map(|n| match n.strip_prefix("t-") {
                        Some(rest) => format!("<release>-{rest}"),
                        None => n.to_owned(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let resources = if names.is_empty() {
                    list("resources")
                } else {
                    format!("{} (only {names})", list("resources"))
                };
                out.push(format!(
                    "| {account} | {scope} | {} | {resources} | {} |",
                    list("apiGroups"),
                    list("verbs")
                ));
            }
        }
        out
    };
    let defaults = rows(&[]);
    let opt_in: Vec<String> = rows(&[
        "--set",
        "floatingIPs.rancher.enabled=true",
        "--set",
        "floatingIPs.rancher.harvester=true",
        "--set",
        "floatingIPs.guestKubeconfigSecretNames={guest-kubeconfig}",
        "--set",
        "routedIPs.tokenSecrets[0].namespace=kube-system",
        "--set",
        "routedIPs.tokenSecrets[0].name=hcloud",
        "--set",
        "routeReflectors.etcdTlsSecret.namespace=calico-system",
        "--set",
        "routeReflectors.etcdTlsSecret.name=calico-etcd",
    ])
    .into_iter()
    .filter(|r| !defaults.contains(r))
    .collect();
    let mut table = String::from(
        "| account | scope | API groups | resources | verbs |\n|---|---|---|---|---|\n",
    );
    for r in &defaults {
        table.push_str(r);
        table.push('\n');
    }
    table.push_str(
        "\nAdded by opt-in values (`floatingIPs.rancher.*`, `floatingIPs.guestKubeconfigSecretNames`, \
         `routedIPs.tokenSecrets`, `routeReflectors.etcdTlsSecret`; the names here are examples):\n\n\
         | account | scope | API groups | resources | verbs |\n|---|---|---|---|---|\n",
    );
    for r in &opt_in {
        table.push_str(r);
        table.push('\n');
    }
    let readme_path = chart().join("README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let (begin, end) = ("<!-- rbac-table:begin -->\n", "<!-- rbac-table:end -->");
    let (Some(b), Some(e)) = (readme.find(begin), readme.find(end)) else {
        panic!("charts/netpolicy/README.md has no {begin:?} … {end:?} block");
    };
    let current = &readme[b + begin.len()..e];
    if std::env::var_os("NETPOLICY_WRITE_DOCS").is_some() {
        let next = format!("{}{table}{}", &readme[..b + begin.len()], &readme[e..]);
        std::fs::write(&readme_path, next).unwrap();
        return;
    }
    assert!(
        current == table,
        "the chart README's RBAC table is stale: run NETPOLICY_WRITE_DOCS=1 cargo test -p netpolicy-operator --test integration helm_chart::the_readme_rbac_table"
    );
}

/// The chart as users get it from a Helm repository: `helm package` and `helm repo
/// index` (what CI publishes), served over HTTP, added with `helm repo add`, and
/// rendered from there with the version and app version of Chart.yaml. (Installed from
/// such a repository on real nodes: `tests/three_nodes.rs`.)
#[test]
fn the_chart_packages_into_a_repository_helm_renders_from() {
    let chart_dir = chart();
    helm(&["lint", chart_dir.to_str().unwrap()]);
    let repo = netpolicy_testenv::HelmRepo::publish(&chart_dir);
    let run = |args: &[&str]| repo.run(args);
    run(&["repo", "add", "netpolicy", &repo.url]);
    let shown = run(&["show", "chart", "netpolicy/netpolicy"]);
    let chart_yaml = std::fs::read_to_string(chart_dir.join("Chart.yaml")).unwrap();
    // Helm writes Chart.yaml again (quotes go): compare the values.
    let value = |text: &str, key: &str| -> String {
        let line = text
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_default();
        line[key.len().min(line.len())..]
            .trim()
            .trim_matches('"')
            .to_owned()
    };
    for key in ["version:", "appVersion:"] {
        assert_eq!(
            value(&shown, key),
            value(&chart_yaml, key),
            "{key} in {shown}"
        );
        assert!(!value(&chart_yaml, key).is_empty());
    }
    let rendered = run(&[
        "template",
        "np",
        "netpolicy/netpolicy",
        "--namespace",
        "netpolicy-system",
    ]);
    assert!(rendered.contains("name: np-operator"), "{rendered}");
    assert!(rendered.contains("kind: DaemonSet"), "{rendered}");
}
