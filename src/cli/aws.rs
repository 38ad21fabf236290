//! `dovetail aws instance-types`: the AWS provider's view of the region's
//! instance types, as a table or as a catalog. `dovetail aws resolve`:
//! what an EC2NodeClass resolves to in the account and whether it is
//! ready, as the controller would find it, writing nothing.

use std::path::Path;
use std::sync::Arc;

use super::args::{
    AwsArgs, AwsClusterArgs, AwsCommand, AwsCommonArgs, AwsInstanceTypesArgs, AwsResolveArgs,
    OutputFormat,
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
        AwsCommand::Resolve(args) => resolve(args, io),
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

/// Reads one EC2NodeClass. Errors name the file, and the line and field
/// where the YAML or the object is wrong.
fn read_nodeclass(path: &Path) -> Result<EC2NodeClass, String> {
    let file = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {file}: {e}"))?;
    let doc: serde_json::Value =
        serde_saphyr::from_str(&text).map_err(|e| format!("{file}: {e}"))?;
    let line_of = |key: &str| {
        text.lines()
            .position(|l| l.trim_start().starts_with(&format!("{key}:")))
            .map_or(String::new(), |n| format!(":{}", n + 1))
    };
    let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
    if kind != "EC2NodeClass" {
        return Err(if kind.is_empty() {
            format!(
                "{file}: kind: missing; expected an EC2NodeClass (apiVersion karpenter.k8s.aws/v1)"
            )
        } else {
            format!(
                "{file}{}: kind: {kind} is not an EC2NodeClass (apiVersion karpenter.k8s.aws/v1)",
                line_of("kind")
            )
        });
    }
    let api_version = doc
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or_default();
    if api_version != "karpenter.k8s.aws/v1" {
        return Err(format!(
            "{file}{}: apiVersion: {api_version:?} is not karpenter.k8s.aws/v1",
            line_of("apiVersion")
        ));
    }
    let class: EC2NodeClass = serde_saphyr::from_str(&text).map_err(|e| format!("{file}: {e}"))?;
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
    let Some(runtime) = super::runtime(2, io) else {
        return exit::ERROR;
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

/// `dovetail aws resolve` (see `docs/aws.md`).
fn resolve(a: &AwsResolveArgs, io: &mut Io) -> u8 {
    const NODECLASS_HINT: &str = "--nodeclass takes one EC2NodeClass (karpenter.k8s.aws/v1) as YAML, e.g. examples-repo/nodeclasses/default.yaml";
    let config = match aws_config(&a.aws, Some(&a.cluster)) {
        Ok(c) => c,
        Err(e) => {
            io.log(&format!("error: {e}"));
            return exit::ERROR;
        }
    };
    let mut class = match read_nodeclass(&a.nodeclass) {
        Ok(c) => c,
        Err(e) => {
            io.log(&format!("error: {e}"));
            io.log(&format!("hint: {NODECLASS_HINT}"));
            return exit::ERROR;
        }
    };
    class
        .metadata
        .name
        .get_or_insert_with(|| "default".to_string());
    let Some(runtime) = super::runtime(2, io) else {
        return exit::ERROR;
    };
    let result = runtime.block_on(async {
        let provider = AwsProvider::new(config, Arc::new(SystemClock)).await?;
        let (traced, mut notes) = provider.resolve_read_only(&class).await?;
        let mut launches = Vec::new();
        let mut unknown = Vec::new();
        if !a.instance_types.is_empty() {
            // The user data carries what nodes need to join: the flags',
            // else eks:DescribeCluster's, as `dovetail controller` finds it.
            if let Err(e) = provider.discover_cluster(None, None).await {
                notes.push(format!(
                    "the cluster endpoint, CA and service CIDR were not discovered ({e}); pass --cluster-endpoint, --cluster-ca-bundle and --service-cidr"
                ));
            }
            let r = &traced.resolution;
            let mut with_status = class.clone();
            r.apply_to(with_status.status.get_or_insert_with(Default::default));
            let offered = provider.instance_types_for(&with_status).await?;
            for t in &a.instance_types {
                if !offered.iter().any(|o| &o.name == t) {
                    unknown.push(t.clone());
                    continue;
                }
                let plan = provider.plan_for_type(&class, r, t).await;
                launches.push(Launch::of(t, plan, provider.config().cluster_name.as_str()));
            }
        }
        Ok::<_, crate::cloud::CloudError>((
            provider.region().to_string(),
            traced,
            notes,
            launches,
            unknown,
        ))
    });
    let (region, traced, notes, launches, unknown) = match result {
        Ok(r) => r,
        Err(e) => {
            io.error(&e, Some(hint(&e)));
            return exit::PROBLEM;
        }
    };
    if !unknown.is_empty() {
        io.log(&format!(
            "error: --instance-type {}: {region} offers no such instance type in the node class's subnets' zones (or dovetail cannot launch it)",
            unknown.join(", ")
        ));
        io.log(
            "hint: dovetail aws instance-types --nodeclass FILE lists the types a launch may use",
        );
        return exit::ERROR;
    }
    let report = ResolveReport::new(&class, &region, &traced, notes, launches);
    match a.output {
        OutputFormat::Json => io.data(&format!(
            "{}\n",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        )),
        _ => io.data(&report.text()),
    }
    if report.ready {
        exit::OK
    } else {
        exit::PROBLEM
    }
}

/// What `dovetail aws resolve --output json` prints (`schema_version` 1).
#[derive(Debug, serde::Serialize)]
struct ResolveReport {
    schema_version: u32,
    nodeclass: String,
    region: String,
    ready: bool,
    amis: Vec<ReportAmi>,
    subnets: Vec<ReportSubnet>,
    security_groups: Vec<crate::api::ec2nodeclass::SecurityGroup>,
    instance_profile: Option<String>,
    conditions: Vec<ReportCondition>,
    problems: Vec<crate::cloud::NodeClassProblem>,
    notes: Vec<String>,
    launches: Vec<Launch>,
}

#[derive(Debug, serde::Serialize)]
struct ReportAmi {
    id: String,
    name: Option<String>,
    architecture: String,
    variant: String,
    deprecated: bool,
    term: Option<String>,
}

#[derive(Debug, serde::Serialize)]
struct ReportSubnet {
    id: String,
    zone: String,
    zone_id: Option<String>,
    free_addresses: Option<i32>,
}

#[derive(Debug, serde::Serialize)]
struct ReportCondition {
    #[serde(rename = "type")]
    type_: String,
    status: &'static str,
    reason: String,
    message: String,
}

/// A launch of one instance type: its template and user data, or why
/// there is none.
#[derive(Debug, serde::Serialize)]
struct Launch {
    instance_type: String,
    launch_template_name: Option<String>,
    launch_template: Option<crate::cloud::aws::launch::TemplateSpec>,
    /// The CreateLaunchTemplate `LaunchTemplateData` exactly as sent.
    launch_template_data: Option<serde_json::Value>,
    /// Decoded (as the instance reads it).
    user_data: Option<String>,
    error: Option<String>,
}

impl Launch {
    fn of(
        instance_type: &str,
        plan: Result<crate::cloud::aws::launch::LaunchPlan, crate::cloud::CloudError>,
        cluster: &str,
    ) -> Launch {
        match plan {
            Ok(plan) => {
                let spec = plan.configs.into_iter().next().map(|(s, _)| s);
                Launch {
                    instance_type: instance_type.to_string(),
                    launch_template_name: spec.as_ref().map(|s| s.name(cluster)),
                    user_data: spec.as_ref().map(|s| s.user_data.clone()),
                    launch_template_data: spec
                        .as_ref()
                        .map(|s| crate::cloud::aws::launch::request_data_json(&s.request_data())),
                    launch_template: spec,
                    error: None,
                }
            }
            Err(e) => Launch {
                instance_type: instance_type.to_string(),
                launch_template_name: None,
                launch_template: None,
                launch_template_data: None,
                user_data: None,
                error: Some(e.to_string()),
            },
        }
    }
}

/// An image's architecture and variant, from its requirements.
fn arch_and_variant(ami: &crate::api::ec2nodeclass::Ami) -> (String, String) {
    let mut arch = "amd64".to_string();
    let mut variant = "any";
    for r in &ami.requirements {
        match (r.key.as_str(), r.operator.as_str()) {
            (crate::model::labels::ARCH, "In") => {
                if let Some(v) = r.values.as_ref().and_then(|v| v.first()) {
                    arch.clone_from(v);
                }
            }
            ("karpenter.k8s.aws/instance-gpu-count", "Exists") => variant = "nvidia",
            ("karpenter.k8s.aws/instance-accelerator-count", "Exists") => variant = "neuron",
            ("karpenter.k8s.aws/instance-gpu-count", "DoesNotExist") if variant == "any" => {
                variant = "standard";
            }
            _ => {}
        }
    }
    (arch, variant.to_string())
}

impl ResolveReport {
    fn new(
        class: &EC2NodeClass,
        region: &str,
        traced: &crate::cloud::aws::nodeclass::Traced,
        notes: Vec<String>,
        launches: Vec<Launch>,
    ) -> ResolveReport {
        let r = &traced.resolution;
        ResolveReport {
            schema_version: 1,
            nodeclass: class.metadata.name.clone().unwrap_or_default(),
            region: region.to_string(),
            ready: r.is_ready(),
            amis: r
                .amis
                .iter()
                .map(|a| {
                    let (architecture, variant) = arch_and_variant(a);
                    ReportAmi {
                        id: a.id.clone(),
                        name: a.name.clone(),
                        architecture,
                        variant,
                        deprecated: a.deprecated.unwrap_or(false),
                        term: traced.terms.get(&a.id).cloned(),
                    }
                })
                .collect(),
            subnets: r
                .subnets
                .iter()
                .map(|s| ReportSubnet {
                    id: s.id.clone(),
                    zone: s.zone.clone(),
                    zone_id: s.zone_id.clone(),
                    free_addresses: traced.free_addresses.get(&s.id).copied(),
                })
                .collect(),
            security_groups: r.security_groups.clone(),
            instance_profile: r.instance_profile.clone(),
            conditions: r
                .conditions()
                .into_iter()
                .map(|c| ReportCondition {
                    type_: c.type_.to_string(),
                    status: if c.status { "True" } else { "False" },
                    reason: c.reason,
                    message: c.message,
                })
                .collect(),
            problems: r.problems.clone(),
            notes,
            launches,
        }
    }

    fn text(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(o, "EC2NodeClass {} in {}", self.nodeclass, self.region);
        let _ = writeln!(o, "Ready: {}", if self.ready { "True" } else { "False" });
        let _ = writeln!(o, "\nImages:");
        if self.amis.is_empty() {
            let _ = writeln!(o, "  (none)");
        }
        for a in &self.amis {
            let _ = writeln!(
                o,
                "  {:<22} {:<6} {:<9} {}{}  <- {}",
                a.id,
                a.architecture,
                a.variant,
                a.name.as_deref().unwrap_or("-"),
                if a.deprecated { " (deprecated)" } else { "" },
                a.term.as_deref().unwrap_or("-")
            );
        }
        let _ = writeln!(o, "\nSubnets:");
        if self.subnets.is_empty() {
            let _ = writeln!(o, "  (none)");
        }
        for s in &self.subnets {
            let _ = writeln!(
                o,
                "  {:<26} {:<12} {:<10} {} free addresses",
                s.id,
                s.zone,
                s.zone_id.as_deref().unwrap_or("-"),
                s.free_addresses
                    .map_or_else(|| "?".to_string(), |n| n.to_string())
            );
        }
        let _ = writeln!(o, "\nSecurity groups:");
        if self.security_groups.is_empty() {
            let _ = writeln!(o, "  (none)");
        }
        for g in &self.security_groups {
            let _ = writeln!(o, "  {:<22} {}", g.id, g.name.as_deref().unwrap_or("-"));
        }
        let _ = writeln!(
            o,
            "\nInstance profile: {}",
            self.instance_profile.as_deref().unwrap_or("(none)")
        );
        let _ = writeln!(o, "\nConditions:");
        for c in &self.conditions {
            let _ = write!(o, "  {:<26} {:<5} {}", c.type_, c.status, c.reason);
            if !c.message.is_empty() {
                let _ = write!(o, ": {}", c.message);
            }
            let _ = writeln!(o);
        }
        if !self.problems.is_empty() {
            let _ = writeln!(o, "\nProblems:");
            for p in &self.problems {
                let _ = writeln!(o, "  {} ({}): {}", p.condition, p.reason, p.message);
            }
        }
        if !self.notes.is_empty() {
            let _ = writeln!(o, "\nNotes:");
            for n in &self.notes {
                let _ = writeln!(o, "  {n}");
            }
        }
        for l in &self.launches {
            let _ = writeln!(o, "\nLaunch of {}:", l.instance_type);
            if let Some(e) = &l.error {
                let _ = writeln!(o, "  not possible: {e}");
                continue;
            }
            if let Some(name) = &l.launch_template_name {
                let _ = writeln!(o, "  launch template {name}");
            }
            if let Some(t) = &l.launch_template_data {
                // As CreateLaunchTemplate sends it; the user data follows,
                // decoded.
                let mut value = t.clone();
                if let Some(m) = value.as_object_mut() {
                    m.remove("UserData");
                }
                let data = serde_json::to_string_pretty(&value).unwrap_or_default();
                for line in data.lines() {
                    let _ = writeln!(o, "    {line}");
                }
            }
            if let Some(u) = &l.user_data {
                let _ = writeln!(o, "  user data:");
                for line in u.lines() {
                    let _ = writeln!(o, "    {line}");
                }
            }
        }
        o
    }
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
