//! `netpolicy`: the one binary — `operator`, `agent`, `plan`, `convert`, `crds`. The
//! work lives in the library (`netpolicy_operator::cli`).

fn main() -> std::process::ExitCode {
    netpolicy_operator::cli::run(std::env::args_os())
}
