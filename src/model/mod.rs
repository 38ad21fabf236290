//! The pure domain model of scheduling: resources, requirements, taints,
//! instance types and offerings. No I/O, no kube client, no AWS SDK.
