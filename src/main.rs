use clap::Parser;

mod allocator;

fn main() -> std::process::ExitCode {
    let cli = dovetail::cli::args::Cli::parse();
    if !cli.command.runs_until_stopped() {
        allocator::keep_freed_memory();
    }
    dovetail::cli::run_main(cli)
}
