//! Argument types. Doc comments here are the `--help` text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Environment variables dovetail reads.
pub mod env {
    /// Disables colour when set to a non-empty value (<https://no-color.org>).
    pub const NO_COLOR: &str = "NO_COLOR";
    /// Log filter for stderr, in `tracing_subscriber::EnvFilter` syntax.
    pub const LOG: &str = "DOVETAIL_LOG";
    /// Karpenter's feature gates (`Name=bool,...`), read by `controller`,
    /// `simulate`, `plan` and `validate` when `--feature-gates` is not given.
    pub const FEATURE_GATES: &str = "FEATURE_GATES";
}

/// `--feature-gates`: checked as it is parsed, so a mistake is a usage error.
fn parse_feature_gates(s: &str) -> Result<String, String> {
    crate::controller::features::FeatureGates::parse(s).map(|_| s.to_string())
}

/// dovetail: a Karpenter-compatible node autoscaler for EKS, driven by git.
#[derive(Debug, Parser)]
#[command(name = "dovetail", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a configuration repository: schema, CEL rules, runtime checks and references.
    Validate(ValidateArgs),
    /// Print the CustomResourceDefinitions generated from dovetail's API types.
    Crds(CrdsArgs),
    /// Plan capacity for pending pods once, outside any cluster: the NodeClaims dovetail would launch.
    Plan(PlanArgs),
    /// Run the controller against a simulated cluster and EC2 on a virtual clock (default: the bundled demo).
    Simulate(SimulateArgs),
    /// Show what changes between two commits (or a commit and a live cluster), and with --impact what it does to running nodes.
    Diff(DiffArgs),
    /// Write the state of a live cluster as a snapshot file (a v1/List), as plan, diff and simulate read it.
    Snapshot(SnapshotArgs),
    /// Apply each new commit of a ref to the cluster: validate, dry-run, apply in order, optionally prune.
    Sync(SyncArgs),
    /// Inspect what the AWS provider sees: instance types with their allocatable resources and prices.
    Aws(AwsArgs),
    /// Run the autoscaler in a cluster: kube-rs watches, the AWS provider, config sync, leader election, metrics.
    Controller(Box<ControllerArgs>),
}

impl Command {
    /// Whether the command runs until it is stopped (the controller, a
    /// served cluster) rather than finishing its work and exiting.
    pub fn runs_until_stopped(&self) -> bool {
        match self {
            Command::Controller(_) => true,
            Command::Simulate(a) => a.serve.is_some(),
            _ => false,
        }
    }
}

/// Where the configuration is read from.
#[derive(Debug, Clone, Args)]
pub struct RepoArgs {
    /// The configuration repository: a git repository (or a directory inside one) or a plain directory.
    #[arg(default_value = ".")]
    pub path: PathBuf,
    /// Read the committed tree of this git ref (branch, tag, commit).
    #[arg(long = "ref", value_name = "REF", conflicts_with = "worktree")]
    pub git_ref: Option<String>,
    /// Read the files on disk instead of a committed tree.
    #[arg(long)]
    pub worktree: bool,
}

/// Output formats; each command accepts the ones that make sense for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
    Markdown,
    Junit,
    Github,
    Sarif,
    Html,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Output format.
    #[arg(long, short, default_value = "text", value_parser = formats(&["text", "json", "markdown", "junit", "github", "sarif"]))]
    pub output: OutputFormat,
    /// Treat warnings as errors.
    #[arg(long)]
    pub strict: bool,
    /// Karpenter's feature gates the controller runs with (Name=bool,...; default: FEATURE_GATES): a static NodePool is inactive without StaticCapacity=true.
    #[arg(long, value_name = "GATES", value_parser = parse_feature_gates)]
    pub feature_gates: Option<String>,
    /// Instance-type catalog; warns about requirements no instance type of it satisfies.
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
    /// Accept nodeClassRefs to EC2NodeClasses that are not in the repository.
    #[arg(long)]
    pub allow_external_nodeclass: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("uses_nodes").args(["impact", "forecast"]).multiple(true)))]
