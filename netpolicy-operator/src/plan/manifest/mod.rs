//! Reading Kubernetes manifests from disk: files or directories of multi-document YAML.
//!
//! Every document is located (file and first line), its `apiVersion`/`kind` read first,
//! then the whole document is deserialized into its kind. Problems are reported with
//! file and line: malformed YAML and documents that do not fit their kind are errors of
//! the input; unknown kinds are warnings and are skipped. netpolicy kinds are also
//! checked strictly against their CRD schema, so a misspelt field
//! (`spec.routes[0].gatway`) is an error instead of being silently dropped.

pub mod schema;
pub mod yaml;

use std::{
    fmt, fs,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use k8s_openapi::{
    api::core::v1::{Namespace, Node},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::Resource;
use serde::{Deserialize, de::DeserializeOwned};

use crate::{
    api::{
        API_VERSION, Attractor, ClusterConfig, Conduit, FloatingIP, FloatingIPRange, Flow, Gateway,
        NodeConfig, NodeNetworkConfig, RouteReflectorConfig, RoutedIP, RoutedIPIssuer, Stream,
        Trench, Vip,
    },
    route_reflector::CalicoBgpPeer,
};

/// Where a document starts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Origin {
    /// The file.
    pub file: PathBuf,
    /// 1-based line of the document's first line.
    pub line: u64,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// An object read from disk, with where it was found.
#[derive(Debug, Clone)]
pub struct Located<T> {
    /// The object.
    pub object: T,
    /// Where its document starts.
    pub origin: Origin,
}

pub use crate::k8s::InputError;

/// Failures that stop reading altogether (the CLI exits 2 for them).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A path could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A directory held no YAML files, or a path is neither file nor directory.
    #[error("{}: no YAML files (*.yaml, *.yml) found", path.display())]
    NoManifests {
        /// The path.
        path: PathBuf,
    },
}

/// Everything read from the input.
#[derive(Debug, Default)]
pub struct Manifests {
    /// core/v1 Nodes.
    pub nodes: Vec<Located<Node>>,
    /// core/v1 Namespaces.
    pub namespaces: Vec<Located<Namespace>>,
    /// core/v1 Services (kube-vip's `vipHost` on a LoadBalancer Service says which node
    /// announces a FloatingIP: return routing).
    pub services: Vec<Located<k8s_openapi::api::core::v1::Service>>,
    /// ClusterConfigs.
    pub cluster_configs: Vec<Located<ClusterConfig>>,
    /// NodeConfigs.
    pub node_configs: Vec<Located<NodeConfig>>,
    /// FloatingIPRanges.
    pub floating_ip_ranges: Vec<Located<FloatingIPRange>>,
    /// FloatingIPs.
    pub floating_ips: Vec<Located<FloatingIP>>,
    /// RouteReflectorConfigs.
    pub route_reflector_configs: Vec<Located<RouteReflectorConfig>>,
    /// RoutedIPIssuers.
    pub routed_ip_issuers: Vec<Located<RoutedIPIssuer>>,
    /// RoutedIPs.
    pub routed_ips: Vec<Located<RoutedIP>>,
    /// Trenches.
    pub trenches: Vec<Located<Trench>>,
    /// Attractors.
    pub attractors: Vec<Located<Attractor>>,
    /// Gateways.
    pub gateways: Vec<Located<Gateway>>,
    /// Vips.
    pub vips: Vec<Located<Vip>>,
    /// Conduits.
    pub conduits: Vec<Located<Conduit>>,
    /// Streams.
    pub streams: Vec<Located<Stream>>,
    /// Flows.
    pub flows: Vec<Located<Flow>>,
    /// Calico BGPPeers (`crd.projectcalico.org/v1` or `projectcalico.org/v3`).
    pub bgp_peers: Vec<Located<CalicoBgpPeer>>,
    /// Rancher's `provisioning.cattle.io/v1` Clusters (guest discovery `rancher`; their
    /// `status.clusterName` names the guest's namespace).
    pub rancher_clusters: Vec<Located<kube::core::DynamicObject>>,
    /// Problems with documents (the rest of the input is still used).
    pub errors: Vec<InputError>,
    /// Things skipped on purpose (unknown kinds), for a person to read; `field` is
    /// the document's `file:line`.
    pub warnings: Vec<InputError>,
    /// Every object used, by (kind, namespace, name), with where it was read: a second
    /// definition is an error naming both places, whatever the kind.
    seen: std::collections::HashMap<(String, String, String), Origin>,
}

/// The kinds `plan` reads that live in a namespace (an object without
/// `metadata.namespace` is in `default`, as `kubectl apply` puts it).
fn namespaced(kind: &str) -> bool {
    crate::k8s::traffic::TRAFFIC_KINDS.contains(&kind)
        || ["Service", "FloatingIP", "Cluster"].contains(&kind)
}

/// Reads every path: a file, or a directory whose `*.yaml`/`*.yml` files are read in
/// name order (recursively).
///
/// # Errors
/// [`LoadError`] when a path cannot be read; problems *inside* documents are collected
/// in [`Manifests::errors`] instead.
pub fn load(paths: &[PathBuf]) -> Result<Manifests, LoadError> {
    let mut files = Vec::new();
    let mut seen = Seen::default();
    for p in paths {
        collect_files(p, &mut files, &mut seen)?;
    }
    let mut m = Manifests::default();
    for f in files {
        let text = fs::read_to_string(&f).map_err(|source| LoadError::Io {
            path: f.clone(),
            source,
        })?;
        m.add_text(&f, &text);
    }
    Ok(m)
}

/// Directories and files already read, by their real (canonical) path: a file reached
/// twice (through a symbolic link, or named twice) is read once, and a directory is
/// never entered again (a link to `.` or to an ancestor would otherwise loop).
#[derive(Default)]
struct Seen {
    dirs: std::collections::HashSet<PathBuf>,
    files: std::collections::HashSet<PathBuf>,
}

impl Seen {
    fn first_time(
        set: &mut std::collections::HashSet<PathBuf>,
        p: &Path,
    ) -> Result<bool, LoadError> {
        let real = fs::canonicalize(p).map_err(|source| LoadError::Io {
            path: p.to_owned(),
            source,
        })?;
        Ok(set.insert(real))
    }
}

fn collect_files(p: &Path, out: &mut Vec<PathBuf>, seen: &mut Seen) -> Result<(), LoadError> {
    let meta = fs::metadata(p).map_err(|source| LoadError::Io {
        path: p.to_owned(),
        source,
    })?;
    if meta.is_file() {
        if Seen::first_time(&mut seen.files, p)? {
            out.push(p.to_owned());
        }
        return Ok(());
    }
    if !meta.is_dir() {
        return Err(LoadError::NoManifests { path: p.to_owned() });
    }
    let before = out.len();
    let fresh = Seen::first_time(&mut seen.dirs, p)?;
    if fresh {
        walk(p, out, seen)?;
    }
    if out.len() == before && fresh {
        return Err(LoadError::NoManifests { path: p.to_owned() });
    }
    Ok(())
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>, seen: &mut Seen) -> Result<(), LoadError> {
    let io = |source| LoadError::Io {
        path: dir.to_owned(),
        source,
    };
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for e in entries {
        if e.is_dir() {
            if Seen::first_time(&mut seen.dirs, &e)? {
                walk(&e, out, seen)?;
            }
        } else if e.extension().is_some_and(|x| x == "yaml" || x == "yml")
            && Seen::first_time(&mut seen.files, &e)?
        {
            out.push(e);
        }
    }
    Ok(())
}

/// Splits a YAML stream into documents: `(first line, text)`. A line that starts with
/// `---` or is `...` separates documents; empty and comment-only documents are dropped.
pub fn split_documents(text: &str) -> Vec<(u64, String)> {
    let mut docs = Vec::new();
    let mut cur = String::new();
    let mut start = 1u64;
    let push = |start: u64, cur: &mut String, docs: &mut Vec<(u64, String)>| {
        let meaningful = cur.lines().any(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#') && !t.starts_with('%')
        });
        if meaningful {
            docs.push((start, std::mem::take(cur)));
        } else {
            cur.clear();
        }
    };
    for (i, line) in text.lines().enumerate() {
        let n = i as u64 + 1;
        let is_start = line == "---" || line.starts_with("--- ") || line.starts_with("---\t");
        if is_start || line == "..." {
            push(start, &mut cur, &mut docs);
            start = n + 1;
            if let Some(rest) = line.strip_prefix("---").filter(|r| !r.trim().is_empty()) {
                // Content on the marker line belongs to the new document.
                start = n;
                cur.push_str(rest.trim_start());
                cur.push('\n');
            }
            continue;
        }
        if cur.is_empty() && line.trim().is_empty() {
            start = n + 1;
            continue;
        }
        cur.push_str(line);
        cur.push('\n');
    }
    push(start, &mut cur, &mut docs);
    docs
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Head {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: HeadMeta,
}

#[derive(Deserialize, Default)]
struct HeadMeta {
    #[serde(default)]
    name: String,
}

/// `file:line:column: message` for a YAML error in a document starting at `origin`.
fn yaml_error(origin: &Origin, err: &serde_saphyr::Error) -> (String, String) {
    let inner = err.without_snippet();
    let (line, col) = inner.location().map_or((origin.line, 1), |l| {
        (origin.line + l.line().saturating_sub(1), l.column())
    });
    let mut message = inner.to_string();
    // The parser's own position is relative to the document; ours is in the file.
    if let Some(at) = message.find(" at line ") {
        message.truncate(at);
    }
    (format!("{}:{line}:{col}", origin.file.display()), message)
}

impl Manifests {
    /// Adds every document of one file's text.
    pub fn add_text(&mut self, file: &Path, text: &str) {
        for (line, doc) in split_documents(text) {
            let origin = Origin {
                file: file.to_owned(),
                line,
            };
            self.add_document(origin, &doc);
        }
    }

    fn add_document(&mut self, origin: Origin, doc: &str) {
        let tree = match yaml::parse(doc) {
            Ok(t) => t,
            Err(e) => {
                let (field, message) = yaml_error(&origin, &e);
                let (kind, name) = guess_head(doc);
                let message = if message.contains("budget") || message.contains("limit") {
                    format!(
                        "the document is over a parser limit (these stop alias bombs and \
                         runaway documents; a NodeConfig with 50,000 routes is well within \
                         them): {message}"
                    )
                } else if serde_saphyr::from_str::<serde_json::Value>(doc).is_ok() {
                    format!("not a Kubernetes object: {message}")
                } else {
                    format!("malformed YAML: {message}")
                };
                self.errors.push(InputError {
                    kind,
                    name,
                    field,
                    message,
                });
                return;
            }
        };
        self.add_tree(origin, &tree);
    }

    /// Adds one parsed object (a document, or an item of a `List` document).
    fn add_tree(&mut self, origin: Origin, tree: &yaml::Node) {
        let text = |k: &str| tree.get(k).and_then(|n| n.as_str()).unwrap_or_default();
        // `kubectl get -o yaml` exports a `List` (apiVersion v1, any kind ending in
        // `List`): its items are the objects, each read as its own document (its lines
        // counted from the List's start).
        if text("apiVersion") == "v1" && text("kind").ends_with("List") {
            if let Some(yaml::Node {
                value: yaml::Value::Seq(items),
                ..
            }) = tree.get("items")
            {
                for item in items {
                    self.add_tree(origin.clone(), item);
                }
            }
            return;
        }
        let head = Head {
            api_version: text("apiVersion").to_owned(),
            kind: text("kind").to_owned(),
            metadata: HeadMeta {
                name: tree
                    .get("metadata")
                    .and_then(|m| m.get("name"))
                    .and_then(|n| n.as_str())
                    .unwrap_or_default()
                    .to_owned(),
            },
        };
        let input_error = |field: String, message: String| InputError {
            kind: head.kind.clone(),
            name: head.metadata.name.clone(),
            field,
            message,
        };
        if !matches!(tree.value, yaml::Value::Map(_)) {
            self.errors.push(input_error(
                origin.to_string(),
                "not a Kubernetes object (a mapping with apiVersion, kind and metadata)".into(),
            ));
            return;
        }
        if head.kind.is_empty() || head.api_version.is_empty() {
            self.errors.push(input_error(
                origin.to_string(),
                "document has no apiVersion or kind; is this a Kubernetes manifest?".into(),
            ));
            return;
        }
        let d = Doc {
            origin,
            tree,
            head: &head,
        };
        match (head.api_version.as_str(), head.kind.as_str()) {
            ("v1", "Node") => self.parse_into(&d, None, false, |m| &mut m.nodes),
            ("v1", "Namespace") => self.parse_into(&d, None, true, |m| &mut m.namespaces),
            ("v1", "Service") => self.parse_into(&d, None, false, |m| &mut m.services),
            (API_VERSION, "ClusterConfig") => {
                self.parse_into(&d, crd("ClusterConfig"), false, |m| &mut m.cluster_configs)
            }
            (API_VERSION, "NodeConfig") => {
                self.parse_into(&d, crd("NodeConfig"), false, |m| &mut m.node_configs)
            }
            (API_VERSION, "FloatingIPRange") => {
                self.parse_into(&d, crd("FloatingIPRange"), false, |m| {
                    &mut m.floating_ip_ranges
                })
            }
            (API_VERSION, "FloatingIP") => {
                self.parse_into(&d, crd("FloatingIP"), false, |m| &mut m.floating_ips)
            }
            (API_VERSION, "RouteReflectorConfig") => {
                self.parse_into(&d, crd("RouteReflectorConfig"), false, |m| {
                    &mut m.route_reflector_configs
                })
            }
            (API_VERSION, "RoutedIPIssuer") => {
                self.parse_into(&d, crd("RoutedIPIssuer"), false, |m| {
                    &mut m.routed_ip_issuers
                })
            }
            (API_VERSION, "RoutedIP") => {
                self.parse_into(&d, crd("RoutedIP"), false, |m| &mut m.routed_ips)
            }
            (API_VERSION, "Trench") => {
                self.parse_into(&d, crd("Trench"), false, |m| &mut m.trenches)
            }
            (API_VERSION, "Attractor") => {
                self.parse_into(&d, crd("Attractor"), false, |m| &mut m.attractors)
            }
            (API_VERSION, "Gateway") => {
                self.parse_into(&d, crd("Gateway"), false, |m| &mut m.gateways)
            }
            (API_VERSION, "Vip") => self.parse_into(&d, crd("Vip"), false, |m| &mut m.vips),
            (API_VERSION, "Conduit") => {
                self.parse_into(&d, crd("Conduit"), false, |m| &mut m.conduits)
            }
            (API_VERSION, "Stream") => {
                self.parse_into(&d, crd("Stream"), false, |m| &mut m.streams)
            }
            (API_VERSION, "Flow") => self.parse_into(&d, crd("Flow"), false, |m| &mut m.flows),
            ("crd.projectcalico.org/v1" | "projectcalico.org/v3", "BGPPeer") => {
                self.parse_into(&d, None, false, |m| &mut m.bgp_peers)
            }
            ("provisioning.cattle.io/v1", "Cluster") => {
                self.parse_into(&d, None, false, |m| &mut m.rancher_clusters)
            }
            (API_VERSION, "NodeNetworkConfig") => self.warnings.push(input_error(
                d.origin.to_string(),
                "ignored: a NodeNetworkConfig is output, rendered by the operator".into(),
            )),
            (v, k) if v.starts_with("netpolicy.io/") => self.errors.push(input_error(
                "apiVersion".into(),
                format!(
                    "{k} in {v} is not a kind this netpolicy knows (it reads {} kinds)",
                    NodeNetworkConfig::api_version(&())
                ),
            )),
            (v, k) => self.warnings.push(input_error(
                d.origin.to_string(),
                format!("ignored: {k} ({v}) is not a kind netpolicy plan reads"),
            )),
        }
    }

    /// Checks one document of a known kind (every problem at once: duplicate keys,
    /// names and labels, the CRD schema for netpolicy kinds), then deserializes it. An
    /// object with problems is not used: it selects nothing, allocates nothing.
    fn parse_into<T: DeserializeOwned>(
        &mut self,
        d: &Doc<'_>,
        crd: Option<&CustomResourceDefinition>,
        label_name: bool,
        list: impl FnOnce(&mut Self) -> &mut Vec<Located<T>>,
    ) {
        let mut problems = Vec::new();
        schema::duplicates(d.tree, "", &mut problems);
        schema::check_metadata(d.tree, label_name, &mut problems);
        if let Some(crd) = crd {
            let spec_schema = crd
                .spec
                .versions
                .first()
                .and_then(|v| v.schema.as_ref())
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .and_then(|s| s.properties.as_ref())
                .and_then(|p| p.get("spec"));
            if let (Some(schema), Some(spec)) = (spec_schema, d.tree.get("spec")) {
                schema::check(schema, spec, "spec", &mut problems);
            }
        }
        let error = |field: String, message: String| InputError {
            kind: d.head.kind.clone(),
            name: d.head.metadata.name.clone(),
            field,
            message,
        };
        if !problems.is_empty() {
            let bad: Vec<(String, Option<serde_json::Value>)> = problems
                .iter()
                .map(|p| (p.path.clone(), p.stand_in.clone()))
                .collect();
            for p in problems {
                let at = format!(
                    "{}:{}:{}",
                    d.origin.file.display(),
                    d.origin.line + p.line.saturating_sub(1),
                    p.column
                );
                self.errors
                    .push(error(p.path, format!("{} ({at})", p.message)));
            }
            // The object is not used; its other problems are still worth knowing now
            // rather than after the next fix: the rules on the whole object (the CRDs'
            // rule on metadata.name) and the routing rules.
            if let Some(message) = name_rule(&d.head.kind, &d.head.metadata.name) {
                self.errors.push(error("metadata.name".into(), message));
            }
            for (path, message) in routing_problems_besides(d, &bad) {
                self.errors.push(error(path, message));
            }
            return;
        }
        if d.head.metadata.name.is_empty() {
            self.errors.push(error(
                "metadata.name".into(),
                format!("{}: {} has no name", d.origin, d.head.kind),
            ));
            return;
        }
        let json = d.tree.to_json();
        // The API server would refuse it (etcd's request limit): `kubectl apply` fails.
        let bytes = serde_json::to_vec(&json).map_or(0, |v| v.len());
        if bytes > crate::k8s::DEFAULT_MAX_OBJECT_BYTES {
            self.errors.push(error(
                "spec".into(),
                format!(
                    "TooLarge: {bytes} bytes, over the {} an object may have \
                     (--max-object-bytes; etcd's default request limit is 1.5 MiB): the API \
                     server would refuse it, `kubectl apply` fails ({}); the plan below \
                     shows what it would do if it were stored",
                    crate::k8s::DEFAULT_MAX_OBJECT_BYTES,
                    d.origin
                ),
            ));
        }
        let namespace = if namespaced(&d.head.kind) {
            let ns = d
                .tree
                .get("metadata")
                .and_then(|m| m.get("namespace"))
                .and_then(|n| n.as_str())
                .unwrap_or_default();
            if ns.is_empty() { "default" } else { ns }.to_owned()
        } else {
            String::new()
        };
        let key = (
            d.head.kind.clone(),
            namespace.clone(),
            d.head.metadata.name.clone(),
        );
        if let Some(first) = self.seen.get(&key) {
            let name = if namespace.is_empty() {
                d.head.metadata.name.clone()
            } else {
                format!("{namespace}/{}", d.head.metadata.name)
            };
            let message = format!(
                "defined twice: at {first} and at {}; the second is ignored",
                d.origin
            );
            self.errors.push(InputError {
                kind: d.head.kind.clone(),
                name,
                field: "metadata.name".into(),
                message,
            });
            return;
        }
        let object: T = match serde_path_to_error::deserialize(json) {
            Ok(o) => o,
            Err(e) => {
                self.errors.push(error(
                    e.path().to_string(),
                    format!(
                        "does not fit the {} schema: {} ({})",
                        d.head.kind,
                        e.inner(),
                        d.origin
                    ),
                ));
                return;
            }
        };
        self.seen.insert(key, d.origin.clone());
        list(self).push(Located {
            object,
            origin: d.origin.clone(),
        });
    }
}

/// For a ClusterConfig or NodeConfig with schema problems at `bad`: the routing
/// validation's problems of the rest of the object (the fields at `bad` left out, and
/// nothing reported again at or under them).
/// The CRDs' rule on `metadata.name` (a ClusterConfig and a RouteReflectorConfig are
/// singletons named `default`), checked here when the object's schema problems keep it
/// from the passes that check it otherwise.
fn name_rule(kind: &str, name: &str) -> Option<String> {
    let singleton = matches!(kind, "ClusterConfig" | "RouteReflectorConfig");
    (singleton && name != "default").then(|| {
        format!("a {kind} must be named \"default\" (there is only one); this one is ignored")
    })
}

fn routing_problems_besides(
    d: &Doc<'_>,
    bad: &[(String, Option<serde_json::Value>)],
) -> Vec<(String, String)> {
    if !matches!(d.head.kind.as_str(), "ClusterConfig" | "NodeConfig") {
        return Vec::new();
    }
    let under = |path: &str| {
        bad.iter().any(|(b, _)| {
            path == b
                || path.starts_with(&format!("{b}."))
                || path.starts_with(&format!("{b}["))
                || b.starts_with(&format!("{path}."))
                || b.starts_with(&format!("{path}["))
        })
    };
    let mut json = d.tree.to_json();
    for (b, stand_in) in bad {
        replace_path(&mut json, b, stand_in.clone());
    }
    let Some(spec) = json.get("spec") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Ok(routing) = serde_json::from_value::<netpolicy_core::spec::RoutingSpec>(spec.clone())
        && let Err(e) = routing.validate("spec")
    {
        out.extend(
            e.field_errors()
                .iter()
                .map(|f| (f.path.clone(), f.message.clone())),
        );
    }
    if let Some(sel) = spec.get("nodeSelector")
        && let Ok(sel) = serde_json::from_value::<netpolicy_core::spec::LabelSelector>(sel.clone())
        && let Err(e) = sel.validate("spec.nodeSelector")
    {
        out.extend(
            e.field_errors()
                .iter()
                .map(|f| (f.path.clone(), f.message.clone())),
        );
    }
    out.retain(|(p, _)| !under(p));
    out
}

/// Replaces the value at a field path (`spec.routes[2].table`) in `v` by `with`, or
/// removes it when `with` is `None`.
fn replace_path(v: &mut serde_json::Value, path: &str, with: Option<serde_json::Value>) {
    let mut steps: Vec<String> = Vec::new();
    for part in path.split('.') {
        let mut rest = part;
        if let Some(i) = rest.find('[') {
            steps.push(rest[..i].to_owned());
            rest = &rest[i..];
            while let Some(end) = rest.find(']') {
                steps.push(rest[..=end].to_owned());
                rest = &rest[end + 1..];
            }
        } else {
            steps.push(rest.to_owned());
        }
    }
    let Some((last, parents)) = steps.split_last() else {
        return;
    };
    let mut cur = v;
    for s in parents {
        let next = match s.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
            Some(i) => i.parse::<usize>().ok().and_then(|i| cur.get_mut(i)),
            None => cur.get_mut(s.as_str()),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match (
        last.strip_prefix('[').and_then(|x| x.strip_suffix(']')),
        with,
    ) {
        (Some(i), Some(w)) => {
            if let Some(slot) = i.parse::<usize>().ok().and_then(|i| cur.get_mut(i)) {
                *slot = w;
            }
        }
        (Some(_), None) => {}
        (None, Some(w)) => {
            if let Some(m) = cur.as_object_mut() {
                m.insert(last.clone(), w);
            }
        }
        (None, None) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(last.as_str());
            }
        }
    }
}

