use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::{
    api::{Flow, Gateway, Stream, Vip},
    trench::{Objects, domains},
};

fn obj<T: serde::de::DeserializeOwned>(kind: &str, name: &str, trench: bool, spec: Value) -> T {
    let mut meta = json!({"name": name, "namespace": "default", "uid": format!("uid-{name}")});
    if trench {
        meta["labels"] = json!({"trench": "trench-a"});
    }
    serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": kind, "metadata": meta, "spec": spec
    }))
    .unwrap()
}

/// Meridio's `config/samples/meridio_v1alpha1_*` in namespace default, in our kinds.
struct Sample {
    trenches: Vec<Trench>,
    attractors: Vec<Attractor>,
    gateways: Vec<Gateway>,
    vips: Vec<Vip>,
    conduits: Vec<Conduit>,
    streams: Vec<Stream>,
    flows: Vec<Flow>,
}

fn sample() -> Sample {
    Sample {
        trenches: vec![obj(
            "Trench",
            "trench-a",
            false,
            json!({"ipFamily": "dualstack"}),
        )],
        attractors: vec![obj(
            "Attractor",
            "attr1",
            true,
            json!({
                "interface": {"name": "ext-vlan.100", "link": "eth0", "vlanId": 100,
                              "ipv4Prefix": "169.254.100.0/24", "ipv6Prefix": "100:100::/64"},
                "gateways": ["gateway1", "gateway2"], "vips": ["vip1", "vip2"],
                "composites": ["conduit-stateless"], "replicas": 2
            }),
        )],
        gateways: vec![
            obj(
                "Gateway",
                "gateway1",
                true,
                json!({"address": "2.3.4.5", "protocol": "bgp",
                "bgp": {"remoteAsn": 2000, "localAsn": 2001, "holdTime": "24s"}}),
            ),
            obj(
                "Gateway",
                "gateway2",
                true,
                json!({"address": "1000::1", "protocol": "bgp",
                "bgp": {"remoteAsn": 3000, "localAsn": 2001, "remotePort": 10179, "localPort": 10179,
                        "holdTime": "240s",
                        "bfd": {"switch": true, "minTx": "300ms", "minRx": "300ms", "multiplier": 3}}}),
            ),
            obj(
                "Gateway",
                "gateway3",
                true,
                json!({"address": "1.2.3.4", "protocol": "static",
                "static": {"bfd": {"switch": true, "minTx": "200ms", "minRx": "200ms", "multiplier": 5}}}),
            ),
        ],
        vips: vec![
            obj("Vip", "vip1", true, json!({"address": "20.0.0.0/32"})),
            obj("Vip", "vip2", true, json!({"address": "10.0.0.1/32"})),
        ],
        conduits: vec![obj("Conduit", "conduit-stateless", true, json!({}))],
        streams: vec![obj(
            "Stream",
            "stream-1",
            true,
            json!({"conduit": "conduit-stateless"}),
        )],
        flows: vec![obj(
            "Flow",
            "flow-1",
            true,
            json!({"stream": "stream-1", "vips": ["vip1"],
            "protocols": ["tcp", "udp"], "priority": 2}),
        )],
    }
}

impl Sample {
    fn objects(&self) -> Objects<'_> {
        Objects {
            trenches: &self.trenches,
            attractors: &self.attractors,
            gateways: &self.gateways,
            vips: &self.vips,
            conduits: &self.conduits,
            streams: &self.streams,
            flows: &self.flows,
        }
    }
}

