/// The allocator: glibc's fragments under a controller's pattern of
/// long-lived caches among short-lived per-pass data; see the README's
/// dependency notes.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    dovetail::cli::main()
}
