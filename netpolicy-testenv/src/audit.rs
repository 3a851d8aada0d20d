//! What the API server's audit log says was written: every write request is audited
//! (metadata only, `ResponseComplete`, synchronously), so a test counts a job's writes,
//! their verbs and answers, and follows thousands as they are answered without asking
//! the API server being measured for anything.

use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::ControlPlane;

/// One write request the API server answered, from its audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// `create`, `update`, `patch`, `delete` or `deletecollection`.
    pub verb: String,
    /// The resource (`nodenetworkconfigs`).
    pub resource: String,
    /// The subresource (`status`), empty for the object itself.
    pub subresource: String,
    /// The object's namespace, empty for a cluster-scoped one.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The user who made the request.
    pub user: String,
    /// The HTTP status the API server answered (0 when the audit event has none).
    pub code: u16,
}

impl ControlPlane {
    /// Every write request to `resource` (plural, any group) named `name` that the API
    /// server has completed so far, in order. Writes are audited synchronously, so a
    /// write that has been answered is in the list.
    ///
    /// # Panics
    /// When the audit log cannot be read.
    pub fn writes(&self, resource: &str, name: &str) -> Vec<Write> {
        self.writes_where(resource, |n| n == name)
    }

    /// Every completed write request to `resource` whose object name satisfies `pick`
    /// (one read of the audit log for many objects).
    ///
    /// # Panics
    /// When the audit log cannot be read.
    pub fn writes_where(&self, resource: &str, pick: impl Fn(&str) -> bool) -> Vec<Write> {
        self.all_writes()
            .into_iter()
            .filter(|w| w.resource == resource && pick(&w.name))
            .collect()
    }

    /// Every write request the API server answered so far, in order, from its audit
    /// log (kept across restarts of the API server).
    ///
    /// # Panics
    /// When the audit log cannot be read.
    pub fn all_writes(&self) -> Vec<Write> {
        let path = self.dir.join("audit.log");
        let text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        parse_writes(&text)
    }

    /// The audit log followed from now on: each [`AuditTail::next_writes`] gives the
    /// write requests answered since the one before, reading only what is new. A test
    /// follows thousands of writes as they are answered without watching the objects (a
    /// watch is work for the API server being measured) or rereading the whole log.
    ///
    /// # Panics
    /// When the audit log cannot be read.
    pub fn follow_writes(&self) -> AuditTail {
        let path = self.dir.join("audit.log");
        let offset = fs::metadata(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
            .len();
        AuditTail { path, offset }
    }
}

/// The API server's audit log followed from a point ([`ControlPlane::follow_writes`]).
#[derive(Debug)]
pub struct AuditTail {
    path: PathBuf,
    /// Where the next read starts: just past the last whole line read.
    offset: u64,
}

impl AuditTail {
    /// The write requests answered since the last call (or since the tail was made).
    ///
    /// # Panics
    /// When the audit log cannot be read.
    pub fn next_writes(&mut self) -> Vec<Write> {
        let (writes, next) = writes_after(&self.path, self.offset);
        self.offset = next;
        writes
    }
}

/// The completed writes in the audit log at `path` after byte `from`, and the offset
/// past the last whole line read.
fn writes_after(path: &Path, from: u64) -> (Vec<Write>, u64) {
    use std::io::{Read as _, Seek as _};
    let mut file =
        fs::File::open(path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let mut bytes = Vec::new();
    file.seek(std::io::SeekFrom::Start(from))
        .and_then(|_| file.read_to_end(&mut bytes))
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    // The API server may be halfway through a line: it is read next time, whole.
    let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let text = String::from_utf8_lossy(&bytes[..whole]);
    (parse_writes(&text), from + whole as u64)
}

/// The completed write requests in audit log lines (one JSON event a line).
fn parse_writes(text: &str) -> Vec<Write> {
    let field = |v: &serde_json::Value, path: &[&str]| {
        path.iter()
            .try_fold(v, |v, k| v.get(k))
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| field(e, &["stage"]) == "ResponseComplete")
        .map(|e| Write {
            verb: field(&e, &["verb"]),
            resource: field(&e, &["objectRef", "resource"]),
            subresource: field(&e, &["objectRef", "subresource"]),
            namespace: field(&e, &["objectRef", "namespace"]),
            name: field(&e, &["objectRef", "name"]),
            user: field(&e, &["user", "username"]),
            code: e
                .get("responseStatus")
                .and_then(|r| r.get("code"))
                .and_then(serde_json::Value::as_u64)
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(0),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    const PUT: &str = r#"{"stage":"ResponseComplete","verb":"update","objectRef":{"resource":"nodenetworkconfigs","name":"n1"},"user":{"username":"op"},"responseStatus":{"code":200}}"#;
    const STATUS: &str = r#"{"stage":"ResponseComplete","verb":"patch","objectRef":{"resource":"floatingips","subresource":"status","namespace":"t","name":"f"},"user":{"username":"op"},"responseStatus":{"code":409}}"#;
    const STARTED: &str = r#"{"stage":"ResponseStarted","verb":"update","objectRef":{"resource":"nodenetworkconfigs","name":"n2"}}"#;

    #[test]
    fn completed_writes_are_read_with_their_fields() {
        let w = parse_writes(&format!("{PUT}\n{STARTED}\nnot json\n{STATUS}\n"));
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!(
            w[0],
            Write {
                verb: "update".into(),
                resource: "nodenetworkconfigs".into(),
                subresource: String::new(),
                namespace: String::new(),
                name: "n1".into(),
                user: "op".into(),
                code: 200,
            }
        );
        assert_eq!(
            (
                w[1].subresource.as_str(),
                w[1].namespace.as_str(),
                w[1].code
            ),
            ("status", "t", 409)
        );
    }

    #[test]
    fn following_the_log_reads_each_whole_line_once() {
        let dir = std::env::temp_dir().join(format!("netpolicy-audit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        let mut f = fs::File::create(&path).unwrap();
        write!(f, "{PUT}\n{}", &STATUS[..20]).unwrap();
        f.flush().unwrap();
        let mut tail = AuditTail {
            path: path.clone(),
            offset: 0,
        };
        let first = tail.next_writes();
        assert_eq!(first.len(), 1);
        assert_eq!(
            tail.offset,
            PUT.len() as u64 + 1,
            "a half-written line is left for later"
        );
        writeln!(f, "{}", &STATUS[20..]).unwrap();
        f.flush().unwrap();
        let second = tail.next_writes();
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].resource, "floatingips");
        assert_eq!(tail.offset, fs::metadata(&path).unwrap().len());
        assert!(tail.next_writes().is_empty(), "nothing new, nothing read");
        fs::remove_dir_all(&dir).unwrap();
    }
}
