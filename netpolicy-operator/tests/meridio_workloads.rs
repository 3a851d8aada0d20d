//! The `meridio` data plane against the real API server: the operator keeps Meridio's
//! own workloads for each trench (the objects Meridio's operator keeps, named as it
//! names them, owned as it owns them), in the trench's namespace only, writes only what
//! changed, and nothing at all on a quiet resync or after a restart.
//!
//! (The garbage collector that deletes them with their Trench does not run beside a
//! bare API server: `tests/real_node.rs` checks that on a real cluster.)

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{collections::BTreeMap, time::Duration};

use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use netpolicy_operator::api::crds;
use netpolicy_testenv::eventually;
use serde_json::json;

/// Meridio's workloads and the accounts they run as: (group, version, kind, plural).
const KINDS: [(&str, &str, &str, &str); 9] = [
    ("", "v1", "ConfigMap", "configmaps"),
    ("", "v1", "ServiceAccount", "serviceaccounts"),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
    ),
    ("", "v1", "Service", "services"),
    ("apps", "v1", "StatefulSet", "statefulsets"),
    ("apps", "v1", "Deployment", "deployments"),
    ("apps", "v1", "DaemonSet", "daemonsets"),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
    ),
];

fn workload_api(client: &Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    let (g, v, k, p) = KINDS.iter().find(|k| k.2 == kind).unwrap();
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), p),
    )
}

/// Every object netpolicy keeps for Meridio in `ns`: `Kind/name` → the object.
async fn kept(client: &Client, ns: &str) -> BTreeMap<String, DynamicObject> {
    let mut out = BTreeMap::new();
    for (_, _, kind, _) in KINDS {
        let lp = kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=netpolicy");
        for o in workload_api(client, kind, ns)
            .list(&lp)
            .await
            .unwrap()
            .items
        {
            out.insert(format!("{kind}/{}", o.metadata.name.clone().unwrap()), o);
        }
    }
    out
}

async fn trench(client: &Client, ns: &str) {
    let pp = PostParams::default();
    let l = json!({"trench": "trench-a"});
    for (kind, name, spec) in [
        ("Trench", "trench-a", json!({"ipFamily": "dualstack"})),
        ("Vip", "vip1", json!({"address": "20.0.0.0/32"})),
        (
            "Gateway",
            "gateway1",
            json!({"address": "169.254.100.1", "protocol": "static"}),
        ),
        (
            "Attractor",
            "attr1",
            json!({
            "interface": {"name": "ext-vlan.100", "link": "eth0", "vlanId": 100,
                          "ipv4Prefix": "169.254.100.0/24", "ipv6Prefix": "100:100::/64"},
            "gateways": ["gateway1"], "vips": ["vip1"], "composites": ["conduit-stateless"]}),
        ),
        ("Conduit", "conduit-stateless", json!({})),
        (
            "Stream",
            "stream-1",
            json!({"conduit": "conduit-stateless"}),
        ),
        (
            "Flow",
            "flow-1",
            json!({"stream": "stream-1", "vips": ["vip1"],
                                  "protocols": ["tcp"], "priority": 2}),
        ),
    ] {
        let mut meta = json!({"name": name});
        if kind != "Trench" {
            meta["labels"] = l.clone();
        }
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": kind, "metadata": meta, "spec": spec
        }))
        .unwrap();
        common::traffic_api(client, kind, ns)
            .create(&pp, &o)
            .await
            .unwrap();
    }
}

