//! The `netpolicy` command line.
//!
//! Exit status: 0 success; 1 the input has validation errors or conflicts (the plan is
//! still printed); 2 usage errors or unreadable files.

use std::{
    io::{BufWriter, Write},
    path::PathBuf,
    process::ExitCode,
};

use crate::{manifest, plan};
use clap::{Parser, Subcommand, ValueEnum};

/// Kubernetes node networking: routing policy, floating IPs, routed cloud IPs and BGP
/// route reflectors, in one pipeline.
#[derive(Debug, Parser)]
#[command(name = "netpolicy", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run every pipeline over manifests on disk and print the result; needs no cluster.
    Plan(PlanArgs),
    /// Print the CustomResourceDefinitions as YAML.
    Crds,
    /// Convert the seeds' manifests on disk to netpolicy's: ipruler's, kube-fip's,
    /// Meridio's and routedip-operator's objects, and the Calico route-reflector
    /// operator's Deployment (printed as YAML; other documents pass through; what needs a
    /// person's check is noted on stderr).
    Convert(ConvertArgs),
    /// What the cluster says about a node or a policy (read-only, with your kubeconfig):
    /// revision, conditions, every item with where it came from and whether it is
    /// applied, repairs and fights, and what `plan` would change.
    Status(StatusArgs),
    /// Run the operator: leader election, controllers, metrics and health endpoints.
    Operator(crate::operator::Options),
    /// Run the node agent: apply this node's NodeNetworkConfig and report its status.
    Agent(crate::agent::AgentOptions),
}

/// Arguments of `netpolicy plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// A manifest file or a directory of them (multi-document YAML); repeatable.
    #[arg(short = 'f', long = "filename", value_name = "PATH", required = true)]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Arguments of `netpolicy status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// What to show.
    #[command(subcommand)]
    pub what: StatusTarget,
    /// The kubeconfig file (default: `KUBECONFIG`, `~/.kube/config`, in-cluster).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

/// What `netpolicy status` shows.
#[derive(Debug, Subcommand)]
pub enum StatusTarget {
    /// A node: its NodeNetworkConfig's revision and conditions, every item with the
    /// policies it came from and whether its agent applied it, the agent's repairs and
    /// fights (Events), and what `plan` over the cluster's objects would change.
    Node {
        /// The node's name.
        name: String,
    },
    /// A policy (`ClusterConfig/<name>`, `NodeConfig/<name>`, or a name): the nodes it
    /// selects and which applied it, its rollout waves, conflicts and conditions.
    Policy {
        /// The policy.
        name: String,
    },
}

/// Arguments of `netpolicy convert`.
#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// A manifest file or a directory of them (multi-document YAML); repeatable.
    #[arg(short = 'f', long = "filename", value_name = "PATH", required = true)]
    pub files: Vec<PathBuf>,
    /// The priority of the first ipruler rule (ipruler's rules have none; each next rule
    /// gets one more). Converting in several runs, give each its own start, so rules of
    /// different runs never share a priority.
    #[arg(long, value_name = "N", default_value_t = crate::convert::FIRST_RULE_PRIORITY,
          value_parser = clap::value_parser!(u32).range(1..32000))]
    pub rule_priority_start: u32,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Tables for a person.
    Table,
    /// JSON (`plan`'s is the contract of docs/architecture.md).
    Json,
    /// The same as YAML.
    Yaml,
}

/// Runs the command line and returns the process exit status.
pub fn run(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match cli.command {
        Command::Plan(a) => run_plan(&a),
        Command::Convert(a) => run_convert(&a),
        Command::Status(a) => run_status(a),
        Command::Operator(opts) => run_operator(opts),
        Command::Agent(opts) => run_agent(opts),
        Command::Crds => match crds_yaml() {
            Ok(y) => print_out(&y),
            Err(e) => {
                eprintln!("error: {}", crate::error::Chain(&e));
                ExitCode::from(2)
            }
        },
    }
}

/// Runs a long-lived async command on a multi-threaded runtime; `code` maps its success
/// to an exit status. Errors print as `error: ...` and exit 2.
fn run_async<T>(
    fut: impl std::future::Future<Output = crate::Result<T>>,
    code: impl FnOnce(T) -> ExitCode,
) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(fut) {
        Ok(v) => code(v),
        Err(e) => {
            eprintln!("error: {}", crate::error::Chain(&e));
            ExitCode::from(2)
        }
    }
}

fn run_status(a: StatusArgs) -> ExitCode {
    let width = terminal_width();
    let output = a.output;
    run_async(
        async move {
            let client = crate::process::client_from(a.kubeconfig.as_ref()).await?;
            let what = match &a.what {
                StatusTarget::Node { name } => format!("node {name}"),
                StatusTarget::Policy { name } => format!("policy {name}"),
            };
            let wrap = |e: crate::status::StatusError| {
                let source = match e {
                    crate::status::StatusError::Kube(k) => k,
                    crate::status::StatusError::Usage(u) => {
                        return crate::Error::Config {
                            what: u,
                            source: "not a node or policy name".into(),
                        };
                    }
                };
                let what = match &source {
                    kube::Error::Api(e) if e.code == 404 => match &a.what {
                        StatusTarget::Node { name } => format!(
                            "no NodeNetworkConfig for node {name}: no policy selects it, the node does not exist, or no operator runs"
                        ),
                        StatusTarget::Policy { name } => format!("no policy {name}"),
                    },
                    _ => format!("reading the cluster for {what}"),
                };
                crate::Error::Kube { what, source }
            };
            let text = match &a.what {
                StatusTarget::Node { name } => {
                    let s = crate::status::node(&client, name)
                        .await
                        .map_err(|e| wrap(e.into()))?;
                    render(output, &s, || s.to_table(width))
                }
                StatusTarget::Policy { name } => {
                    let s = crate::status::policy(&client, name).await.map_err(wrap)?;
                    render(output, &s, || s.to_table(width))
                }
            };
            Ok(text)
        },
        |text| match text {
            Ok(t) => print_out(&t),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
    )
}

/// `value` as `output` asks: a table, JSON or YAML.
fn render<T: serde::Serialize>(
    output: Output,
    value: &T,
    table: impl FnOnce() -> String,
) -> Result<String, String> {
    match output {
        Output::Table => Ok(table()),
        Output::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| format!("cannot render JSON: {e}")),
        Output::Yaml => {
            serde_saphyr::to_string(value).map_err(|e| format!("cannot render YAML: {e}"))
        }
    }
}

