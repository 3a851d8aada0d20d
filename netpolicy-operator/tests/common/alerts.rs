//! The alert rules (deploy/prometheus-rules.yaml) against what a real operator and
//! agent serve on /metrics: promtool lints the exposition, every series a rule reads
//! exists, and over a healthy scrape no alert fires.

use std::{
    collections::BTreeSet,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// Debian's `promtool` (package `prometheus`, installed by scripts/test); `None` with a
/// SKIP line when it is not installed.
pub(crate) fn promtool() -> Option<PathBuf> {
    let found = on_path("promtool");
    if found.is_none() {
        super::skip(
            "the alert rules against a real scrape: promtool is not installed (Debian's prometheus package)",
        );
    }
    found
}

/// `name` in a directory of `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Debian's `prometheus` server (package `prometheus`); `None` with a SKIP line when it
/// is not installed.
pub(crate) fn prometheus() -> Option<PathBuf> {
    let found = on_path("prometheus");
    if found.is_none() {
        super::skip(
            "a real Prometheus scrape: prometheus is not installed (Debian's prometheus package)",
        );
    }
    found
}

/// A Prometheus server as a process (killed when dropped), scraping static targets
/// every second and loading the repository's alert rules.
pub(crate) struct Prometheus {
    _process: super::Killed,
    base: String,
    http: reqwest::Client,
}

impl Prometheus {
    /// Started with `targets` (job, `host:port`), its data and log under `dir`; ready.
    pub(crate) async fn start(bin: &Path, targets: &[(&str, String)], dir: &Path) -> Self {
        let mut scrape = String::new();
        for (job, target) in targets {
            scrape.push_str(&format!(
                "  - job_name: {job}\n    static_configs: [{{targets: [{target:?}]}}]\n"
            ));
        }
        Self::start_with(bin, &scrape, dir).await
    }

    /// Started with `scrape_configs` (YAML list items, indented two spaces).
    pub(crate) async fn start_with(bin: &Path, scrape_configs: &str, dir: &Path) -> Self {
        let port = super::free_port();
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: [{:?}]\nscrape_configs:\n{scrape_configs}",
            rules_file().display().to_string()
        );
        let conf = dir.join("prometheus.yml");
        std::fs::write(&conf, config).unwrap();
        let process = super::Killed(
            Command::new(bin)
                .arg(format!("--config.file={}", conf.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("prometheus-data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(super::appending(&dir.join("prometheus.log")))
                .spawn()
                .unwrap(),
        );
        let p = Self {
            _process: process,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        };
        netpolicy_testenv::eventually("Prometheus ready", 60, || async {
            p.http
                .get(format!("{}/-/ready", p.base))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        p
    }

    /// `GET path` of its HTTP API, as JSON.
    pub(crate) async fn get(&self, path: &str) -> serde_json::Value {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// An instant query's result (`None`: refused, e.g. it does not parse).
    pub(crate) async fn query(&self, expr: &str) -> Option<Vec<serde_json::Value>> {
        let v: serde_json::Value = self
            .http
            .get(format!("{}/api/v1/query", self.base))
            .query(&[("query", expr)])
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (v["status"] == "success")
            .then(|| v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// A range query's result over the last `secs` seconds, a point a second.
    pub(crate) async fn query_range(&self, expr: &str, secs: u64) -> Vec<serde_json::Value> {
        let end = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let (start, end) = ((end - secs).to_string(), end.to_string());
        let v: serde_json::Value = self
            .http
            .get(format!("{}/api/v1/query_range", self.base))
            .query(&[
                ("query", expr),
                ("start", &start),
                ("end", &end),
                ("step", "1"),
            ])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Every value of a label (`__name__`: every metric name stored).
    pub(crate) async fn label_values(&self, label: &str) -> Vec<String> {
        self.get(&format!("/api/v1/label/{label}/values")).await["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Its version (`/api/v1/status/buildinfo`).
    pub(crate) async fn version(&self) -> String {
        self.get("/api/v1/status/buildinfo").await["data"]["version"]
            .as_str()
            .unwrap_or("?")
            .to_owned()
    }
}

/// The repository's alert rules file.
pub(crate) fn rules_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus-rules.yaml")
}

/// One scrape: the `job` and `instance` labels Prometheus would add, and the body.
pub(crate) struct Scrape<'a> {
    pub(crate) job: &'a str,
    pub(crate) instance: &'a str,
    pub(crate) body: &'a str,
}

/// OpenMetrics (what /metrics serves) as Prometheus' text format 0.0.4, the one
/// `promtool check metrics` lints: a counter's family is named with its `_total`
/// suffix there, and there is no `# EOF` or `# UNIT`.
pub(crate) fn as_text_format(openmetrics: &str) -> String {
    let counters: BTreeSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::new();
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if counters.contains(name) {
                    out.push_str(&format!("{p}{name}_total {tail}\n"));
                } else {
                    out.push_str(line);
                    out.push('\n');
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Every sample of `body`: (`name{labels}` with `job` and `instance` added, value).
fn samples(s: &Scrape<'_>) -> Vec<(String, String)> {
    s.body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let extra = format!("job=\"{}\",instance=\"{}\"", s.job, s.instance);
            let series = match series.split_once('{') {
                Some((name, labels)) => format!("{name}{{{extra},{labels}"),
                None => format!("{series}{{{extra}}}"),
            };
            Some((series, value.to_owned()))
        })
        .collect()
}

/// The metric names the rules read (`netpolicy_…` in every `expr`).
fn names_in_rules(rules: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in rules.lines() {
        let mut rest = line;
        while let Some(i) = rest.find("netpolicy_") {
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            // Not a word inside another (a runbook anchor is lower case without `_`).
            let before = rest[..i].chars().last();
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '#') {
                out.insert(tail[..end].to_owned());
            }
            rest = &tail[end..];
        }
    }
    out
}

/// The checks a real scrape passes (panics naming what failed):
/// - `promtool check metrics` finds nothing to lint in any body;
/// - every metric a rule reads is one the scrapes serve (a family with its HELP and
///   TYPE), but those `unserved` names with why: a per-object family of a kind the
///   cluster has no object of (prometheus-client serves a family with no series not at
///   all);
/// - `promtool test rules` over the scrapes' samples held for 70 minutes: no alert fires.
pub(crate) fn check(
    promtool: &Path,
    scrapes: &[Scrape<'_>],
    unserved: &[(&str, &str)],
    dir: &Path,
) {
    for s in scrapes {
        let mut child = Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(as_text_format(s.body).as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool check metrics on {}'s /metrics: {}{}",
            s.job,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rules = std::fs::read_to_string(rules_file()).unwrap();
    let served: BTreeSet<String> = scrapes
        .iter()
        .flat_map(|s| {
            as_text_format(s.body)
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter_map(|l| Some(l.strip_prefix("# TYPE ")?.split(' ').next()?.to_owned()))
        .collect();
    let missing: Vec<String> = names_in_rules(&rules)
        .into_iter()
        .filter(|n| !served.contains(n) && !unserved.iter().any(|(u, _)| u == n))
        .collect();
    for (name, why) in unserved {
        assert!(
            !served.contains(*name),
            "{name} is served now: take it off the unserved list ({why})"
        );
        println!("not in this scrape: {name} ({why})");
    }
    assert!(
        missing.is_empty(),
        "the alert rules read metrics /metrics does not serve: {missing:?} (served: {served:?})"
    );
    // The healthy scrape held for 70 minutes: every alert evaluated at its end.
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    let mut test = String::from(
        "rule_files:\n  - rules.yaml\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n",
    );
    let mut n = 0;
    for s in scrapes {
        for (series, value) in samples(s) {
            test.push_str(&format!(
                "      - series: '{}'\n        values: '{value}x70'\n",
                series.replace('\'', "''")
            ));
            n += 1;
        }
    }
    test.push_str("    alert_rule_test:\n");
    for a in &alerts {
        test.push_str(&format!(
            "      - eval_time: 70m\n        alertname: {a}\n        exp_alerts: []\n"
        ));
    }
    std::fs::copy(rules_file(), dir.join("rules.yaml")).unwrap();
    let file = dir.join("healthy.test.yaml");
    std::fs::write(&file, &test).unwrap();
    let out = Command::new(promtool)
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "an alert fires over a healthy scrape ({n} series, {}): {}{}",
        file.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "alert rules over a real scrape: {} alerts silent over {n} series; of the {} metrics the rules read, {} served; promtool check metrics clean",
        alerts.len(),
        names_in_rules(&rules).len(),
        names_in_rules(&rules).len() - unserved.len()
    );
}
