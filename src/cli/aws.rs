//! `dovetail aws instance-types`: the AWS provider's view of the region's
//! instance types, as a table or as a catalog.

use std::path::Path;
use std::sync::Arc;

use super::args::{
    AwsArgs, AwsClusterArgs, AwsCommand, AwsCommonArgs, AwsInstanceTypesArgs, OutputFormat,
};
use super::{Io, exit};
use crate::api::EC2NodeClass;
use crate::clock::SystemClock;
use crate::cloud::aws::{AwsConfig, AwsProvider, ClusterAccess};
use crate::model::InstanceType;
use crate::model::quantity::{CPU, MEMORY, PODS, format_quantity};

/// Listing instance types tags nothing, so no cluster name is needed; the
/// provider's configuration still carries one.
const NO_CLUSTER: &str = "(none)";

pub fn run(a: &AwsArgs, io: &mut Io) -> u8 {
    match &a.command {
        AwsCommand::InstanceTypes(args) => instance_types(args, io),
    }
}

/// The provider configuration of the command-line flags.
pub fn aws_config(
    common: &AwsCommonArgs,
    cluster: Option<&AwsClusterArgs>,
) -> Result<AwsConfig, String> {
    let mut c = AwsConfig::new(cluster.map_or(NO_CLUSTER, |c| c.cluster_name.as_str()));
    c.region.clone_from(&common.region);
    c.endpoint_url.clone_from(&common.endpoint_url);
    c.pricing_file.clone_from(&common.pricing_file);
    c.isolated_vpc = common.isolated_vpc;
    c.vm_memory_overhead = common.vm_memory_overhead_percent / 100.0;
    c.reserved_enis = common.reserved_enis;
    if let Some(k) = cluster {
        c.kubernetes_version.clone_from(&k.kubernetes_version);
        c.ssm_parameter_root.clone_from(&k.ssm_parameter_root);
        c.cluster = ClusterAccess {
            endpoint: k.cluster_endpoint.clone(),
            ca_bundle: k.cluster_ca_bundle.clone(),
            service_cidr: k.service_cidr.clone(),
            dns_ip: None,
        };
    }
    c.validate()?;
    Ok(c)
}

fn read_nodeclass(path: &Path) -> Result<EC2NodeClass, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let class: EC2NodeClass =
        serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(class)
}

