//! Writes a loop sends together. A loop decides what to write for every
//! object first, holding the controller; the writes then go out at most
//! [`Settings::write_concurrency`] at a time, and the loop reads their
//! answers in the order it decided them, so what it records (Events,
//! metrics, retries) is the same whatever order the API server answered
//! in.
//!
//! [`Settings::write_concurrency`]: super::Settings::write_concurrency

use std::future::Future;

use futures::StreamExt;

/// Runs `writes` with at most `limit` in flight; their answers in the
/// order given.
pub(super) async fn concurrently<F: Future>(
    writes: impl IntoIterator<Item = F>,
    limit: usize,
) -> Vec<F::Output> {
    futures::stream::iter(writes)
        .buffered(limit.max(1))
        .collect()
        .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// At most `limit` run at once, and the answers keep the order of the
    /// writes, not of their completion.
    #[tokio::test(start_paused = true)]
    async fn answers_keep_the_order_given_with_at_most_limit_in_flight() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let writes = (0..10u64).map(|i| {
            let (running, most) = (&running, &most);
            async move {
                let now = running.fetch_add(1, SeqCst) + 1;
                most.fetch_max(now, SeqCst);
                // Later writes answer first.
                tokio::time::sleep(Duration::from_millis(100 - i * 10)).await;
                running.fetch_sub(1, SeqCst);
                i
            }
        });
        let answers = concurrently(writes, 3).await;
        assert_eq!(answers, (0..10).collect::<Vec<_>>());
        assert_eq!(most.load(SeqCst), 3);
    }
}
