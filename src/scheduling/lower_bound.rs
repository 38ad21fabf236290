//! A lower bound on the price of the new capacity a solve needs.
//!
//! Every bound here is the objective of a feasible solution of the dual of
//! the covering LP "buy instance types so that their allocatable covers the
//! requests not served by free existing capacity, with at least `m` nodes"
//! (`m` is the number of new nodes that hostname anti-affinity forces), so it
//! never exceeds any real plan's price:
//! - per resource: the cheapest price per unit of allocatable of that resource;
//! - jointly over cpu and memory plus the node count: a search over dual
//!   directions, each evaluated exactly.

/// One instance type as the bound sees it.
#[derive(Debug, Clone)]
pub struct BoundType {
    pub alloc: Vec<f64>,
    pub price: f64,
}

/// Directions sampled in the cpu/memory dual plane.
const DIRECTIONS: usize = 48;
/// Ternary-search steps along each direction.
const STEPS: usize = 48;

/// `demand[r]`: requests to serve on new capacity, including daemonset
/// overhead of the forced nodes; `forced`: new nodes required.
pub fn lower_bound(types: &[BoundType], demand: &[f64], forced: usize) -> f64 {
    if types.is_empty() || demand.iter().all(|d| *d <= 0.0) && forced == 0 {
        return 0.0;
    }
    let m = forced as f64;
    let dims = demand.len();
    let mut best: f64 = 0.0;
    // Dual with only the node-count constraint: m × cheapest type.
    let cheapest = types.iter().map(|t| t.price).fold(f64::INFINITY, f64::min);
    best = best.max(m * cheapest);
    // One resource at a time, plus the node count.
    for (r, &d) in demand.iter().enumerate() {
        if d <= 0.0 {
            continue;
        }
        let g: Vec<f64> = types.iter().map(|t| t.alloc[r]).collect();
        best = best.max(along(types, &g, d, m));
    }
    // cpu and memory together.
    if dims >= 2 && demand[0] > 0.0 && demand[1] > 0.0 {
        let scale0 = types
            .iter()
            .map(|t| t.alloc[0])
            .fold(0.0, f64::max)
            .max(1.0);
        let scale1 = types
            .iter()
            .map(|t| t.alloc[1])
            .fold(0.0, f64::max)
            .max(1.0);
        for k in 1..DIRECTIONS {
            let theta = std::f64::consts::FRAC_PI_2 * k as f64 / DIRECTIONS as f64;
            let (a, b) = (theta.cos() / scale0, theta.sin() / scale1);
            let g: Vec<f64> = types
                .iter()
                .map(|t| a * t.alloc[0] + b * t.alloc[1])
                .collect();
            best = best.max(along(types, &g, a * demand[0] + b * demand[1], m));
        }
    }
    best
}

/// Best dual objective along direction `g` (the constraint row of each type
/// projected on the direction): maximise `s * d + m * z(s)` where
/// `z(s) = max(0, min_t(price_t - s * g_t))`, for `s` in `[0, s_max]`.
fn along(types: &[BoundType], g: &[f64], d: f64, m: f64) -> f64 {
    let s_max = types
        .iter()
        .zip(g)
        .filter(|(_, g)| **g > 0.0)
        .map(|(t, g)| t.price / g)
        .fold(f64::INFINITY, f64::min);
    if !s_max.is_finite() {
        return 0.0;
    }
    let value = |s: f64| -> f64 {
        let z = types
            .iter()
            .zip(g)
            .map(|(t, g)| t.price - s * g)
            .fold(f64::INFINITY, f64::min)
            .max(0.0);
        s * d + m * z
    };
    let (mut lo, mut hi) = (0.0, s_max);
    for _ in 0..STEPS {
        let m1 = lo + (hi - lo) / 3.0;
        let m2 = hi - (hi - lo) / 3.0;
        if value(m1) < value(m2) {
            lo = m1;
        } else {
            hi = m2;
        }
    }
    value(lo).max(value(s_max)).max(value(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference benchmark's types: k vCPU and 2k GiB at 0.3147k/h,
    /// with 100m cpu and 10Mi memory of overhead.
    fn bench_types() -> Vec<BoundType> {
        (1..=400)
            .map(|k| BoundType {
                alloc: vec![k as f64 * 1000.0 - 100.0, (k as f64) * 2048.0 - 10.0],
                price: 0.3147483648 * k as f64,
            })
            .collect()
    }

    #[test]
    fn matches_the_reference_lower_bound_formula() {
        // README: LB = 0.3147 × max(Σcpu + 0.1 × N/5, ...); 1k pods: 215.08.
        let types = bench_types();
        let forced = 200;
        let sum_cpu = 215.08 / 0.3147483648 - 0.1 * forced as f64;
        let lb = lower_bound(&types, &[sum_cpu * 1000.0, 100.0], forced);
        assert!((lb - 215.08).abs() < 0.05, "{lb}");
    }

    #[test]
    fn never_exceeds_a_feasible_purchase() {
        let types = bench_types();
        // 10 pods of 1.5 cpu on 10 nodes of fake-it-1 (k=2): 10 × 0.6295.
        let lb = lower_bound(&types, &[15_000.0, 10.0 * 1024.0], 10);
        assert!(lb <= 10.0 * 2.0 * 0.3147483648 + 1e-9, "{lb}");
        assert!(lb >= 15.0 * 0.3147483648, "{lb}");
    }
}
