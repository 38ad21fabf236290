//! `dovetail sync`: git-driven sync against the live cluster (the kube
//! client's usual kubeconfig or in-cluster configuration).

use std::sync::Arc;
use std::time::Duration;

use super::args::SyncArgs;
use super::{Io, exit, render};
use crate::api::{CapacityBuffer, EC2NodeClass, NodeOverlay, NodePool};
use crate::clock::SystemClock;
use crate::cluster::KubeCluster;
use crate::sync::{Outcome, Settings, SyncEngine, resolve_head, watch};

/// How long the first list of NodePools and EC2NodeClasses may take.
const CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(60);

pub fn run(a: &SyncArgs, io: &mut Io) -> u8 {
    let mut settings = Settings::new(&a.path);
    settings.git_ref.clone_from(&a.git_ref);
    settings.prune = a.prune;
    settings.max_prune = a.max_prune;
    settings.force_prune = a.force_prune;
    settings.allow_external_nodeclass = a.allow_external_nodeclass;
    // The repository is checked before the cluster is contacted.
    if let Err(e) = resolve_head(&settings) {
        io.error(&e, e.hint().as_deref());
        return exit::ERROR;
    }
    let Some(runtime) = super::runtime(1, io) else {
        return exit::ERROR;
    };
    runtime.block_on(async {
        let client = match crate::cluster::kube_client::connect(None, None).await {
            Ok(c) => c,
            Err(e) => {
                io.error(
                    &e,
                    Some("set KUBECONFIG or ~/.kube/config, or run inside a cluster"),
                );
                return exit::ERROR;
            }
        };
        settings.namespace = a
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        // NodeOverlays and CapacityBuffers are applied where their CRDs
        // are installed: without a cache of them, every pass would find
        // them missing, apply them again and never prune them.
        use crate::cluster::kube_client::serves;
        let overlays = serves(&client, "karpenter.sh/v1alpha1", "nodeoverlays").await;
        let buffers = serves(&client, "autoscaling.x-k8s.io/v1beta1", "capacitybuffers").await;
        let mut cluster = KubeCluster::new(client);
        let watched = (|| {
            cluster.watch::<NodePool>()?.watch::<EC2NodeClass>()?;
            if overlays {
                cluster.watch::<NodeOverlay>()?;
            }
            if buffers {
                cluster.watch::<CapacityBuffer>()?;
            }
            Ok::<(), tokio::runtime::TryCurrentError>(())
        })();
        if let Err(e) = watched {
            io.error(&e, None);
            return exit::ERROR;
        }
        match tokio::time::timeout(CACHE_SYNC_TIMEOUT, cluster.wait_until_synced()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                io.error(&e, None);
                return exit::ERROR;
            }
            Err(_) => {
                io.log(&format!(
                    "error: the cluster's NodePools and EC2NodeClasses could not be listed within {}s",
                    CACHE_SYNC_TIMEOUT.as_secs()
                ));
                io.log("hint: check that the CRDs are installed (`dovetail crds | kubectl apply -f -`) and that the credentials may list them");
                return exit::ERROR;
            }
        }
        let mut engine = SyncEngine::new(Arc::new(cluster), Arc::new(SystemClock), settings);
        if a.once {
            let outcome = engine.sync().await;
            print(&outcome, io);
            return outcome.exit_code();
        }
        let watcher = match watch::RepoWatcher::new(&a.path) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the repository; polling only");
                None
            }
        };
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        watch::run(&mut engine, watcher, a.poll_interval, |o| print(o, io), shutdown).await;
        exit::OK
    })
}

/// One line per pass (nothing for passes that did nothing), and the
/// diagnostics of an invalid revision.
fn print(outcome: &Outcome, io: &mut Io) {
    match outcome {
        Outcome::Waiting { .. } | Outcome::StillInvalid { .. } => {}
        Outcome::UpToDate { revision } => io.data(&format!("{revision}: up to date\n")),
        Outcome::Applied {
            revision,
            created,
            updated,
            pruned,
        } => {
            let mut line = format!(
                "{revision}: applied ({} created, {} updated, {} pruned)\n",
                created.len(),
                updated.len(),
                pruned.len()
            );
            for (verb, list) in [
                ("created", created),
                ("updated", updated),
                ("pruned", pruned),
            ] {
                for o in list {
                    line.push_str(&format!("  {verb} {o}\n"));
                }
            }
            io.data(&line);
        }
        Outcome::Invalid {
            revision,
            diagnostics,
        } => {
            io.data(&format!(
                "{revision}: invalid, nothing applied ({} error{})\n",
                diagnostics.len(),
                if diagnostics.len() == 1 { "" } else { "s" }
            ));
            let style = render::Style::for_stream(io.out_is_terminal);
            io.data(&render::text(diagnostics, style));
        }
        Outcome::PruneBlocked {
            revision,
            candidates,
            limit,
            ..
        } => {
            io.data(&format!(
                "{revision}: applied, but pruning {} objects exceeds --max-prune {limit}; nothing pruned: {}\n",
                candidates.len(),
                candidates.join(", ")
            ));
            io.log("hint: raise --max-prune, or pass --force-prune once");
        }
        Outcome::Partial {
            revision,
            failed,
            error,
            ..
        } => io.log(&format!(
            "error: partially applied at revision {revision}: {failed}: {error}"
        )),
        Outcome::ClusterError {
            revision, error, ..
        } => io.log(&format!("error: {revision} not applied: {error}")),
        Outcome::Source { error } => io.error(error, error.hint().as_deref()),
    }
}
