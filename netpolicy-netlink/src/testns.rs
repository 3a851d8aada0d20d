//! Throwaway network namespaces for testing code built on this crate (ours, and node
//! agents that embed it): a namespace with a veth pair, deleted on drop. Made with the
//! `ip` command (iproute2), as a person would; needs root.
//!
//! # Examples
//! ```no_run
//! use netpolicy_netlink::{Adapter, Ownership, testns::TestNamespace};
//!
//! // `None` when not root: a SKIP line is printed and the test returns.
//! let Some(ns) = TestNamespace::new("my agent applies routes")? else {
//!     return Ok(());
//! };
//! let adapter = Adapter::open(&ns.namespace(), Ownership::default())?;
//! let routes = ns.ip(&["route", "show", "table", "all"])?;
//! # let _ = (adapter, routes);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::{
    io::{self, Write},
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

use crate::Namespace;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A network namespace holding a veth pair `v0`/`v1` (both up), with 192.0.2.10/24 and
/// 2001:db8::10/64 on `v0`; deleted on drop.
#[derive(Debug)]
pub struct TestNamespace {
    name: String,
}

/// Whether this process runs as root (real uid 0), which network namespaces need.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        == Some("0")
}

/// Runs `ip` with `args`; its standard output, or an error with its standard error.
fn ip(args: &[&str]) -> io::Result<String> {
    let out = Command::new("ip").args(args).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl TestNamespace {
    /// A fresh namespace, named after this process and a counter. `Ok(None)` when not
    /// root: a `SKIP <purpose>` line then goes to standard error (which the test
    /// harness does not capture), so a skipped test says so in every run.
    ///
    /// # Errors
    /// When `ip` is missing or refuses a step (the namespace is removed again).
    pub fn new(purpose: &str) -> io::Result<Option<Self>> {
        if !is_root() {
            let _ = writeln!(
                io::stderr(),
                "SKIP {purpose}: needs root to create network namespaces"
            );
            return Ok(None);
        }
        let name = format!(
            "np-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name])?;
        // From here on, drop removes the namespace whatever fails.
        let ns = Self { name };
        for step in [
            &["link", "add", "v0", "type", "veth", "peer", "name", "v1"][..],
            &["link", "set", "v0", "up"],
            &["link", "set", "v1", "up"],
            &["addr", "add", "192.0.2.10/24", "dev", "v0"],
            &["-6", "addr", "add", "2001:db8::10/64", "dev", "v0", "nodad"],
        ] {
            ns.ip(step)?;
        }
        Ok(Some(ns))
    }

    /// The namespace's name (`ip -n NAME`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace, to open an [`crate::Adapter`] in.
    pub fn namespace(&self) -> Namespace {
        Namespace::Named(self.name.clone())
    }

    /// Runs `f` on a short-lived thread inside the namespace and returns what it
    /// returned. A socket made there stays in this namespace wherever it is used
    /// afterwards: a listener for a test's server, a connected stream for its client.
    ///
    /// ```no_run
    /// # use netpolicy_netlink::testns::TestNamespace;
    /// # let ns = TestNamespace::new("doc")?.unwrap();
    /// let listener = ns.run(|| std::net::TcpListener::bind("[::]:8080"))??;
    /// # let _ = listener;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The namespace cannot be entered, or `f` panicked.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
        crate::conn::in_namespace(&self.namespace(), move || Ok(f()))
            .map_err(|e| io::Error::other(e.to_string()))
    }

    /// Runs `ip -n NAME args…`; its standard output.
    ///
    /// # Errors
    /// When `ip` fails, with its message.
    pub fn ip(&self, args: &[&str]) -> io::Result<String> {
        let mut a = vec!["-n", self.name.as_str()];
        a.extend_from_slice(args);
        ip(&a)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
