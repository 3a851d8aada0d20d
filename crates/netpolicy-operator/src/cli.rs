//! The `netpolicy` command line.
//!
//! Exit status: 0 success; 1 the input has validation errors or conflicts (the plan is
//! still printed); 2 usage errors or unreadable files.

use std::{io::Write, path::PathBuf, process::ExitCode};

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

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Tables for a person.
    Table,
    /// The JSON contract of DESIGN.md.
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
        Command::Crds => match crds_yaml() {
            Ok(y) => print_out(&y),
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
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

fn run_plan(a: &PlanArgs) -> ExitCode {
    let manifests = match manifest::load(&a.files) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let report = plan::plan(&manifests);
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    let text = match a.output {
        Output::Table => Ok(report.to_table()),
        Output::Json => serde_json::to_string_pretty(&report)
            .map(|mut s| {
                s.push('\n');
                s
            })
            .map_err(|e| e.to_string()),
        Output::Yaml => serde_saphyr::to_string(&report).map_err(|e| e.to_string()),
    };
    let text = match text {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot render the plan: {e}");
            return ExitCode::from(2);
        }
    };
    print_out(&text);
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