fn run_operator(opts: crate::operator::Options) -> ExitCode {
    run_async(crate::operator::run(opts), |exit| match exit {
        crate::operator::Exit::Stopped => ExitCode::SUCCESS,
        crate::operator::Exit::LostLease => ExitCode::from(1),
    })
}

fn run_agent(opts: crate::agent::AgentOptions) -> ExitCode {
    run_async(crate::agent::run(opts), |()| ExitCode::SUCCESS)
}

fn print_out(s: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    if out
        .write_all(s.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        // A closed pipe (`| head`) is not an error of ours.
        return ExitCode::SUCCESS;
    }
    ExitCode::SUCCESS
}

/// Every YAML/JSON document under `paths` (directories recursively, `.yaml`, `.yml`,
/// `.json`, in name order), with `file#index` for messages.
fn read_documents(paths: &[PathBuf]) -> Result<Vec<(String, serde_json::Value)>, String> {
    fn files(p: &std::path::Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
        if p.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            entries.sort();
            for e in entries {
                let manifest = e
                    .extension()
                    .and_then(|x| x.to_str())
                    .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"));
                if e.is_dir() || manifest {
                    files(&e, out)?;
                }
            }
        } else {
            out.push(p.to_path_buf());
        }
        Ok(())
    }
    let mut all = Vec::new();
    for p in paths {
        files(p, &mut all)?;
    }
    let mut docs = Vec::new();
    for f in all {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        // The reader `plan` uses: what kubectl reads, this reads (manifest::yaml).
        let mut i = 0;
        for (line, doc) in manifest::split_documents(&text) {
            let v = manifest::yaml::parse(&doc)
                .map_err(|e| {
                    let e = e.without_snippet();
                    let at = e
                        .location()
                        .map_or(line, |l| line + l.line().saturating_sub(1));
                    format!("{}:{at}: not YAML: {e}", f.display())
                })?
                .to_json();
            if !v.is_null() {
                i += 1;
                docs.push((format!("{}#{i}", f.display()), v));
            }
        }
    }
    Ok(docs)
}

fn run_convert(a: &ConvertArgs) -> ExitCode {
    let docs = match read_documents(&a.files) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let c = crate::convert::convert_from(docs, a.rule_priority_start);
    let mut out = String::new();
    for o in &c.objects {
        out.push_str("---\n");
        match serde_saphyr::to_string(o) {
            Ok(y) => out.push_str(&y),
            Err(e) => {
                eprintln!("error: cannot render YAML: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let code = print_out(&out);
    for n in &c.notes {
        eprintln!("note: {n}");
    }
    for e in &c.errors {
        eprintln!("error: {e}");
    }
    if c.errors.is_empty() {
        code
    } else {
        ExitCode::from(1)
    }
}

fn run_plan(a: &PlanArgs) -> ExitCode {
    let manifests = match manifest::load(&a.files) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let report = plan::plan(&manifests);
    let width = terminal_width();
    for w in &report.warnings {
        let line = format!("warning: {w}\n");
        match width {
            Some(n) => eprint!("{}", plan::wrap_prose(&line, usize::from(n))),
            None => eprint!("{line}"),
        }
    }
    // JSON is streamed: on a large cluster it is far bigger than the report in memory
    // (nodes with the same result share it; the output spells it out per node).
    let mut out = BufWriter::new(std::io::stdout().lock());
    let written = match a.output {
        Output::Table => out.write_all(report.to_table_width(width).as_bytes()),
        Output::Json => serde_json::to_writer_pretty(&mut out, &report)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n")),
        Output::Yaml => match serde_saphyr::to_string(&report) {
            Ok(y) => out.write_all(y.as_bytes()),
            Err(e) => {
                eprintln!("error: cannot render the plan as YAML: {e}");
                return ExitCode::from(2);
            }
        },
    }
    .and_then(|()| out.flush());
    match written {
        // A closed pipe (`| head`) is the reader's choice, not an error of ours.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("error: cannot write the plan: {e}");
            return ExitCode::from(2);
        }
        _ => {}
    }
    if report.has_errors() {
        eprintln!(
            "error: the input has {} problem{} (listed under errors)",
            report.errors.len(),
            if report.errors.len() == 1 { "" } else { "s" }
        );
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Every CRD, as a multi-document YAML stream.
///
/// # Errors
/// When serialization fails (it does not for these types).
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in crate::api::crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

/// The width of the terminal standard output is, if it is one: `COLUMNS` when set (a
/// shell's idea of it, also how a user narrows the tables), else the terminal's own.
/// `None` when standard output is a pipe or a file: tables keep their full width.
fn terminal_width() -> Option<u16> {
    use std::io::IsTerminal;
    let stdout = std::io::stdout();
    if !stdout.is_terminal() {
        return None;
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok())
        .filter(|c| *c >= 20)
        .or_else(|| terminal_size::terminal_size_of(&stdout).map(|(w, _)| w.0))
}
