//! The operator's and the agent's errors: what failed (`what`, for people) and the
//! underlying error as the `source`, so callers can inspect it and log the whole chain
//! ([`Chain`]).

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the operator or the agent could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes call failed.
    #[error("{what}")]
    Kube {
        /// What was being done.
        what: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// No usable Kubernetes configuration.
    #[error("{what}")]
    Config {
        /// What was being read.
        what: String,
        /// Why it is unusable.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The system refused (a socket, a file).
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The kernel adapter failed as a whole (not one item: those are in the status).
    #[error("{what}")]
    Netlink {
        /// What was being done.
        what: String,
        /// The adapter's error.
        #[source]
        source: netpolicy_netlink::Error,
    },
    /// The work ran but did not reach its goal (cleanup left objects in place).
    #[error("{0}")]
    Incomplete(String),
}

/// An error with its sources, `: `-separated, for logs.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = self.0.to_string();
        let mut next = self.0.source();
        while let Some(e) = next {
            // An error that already shows its source (netpolicy-netlink's `Io`) is not
            // followed by the same text again.
            let text = e.to_string();
            if !out.ends_with(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
            next = e.source();
        }
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_shows_what_failed_and_why() {
        let e = Error::Io {
            what: "listening on 127.0.0.1:1".into(),
            source: std::io::Error::from(std::io::ErrorKind::AddrInUse),
        };
        assert_eq!(
            Chain(&e).to_string(),
            "listening on 127.0.0.1:1: address in use"
        );
        assert!(std::error::Error::source(&e).is_some());
    }
}