fn instance_types(a: &AwsInstanceTypesArgs, io: &mut Io) -> u8 {
    let config = match aws_config(&a.aws, None) {
        Ok(c) => c,
        Err(e) => {
            io.log(&format!("error: {e}"));
            return exit::ERROR;
        }
    };
    let nodeclass = match &a.nodeclass {
        Some(path) => match read_nodeclass(path) {
            Ok(c) => c,
            Err(e) => {
                io.log(&format!("error: {e}"));
                io.log("hint: --nodeclass takes one EC2NodeClass as YAML, e.g. examples-repo/nodeclasses/default.yaml");
                return exit::ERROR;
            }
        },
        None => EC2NodeClass::test("default"),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            io.error(&e, None);
            return exit::ERROR;
        }
    };
    let result = runtime.block_on(async {
        let provider = AwsProvider::new(config, Arc::new(SystemClock)).await?;
        let types = provider.instance_types_for(&nodeclass).await?;
        let unpriced = provider.unpriced_types().await?;
        Ok::<_, crate::cloud::CloudError>((provider.region().to_string(), types, unpriced))
    });
    let (region, types, unpriced) = match result {
        Ok(r) => r,
        Err(e) => {
            io.error(&e, Some(hint(&e)));
            return exit::ERROR;
        }
    };
    if !unpriced.is_empty() {
        io.log(&format!(
            "note: {} instance types of {region} have no on-demand price: they are offered as spot only, or left out without a spot price either (first: {})",
            unpriced.len(),
            unpriced.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    match a.output {
        OutputFormat::Json => {
            let doc = serde_json::json!({
                "schema_version": 1,
                "region": region,
                "instanceTypes": crate::model::catalog::catalog_json(&types),
            });
            io.data(&format!(
                "{}\n",
                serde_json::to_string_pretty(&doc).unwrap_or_default()
            ));
        }
        _ => io.data(&table(&types)),
    }
    exit::OK
}

fn hint(e: &crate::cloud::CloudError) -> &'static str {
    use crate::cloud::CloudError;
    match e {
        CloudError::AccessDenied { .. } => {
            "grant the actions of deploy/iam-policy.json to these credentials"
        }
        CloudError::InvalidRequest(m) if m.contains("region") => "pass --region or set AWS_REGION",
        CloudError::Api(m) if m.contains("on-demand prices") => {
            "pass --pricing-file (see docs/aws.md), or allow pricing:GetProducts"
        }
        _ => {
            "check the AWS credentials, region and endpoint (AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL)"
        }
    }
}

/// One line per instance type, cheapest on-demand first: capacity,
/// allocatable, the number of offerings and the lowest on-demand and spot
/// prices.
fn table(types: &[InstanceType]) -> String {
    let lowest = |t: &InstanceType, ct: &str| {
        t.cheapest_offering(|o| o.capacity_type == ct)
            .map(|o| o.price)
    };
    let mut rows: Vec<(&InstanceType, Option<f64>, Option<f64>)> = types
        .iter()
        .map(|t| (t, lowest(t, "on-demand"), lowest(t, "spot")))
        .collect();
    rows.sort_by(|a, b| {
        let key = |r: &(&InstanceType, Option<f64>, Option<f64>)| r.1.unwrap_or(f64::INFINITY);
        key(a)
            .total_cmp(&key(b))
            .then_with(|| a.0.name.cmp(&b.0.name))
    });
    let price = |p: Option<f64>| p.map_or_else(|| "-".to_string(), |p| format!("{p:.4}"));
    let mut out = format!(
        "{:<22} {:>6} {:>10} {:>5} {:>10} {:>10} {:>6} {:>10} {:>10}\n",
        "NAME", "CPU", "MEMORY", "PODS", "ALLOC-CPU", "ALLOC-MEM", "OFFERS", "OD-$/H", "SPOT-$/H"
    );
    for (t, od, spot) in rows {
        out.push_str(&format!(
            "{:<22} {:>6} {:>10} {:>5} {:>10} {:>10} {:>6} {:>10} {:>10}\n",
            t.name,
            format_quantity(CPU, t.capacity.get(CPU)),
            format_quantity(MEMORY, t.capacity.get(MEMORY)),
            t.capacity.get(PODS),
            format_quantity(CPU, t.allocatable.get(CPU)),
            format_quantity(MEMORY, t.allocatable.get(MEMORY)),
            t.offerings.len(),
            price(od),
            price(spot),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Controller {
        #[command(flatten)]
        common: AwsCommonArgs,
        #[command(flatten)]
        cluster: AwsClusterArgs,
    }

    #[test]
    fn flags_become_the_provider_config() {
        let c = Controller::try_parse_from([
            "x",
            "--cluster-name",
            "prod",
            "--region",
            "eu-west-1",
            "--vm-memory-overhead-percent",
            "5",
            "--ssm-parameter-root",
            "/test/service",
            "--kubernetes-version",
            "1.34",
            "--cluster-endpoint",
            "https://k8s",
            "--cluster-ca-bundle",
            "Q0E=",
        ])
        .expect("parses");
        let config = aws_config(&c.common, Some(&c.cluster)).expect("valid");
        assert_eq!(config.cluster_name, "prod");
        assert_eq!(config.region.as_deref(), Some("eu-west-1"));
        assert!((config.vm_memory_overhead - 0.05).abs() < 1e-12);
        assert_eq!(config.ssm_parameter_root, "/test/service");
        assert_eq!(config.cluster.endpoint.as_deref(), Some("https://k8s"));
        let bad = Controller::try_parse_from([
            "x",
            "--cluster-name",
            "prod",
            "--ssm-parameter-root",
            "relative",
        ])
        .expect("parses");
        let e = aws_config(&bad.common, Some(&bad.cluster)).unwrap_err();
        assert!(e.contains("SSM parameter root"), "{e}");
    }
}
