//! A synchronous rtnetlink connection in a chosen network namespace: dumps, and batches
//! of requests sent back to back (pipelined) with one result per request.
//!
//! Pipelining: requests go out in chunks of up to [`CHUNK`] messages in one `send`, each
//! with its own sequence number. The kernel answers every failure with a NACK carrying
//! the sequence number, so an error is attributed to exactly the item that caused it;
//! only the last request of a chunk asks for an ACK, which (requests being handled in
//! order) marks the chunk complete. The receive buffer is sized so that a chunk's
//! answers always fit (`NETLINK_CAP_ACK` keeps them at 36 bytes), so the kernel never
//! answers `ENOBUFS`.

use std::{fs::File, os::fd::AsFd, path::PathBuf};

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

use crate::{Error, Result};

/// Requests per `send` when pipelining.
pub const CHUNK: usize = 512;

/// Which network namespace to work in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespace {
    /// The namespace of the calling process.
    Current,
    /// A named namespace (`/run/netns/<name>`, as `ip netns` creates them).
    Named(String),
    /// A namespace file (`/proc/<pid>/ns/net`, a bind mount, ...).
    Path(PathBuf),
}

impl Namespace {
    fn path(&self) -> Option<PathBuf> {
        match self {
            Self::Current => None,
            Self::Named(n) => Some(PathBuf::from("/run/netns").join(n)),
            Self::Path(p) => Some(p.clone()),
        }
    }
}

/// A kernel error for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelError {
    /// The errno (positive).
    pub errno: i32,
    /// Its text (`File exists`).
    pub message: String,
}

impl KernelError {
    fn new(errno: i32) -> Self {
        Self {
            errno,
            message: std::io::Error::from_raw_os_error(errno).to_string(),
        }
    }
}

impl std::fmt::Display for KernelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (errno {})", self.message, self.errno)
    }
}

/// An rtnetlink socket bound in one namespace.
#[derive(Debug)]
pub struct Conn {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

pub(crate) fn io(what: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::Io {
        what: what.to_owned(),
        source: std::sync::Arc::new(e),
    }
}

fn open_socket() -> Result<Socket> {
    let mut sock = Socket::new(NETLINK_ROUTE).map_err(io("netlink socket"))?;
    sock.bind_auto().map_err(io("binding the netlink socket"))?;
    sock.connect(&SocketAddr::new(0, 0))
        .map_err(io("connecting the netlink socket"))?;
    // Large enough for a chunk of capped acks and for dump batches.
    sock.set_rx_buf_sz(8 * 1024 * 1024)
        .map_err(io("netlink receive buffer"))?;
    let _ = sock.set_cap_ack(true);
    let _ = sock.set_ext_ack(true);
    Ok(sock)
}

/// The netlink messages in one datagram.
pub(crate) fn parse(buf: &[u8]) -> Result<Vec<NetlinkMessage<RouteNetlinkMessage>>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buf[at..])
            .map_err(|e| Error::Decode(e.to_string()))?;
        let len = m.header.length as usize;
        if len == 0 {
            break;
        }
        at += len.div_ceil(4) * 4;
        out.push(m);
    }
    Ok(out)
}

/// Runs `make` in `ns`: for another namespace on a short-lived thread that enters it
/// (a netlink socket belongs to the namespace it was made in); the calling thread never
/// changes namespace.
pub(crate) fn in_namespace<T: Send + 'static>(
    ns: &Namespace,
    make: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let Some(path) = ns.path() else {
        return make();
    };
    std::thread::spawn(move || -> Result<T> {
        let f = File::open(&path).map_err(|e| Error::Io {
            what: format!("opening namespace {}", path.display()),
            source: std::sync::Arc::new(e),
        })?;
        nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
            Error::Io {
                what: format!("entering namespace {}", path.display()),
                source: std::sync::Arc::new(std::io::Error::from(e)),
            }
        })?;
        make()
    })
    .join()
    .map_err(|_| Error::Io {
        what: "opening the namespace".into(),
        source: std::sync::Arc::new(std::io::Error::other("its thread panicked")),
    })?
}

impl Conn {
    /// The netlink port ID of this connection's socket: the kernel names it in the
    /// notifications of the changes this connection makes.
    ///
    /// # Errors
    /// The socket's address cannot be read.
    pub fn port(&self) -> Result<u32> {
        let mut addr = SocketAddr::new(0, 0);
        self.sock
            .get_address(&mut addr)
            .map_err(io("reading the netlink socket's address"))?;
        Ok(addr.port_number())
    }

