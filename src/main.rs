fn main() -> std::process::ExitCode {
    dovetail::cli::main()
}
