//! Data parallelism over slices with scoped threads: deterministic output
//! order, no extra dependency.
//!
//! Threads take the next item from a shared counter, so one expensive item
//! does not hold up a fixed share of the others.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

/// Maps `f` over `items` on up to `available_parallelism()` threads and
/// returns the results in input order. Workers take the next item from a
/// shared counter, so one expensive item does not hold up a fixed share of
/// the others. A panic in `f` is re-raised on the caller's thread.
pub fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = thread::available_parallelism()
        .map_or(1, usize::from)
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(&f).collect();
    }
    let next = AtomicUsize::new(0);
    let (f, next) = (&f, &next);
    let mut slots: Vec<Option<R>> = Vec::with_capacity(items.len());
    slots.resize_with(items.len(), || None);
    thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else {
                            return done;
                        };
                        done.push((i, f(item)));
                    }
                })
            })
            .collect();
        for w in workers {
            match w.join() {
                Ok(done) => {
                    for (i, r) in done {
                        slots[i] = Some(r);
                    }
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    slots
        .into_iter()
        .map(|r| r.expect("every index is taken by exactly one worker"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn preserves_order() {
        let v: Vec<u32> = (0..1000).collect();
        let out = super::map(&v, |x| x * 2);
        assert_eq!(out, v.iter().map(|x| x * 2).collect::<Vec<_>>());
        assert!(super::map(&[] as &[u32], |x| *x).is_empty());
    }

    #[test]
    #[should_panic(expected = "boom")]
    fn panics_propagate() {
        let v: Vec<u32> = (0..100).collect();
        super::map(&v, |x| if *x == 57 { panic!("boom") } else { *x });
    }
}
