//! The command line: argument types in [`args`], one module per command,
//! rendering of diagnostics in [`render`]. Commands write through [`Io`], so
//! tests run them in-process and capture both streams.
//!
//! `cli::live` is the one place the CLI reads a live API server;
//! `cli::controller` wires `dovetail controller`; `cli::log` writes the logs,
//! as JSON lines with `--log-format json`.

pub mod args;
mod aws;
mod controller;
mod diff;
mod forecast;
mod impact;
mod live;
pub mod log;
mod plan;
pub mod render;
mod serve;
mod simulate;
mod snapshot;
mod sync;
mod validate;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};

/// Exit codes shared by every command (see CONVENTIONS.md).
pub mod exit {
    /// Success: valid, no differences, every pod placed.
    pub const OK: u8 = 0;
    /// The command ran and found a problem.
    pub const PROBLEM: u8 = 1;
    /// Usage, I/O or git-ref error.
    pub const ERROR: u8 = 2;
}

/// The hint for a catalog that cannot be read.
pub(crate) const CATALOG_HINT: &str = "--catalog takes the instance-type catalog format, {\"instanceTypes\": [...]} with allocatable and offerings; docs/catalog.md describes it and how to capture one";

/// The streams a command writes to: data to `out`, logs and errors to `err`.
pub struct Io<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
    /// Whether `out` is a terminal (colour is used only then).
    pub out_is_terminal: bool,
    pub err_is_terminal: bool,
}

impl Io<'_> {
    /// Writes data to stdout, ignoring a closed pipe (`dovetail ... | head`).
    pub fn data(&mut self, s: &str) {
        let _ = self.out.write_all(s.as_bytes());
        let _ = self.out.flush();
    }

    /// Writes a line to stderr.
    pub fn log(&mut self, s: &str) {
        let _ = writeln!(self.err, "{s}");
    }

    /// Prints diagnostics as `validate` does (colour on a terminal).
    pub fn diagnostics(&mut self, diags: &[crate::diag::Diagnostic]) {
        let style = render::Style::for_stream(self.err_is_terminal);
        let _ = self.err.write_all(render::text(diags, style).as_bytes());
    }

    /// Prints a problem reading a file of objects as a diagnostic at its
    /// file and line, with `hint` unless the problem has a better one.
    pub fn read_error(&mut self, e: &crate::snapshot::ReadError, hint: &str) {
        let mut d = e.diagnostic();
        if d.hint.is_none() {
            d.hint = Some(hint.to_string());
        }
        self.diagnostics(&[d]);
    }

    /// Prints an error, its causes, and a `hint:` line when there is a likely fix.
    pub fn error(&mut self, err: &dyn std::error::Error, hint: Option<&str>) {
        let style = render::Style::for_stream(self.err_is_terminal);
        let msg = format!(
            "{}: {}",
            style.severity(crate::diag::Severity::Error),
            with_causes(err)
        );
        self.log(&msg);
        if let Some(h) = hint {
            self.log(&format!("hint: {h}"));
        }
    }
}

/// An error and its chain of causes on one line. Many libraries (kube's
/// client among them) already print their cause in their own message, so a
/// cause whose text is already there is not repeated.
fn with_causes(err: &dyn std::error::Error) -> String {
    let mut msg = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        source = s.source();
    }
    msg
}

/// The command line parsed: runs it with the process's terminal.
pub fn run_main(cli: Cli) -> ExitCode {
    match &cli.command {
        Command::Controller(a) => log::init(
            &a.log_level,
            a.log_format,
            render::Style::for_stream(std::io::stderr().is_terminal()).color,
        ),
        _ => init_logging(),
    }
    let (mut stdout, mut stderr) = (std::io::stdout().lock(), std::io::stderr());
    let mut io = Io {
        out_is_terminal: std::io::stdout().is_terminal(),
        err_is_terminal: stderr.is_terminal(),
        out: &mut stdout,
        err: &mut stderr,
    };
    ExitCode::from(run(cli, &mut io))
}

/// The feature gates of a command: `base` (Karpenter's defaults, or a
/// scenario's settings), then `FEATURE_GATES` when `--feature-gates` is not
/// given, then the flag; each names only the gates it sets.
/// The tokio runtime of a command that talks to a cluster or a cloud,
/// with `workers` threads; `None` (the error reported) if the OS refuses
/// one.
pub(crate) fn runtime(workers: usize, io: &mut Io) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
    {
        Ok(r) => Some(r),
        Err(e) => {
            io.error(&e, None);
            None
        }
    }
}

pub(crate) fn feature_gates(
    flag: Option<&str>,
    mut base: crate::controller::features::FeatureGates,
) -> Result<crate::controller::features::FeatureGates, String> {
    match flag {
        Some(f) => base.apply(f).map_err(|e| format!("--feature-gates: {e}"))?,
        None => {
            if let Ok(env) = std::env::var(args::env::FEATURE_GATES) {
                base.apply(&env)
                    .map_err(|e| format!("{}: {e}", args::env::FEATURE_GATES))?;
            }
        }
    }
    Ok(base)
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env(args::env::LOG).unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(render::Style::for_stream(std::io::stderr().is_terminal()).color)
        .try_init();
}

pub use crate::cluster::kube_client::install_tls_provider;

/// Runs a parsed command line and returns the process exit code.
pub fn run(cli: Cli, io: &mut Io) -> u8 {
    install_tls_provider();
    match cli.command {
        Command::Validate(a) => validate::run(&a, io),
        Command::Crds(a) => crds(&a, io),
        Command::Plan(a) => plan::run(&a, io),
        Command::Simulate(a) => simulate::run(&a, io),
        Command::Diff(a) => diff::run(&a, io),
        Command::Snapshot(a) => snapshot::run(&a, io),
        Command::Sync(a) => sync::run(&a, io),
        Command::Aws(a) => aws::run(&a, io),
        Command::Controller(a) => controller::run(&a, io),
    }
}

/// Parses `args` (including the program name) and runs the command; a usage
/// error is printed to `io.err` and gives exit code 2.
pub fn run_args<I, T>(args: I, io: &mut Io) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    match Cli::try_parse_from(args) {
        Ok(cli) => run(cli, io),
        // `--help` and `--version` go to stdout, as the binary prints them.
        Err(e) if !e.use_stderr() => {
            io.data(&e.to_string());
            exit::OK
        }
        Err(e) => {
            let _ = write!(io.err, "{e}");
            exit::ERROR
        }
    }
}

fn crds(a: &args::CrdsArgs, io: &mut Io) -> u8 {
    match &a.out_dir {
        Some(dir) => match crate::api::write_crds(dir) {
            Ok(()) => exit::OK,
            Err(e) => {
                io.error(&e, Some("check that the directory exists and is writable"));
                exit::ERROR
            }
        },
        None => {
            io.data(&crate::api::crds_yaml());
            exit::OK
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose message already includes its cause's text, as kube's
    /// errors do.
    #[derive(Debug)]
    struct Layer(String, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    /// The kubeconfig error used to repeat its cause three times in one
    /// 600-character line.
    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = Layer("No such file or directory (os error 2)".into(), None);
        let read = Layer(
            format!("failed to read kubeconfig: {io}"),
            Some(Box::new(io)),
        );
        let infer = Layer(
            format!("failed to infer config: ({read})"),
            Some(Box::new(read)),
        );
        let top = Layer(
            "cannot configure a Kubernetes client".into(),
            Some(Box::new(infer)),
        );
        assert_eq!(
            with_causes(&top),
            "cannot configure a Kubernetes client: failed to infer config: (failed to read kubeconfig: No such file or directory (os error 2))"
        );
    }
}
