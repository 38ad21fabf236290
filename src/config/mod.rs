//! The configuration repository: reading a git tree or a directory, parsing
//! YAML with positions, and validating the objects in it.

pub mod diff;
pub mod load;
pub mod source;
pub mod validate;
pub mod yaml;