pub struct DiffArgs {
    /// The configuration repository: a git repository or a directory inside one.
    #[arg(default_value = ".")]
    pub path: PathBuf,
    /// The old revision (branch, tag, commit), e.g. the pull request's base [default with --worktree: HEAD].
    #[arg(
        long,
        value_name = "REF",
        required_unless_present_any = ["cluster", "worktree"],
        conflicts_with = "cluster"
    )]
    pub from: Option<String>,
    /// Compare --from (default HEAD) with the files on disk instead of --to, as `git diff` does.
    #[arg(long, conflicts_with_all = ["cluster", "merge_base", "to"])]
    pub worktree: bool,
    /// The new revision, e.g. the pull request's head.
    #[arg(
        long,
        visible_alias = "ref",
        value_name = "REF",
        default_value = "HEAD"
    )]
    pub to: String,
    /// Compare the merge base of --from and --to with --to, as code review shows a branch.
    #[arg(long, conflicts_with = "cluster")]
    pub merge_base: bool,
    /// Compare the live cluster's NodePools and EC2NodeClasses (kubeconfig or in-cluster config) with --to.
    #[arg(long)]
    pub cluster: bool,
    /// Add what the change does to running nodes: drift, limits, budget pacing (needs --snapshot or --cluster).
    #[arg(long)]
    pub impact: bool,
    /// The cluster for --impact and --forecast: a snapshot file, as `dovetail snapshot` or kubectl writes it.
    #[arg(
        long,
        value_name = "FILE",
        requires = "uses_nodes",
        conflicts_with = "cluster"
    )]
    pub snapshot: Option<PathBuf>,
    /// Instance-type catalog: prices the nodes --impact reports, and what --forecast launches [default: the built-in one].
    #[arg(long, value_name = "FILE", requires = "uses_nodes")]
    pub catalog: Option<PathBuf>,
    /// Forecast the change: the snapshot's cluster simulated with each side's configuration for --for, side by side (needs --snapshot or --cluster).
    #[arg(long)]
    pub forecast: bool,
    /// With --forecast: how long each side runs.
    #[arg(
        long = "for",
        value_name = "DURATION",
        default_value = "24h",
        requires = "forecast"
    )]
    pub forecast_for: String,
    /// With --forecast: a Deployment scaled during the window, e.g. deployment/shop/web=40@2h (at 2 hours in); repeatable.
    #[arg(long, value_name = "deployment/NS/NAME=N@OFFSET", requires = "forecast", value_parser = crate::simulate::forecast::ScaleChange::parse)]
    pub scale: Vec<crate::simulate::forecast::ScaleChange>,
    /// With --forecast: how many instances a capacity reservation the snapshot's EC2NodeClasses hold has in all, e.g. cr-0123456789abcdef0=8 (default: as many as the snapshot has nodes in it, so none left); repeatable.
    #[arg(long, value_name = "ID=COUNT", requires = "forecast", value_parser = crate::simulate::forecast::parse_reservation_count)]
    pub reservation: Vec<(String, u32)>,
    /// With --forecast: the time from launching an instance to its node being Ready.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "45s",
        requires = "forecast"
    )]
    pub launch_delay: String,
    /// With --forecast: Karpenter's feature gates both sides' controllers run with (Name=bool,...; default: FEATURE_GATES, else Karpenter's defaults).
    #[arg(long, value_name = "GATES", requires = "forecast", value_parser = parse_feature_gates)]
    pub feature_gates: Option<String>,
    /// With --forecast: how both sides' controllers treat preferred affinities, ScheduleAnyway spreads and PreferNoSchedule (Karpenter's PREFERENCE_POLICY).
    #[arg(
        long,
        value_enum,
        value_name = "POLICY",
        ignore_case = true,
        requires = "forecast"
    )]
    pub preference_policy: Option<PreferencesArg>,
    /// With --forecast: write each side's whole simulation report into DIR (a.json, a.html, b.json, b.html; the HTML with the charts of `simulate --output html`).
    #[arg(long, value_name = "DIR", requires = "forecast")]
    pub forecast_reports: Option<PathBuf>,
    /// The time one wave of replacements takes in --impact's estimates (launch a node, drain the old one).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5m",
        requires = "impact"
    )]
    pub replacement_time: String,
    /// Output format.
    #[arg(long, short, default_value = "text", value_parser = formats(&["text", "markdown", "json"]))]
    pub output: OutputFormat,
    /// Accept nodeClassRefs to EC2NodeClasses that are not in the repository.
    #[arg(long)]
    pub allow_external_nodeclass: bool,
}

