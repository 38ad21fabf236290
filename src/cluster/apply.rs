//! The parameters of a server-side apply (`Cluster::apply`).

/// How to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyParams {
    /// Who owns the applied fields (`fieldManager`).
    pub field_manager: String,
    /// Run admission without storing anything (`dryRun=All`).
    pub dry_run: bool,
    /// Take over fields another manager owns instead of failing with a
    /// conflict (`force=true`).
    pub force: bool,
}

impl ApplyParams {
    /// A forced apply by `field_manager`.
    pub fn new(field_manager: impl Into<String>) -> Self {
        ApplyParams {
            field_manager: field_manager.into(),
            dry_run: false,
            force: true,
        }
    }

    /// The same apply as a dry run.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }
}
