//! Credentials that load again when AWS says their session token expired.
//!
//! The SDK's identity cache loads credentials again shortly before the
//! expiry they carry. A token that AWS holds expired earlier (a clock that
//! drifted, a session cut short, credentials that carry no expiry) would
//! be sent again and again until then, and every call would fail.
//! [`Refreshing`] takes the cache's place around the usual credential
//! chain: credentials are kept until [`REFRESH_BEFORE_EXPIRY`] before
//! their expiry, or until [`expire`] is called, which
//! [`super::error::call`] does when AWS answers `ExpiredToken` (or
//! `RequestExpired`) before it tries the call again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use aws_config::SdkConfig;
use aws_config::identity::IdentityCache;
use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider, future};

/// Credentials are loaded again when less than this is left before their
/// expiry.
pub const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(60);

/// Bumped by [`expire`]: credentials loaded before the current value are
/// loaded again. One for the process: every client signs with the same
/// identity.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// AWS refused the session token as expired: every [`Refreshing`]
/// provider loads its credentials again at its next use.
pub fn expire() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// A credential provider around another, with the cache described in the
/// module documentation.
#[derive(Debug)]
pub struct Refreshing {
    inner: SharedCredentialsProvider,
    /// The credentials and the [`GENERATION`] they were loaded in.
    cached: tokio::sync::Mutex<Option<(u64, Credentials)>>,
}

impl Refreshing {
    pub fn new(inner: SharedCredentialsProvider) -> Self {
        Refreshing {
            inner,
            cached: tokio::sync::Mutex::new(None),
        }
    }
}

/// Whether credentials are good for a while yet.
fn fresh(credentials: &Credentials, now: SystemTime) -> bool {
    credentials
        .expiry()
        .is_none_or(|expiry| now + REFRESH_BEFORE_EXPIRY < expiry)
}

impl ProvideCredentials for Refreshing {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(async move {
            // One load at a time: callers waiting meanwhile get its result.
            let mut cached = self.cached.lock().await;
            let generation = GENERATION.load(Ordering::SeqCst);
            if let Some((loaded_in, credentials)) = cached.as_ref()
                && *loaded_in == generation
                && fresh(credentials, SystemTime::now())
            {
                return Ok(credentials.clone());
            }
            let credentials = self.inner.provide_credentials().await?;
            tracing::debug!(
                access_key_id = credentials.access_key_id(),
                "credentials loaded"
            );
            *cached = Some((generation, credentials.clone()));
            Ok(credentials)
        })
    }
}

/// `sdk` with its credentials behind [`Refreshing`] (and no other cache).
pub fn refreshing(sdk: &SdkConfig) -> SdkConfig {
    let Some(inner) = sdk.credentials_provider() else {
        return sdk.clone();
    };
    sdk.to_builder()
        .credentials_provider(SharedCredentialsProvider::new(Refreshing::new(inner)))
        .identity_cache(IdentityCache::no_cache())
        .build()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    use super::*;

    /// Hands out `key-1`, `key-2`, ... expiring `lifetime` from now.
    #[derive(Debug)]
    struct Counting {
        loads: Arc<AtomicU32>,
        lifetime: Duration,
    }

    impl ProvideCredentials for Counting {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            let n = self.loads.fetch_add(1, Ordering::SeqCst) + 1;
            future::ProvideCredentials::ready(Ok(Credentials::new(
                format!("key-{n}"),
                "secret",
                Some("token".to_string()),
                Some(SystemTime::now() + self.lifetime),
                "test",
            )))
        }
    }

    fn provider(lifetime: Duration) -> (Refreshing, Arc<AtomicU32>) {
        let loads = Arc::new(AtomicU32::new(0));
        let inner = Counting {
            loads: loads.clone(),
            lifetime,
        };
        (
            Refreshing::new(SharedCredentialsProvider::new(inner)),
            loads,
        )
    }

    #[tokio::test]
    async fn credentials_are_kept_until_near_their_expiry_or_until_expired() {
        let (p, loads) = provider(Duration::from_secs(3600));
        let first = p.provide_credentials().await.unwrap();
        let again = p.provide_credentials().await.unwrap();
        assert_eq!(first.access_key_id(), again.access_key_id());
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        // AWS said the token expired: the next use loads again.
        expire();
        let after = p.provide_credentials().await.unwrap();
        assert_ne!(after.access_key_id(), first.access_key_id());
        assert_eq!(loads.load(Ordering::SeqCst), 2);

        // Credentials about to expire are loaded again at every use.
        let (short, loads) = provider(REFRESH_BEFORE_EXPIRY / 2);
        short.provide_credentials().await.unwrap();
        short.provide_credentials().await.unwrap();
        assert_eq!(loads.load(Ordering::SeqCst), 2);
    }
}
