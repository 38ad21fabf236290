//! The command line: argument types in [`args`], one function per command.

pub mod args;

use std::process::ExitCode;

use clap::Parser;

/// Exit codes shared by every command (see CONVENTIONS.md).
pub mod exit {
    /// Success: valid, no differences, every pod placed.
    pub const OK: u8 = 0;
    /// The command ran and found a problem.
    pub const PROBLEM: u8 = 1;
    /// Usage, I/O or git-ref error.
    pub const ERROR: u8 = 2;
}

pub fn main() -> ExitCode {
    let cli = args::Cli::parse();
    ExitCode::from(run(cli))
}

/// Runs a parsed command line and returns the process exit code.
pub fn run(cli: args::Cli) -> u8 {
    match cli.command {}
}