/// Where the controller's capacity comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CloudArg {
    Aws,
    Kwok,
}

/// Whether soft scheduling constraints count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PreferencesArg {
    /// Honour preferences, relaxing them one at a time only when a pod cannot be placed otherwise.
    Respect,
    /// Drop preferences entirely.
    Ignore,
}

impl From<PreferencesArg> for crate::scheduling::Preferences {
    fn from(p: PreferencesArg) -> Self {
        match p {
            PreferencesArg::Respect => crate::scheduling::Preferences::Respect,
            PreferencesArg::Ignore => crate::scheduling::Preferences::Ignore,
        }
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Instance-type catalog (instanceTypes[] with allocatable and offerings).
    #[arg(long, value_name = "FILE")]
    pub catalog: PathBuf,
    /// Pending pods: multi-document YAML, a v1/List, or JSON lines.
    #[arg(long, value_name = "FILE")]
    pub pods: PathBuf,
    /// Existing cluster state (nodes, NodeClaims, pods, DaemonSets, volumes), as kubectl prints it.
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
    /// Respect or ignore preferred affinities, spread and PreferNoSchedule.
    #[arg(long, value_enum, default_value_t = PreferencesArg::Respect)]
    pub preferences: PreferencesArg,
    /// Output format.
    #[arg(long, short, default_value = "text", value_parser = formats(&["text", "json"]))]
    pub output: OutputFormat,
    /// Karpenter's feature gates (Name=bool,...; default: FEATURE_GATES, else Karpenter v1.14.1's defaults).
    #[arg(long, value_name = "GATES", value_parser = parse_feature_gates)]
    pub feature_gates: Option<String>,
}

/// `--output` of a command that prints only some formats: `--help` lists
/// just those, and any other is a usage error.
fn formats(
    names: &'static [&'static str],
) -> impl clap::builder::TypedValueParser<Value = OutputFormat> {
    clap::builder::TypedValueParser::try_map(
        clap::builder::PossibleValuesParser::new(names.iter().copied()),
        |s| OutputFormat::from_str(&s, false),
    )
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The scenario file (see docs/simulate.md); without one, the bundled demo runs.
    pub scenario: Option<PathBuf>,
    /// Simulate until this offset from the start (e.g. 24h) instead of the scenario's `until`.
    #[arg(long, value_name = "DURATION")]
    pub until: Option<String>,
    /// Instance-type catalog for the simulated EC2 (default: the built-in one).
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
    /// Output format: a readable timeline (text), the report (json), or the report as one self-contained HTML page with charts (html).
    #[arg(long, short, default_value = "text", value_parser = formats(&["text", "json", "html"]))]
    pub output: OutputFormat,
    /// Write the output to this file instead of stdout (never through a symlink).
    #[arg(long, value_name = "PATH")]
    pub output_file: Option<PathBuf>,
    /// Write the controller's metrics at the end of the run to FILE, in the Prometheus text format /metrics serves.
    #[arg(long, value_name = "FILE")]
    pub metrics: Option<PathBuf>,
    /// With --metrics: a snapshot every DURATION of simulated time (e.g. 1m), all in FILE as one OpenMetrics text with a timestamp on every sample, for `promtool tsdb create-blocks-from openmetrics`.
    #[arg(long, value_name = "DURATION", requires = "metrics")]
    pub metrics_every: Option<String>,
    /// With --metrics: a label added to every sample, as a scrape adds its target's (e.g. job=karpenter, which Karpenter's performance dashboard selects); repeatable.
    #[arg(long, value_name = "NAME=VALUE", requires = "metrics", value_parser = parse_metrics_label)]
    pub metrics_label: Vec<(String, String)>,
    /// Write the cluster as it stands at the end of the run as a snapshot, in the format `dovetail snapshot` writes (YAML for a .yaml or .yml file, else JSON), for `diff --forecast --snapshot` and `plan --snapshot`.
    #[arg(long, value_name = "FILE")]
    pub snapshot_out: Option<PathBuf>,
    /// Karpenter's feature gates (Name=bool,...; default: FEATURE_GATES); each gate named here wins over the scenario's settings.featureGates.
    #[arg(long, value_name = "GATES", value_parser = parse_feature_gates)]
    pub feature_gates: Option<String>,
    /// How the controller treats preferences (Karpenter's PREFERENCE_POLICY) [default: the scenario's settings.preferencePolicy, else respect].
    #[arg(long, value_enum, value_name = "POLICY", ignore_case = true)]
    pub preference_policy: Option<PreferencesArg>,
    /// Serve the simulated cluster as a Kubernetes API on ADDR, a loopback address such as 127.0.0.1:8443 (port 0: any free port), running in real time until interrupted or the scenario ends; kubectl and `dovetail controller` can use it.
    #[arg(long, value_name = "ADDR")]
    pub serve: Option<String>,
    /// With --serve: write a kubeconfig for the served API to FILE.
    #[arg(long, value_name = "FILE", requires = "serve")]
    pub kubeconfig_out: Option<PathBuf>,
    /// With --serve: record every write request (verb, resource, name, response code, user agent) in FILE, one JSON line each, as the API server's audit log does.
    #[arg(long, value_name = "FILE", requires = "serve")]
    pub audit_log: Option<PathBuf>,
    /// With --serve: run SPEED times as fast as real time (with the in-process controller only; an external controller keeps real time).
    #[arg(long, value_name = "SPEED", default_value_t = 1.0, value_parser = parse_speed)]
    pub speed: f64,
    /// With --serve: `in-process` runs dovetail's controller in this process; `none` leaves the cluster to an external `dovetail controller`.
    #[arg(long, value_name = "WHERE", default_value = "in-process", value_parser = ["in-process", "none"])]
    pub controller: String,
    /// With --serve --controller none: the EC2 API (such as moto) whose running instances tagged for --cluster-name get Nodes [default: the simulated EC2].
    #[arg(long, value_name = "URL", requires = "serve")]
    pub ec2_endpoint: Option<String>,
    /// With --ec2-endpoint: the cluster name the instances are tagged with.
    #[arg(long, value_name = "NAME", default_value = "dovetail")]
    pub cluster_name: String,
    /// With --ec2-endpoint: the AWS region [default: AWS_REGION, else the scenario's].
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
    /// With --serve: a fault of the served API, `key=value,...` with verb, resource, latency, status, retryAfter, dropWatchAfter, writeTimeout and times (e.g. verb=create,resource=nodeclaims,status=429,retryAfter=1,times=3); repeatable, added to the scenario's `faults:`.
    #[arg(long, value_name = "SPEC", requires = "serve", value_parser = crate::world::faults::FaultRule::parse)]
    pub fault: Vec<crate::world::faults::FaultRule>,
    /// With --serve: keep only the last EVENTS changes of each kind for watches from a resource version (default 1048576); a watch from an older one gets a 410 Expired ERROR event, as from an API server whose watch cache has moved past it, so clients' relists can be tried.
    #[arg(long, value_name = "EVENTS", requires = "serve", value_parser = parse_watch_log)]
    pub watch_log: Option<usize>,
}

