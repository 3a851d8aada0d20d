//! `netpolicy`: the one binary — `operator`, `agent`, `plan`, `convert`, `crds`. The
//! work lives in the library (`netpolicy_operator::cli`).

/// See the `mimalloc` feature in Cargo.toml: memory a burst used goes back to the
/// system (the chart's memory limit holds 10,000 nodes with it).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    netpolicy_operator::cli::run(std::env::args_os())
}
