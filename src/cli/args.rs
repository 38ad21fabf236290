//! Argument types. Doc comments here are the `--help` text.

use clap::{Parser, Subcommand};

/// dovetail: a Karpenter-compatible node autoscaler for EKS, driven by git.
#[derive(Debug, Parser)]
#[command(name = "dovetail", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