/// The bytes Meridio v1.2.8's writer produces for its samples
/// (../shared/meridio-workloads.md §2, checked there with Meridio's own reader:
/// `UnmarshalConfig` + `ConvertAll`, no error, nothing dropped).
pub(crate) const MERIDIO_SAMPLE: &[(&str, &str)] = &[
    ("trench", "name: trench-a\n"),
    (
        "conduits",
        "items:\n- name: conduit-stateless\n  trench: trench-a\n",
    ),
    (
        "streams",
        "items:\n- name: stream-1\n  conduit: conduit-stateless\n  max-targets: 100\n",
    ),
    (
        "flows",
        "items:\n- name: flow-1\n  source-subnets: []\n  destination-port-ranges: []\n  source-port-ranges: []\n  protocols:\n  - tcp\n  - udp\n  vips:\n  - vip1\n  priority: 2\n  stream: stream-1\n",
    ),
    (
        "vips",
        "items:\n- name: vip1\n  address: 20.0.0.0/32\n  trench: trench-a\n- name: vip2\n  address: 10.0.0.1/32\n  trench: trench-a\n",
    ),
    (
        "attractors",
        "items:\n- name: attr1\n  vips:\n  - vip1\n  - vip2\n  gateways:\n  - gateway1\n  - gateway2\n  trench: trench-a\n",
    ),
    (
        "gateways",
        "items:\n- name: gateway1\n  address: 2.3.4.5\n  remote-asn: 2000\n  local-asn: 2001\n  remote-port: 179\n  local-port: 179\n  ip-family: ipv4\n  bfd: false\n  protocol: bgp\n  hold-time: 24\n  trench: trench-a\n- name: gateway2\n  address: 1000::1\n  remote-asn: 3000\n  local-asn: 2001\n  remote-port: 10179\n  local-port: 10179\n  ip-family: ipv6\n  bfd: true\n  protocol: bgp\n  hold-time: 240\n  min-tx: 300\n  min-rx: 300\n  multiplier: 3\n  trench: trench-a\n- name: gateway3\n  address: 1.2.3.4\n  ip-family: ipv4\n  bfd: true\n  protocol: static\n  min-tx: 200\n  min-rx: 200\n  multiplier: 5\n  trench: trench-a\n",
    ),
];