    /// Opens a connection in `ns`. A netlink socket belongs to the namespace it was made
    /// in, so for another namespace it is made on a short-lived thread that enters it;
    /// the calling thread never changes namespace.
    ///
    /// # Errors
    /// The namespace cannot be opened or entered (needs `CAP_SYS_ADMIN`), or the socket
    /// cannot be made.
    pub fn open(ns: &Namespace) -> Result<Self> {
        let sock = in_namespace(ns, open_socket)?;
        Ok(Self {
            sock,
            seq: 0,
            buf: vec![0; 1 << 20],
        })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn serialize(&mut self, msg: RouteNetlinkMessage, flags: u16, out: &mut Vec<u8>) -> u32 {
        let seq = self.next_seq();
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = seq;
        let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        m.finalize();
        let at = out.len();
        out.resize(at + m.buffer_len(), 0);
        m.serialize(&mut out[at..]);
        seq
    }

    /// Receives one datagram and returns its messages.
    fn recv(&mut self) -> Result<Vec<NetlinkMessage<RouteNetlinkMessage>>> {
        let n = self
            .sock
            .recv(&mut &mut self.buf[..], 0)
            .map_err(io("netlink receive"))?;
        parse(&self.buf[..n])
    }

    /// Dumps with `request` (`NLM_F_DUMP`) and returns every answer.
    ///
    /// # Errors
    /// The kernel refused the dump, or an answer did not parse.
    pub fn dump(&mut self, request: RouteNetlinkMessage) -> Result<Vec<RouteNetlinkMessage>> {
        let mut bytes = Vec::new();
        let seq = self.serialize(request, NLM_F_REQUEST | NLM_F_DUMP, &mut bytes);
        self.sock.send(&bytes, 0).map_err(io("netlink send"))?;
        let mut out = Vec::new();
        loop {
            for m in self.recv()? {
                if m.header.sequence_number != seq {
                    continue;
                }
                match m.payload {
                    NetlinkPayload::InnerMessage(inner) => out.push(inner),
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::Error(e) => {
                        if let Some(code) = e.code {
                            return Err(Error::Kernel(KernelError::new(-code.get())));
                        }
                        return Ok(out);
                    }
                    _ => {}
                }
            }
        }
    }

    /// Sends `requests` (each with its own flags, `NLM_F_REQUEST | NLM_F_ACK` added),
    /// pipelined, and returns one result per request, in order.
    ///
    /// # Errors
    /// Only when the socket fails; kernel refusals are per-request results.
    pub fn execute(
        &mut self,
        requests: Vec<(RouteNetlinkMessage, u16)>,
    ) -> Result<Vec<std::result::Result<(), KernelError>>> {
        let mut results = Vec::with_capacity(requests.len());
        let mut it = requests.into_iter().peekable();
        while it.peek().is_some() {
            let mut bytes = Vec::new();
            let mut first = None;
            let mut count = 0u32;
            let batch: Vec<_> = it.by_ref().take(CHUNK).collect();
            let last = batch.len().saturating_sub(1);
            for (k, (msg, flags)) in batch.into_iter().enumerate() {
                // Only the last request of a chunk asks for an ACK: the kernel answers
                // every failure anyway (a NACK carries its sequence number), and
                // handles requests in order, so the last ACK means the chunk is done.
                // Skipping the other ACKs saves the kernel an skb per success.
                let ack = if k == last { NLM_F_ACK } else { 0 };
                let seq = self.serialize(msg, flags | NLM_F_REQUEST | ack, &mut bytes);
                first.get_or_insert(seq);
                count += 1;
            }
            let first = first.unwrap_or(0);
            self.sock.send(&bytes, 0).map_err(io("netlink send"))?;
            let mut chunk: Vec<Option<std::result::Result<(), KernelError>>> =
                vec![None; count as usize];
            let last = count.saturating_sub(1);
            let mut done = false;
            while !done {
                for m in self.recv()? {
                    let i = m.header.sequence_number.wrapping_sub(first);
                    if i >= count {
                        continue;
                    }
                    if let NetlinkPayload::Error(e) = m.payload {
                        chunk[i as usize] = Some(match e.code {
                            None => Ok(()),
                            Some(code) => Err(KernelError::new(-code.get())),
                        });
                        if i == last {
                            done = true;
                        }
                    }
                }
            }
            results.extend(chunk.into_iter().map(|r| r.unwrap_or(Ok(()))));
        }
        Ok(results)
    }
}