/// Plays the StatefulSet, Deployment and DaemonSet controllers (none runs beside a
/// bare API server): every workload of `ns` observed at its generation, all replicas
/// ready and updated.
async fn roll_out(client: &Client, ns: &str) {
    for (key, o) in kept(client, ns).await {
        let (kind, name) = key.split_once('/').unwrap();
        let generation = o.metadata.generation.unwrap_or_default();
        let want = o.data["spec"]["replicas"].as_i64().unwrap_or(1);
        let status = match kind {
            "StatefulSet" | "Deployment" => json!({
                "observedGeneration": generation, "replicas": want, "readyReplicas": want,
                "updatedReplicas": want, "availableReplicas": want, "currentReplicas": want,
            }),
            "DaemonSet" => json!({
                "observedGeneration": generation, "desiredNumberScheduled": 1,
                "currentNumberScheduled": 1, "numberMisscheduled": 0, "numberReady": 1,
                "updatedNumberScheduled": 1, "numberAvailable": 1,
            }),
            _ => continue,
        };
        workload_api(client, kind, ns)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .unwrap();
    }
}

/// Waits (up to 60 s) until `ns` holds exactly [`EXPECTED`]; fails with `why()`.
async fn all_kept(client: &Client, ns: &str, why: &dyn Fn() -> String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while kept(client, ns)
        .await
        .keys()
        .map(String::as_str)
        .collect::<Vec<_>>()
        != EXPECTED
    {
        assert!(
            std::time::Instant::now() < deadline,
            "workloads of {ns} not kept within 60 s:\n{}",
            why()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

const EXPECTED: [&str; 15] = [
    "ConfigMap/meridio-configuration-trench-a",
    "DaemonSet/proxy-conduit-stateless",
    "Deployment/nse-vlan-attr1",
    "Deployment/stateless-lb-frontend-attr1",
    "PodDisruptionBudget/pdb-attr1",
    "Role/meridio-configuration-role-trench-a",
    "Role/meridio-fes-role-trench-a",
    "RoleBinding/meridio-configuration-role-binding-trench-a",
    "RoleBinding/meridio-fes-role-binding-trench-a",
    "Service/ipam-service-trench-a",
    "Service/nsp-service-trench-a",
    "ServiceAccount/meridio-fes-trench-a",
    "ServiceAccount/meridio-sa-trench-a",
    "StatefulSet/ipam-trench-a",
    "StatefulSet/nsp-trench-a",
];

/// Writes (patches) by anyone to Meridio's workload kinds so far, statuses aside (the
/// test writes those, playing the workload controllers): `resource/name`.
fn patches(cp: &netpolicy_testenv::ControlPlane) -> Vec<String> {
    let mut out = Vec::new();
    for (_, _, _, plural) in KINDS {
        for w in cp.writes_where(plural, |_| true) {
            if w.verb == "patch" && w.subresource != "status" {
                out.push(format!("{}/{}", w.resource, w.name));
            }
        }
    }
    out.sort();
    out
}

/// What `kubectl auth can-i <verb> <resource> -n <ns> --as=system:serviceaccount:…`
/// answers: a SelfSubjectAccessReview made as the account (impersonated, with the
/// groups the API server gives a ServiceAccount).
async fn can_i(
    cp: &netpolicy_testenv::ControlPlane,
    account: (&str, &str),
    verb: &str,
    resource: &str,
    ns: &str,
) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let (account_ns, name) = account;
    let groups = [
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{account_ns}"),
        "system:authenticated".to_owned(),
    ];
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    let client = cp
        .client_impersonating(
            &format!("system:serviceaccount:{account_ns}:{name}"),
            &groups,
        )
        .await;
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.to_owned()),
                verb: Some(verb.to_owned()),
                resource: Some(resource.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SelfSubjectAccessReview>::all(client)
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// Each workload's `serviceAccountName` is an account that exists, and each account is
/// allowed what Meridio's RBAC allows its components (the NSP watches its ConfigMap, the
/// front ends watch Secrets for BGP keys) in the trench's namespace, and nothing else
/// asked here: not another verb, not the other resource, not another namespace.
async fn accounts_allow_what_meridio_needs(
    cp: &netpolicy_testenv::ControlPlane,
    objects: &BTreeMap<String, DynamicObject>,
    ns: &str,
    other_ns: &str,
) {
    let mut named = BTreeMap::new();
    for (key, o) in objects {
        if let Some(sa) = o.data["spec"]["template"]["spec"]["serviceAccountName"].as_str() {
            assert!(
                objects.contains_key(&format!("ServiceAccount/{sa}")),
                "{key} runs as {sa}, which is not there"
            );
            named.insert(key.clone(), sa.to_owned());
        }
    }
    assert_eq!(
        named,
        BTreeMap::from([
            (
                "Deployment/stateless-lb-frontend-attr1".to_owned(),
                "meridio-fes-trench-a".to_owned()
            ),
            (
                "StatefulSet/nsp-trench-a".to_owned(),
                "meridio-sa-trench-a".to_owned()
            ),
        ])
    );
    for (account, allowed) in [
        ("meridio-sa-trench-a", "configmaps"),
        ("meridio-fes-trench-a", "secrets"),
    ] {
        for resource in ["configmaps", "secrets"] {
            for verb in ["watch", "get", "list", "create", "update", "delete"] {
                let want = verb == "watch" && resource == allowed;
                assert_eq!(
                    can_i(cp, (ns, account), verb, resource, ns).await,
                    want,
                    "can-i {verb} {resource} -n {ns} --as=system:serviceaccount:{ns}:{account}"
                );
            }
        }
        assert!(
            !can_i(cp, (ns, account), "watch", allowed, other_ns).await,
            "{account} of {ns} may watch {allowed} in {other_ns}"
        );
        assert!(!can_i(cp, (ns, account), "list", "pods", ns).await);
    }
}

/// One operator at a time: a cluster-wide one would serve the other test's trenches.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread")]
async fn meridio_trenches_get_meridios_workloads_in_their_namespace_and_only_changes_are_written() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let lease_ns = cp.namespace("mw-lease").await;
    let (ns1, ns2) = (cp.namespace("mw-a").await, cp.namespace("mw-b").await);
    trench(&client, &ns1).await;
    trench(&client, &ns2).await;
    let log = cp.dir.join("operator-meridio.log");
    let mut op = common::operator(cp, &lease_ns, &log, "info,netpolicy_operator::trench=debug");
    let why = || std::fs::read_to_string(&log).unwrap_or_default();
    for ns in [&ns1, &ns2] {
        all_kept(&client, ns, &why).await;
    }
    // Owned as Meridio's operator owns them, each by an object of its own namespace.
    for ns in [&ns1, &ns2] {
        let uid = |kind: &str, name: &str| {
            let api = common::traffic_api(&client, kind, ns);
            let name = name.to_owned();
            async move { api.get(&name).await.unwrap().metadata.uid.unwrap() }
        };
        let trench_uid = uid("Trench", "trench-a").await;
        let attractor_uid = uid("Attractor", "attr1").await;
        let conduit_uid = uid("Conduit", "conduit-stateless").await;
        let objects = kept(&client, ns).await;
        let owner = |k: &str| {
            let r = &objects[k].metadata.owner_references.as_ref().unwrap()[0];
            (r.kind.clone(), r.uid.clone(), r.controller)
        };
        for k in [
            "ConfigMap/meridio-configuration-trench-a",
            "StatefulSet/nsp-trench-a",
            "StatefulSet/ipam-trench-a",
            "Service/nsp-service-trench-a",
            "Service/ipam-service-trench-a",
            "ServiceAccount/meridio-sa-trench-a",
            "Role/meridio-configuration-role-trench-a",
            "RoleBinding/meridio-configuration-role-binding-trench-a",
            "ServiceAccount/meridio-fes-trench-a",
            "Role/meridio-fes-role-trench-a",
            "RoleBinding/meridio-fes-role-binding-trench-a",
        ] {
            assert_eq!(
                owner(k),
                ("Trench".into(), trench_uid.clone(), Some(true)),
                "{k}"
            );
        }
        for k in [
            "Deployment/nse-vlan-attr1",
            "Deployment/stateless-lb-frontend-attr1",
            "PodDisruptionBudget/pdb-attr1",
        ] {
            assert_eq!(
                owner(k),
                ("Attractor".into(), attractor_uid.clone(), Some(true)),
                "{k}"
            );
        }
        assert_eq!(
            owner("DaemonSet/proxy-conduit-stateless"),
            ("Conduit".into(), conduit_uid.clone(), Some(true))
        );
        // As in Meridio, every child of the trench is owned by its Trench.
        for (kind, name) in [
            ("Attractor", "attr1"),
            ("Conduit", "conduit-stateless"),
            ("Gateway", "gateway1"),
            ("Vip", "vip1"),
            ("Stream", "stream-1"),
            ("Flow", "flow-1"),
        ] {
            let o = common::traffic_api(&client, kind, ns)
                .get(name)
                .await
                .unwrap();
            let refs = o.metadata.owner_references.unwrap_or_default();
            assert!(refs.iter().any(|r| r.uid == trench_uid), "{kind}: {refs:?}");
        }
        // The selectors match the pods' labels; the Services select their StatefulSets.
        let sts = &objects["StatefulSet/nsp-trench-a"].data["spec"];
        assert_eq!(sts["selector"]["matchLabels"]["app"], "nsp-trench-a");
        assert_eq!(sts["template"]["metadata"]["labels"]["app"], "nsp-trench-a");
        assert_eq!(
            objects["Service/nsp-service-trench-a"].data["spec"]["selector"]["app"],
            "nsp-trench-a"
        );
        let cm = &objects["ConfigMap/meridio-configuration-trench-a"].data["data"];
        assert_eq!(cm.as_object().unwrap().len(), 7, "{cm}");
        assert_eq!(cm["trench"], "name: trench-a\n");
        accounts_allow_what_meridio_needs(cp, &objects, ns, if ns == &ns1 { &ns2 } else { &ns1 })
            .await;
    }
    let ready_of = |kind: &'static str, name: &'static str, ns: String| {
        let client = client.clone();
        async move {
            let t = common::traffic_api(&client, kind, &ns)
                .get(name)
                .await
                .unwrap();
            t.data["status"]["conditions"][0].clone()
        }
    };
    let status = |ns: String| ready_of("Trench", "trench-a", ns);
    // No workload controller runs here: each trench says which workloads have not
    // rolled out, its Attractor and Conduit say their own, the rest are configuration.
    eventually(
        "the trenches name the workloads not rolled out",
        30,
        || async {
            let mut all = true;
            for ns in [&ns1, &ns2] {
                let c = status(ns.clone()).await;
                let m = c["message"].as_str().unwrap_or_default();
                all &= c["status"] == "False"
                    && c["reason"] == "WorkloadsNotReady"
                    && EXPECTED
                        .iter()
                        .filter(|k| {
                            ["StatefulSet", "Deployment", "DaemonSet"]
                                .contains(&k.split('/').next().unwrap())
                        })
                        .all(|k| m.contains(&k.replace('/', " ")));
            }
            all
        },
    )
    .await;
    let attractor = ready_of("Attractor", "attr1", ns1.clone()).await;
    assert_eq!(attractor["reason"], "WorkloadsNotReady", "{attractor}");
    let m = attractor["message"].as_str().unwrap();
    assert!(
        m.contains("Deployment stateless-lb-frontend-attr1")
            && m.contains("Deployment nse-vlan-attr1")
            && !m.contains("StatefulSet"),
        "{m}"
    );
    let conduit = ready_of("Conduit", "conduit-stateless", ns1.clone()).await;
    assert_eq!(conduit["reason"], "WorkloadsNotReady", "{conduit}");
    let gateway = ready_of("Gateway", "gateway1", ns1.clone()).await;
    assert_eq!(
        (&gateway["status"], &gateway["reason"]),
        (&json!("True"), &json!("Configured")),
        "{gateway}"
    );
    // Rolled out: Ready, from the workloads' own statuses (watched, not polled).
    for ns in [&ns1, &ns2] {
        roll_out(&client, ns).await;
    }
    eventually("both trenches say Deployed", 30, || async {
        status(ns1.clone()).await["reason"] == "Deployed"
            && status(ns2.clone()).await["reason"] == "Deployed"
            && ready_of("Attractor", "attr1", ns1.clone()).await["reason"] == "Deployed"
            && ready_of("Conduit", "conduit-stateless", ns1.clone()).await["reason"] == "Deployed"
    })
    .await;

    // Quiet: resyncs every 2 s write nothing.
    let before = patches(cp);
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(patches(cp), before, "a quiet resync wrote\n{}", why());

    // A Flow edited: the ConfigMap only (Meridio's NSP reads it live; nothing restarts).
    common::traffic_api(&client, "Flow", &ns1)
        .patch(
            "flow-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"priority": 5}})),
        )
        .await
        .unwrap();
    eventually("the ConfigMap follows the Flow", 30, || async {
        kept(&client, &ns1).await["ConfigMap/meridio-configuration-trench-a"].data["data"]["flows"]
            .as_str()
            .is_some_and(|f| f.contains("priority: 5"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after: Vec<String> = patches(cp);
    let mut new = after.clone();
    for b in &before {
        if let Some(i) = new.iter().position(|a| a == b) {
            new.remove(i);
        }
    }
    assert_eq!(
        new,
        ["configmaps/meridio-configuration-trench-a"],
        "{}",
        why()
    );

    // The Attractor's replicas: its front end only.
    common::traffic_api(&client, "Attractor", &ns1)
        .patch(
            "attr1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    eventually("the front end scales", 30, || async {
        kept(&client, &ns1).await["Deployment/stateless-lb-frontend-attr1"].data["spec"]["replicas"]
            == 3
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut new = patches(cp);
    for b in &after {
        if let Some(i) = new.iter().position(|a| a == b) {
            new.remove(i);
        }
    }
    assert_eq!(
        new,
        ["deployments/stateless-lb-frontend-attr1"],
        "{}",
        why()
    );

    // Deleted by hand: put back (the deletion is watched).
    workload_api(&client, "DaemonSet", &ns1)
        .delete("proxy-conduit-stateless", &Default::default())
        .await
        .unwrap();
    all_kept(&client, &ns1, &why).await;

    // A restarted operator compares what it applied (the hash annotation): no write.
    let settled = patches(cp);
    op.0.kill().unwrap();
    op.0.wait().unwrap();
    op = common::operator(cp, &lease_ns, &log, "info,netpolicy_operator::trench=debug");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        patches(cp),
        settled,
        "the restarted operator rewrote:\n{}",
        why()
    );

    // An unknown resource template is said on the Trench, not ignored.
    common::traffic_api(&client, "Trench", &ns2)
        .patch(
            "trench-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"resource-template": "huge"}}})),
        )
        .await
        .unwrap();
    eventually("the Trench says which template is unknown", 30, || async {
        let c = status(ns2.clone()).await;
        c["status"] == "False"
            && c["reason"] == "UnknownResourceTemplate"
            && c["message"]
                .as_str()
                .is_some_and(|m| m.contains("\"huge\""))
    })
    .await;
    drop(op);
}

/// `--watch-namespace`: Meridio's operator's scope. The operator serves the trenches of
/// its namespace and never touches another's.
#[tokio::test(flavor = "multi_thread")]
async fn an_operator_limited_to_one_namespace_serves_only_the_trenches_there() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let (mine, other) = (
        cp.namespace("mw-mine").await,
        cp.namespace("mw-other").await,
    );
    trench(&client, &mine).await;
    trench(&client, &other).await;
    let log = cp.dir.join("operator-meridio-ns.log");
    let _op = common::operator_with(cp, &mine, &log, "info", &["--watch-namespace", &mine]);
    let why = || std::fs::read_to_string(&log).unwrap_or_default();
    all_kept(&client, &mine, &why).await;
    // Several resyncs later the other namespace has nothing of it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(kept(&client, &other).await.is_empty(), "{}", why());
    let t = common::traffic_api(&client, "Trench", &other)
        .get("trench-a")
        .await
        .unwrap();
    assert!(
        t.data["status"].is_null(),
        "the other namespace's Trench got a status: {}",
        t.data["status"]
    );
    let a = common::traffic_api(&client, "Attractor", &other)
        .get("attr1")
        .await
        .unwrap();
    assert!(a.metadata.owner_references.is_none(), "{:?}", a.metadata);
}

/// Meridio's `update-sync-group`: two Conduits of one group change at once; their proxy
/// DaemonSets are updated one at a time, the second only once the first rolled out.
#[tokio::test(flavor = "multi_thread")]
async fn proxies_of_one_update_sync_group_are_updated_one_at_a_time() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let lease_ns = cp.namespace("mw-sync-lease").await;
    let ns = cp.namespace("mw-sync").await;
    trench(&client, &ns).await;
    let conduit: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "Conduit",
        "metadata": {"name": "conduit-2", "labels": {"trench": "trench-a"}}, "spec": {}
    }))
    .unwrap();
    let conduits = common::traffic_api(&client, "Conduit", &ns);
    conduits
        .create(&PostParams::default(), &conduit)
        .await
        .unwrap();
    for c in ["conduit-stateless", "conduit-2"] {
        conduits
            .patch(
                c,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"update-sync-group": "g1"}}})),
            )
            .await
            .unwrap();
    }
    let log = cp.dir.join("operator-meridio-sync.log");
    let _op = common::operator(cp, &lease_ns, &log, "info,netpolicy_operator::trench=debug");
    let why = || std::fs::read_to_string(&log).unwrap_or_default();
    let daemonsets = workload_api(&client, "DaemonSet", &ns);
    let hash = |name: &'static str| {
        let api = daemonsets.clone();
        async move {
            api.get_opt(name).await.unwrap().and_then(|d| {
                d.metadata
                    .annotations
                    .and_then(|a| a.get("netpolicy.io/applied-hash").cloned())
            })
        }
    };
    eventually("both proxies exist", 60, || async {
        hash("proxy-conduit-stateless").await.is_some() && hash("proxy-conduit-2").await.is_some()
    })
    .await;
    roll_out(&client, &ns).await;
    let before = (
        hash("proxy-conduit-stateless").await.unwrap(),
        hash("proxy-conduit-2").await.unwrap(),
    );
    // Both change at once (another resource template for their containers).
    for c in ["conduit-stateless", "conduit-2"] {
        conduits
            .patch(
                c,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"resource-template": "large"}}})),
            )
            .await
            .unwrap();
    }
    let changed = || async {
        (
            hash("proxy-conduit-stateless").await.unwrap() != before.0,
            hash("proxy-conduit-2").await.unwrap() != before.1,
        )
    };
    eventually("one proxy is updated", 30, || async {
        let (a, b) = changed().await;
        a || b
    })
    .await;
    // Resyncs every 2 s: the other still waits, its Conduit says why.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (a, b) = changed().await;
    assert!(a != b, "both updated at once ({a}, {b}):\n{}", why());
    let waiting = if a { "conduit-2" } else { "conduit-stateless" };
    let ready = conduits.get(waiting).await.unwrap().data["status"]["conditions"][0].clone();
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("update-sync-group \"g1\"")),
        "{ready}"
    );
    // The first rolls out: the second follows.
    roll_out(&client, &ns).await;
    eventually(
        "the second proxy is updated after the first rolled out",
        30,
        || async { changed().await == (true, true) },
    )
    .await;
}
