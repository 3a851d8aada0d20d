//! `netpolicy`: the one binary (`plan`, `crds`; `operator` and `agent` come with their
//! issues). The work lives in the library.

fn main() -> std::process::ExitCode {
    netpolicy_operator::cli::run(std::env::args_os())
}
