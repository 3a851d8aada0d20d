//! Ports for the processes the harness starts, and how it knows one of them is up.

use std::{
    fs,
    net::TcpListener,
    path::Path,
    process::Child,
    thread,
    time::{Duration, Instant},
};

use crate::{Result, tail};

/// Ports handed out by [`free_ports`], held by this process until it ends.
static RESERVED: std::sync::Mutex<Vec<fs::File>> = std::sync::Mutex::new(Vec::new());

/// `n` distinct ports on 127.0.0.1 that nothing listens on now, each reserved against
/// every other process of this harness until this process ends: a lock file per port
/// (under the temp directory) that a process holds while it lives.
///
/// A port found free (bind to port 0, then close) is only free until someone binds it.
/// Test binaries run side by side, and each starts etcd and kube-apiserver on ports it
/// chose that way: one of them once started its API server on the port its own etcd
/// had just bound for TLS, and its tests then talked to etcd ("404 page not found") for
/// a whole run. The lock keeps the harness's processes off each other's ports; whatever
/// else binds a port meanwhile is caught by the start check (the child must own the
/// listener) and the control plane starts again on other ports.
///
/// # Errors
/// When no port can be bound or the lock directory cannot be written.
pub fn free_ports(n: usize) -> std::result::Result<Vec<u16>, String> {
    let dir = std::env::temp_dir().join("netpolicy-testenv-ports");
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Every listener stays open until all n are chosen, so the n are distinct.
    let mut held = Vec::new();
    let mut ports = Vec::new();
    let mut locks = Vec::new();
    while ports.len() < n {
        if held.len() > n + 200 {
            return Err(format!(
                "no {n} free ports: 200 were locked by other test processes"
            ));
        }
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("binding a port: {e}"))?;
        let port = l.local_addr().map_err(|e| format!("port: {e}"))?.port();
        held.push(l);
        let path = dir.join(port.to_string());
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {
                ports.push(port);
                locks.push(file);
            }
            // Another live test process chose this port (or still uses it).
            Err(fs::TryLockError::WouldBlock) => {}
            Err(fs::TryLockError::Error(e)) => {
                return Err(format!("locking {}: {e}", path.display()));
            }
        }
    }
    RESERVED
        .lock()
        .map_err(|_| "the port reservations' lock is poisoned".to_owned())?
        .extend(locks);
    Ok(ports)
}

/// Whether process `pid` holds a socket listening on TCP `port` (IPv4 or IPv6), by its
/// open files and the kernel's socket tables.
fn owns_listener(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (cols.get(1), cols.get(3), cols.get(9))
            else {
                continue;
            };
            let p = local
                .rsplit(':')
                .next()
                .and_then(|h| u16::from_str_radix(h, 16).ok());
            // 0A: TCP_LISTEN.
            if p == Some(port) && *state == "0A" {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        fs::read_link(fd.path())
            .is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
    })
}

/// Waits until `child` itself listens on `port`. A connection alone does not say so:
/// another process may hold the port (see [`free_ports`]), and then the child exits
/// saying its address is in use.
pub(crate) fn wait_for_port(port: u16, child: &mut Child, name: &str, log: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut someone_else = false;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            let other = if someone_else {
                format!(" (another process listens on {port})")
            } else {
                String::new()
            };
            return Err(format!(
                "{name} exited ({status}){other}; log:\n{}",
                tail(log)
            ));
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            if owns_listener(child.id(), port) {
                return Ok(());
            }
            someone_else = true;
        }
        thread::sleep(Duration::from_millis(100));
    }
    let whose = if someone_else {
        "listening only from another process"
    } else {
        "not listening"
    };
    Err(format!(
        "{name} {whose} on {port} after 60 s; log:\n{}",
        tail(log)
    ))
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn free_ports_are_distinct_and_locked_against_other_processes() {
        let ports = free_ports(8).unwrap();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 8, "{ports:?}");
        // Another process cannot take the locks this one holds.
        for port in &ports {
            let path = std::env::temp_dir()
                .join("netpolicy-testenv-ports")
                .join(port.to_string());
            let out = Command::new("flock")
                .args(["--nonblock", "--exclusive"])
                .arg(&path)
                .arg("true")
                .status()
                .unwrap();
            assert!(!out.success(), "{} was not locked", path.display());
        }
    }

    #[test]
    fn a_child_counts_as_up_only_on_a_listener_of_its_own() {
        // This process listens; the child (which never listens) must not count as up
        // on that port, and its exit says another process holds it.
        let mine = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = mine.local_addr().unwrap().port();
        assert!(owns_listener(std::process::id(), port));
        let log = std::env::temp_dir().join(format!("testenv-owner-{}.log", std::process::id()));
        let mut child = Command::new("sleep").arg("1").spawn().unwrap();
        assert!(!owns_listener(child.id(), port));
        let err = wait_for_port(port, &mut child, "sleep", &log).unwrap_err();
        assert!(
            err.contains(&format!("another process listens on {port}")),
            "{err}"
        );
        let _ = fs::remove_file(log);
    }
}