/// `--watch-log`: a positive number of events.
fn parse_watch_log(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{s:?} is not a positive number of events")),
    }
}

/// `--speed`: a positive multiple of real time.
fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number (1 is real time)")),
    }
}

/// `--metrics-label NAME=VALUE`: a Prometheus label name (not one of the
/// reserved `__` names) and any value.
fn parse_metrics_label(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=VALUE (e.g. job=karpenter)"))?;
    let valid = name
        .chars()
        .enumerate()
        .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
    if name.is_empty() || !valid || name.starts_with("__") {
        return Err(format!(
            "{name:?} is not a label name: letters, digits and _, not starting with a digit or __"
        ));
    }
    Ok((name.to_string(), value.to_string()))
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// Output format: yaml or json [default: from --out-file's extension, else json]. (Deprecated: a file name here, as before; use --out-file.)
    #[arg(long, short, value_name = "FORMAT")]
    pub output: Option<String>,
    /// Write to this file instead of stdout (never through a symlink).
    #[arg(long, value_name = "FILE")]
    pub out_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The configuration repository: a git repository, a directory inside one, or git-sync's --link.
    #[arg(default_value = ".")]
    pub path: PathBuf,
    /// Apply the commits of this git ref (branch, tag, commit).
    #[arg(long = "ref", value_name = "REF", default_value = "HEAD")]
    pub git_ref: String,
    /// One pass, then exit: 0 applied or up to date, 1 invalid revision or prune blocked, 2 repository, usage or cluster error.
    #[arg(long)]
    pub once: bool,
    /// Delete objects dovetail applied earlier that are no longer in the repository (never those annotated dovetail.dev/prune: disabled).
    #[arg(long)]
    pub prune: bool,
    /// Most objects pruned per revision [default: the larger of 1 and 10% of the managed objects, rounded up].
    #[arg(long, value_name = "N", requires = "prune")]
    pub max_prune: Option<usize>,
    /// Prune beyond --max-prune.
    #[arg(long, requires = "prune")]
    pub force_prune: bool,
    /// Fallback poll of the repository, for filesystems without change notification (e.g. 30s, 5m).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_poll_interval)]
    pub poll_interval: std::time::Duration,
    /// Namespace of the status ConfigMap `dovetail-sync-status` and its Events [default: the kube client's namespace].
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Accept nodeClassRefs to EC2NodeClasses that are not in the repository.
    #[arg(long)]
    pub allow_external_nodeclass: bool,
}

