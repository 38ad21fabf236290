//! `dovetail simulate --serve` against the API server: one script of
//! requests, both answers compared.
