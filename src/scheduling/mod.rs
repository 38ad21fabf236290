//! The scheduling core: places pending pods on existing capacity and plans the
//! cheapest new NodeClaims. Pure and deterministic.