fn parse_poll_interval(s: &str) -> Result<std::time::Duration, String> {
    use crate::timing::{DurationSyntax, NillableDuration, parse_duration};
    match parse_duration(s, DurationSyntax::Hms)? {
        NillableDuration::After(d) if !d.is_zero() => Ok(d),
        _ => Err(format!(
            "{s:?} is not a positive duration such as 30s or 5m"
        )),
    }
}

#[derive(Debug, Args)]
pub struct CrdsArgs {
    /// Write one file per CRD into this directory instead of printing them.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct AwsArgs {
    #[command(subcommand)]
    pub command: AwsCommand,
}

#[derive(Debug, Subcommand)]
pub enum AwsCommand {
    /// Print the instance types dovetail can launch, as the controller sees them: labels, capacity, overhead, allocatable and priced offerings (--output json: a catalog for simulate --catalog and plan --catalog).
    InstanceTypes(AwsInstanceTypesArgs),
    /// Print what an EC2NodeClass resolves to in the account (images and the terms that chose them, subnets, security groups, instance profile) and its readiness with every problem; with --instance-type, the launch template and user data a launch of that type would use. Writes nothing to AWS.
    Resolve(AwsResolveArgs),
}

#[derive(Debug, Args)]
pub struct AwsResolveArgs {
    #[command(flatten)]
    pub aws: AwsCommonArgs,
    #[command(flatten)]
    pub cluster: AwsClusterArgs,
    /// The EC2NodeClass (YAML) to resolve.
    #[arg(long, value_name = "FILE")]
    pub nodeclass: PathBuf,
    /// Also print the launch template data and decoded user data a launch of this instance type would use (repeatable).
    #[arg(long = "instance-type", value_name = "TYPE")]
    pub instance_types: Vec<String>,
    /// Output format: a report (text) or JSON (schema in docs/aws.md).
    #[arg(long, short, default_value = "text", value_parser = formats(&["text", "json"]))]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct AwsInstanceTypesArgs {
    #[command(flatten)]
    pub aws: AwsCommonArgs,
    /// An EC2NodeClass (YAML) whose kubelet settings, AMI family and block devices apply, offered in the zones of its status.subnets if it has them.
    #[arg(long, value_name = "FILE")]
    pub nodeclass: Option<PathBuf>,
    /// Output format: a table (text) or a catalog (json).
    #[arg(long, short, default_value = "text", value_parser = formats(&["text", "json"]))]
    pub output: OutputFormat,
}

