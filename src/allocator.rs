//! The binary's allocator and its one setting; the benchmarks include this
//! file (`#[path]`) so their figures are the binary's. The library sets no
//! allocator and has no unsafe code.

/// mimalloc: glibc's malloc fragments under a controller's pattern of
/// long-lived caches among short-lived per-pass data; see the README's
/// dependency notes.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay`, by its place in `mi_option_t`. The
/// enum is mimalloc's ABI: an option that goes is renamed `deprecated_*`,
/// never renumbered (`MIMALLOC_VERBOSE=1` lists them in order).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps the memory the process frees for its own reuse instead of giving
/// it back to the OS a second after (mimalloc's default). A batch command
/// (`simulate`, `diff --forecast`, `plan`) builds and drops the same few
/// hundred MiB of per-pass data again and again; given back, each pass
/// faulted it in again, zeroed: 213,000 to 243,000 page faults and 1 to 3 s
/// more system time in the 24-hour benchmark than with it kept (1,850
/// faults). The peak is the same, and the process exits. A command that runs until stopped keeps the default,
/// so its resident memory falls back after a burst.
#[allow(dead_code)] // the benchmarks that run until stopped do not call it
pub fn keep_freed_memory() {
    // SAFETY: sets an integer option; mimalloc reads it when it next
    // purges, from any thread.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) }
}
