//! Probation and the last good config: a revision the agent has not seen pass is
//! probed (the API server, the spec's `probes`) until they pass or `rollbackSeconds` run
//! out; the last revision that passed is kept in `--state-file` to roll back to.

use std::time::{Duration, Instant};

use netpolicy_core::{model::RoutingConfig, spec::RoutingSpec};
use tracing::{info, warn};

use super::{Ctx, Failure};

use crate::api::{
    NodeNetworkConfig, NodeNetworkConfigStatus,
    conditions::{self},
};

/// The state file's content: the last revision that passed and its items, and the node
/// it passed on (files written before 0.2 name none).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct LastGood {
    revision: String,
    spec: RoutingSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    node: Option<String>,
}

/// The last good config kept by an earlier run; nothing when there is no file yet, and
/// nothing (with a warning) when it cannot be read or is not valid.
/// A file another node wrote (a state directory on shared storage, a disk moved to
/// another machine) is not this node's last good config: ignored, with a warning.
pub(super) fn load_last_good(
    path: &std::path::Path,
    node: &str,
) -> Option<(String, RoutingConfig)> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            warn!(path = %path.display(), error = %e, "cannot read the state file; ignoring it");
            return None;
        }
    };
    let parsed = serde_json::from_str::<LastGood>(&text)
        .map_err(|e| e.to_string())
        .and_then(|l| match l.node.as_deref() {
            Some(other) if other != node => Err(format!(
                "it is node {other}'s last good config, not this node's ({node})"
            )),
            _ => Ok(l),
        })
        .and_then(|l| {
            l.spec
                .validate("spec")
                .map(|c| (l.revision, c))
                .map_err(|e| e.to_string())
        });
    match parsed {
        Ok((revision, config)) => {
            info!(revision, path = %path.display(), "last good config from the state file");
            Some((revision, config))
        }
        Err(e) => {
            warn!(path = %path.display(), error = %e, "invalid state file; ignoring it");
            None
        }
    }
}

/// Writes the state file whole or not at all (a temporary file beside it, synced, then
/// renamed over it).
pub(super) fn save_last_good(
    path: &std::path::Path,
    node: &str,
    revision: &str,
    spec: &RoutingSpec,
) -> std::io::Result<()> {
    use std::io::Write;
    let body = serde_json::to_vec(&LastGood {
        revision: revision.to_owned(),
        spec: spec.clone(),
        node: Some(node.to_owned()),
    })
    .map_err(std::io::Error::other)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&body)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Seconds to wait for one probe or the API server.
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The failure the status records for `revision` (a restarted agent does not apply it
/// again either).
pub(super) fn failure_in_status(
    status: &NodeNetworkConfigStatus,
    revision: &str,
) -> Option<Failure> {
    if status.failed_revision.as_deref() != Some(revision) {
        return None;
    }
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::DEGRADED && c.status == conditions::TRUE);
    Some(Failure {
        revision: revision.to_owned(),
        reason: match c.map(|c| c.reason.as_str()) {
            Some(conditions::degraded::API_SERVER_UNREACHABLE) => {
                conditions::degraded::API_SERVER_UNREACHABLE
            }
            _ => conditions::degraded::PROBE_FAILED,
        },
        message: c.map(|c| c.message.clone()).unwrap_or_default(),
    })
}

pub(super) fn rollback_seconds(nnc: &NodeNetworkConfig) -> u32 {
    nnc.spec
        .rollback_seconds
        .unwrap_or(netpolicy_core::rollout::DEFAULT_ROLLBACK_SECONDS)
}

/// Runs the probes (the API server first) until they all pass or `rollbackSeconds`
/// run out. Returns how long it took, or the reason and the last failure.
pub(super) async fn probation(
    ctx: &Ctx,
    nnc: &NodeNetworkConfig,
) -> std::result::Result<Duration, (&'static str, String)> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(u64::from(rollback_seconds(nnc)));
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let failure = match probe_all(ctx, &nnc.spec.probes, left.min(PROBE_TIMEOUT)).await {
            Ok(()) => return Ok(start.elapsed()),
            Err(f) => f,
        };
        if Instant::now() >= deadline {
            return Err(failure);
        }
        tokio::time::sleep(Duration::from_millis(500).min(left)).await;
    }
}

/// Every probe once: each of the spec's in the programmed namespace, then the API
/// server (the agent's own connection).
pub(super) async fn probe_all(
    ctx: &Ctx,
    probes: &[crate::api::ProbeSpec],
    timeout: Duration,
) -> std::result::Result<(), (&'static str, String)> {
    use conditions::degraded::{API_SERVER_UNREACHABLE, PROBE_FAILED};
    let timeout = timeout.max(Duration::from_millis(100));
    for p in probes {
        let ns = ctx.ns.clone();
        let result = match (&p.ping, &p.tcp) {
            (Some(ip), _) => match ip.parse::<std::net::IpAddr>() {
                Ok(ip) => tokio::task::spawn_blocking(move || {
                    netpolicy_netlink::probe::ping(&ns, ip, timeout)
                })
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string()))),
                Err(_) => Err(std::io::Error::other("not an IP address")),
            },
            (None, Some(hp)) => match tokio::net::lookup_host(hp.as_str()).await {
                Ok(mut addrs) => match addrs.next() {
                    Some(addr) => tokio::task::spawn_blocking(move || {
                        netpolicy_netlink::probe::tcp(&ns, addr, timeout)
                    })
                    .await
                    .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string()))),
                    None => Err(std::io::Error::other("the name has no address")),
                },
                Err(e) => Err(e),
            },
            (None, None) => Ok(()),
        };
        if let Err(e) = result {
            return Err((PROBE_FAILED, format!("probe {p} failed ({e})")));
        }
    }
    // The API server last: a pass means it answered after every probe did.
    match tokio::time::timeout(timeout, ctx.client.apiserver_version()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            return Err((
                API_SERVER_UNREACHABLE,
                format!("the API server did not answer: {e}"),
            ));
        }
        Err(_) => {
            return Err((
                API_SERVER_UNREACHABLE,
                format!("the API server did not answer within {timeout:?}"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RoutingSpec {
        serde_json::from_value(serde_json::json!({
            "routes": [{"to": "10.20.0.0/16", "via": "192.0.2.1"}]
        }))
        .unwrap()
    }

    #[test]
    fn the_state_file_is_this_nodes_or_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("last-good.json");
        save_last_good(&path, "node-a", "r1", &spec()).unwrap();
        let (revision, config) = load_last_good(&path, "node-a").expect("node-a's own file");
        assert_eq!(revision, "r1");
        assert_eq!(config.routes.len(), 1);
        // Another node reading it (shared storage, a moved disk) takes nothing.
        assert!(load_last_good(&path, "node-b").is_none());
        // A file from before files named their node is taken.
        std::fs::write(
            &path,
            r#"{"revision":"r0","spec":{"routes":[{"to":"10.20.0.0/16","via":"192.0.2.1"}]}}"#,
        )
        .unwrap();
        assert_eq!(
            load_last_good(&path, "node-b").map(|l| l.0).as_deref(),
            Some("r0")
        );
    }
}