/// How dovetail reaches AWS and computes instance types.
#[derive(Debug, Clone, Args)]
pub struct AwsCommonArgs {
    /// The AWS region [default: AWS_REGION or the profile's].
    #[arg(long, value_name = "REGION", env = "DOVETAIL_REGION")]
    pub region: Option<String>,
    /// Send AWS calls to this endpoint, e.g. an emulator or a VPC endpoint [default: AWS_ENDPOINT_URL, else the service's].
    #[arg(long, value_name = "URL", env = "DOVETAIL_AWS_ENDPOINT_URL")]
    pub endpoint_url: Option<String>,
    /// On-demand prices (see docs/aws.md) for types the Pricing API does not price, or for every type when it cannot be reached.
    #[arg(long, value_name = "FILE", env = "DOVETAIL_PRICING_FILE")]
    pub pricing_file: Option<PathBuf>,
    /// Do not call the Pricing API (isolated VPCs): on-demand prices come from --pricing-file alone.
    #[arg(long, env = "DOVETAIL_ISOLATED_VPC")]
    pub isolated_vpc: bool,
    /// The share of each instance's memory the hypervisor keeps, in percent.
    #[arg(
        long,
        value_name = "PERCENT",
        default_value_t = 7.5,
        env = "DOVETAIL_VM_MEMORY_OVERHEAD_PERCENT"
    )]
    pub vm_memory_overhead_percent: f64,
    /// Network interfaces left out of the ENI-limited max pods.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        env = "DOVETAIL_RESERVED_ENIS"
    )]
    pub reserved_enis: i64,
}

/// What the AWS provider needs to launch nodes for a cluster; for the
/// controller's command line, with [`AwsCommonArgs`].
#[derive(Debug, Clone, Args)]
pub struct AwsClusterArgs {
    /// The EKS cluster's name: instances are tagged kubernetes.io/cluster/NAME.
    #[arg(long, value_name = "NAME", env = "DOVETAIL_CLUSTER_NAME")]
    pub cluster_name: String,
    /// The cluster's Kubernetes version (e.g. 1.34), for AMI aliases [default: the API server's].
    #[arg(long, value_name = "VERSION", env = "DOVETAIL_KUBERNETES_VERSION")]
    pub kubernetes_version: Option<String>,
    /// Where AMI alias parameters are read in SSM.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/aws/service",
        env = "DOVETAIL_SSM_PARAMETER_ROOT"
    )]
    pub ssm_parameter_root: String,
    /// The cluster's API server endpoint, for nodes to join [default: eks:DescribeCluster's].
    #[arg(long, value_name = "URL", env = "DOVETAIL_CLUSTER_ENDPOINT")]
    pub cluster_endpoint: Option<String>,
    /// The cluster's certificate authority (base64), for nodes to join [default: the one the controller trusts, else eks:DescribeCluster's].
    #[arg(long, value_name = "BASE64", env = "DOVETAIL_CLUSTER_CA_BUNDLE")]
    pub cluster_ca_bundle: Option<String>,
    /// The cluster's service CIDR [default: eks:DescribeCluster's] (nodes' cluster DNS is the kube-dns Service's IP, else its .10 address).
    #[arg(long, value_name = "CIDR", env = "DOVETAIL_SERVICE_CIDR")]
    pub service_cidr: Option<String>,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    /// One JSON object per line.
    Json,
}