#[test]
fn meridios_samples_give_the_configmap_meridios_writer_gives_byte_for_byte() {
    let s = sample();
    let mut errors = Vec::new();
    let ds = domains(s.objects(), &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    let data = config_map_data(&ds[0]);
    let want: BTreeMap<String, String> = MERIDIO_SAMPLE
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    for (k, v) in &want {
        assert_eq!(data.get(k), Some(v), "key {k}");
    }
    assert_eq!(
        data.len(),
        7,
        "exactly Meridio's seven keys: {:?}",
        data.keys()
    );
}

#[test]
fn strings_are_quoted_as_yaml_v2_quotes_them() {
    for (s, want) in [
        ("80", "\"80\""),
        ("90-95", "90-95"),
        ("0-65535", "0-65535"),
        ("true", "\"true\""),
        ("on", "\"on\""),
        ("1.5", "\"1.5\""),
        ("1:20", "\"1:20\""),
        ("1000::1", "1000::1"),
        ("::1", "::1"),
        ("fd00::/48", "fd00::/48"),
        ("inf", "inf"),
        ("tcp[16:2] = 80", "tcp[16:2] = 80"),
        ("a: b", "'a: b'"),
        ("#x", "'#x'"),
        ("", "\"\""),
    ] {
        assert_eq!(yaml_str(s), want, "{s:?}");
    }
}

#[test]
fn the_workloads_have_meridios_names_owners_and_wiring() {
    let s = sample();
    let ds = domains(s.objects(), &mut Vec::new());
    let mut problems = BTreeMap::new();
    let objs = workloads(&ds[0], &Settings::default(), &mut problems);
    assert!(problems.is_empty(), "{problems:?}");
    let names: Vec<String> = objs
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "ConfigMap/meridio-configuration-trench-a",
            "ServiceAccount/meridio-sa-trench-a",
            "Role/meridio-configuration-role-trench-a",
            "RoleBinding/meridio-configuration-role-binding-trench-a",
            "ServiceAccount/meridio-fes-trench-a",
            "Role/meridio-fes-role-trench-a",
            "RoleBinding/meridio-fes-role-binding-trench-a",
            "StatefulSet/nsp-trench-a",
            "Service/nsp-service-trench-a",
            "StatefulSet/ipam-trench-a",
            "Service/ipam-service-trench-a",
            "Deployment/nse-vlan-attr1",
            "Deployment/stateless-lb-frontend-attr1",
            "PodDisruptionBudget/pdb-attr1",
            "DaemonSet/proxy-conduit-stateless",
        ]
    );
    let by = |n: &str| objs.iter().find(|o| o["metadata"]["name"] == n).unwrap();
    // Owners: the trench's objects by the Trench, the front end by its Attractor, the
    // proxy by its Conduit (controller references: deletion cascades).
    for (n, kind, uid) in [
        ("nsp-trench-a", "Trench", "uid-trench-a"),
        ("stateless-lb-frontend-attr1", "Attractor", "uid-attr1"),
        (
            "proxy-conduit-stateless",
            "Conduit",
            "uid-conduit-stateless",
        ),
        ("meridio-configuration-trench-a", "Trench", "uid-trench-a"),
        ("meridio-sa-trench-a", "Trench", "uid-trench-a"),
        ("meridio-fes-role-trench-a", "Trench", "uid-trench-a"),
        (
            "meridio-configuration-role-binding-trench-a",
            "Trench",
            "uid-trench-a",
        ),
    ] {
        let o = &by(n)["metadata"]["ownerReferences"][0];
        assert_eq!(
            (o["kind"].as_str(), o["uid"].as_str()),
            (Some(kind), Some(uid)),
            "{n}"
        );
        assert_eq!(o["controller"], true);
    }
    let env_of = |o: &Value, c: &str| -> BTreeMap<String, String> {
        o["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == c)
            .unwrap()["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| {
                Some((
                    e["name"].as_str()?.to_owned(),
                    e["value"].as_str()?.to_owned(),
                ))
            })
            .collect()
    };
    let nsp = env_of(by("nsp-trench-a"), "nsp");
    assert_eq!(nsp["NSP_CONFIG_MAP_NAME"], "meridio-configuration-trench-a");
    assert_eq!(nsp["NSP_NAMESPACE"], "default");
    assert_eq!(nsp["NSP_PORT"], "7778");
    let nse = env_of(by("nse-vlan-attr1"), "nse-vlan");
    assert_eq!(
        nse["NSM_SERVICES"],
        "external-vlan.attr1.trench-a.default { vlan: 100; via: eth0 }"
    );
    assert_eq!(nse["NSM_CIDR_PREFIX"], "169.254.100.0/24,100:100::/64");
    let nsc = env_of(by("stateless-lb-frontend-attr1"), "nsc");
    assert_eq!(
        nsc["NSM_NETWORK_SERVICES"],
        "kernel://external-vlan.attr1.trench-a.default/ext-vlan.100"
    );
    let lb = env_of(by("stateless-lb-frontend-attr1"), "stateless-lb");
    assert_eq!(lb["NSM_SERVICE_NAME"], "conduit-stateless.trench-a.default");
    assert_eq!(lb["NSM_NSP_SERVICE"], "nsp-service-trench-a:7778");
    let proxy = env_of(by("proxy-conduit-stateless"), "proxy");
    assert_eq!(
        proxy["NSM_SERVICE_NAME"],
        "proxy.conduit-stateless.trench-a.default"
    );
    assert_eq!(proxy["NSM_IPAM_SERVICE"], "ipam-service-trench-a:7777");
    assert_eq!(proxy["NSM_NSP_SERVICE_NAME"], "nsp-service");
    assert_eq!(by("stateless-lb-frontend-attr1")["spec"]["replicas"], 2);
    assert_eq!(by("nsp-service-trench-a")["spec"]["ports"][0]["port"], 7778);
    assert_eq!(
        by("ipam-service-trench-a")["spec"]["ports"][0]["port"],
        7777
    );
    assert_eq!(
        by("stateless-lb-frontend-attr1")["spec"]["template"]["spec"]["containers"][2]["image"],
        "registry.nordix.org/cloud-native/meridio/frontend:latest"
    );
}