/// One parsed document and what its head says.
struct Doc<'a> {
    origin: Origin,
    tree: &'a yaml::Node,
    head: &'a Head,
}

/// The kind and name of a document that did not parse, read off its lines (for naming
/// it in the error): a top-level `kind:` and the `name:` under `metadata`.
fn guess_head(doc: &str) -> (String, String) {
    let value = |l: &str, key: &str| {
        l.strip_prefix(key)
            .map(|v| v.trim().trim_matches(['"', '\'']).to_owned())
    };
    let mut kind = String::new();
    let mut name = String::new();
    let mut in_meta = false;
    for l in doc.lines() {
        if let Some(k) = value(l, "kind:") {
            kind = k;
        }
        if let Some(rest) = l.strip_prefix("metadata:") {
            in_meta = true;
            if let Some(i) = rest.find("name:") {
                name = rest[i + 5..]
                    .split([',', '}'])
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .trim_matches(['"', '\''])
                    .to_owned();
            }
            continue;
        }
        if in_meta && !l.starts_with([' ', '\t']) && !l.trim().is_empty() {
            in_meta = false;
        }
        if in_meta
            && name.is_empty()
            && let Some(n) = value(l.trim_start(), "name:")
        {
            name = n;
        }
    }
    (kind, name)
}

/// The CRD of a netpolicy kind, generated once.
fn crd(kind: &str) -> Option<&'static CustomResourceDefinition> {
    static CRDS: OnceLock<Vec<CustomResourceDefinition>> = OnceLock::new();
    CRDS.get_or_init(crate::api::crds)
        .iter()
        .find(|c| c.spec.names.kind == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_split_with_their_first_line() {
        let text = "# c\n---\na: 1\n---\n\n# only a comment\n---\nb: 2\nc: 3\n...\n--- d: 4\n";
        let docs = split_documents(text);
        assert_eq!(
            docs,
            [
                (3, "a: 1\n".to_string()),
                (8, "b: 2\nc: 3\n".to_string()),
                (11, "d: 4\n".to_string())
            ]
        );
    }

    #[test]
    fn malformed_yaml_names_file_and_line() {
        let mut m = Manifests::default();
        m.add_text(
            Path::new("x.yaml"),
            "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Node\nmetadata:\n  name: [b\n",
        );
        assert_eq!(m.nodes.len(), 1);
        assert_eq!(m.errors.len(), 1);
        assert!(m.errors[0].field.starts_with("x.yaml:8:"), "{:?}", m.errors);
        assert!(
            m.errors[0].message.starts_with("malformed YAML"),
            "{:?}",
            m.errors
        );
    }

    #[test]
    fn well_formed_yaml_that_is_not_an_object_is_said_so() {
        let mut m = Manifests::default();
        m.add_text(Path::new("x.yaml"), "- a\n- b\n");
        assert!(
            m.errors[0].message.starts_with("not a Kubernetes object"),
            "{:?}",
            m.errors
        );
        let mut m = Manifests::default();
        m.add_text(
            Path::new("x.yaml"),
            "apiVersion: netpolicy.io/v1alpha1\nkind: NodeConfig\nmetadata: {name: a}\nspec:\n  priority: high\n",
        );
        // A value of the wrong type names the field, and the place in the file.
        assert_eq!(m.errors[0].field, "spec.priority");
        assert_eq!(
            m.errors[0].message,
            "expected an integer, got the string \"high\" (x.yaml:5:13)"
        );
        assert_eq!(
            (m.errors[0].kind.as_str(), m.errors[0].name.as_str()),
            ("NodeConfig", "a")
        );
    }

    #[test]
    fn misspelt_fields_of_netpolicy_kinds_are_errors() {
        let mut m = Manifests::default();
        m.add_text(
            Path::new("x.yaml"),
            "apiVersion: netpolicy.io/v1alpha1\nkind: NodeConfig\nmetadata: {name: a}\nspec:\n  routes:\n  - to: 10.0.0.0/8\n    gatway: 10.1.1.1\n",
        );
        assert_eq!(m.errors.len(), 1, "{:?}", m.errors);
        assert_eq!(m.errors[0].field, "spec.routes[0].gatway");
        assert!(
            m.errors[0].message.contains("via"),
            "{}",
            m.errors[0].message
        );
    }

    #[test]
    fn unknown_kinds_are_warnings() {
        let mut m = Manifests::default();
        m.add_text(
            Path::new("x.yaml"),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
        );
        assert!(m.errors.is_empty());
        assert_eq!(m.warnings.len(), 1);
        assert_eq!(m.warnings[0].kind, "Deployment");
    }
}