/// `dovetail controller`. Every flag can be set by the `DOVETAIL_*`
/// environment variable named in its help.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    #[command(flatten)]
    pub cluster: AwsClusterArgs,
    #[command(flatten)]
    pub aws: AwsCommonArgs,
    /// Where capacity comes from: aws (EC2), or kwok (Nodes that KWOK keeps alive, launched from an instance-type catalog's types and prices: no AWS account needed; the cluster runs KWOK with --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake).
    #[arg(long, value_enum, value_name = "CLOUD", default_value_t = CloudArg::Aws, ignore_case = true, env = "DOVETAIL_CLOUD")]
    pub cloud: CloudArg,
    /// With --cloud kwok: the instance-type catalog to launch from [default: the built-in one].
    #[arg(long, value_name = "FILE", env = "DOVETAIL_CATALOG")]
    pub catalog: Option<PathBuf>,
    /// With --cloud kwok: from an instance's launch to its Node's registration.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_poll_interval, env = "DOVETAIL_REGISTRATION_DELAY")]
    pub registration_delay: std::time::Duration,
    /// With --cloud kwok: a simulate scenario file whose region, zones and cloud section the capacity follows (insufficientCapacity and launchErrors windows count from the controller's start).
    #[arg(long, value_name = "FILE", env = "DOVETAIL_CLOUD_SCENARIO")]
    pub cloud_scenario: Option<PathBuf>,
    /// The SQS queue (name or URL) EventBridge routes EC2 interruption events to (spot interruption warnings, rebalance recommendations, scheduled changes, state changes); polled while leading. Karpenter's interruptionQueue setting.
    #[arg(long, value_name = "NAME", env = "DOVETAIL_INTERRUPTION_QUEUE")]
    pub interruption_queue: Option<String>,
    /// The configuration repository to sync NodePools and EC2NodeClasses from (e.g. git-sync's --link); without it, nothing is synced.
    #[arg(long, value_name = "PATH", env = "DOVETAIL_CONFIG_REPO")]
    pub config_repo: Option<PathBuf>,
    /// The branch (or any git ref) of the configuration repository whose commits are applied.
    #[arg(
        long,
        value_name = "REF",
        default_value = "HEAD",
        env = "DOVETAIL_CONFIG_BRANCH"
    )]
    pub config_branch: String,
    /// Fallback poll of the configuration repository (e.g. 30s, 5m).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_poll_interval, env = "DOVETAIL_POLL_INTERVAL")]
    pub poll_interval: std::time::Duration,
    /// Delete objects synced earlier that are no longer in the repository.
    #[arg(long, env = "DOVETAIL_PRUNE")]
    pub prune: bool,
    /// A provisioning batch closes when no new pending pod arrived for this long...
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_poll_interval, env = "DOVETAIL_BATCH_IDLE_DURATION")]
    pub batch_idle_duration: std::time::Duration,
    /// ...or when it has been open this long.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_poll_interval, env = "DOVETAIL_BATCH_MAX_DURATION")]
    pub batch_max_duration: std::time::Duration,
    /// How provisioning and consolidation treat preferred node and pod affinities, ScheduleAnyway topology spreads and PreferNoSchedule taints (Karpenter's PREFERENCE_POLICY): respect relaxes them one at a time only when a pod fits nowhere otherwise (so they can keep nodes from being consolidated); ignore drops them.
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = PreferencesArg::Respect, ignore_case = true, env = "DOVETAIL_PREFERENCE_POLICY")]
    pub preference_policy: PreferencesArg,
    /// Karpenter's feature gates, as Karpenter spells them: Name=bool,... (NodeRepair, ReservedCapacity, SpotToSpotConsolidation, NodeOverlay, StaticCapacity, CapacityBuffer) [default: FEATURE_GATES, else Karpenter v1.14.1's defaults].
    #[arg(long, value_name = "GATES", value_parser = parse_feature_gates, env = "DOVETAIL_FEATURE_GATES")]
    pub feature_gates: Option<String>,
    /// Spot-to-spot consolidation (an alias of SpotToSpotConsolidation=true): a spot node may be replaced by cheaper spot capacity (with at least 15 cheaper types). Off by default, as Karpenter's SpotToSpotConsolidation feature gate.
    #[arg(long, value_name = "BOOL", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", env = "DOVETAIL_FEATURE_SPOT_TO_SPOT")]
    pub feature_spot_to_spot: bool,
    /// Act on EC2 rebalance recommendations from the interruption queue (not only on interruptions).
    #[arg(long, value_name = "BOOL", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", env = "DOVETAIL_FEATURE_REBALANCE")]
    pub feature_rebalance: bool,
    /// Port of /metrics.
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = 8080,
        env = "DOVETAIL_METRICS_PORT"
    )]
    pub metrics_port: u16,
    /// Port of /healthz and /readyz (may equal --metrics-port).
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = 8081,
        env = "DOVETAIL_HEALTH_PORT"
    )]
    pub health_port: u16,
    /// Log filter: a level (error, warn, info, debug, trace) or tracing directives (dovetail=debug,kube=warn).
    #[arg(
        long,
        value_name = "FILTER",
        default_value = "info",
        env = "DOVETAIL_LOG_LEVEL"
    )]
    pub log_level: String,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "DOVETAIL_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Namespace of the leader-election Lease and the sync status ConfigMap [default: the kube client's namespace].
    #[arg(long, value_name = "NAMESPACE", env = "DOVETAIL_NAMESPACE")]
    pub namespace: Option<String>,
    /// Elect a leader among replicas with a Lease; only the leader writes. Off: this replica always writes.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", env = "DOVETAIL_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "dovetail-leader",
        env = "DOVETAIL_LEASE_NAME"
    )]
    pub lease_name: String,
    /// This replica's identity in the Lease [default: HOSTNAME, the pod's name].
    #[arg(long, value_name = "NAME", env = "DOVETAIL_IDENTITY")]
    pub identity: Option<String>,
    /// The kubeconfig file whose current context to use [default: in-cluster, else KUBECONFIG or ~/.kube/config].
    #[arg(long, value_name = "FILE", env = "DOVETAIL_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// How long the first list of every watched kind may take before the controller gives up.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_poll_interval, env = "DOVETAIL_CACHE_SYNC_TIMEOUT")]
    pub cache_sync_timeout: std::time::Duration,
    /// While leading, /healthz fails when no controller pass has finished (or one has run) for this long, so the kubelet restarts a wedged controller.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_poll_interval, env = "DOVETAIL_LIVENESS_TIMEOUT")]
    pub liveness_timeout: std::time::Duration,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[test]
    fn controller_flags_default_and_read_their_environment_variables() {
        let parse = |args: &[&str]| match super::Cli::try_parse_from(args).unwrap().command {
            super::Command::Controller(a) => *a,
            other => panic!("{other:?}"),
        };
        let a = parse(&["dovetail", "controller", "--cluster-name", "prod"]);
        assert_eq!(a.cluster.cluster_name, "prod");
        // Karpenter's default: SpotToSpotConsolidation=false.
        assert!(!a.feature_spot_to_spot);
        assert!(
            !crate::cli::controller::settings(&a)
                .unwrap()
                .spot_to_spot_consolidation
        );
        assert!(
            !crate::cli::controller::settings(&a)
                .unwrap()
                .static_capacity
        );
        assert!(!a.feature_rebalance);
        assert!(a.leader_elect);
        assert_eq!((a.metrics_port, a.health_port), (8080, 8081));
        assert_eq!(a.batch_idle_duration, std::time::Duration::from_secs(1));
        assert_eq!(a.batch_max_duration, std::time::Duration::from_secs(10));
        assert_eq!(a.log_format, super::LogFormat::Text);
        assert_eq!(a.interruption_queue, None);
        assert!(
            !crate::cli::controller::settings(&a)
                .unwrap()
                .rebalance_as_interruption
        );
        let a = parse(&[
            "dovetail",
            "controller",
            "--cluster-name=prod",
            "--feature-spot-to-spot",
            "--feature-rebalance",
            "--log-format=json",
            "--batch-max-duration=30s",
            "--interruption-queue=dovetail-prod",
        ]);
        assert!(a.feature_spot_to_spot);
        assert!(a.feature_rebalance);
        assert!(
            crate::cli::controller::settings(&a)
                .unwrap()
                .rebalance_as_interruption
        );
        assert!(
            crate::cli::controller::settings(&a)
                .unwrap()
                .spot_to_spot_consolidation
        );
        assert_eq!(a.interruption_queue.as_deref(), Some("dovetail-prod"));
        assert_eq!(a.log_format, super::LogFormat::Json);
        assert_eq!(a.batch_max_duration, std::time::Duration::from_secs(30));
        let a = parse(&[
            "dovetail",
            "controller",
            "--cluster-name=prod",
            "--feature-gates=StaticCapacity=true,SpotToSpotConsolidation=true",
        ]);
        let s = crate::cli::controller::settings(&a).unwrap();
        assert!(s.static_capacity && s.spot_to_spot_consolidation);
        // An unknown gate is a usage error that lists the known ones.
        let e = super::Cli::try_parse_from([
            "dovetail",
            "controller",
            "--cluster-name=prod",
            "--feature-gates=Static=true",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("StaticCapacity (default false)"), "{e}");
        // Every controller flag names its DOVETAIL_* variable.
        use clap::CommandFactory;
        let cmd = super::Cli::command();
        let controller = cmd.find_subcommand("controller").unwrap();
        for arg in controller.get_arguments() {
            if matches!(arg.get_id().as_str(), "help" | "version") {
                continue;
            }
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            assert!(
                env.as_deref().is_some_and(|e| e.starts_with("DOVETAIL_")),
                "--{} has no DOVETAIL_* variable",
                arg.get_id()
            );
        }
        assert!(
            super::Cli::try_parse_from([
                "dovetail",
                "controller",
                "--cluster-name=x",
                "--batch-idle-duration=0s"
            ])
            .is_err()
        );
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