/// Each trench's pods run as accounts of that trench, with Meridio's verbs and no
/// more (NSP: watch ConfigMaps; front ends: watch Secrets); accounts the settings name
/// are the install's, used as they are and never created.
#[test]
fn pods_run_as_the_trenchs_own_accounts_unless_the_settings_name_the_installs() {
    let s = sample();
    let ds = domains(s.objects(), &mut Vec::new());
    let by = |objs: &[Value], kind: &str, n: &str| -> Option<Value> {
        objs.iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == n)
            .cloned()
    };
    let account_of = |objs: &[Value], kind: &str, n: &str| {
        by(objs, kind, n).unwrap()["spec"]["template"]["spec"]["serviceAccountName"].clone()
    };
    let objs = workloads(&ds[0], &Settings::default(), &mut BTreeMap::new());
    assert_eq!(
        account_of(&objs, "StatefulSet", "nsp-trench-a"),
        "meridio-sa-trench-a"
    );
    assert_eq!(
        account_of(&objs, "Deployment", "stateless-lb-frontend-attr1"),
        "meridio-fes-trench-a"
    );
    for (role, resource) in [
        ("meridio-configuration-role-trench-a", "configmaps"),
        ("meridio-fes-role-trench-a", "secrets"),
    ] {
        assert_eq!(
            by(&objs, "Role", role).unwrap()["rules"],
            json!([{"apiGroups": [""], "resources": [resource], "verbs": ["watch"]}]),
            "{role}"
        );
    }
    let binding = by(&objs, "RoleBinding", "meridio-fes-role-binding-trench-a").unwrap();
    assert_eq!(binding["roleRef"]["name"], "meridio-fes-role-trench-a");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "meridio-fes-trench-a", "namespace": "default"}])
    );
    // No token where Meridio mounts none.
    for (kind, n) in [
        ("StatefulSet", "ipam-trench-a"),
        ("DaemonSet", "proxy-conduit-stateless"),
    ] {
        let spec = &by(&objs, kind, n).unwrap()["spec"]["template"]["spec"];
        assert!(spec["serviceAccountName"].is_null(), "{n}");
    }

    let named = Settings {
        nsp_service_account: "meridio-nsp".into(),
        fe_service_account: "meridio-fes".into(),
        ..Settings::default()
    };
    let objs = workloads(&ds[0], &named, &mut BTreeMap::new());
    assert_eq!(
        account_of(&objs, "StatefulSet", "nsp-trench-a"),
        "meridio-nsp"
    );
    assert_eq!(
        account_of(&objs, "Deployment", "stateless-lb-frontend-attr1"),
        "meridio-fes"
    );
    assert!(
        !objs
            .iter()
            .any(|o| ["ServiceAccount", "Role", "RoleBinding"]
                .contains(&o["kind"].as_str().unwrap())),
        "accounts created though the settings name the install's"
    );
}

#[test]
fn a_resource_template_sets_resources_and_an_unknown_one_is_reported() {
    let mut s = sample();
    s.attractors[0].metadata.annotations =
        Some([(RESOURCE_TEMPLATE.to_owned(), "medium".to_owned())].into());
    s.conduits[0].metadata.annotations =
        Some([(RESOURCE_TEMPLATE.to_owned(), "huge".to_owned())].into());
    let ds = domains(s.objects(), &mut Vec::new());
    let mut problems = BTreeMap::new();
    let objs = workloads(&ds[0], &Settings::default(), &mut problems);
    let fe = objs
        .iter()
        .find(|o| o["metadata"]["name"] == "stateless-lb-frontend-attr1")
        .unwrap();
    for c in fe["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
    {
        assert_eq!(c["resources"]["requests"]["cpu"], "200m", "{}", c["name"]);
    }
    assert!(fe["spec"]["template"]["spec"]["initContainers"][0]["resources"].is_null());
    assert_eq!(
        problems.keys().collect::<Vec<_>>(),
        ["Conduit/conduit-stateless"],
        "{problems:?}"
    );
    assert!(problems["Conduit/conduit-stateless"][0].contains("\"huge\""));
}

/// Meridio's `network-attachment` interface type: Multus gives the front ends their
/// interface (the pod annotation), so there is no NSM VLAN endpoint and no NSM client,
/// and the frontend speaks on the attachment's interface.
#[test]
fn a_network_attachment_attractor_gets_multus_instead_of_an_nsm_vlan() {
    let mut s = sample();
    s.attractors[0].spec.interface.vlan_id = None;
    s.attractors[0].spec.interface.link = s.attractors[0].spec.interface.name.clone();
    s.attractors[0].spec.interface.network_attachments = vec![
        serde_json::from_value(
            json!({"name": "vlan-100", "namespace": "net", "interface": "ext0"}),
        )
        .unwrap(),
    ];
    let ds = domains(s.objects(), &mut Vec::new());
    let objs = workloads(&ds[0], &Settings::default(), &mut BTreeMap::new());
    let names: Vec<String> = objs
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with("nse-vlan-")),
        "{names:?}"
    );
    let fe = objs
        .iter()
        .find(|o| o["metadata"]["name"] == "stateless-lb-frontend-attr1")
        .unwrap();
    let pod = &fe["spec"]["template"];
    let networks: Value = serde_json::from_str(
        pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        networks,
        json!([{"name": "vlan-100", "namespace": "net", "interface": "ext0"}])
    );
    let containers: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(containers, ["stateless-lb", "frontend"]);
    let frontend = &pod["spec"]["containers"][1];
    let ext = frontend["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "NFE_EXTERNAL_INTERFACE")
        .unwrap();
    assert_eq!(ext["value"], "ext0");
}
