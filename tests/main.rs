//! dovetail's integration tests: one test binary (each extra binary would
//! link the whole dependency tree again), one module per suite.

mod conformance;
mod deploy;
mod diff;
mod hostile;
mod impact;
mod newcomer;
mod plan;
mod simulate;
mod support;
mod sync;
mod validate;
