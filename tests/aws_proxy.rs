//! A small HTTP proxy on 127.0.0.1 in front of moto that injects the
//! faults moto never produces:
//! - throttling (`RequestLimitExceeded`, `ThrottlingException`) for the
//!   next N calls of an action;
//! - access denied (`UnauthorizedOperation`, `AccessDeniedException`) for
//!   an action;
//! - a service down: 503 `ServiceUnavailable` for an action;
//! - insufficient capacity: CreateFleet overrides of a faulted instance
//!   type are taken out of the request moto sees and reported back in the
//!   answer's `errorSet` with `InsufficientInstanceCapacity`, as EC2 does
//!   for an `instant` fleet (moto launches from the overrides left; with
//!   none left the answer has errors and no instance); overrides into a
//!   subnet out of addresses likewise, with
//!   `InsufficientFreeAddressesInSubnet`;
//! - partial success: with [`Faults::fleet_capacity`] left, a CreateFleet
//!   for more instances launches what is left and reports the shortfall
//!   against its first override;
//! - a missing Spot service-linked role: a spot CreateFleet is answered
//!   with `AuthFailure.ServiceLinkedRoleCreationNotPermitted` and no
//!   instance;
//! - a lost answer: a CreateFleet is carried out, then answered 503;
//! - EC2's idempotency, which moto lacks: a CreateFleet with a
//!   `ClientToken` seen before gets the first answer again, launching
//!   nothing;
//! - the Pricing API, which moto lacks: GetProducts answers come from
//!   recorded responses, page by page (the bare-metal query's apart);
//! - a TerminateInstances that leaves the instance running;
//! - AMI deprecation, which moto lacks: images named deprecated carry a
//!   past `deprecationTime` and, as EC2 answers for images the caller does
//!   not own, are left out of DescribeImages unless the request sets
//!   `IncludeDeprecated=true` or names them in `ImageId.N`;
//! - capacity reservations, which moto lacks: DescribeCapacityReservations
//!   is answered from [`Faults::reservations`] (ids, `state`, `tag:`,
//!   `tag-key`, `owner-id`, `instance-match-criteria` filters); a
//!   CreateLaunchTemplate's target reservation is remembered by template
//!   id, and a CreateFleet override through a template whose reservation
//!   has no room is refused with `ReservationCapacityExceeded` (moto
//!   launches the others, each taking room), and DescribeInstances reports
//!   the instances launched into a reservation as EC2 does (its
//!   `capacityReservationId`, preference `capacity-reservations-only`);
//! - throttling for a while: every call of an action is throttled until
//!   an instant ([`Faults::throttle_until`]);
//! - EC2's eventual consistency ([`Faults::unlisted_for`]): an instance
//!   CreateFleet launched is left out of DescribeInstances for a while,
//!   and DescribeInstances, CreateTags and TerminateInstances naming it
//!   are answered `InvalidInstanceID.NotFound`, as EC2 answers for
//!   seconds after a launch;
//! - expired credentials: a request signed with an access key of
//!   [`Faults::expired_keys`] is answered `ExpiredToken`;
//! - placement groups, which moto lacks: DescribePlacementGroups is
//!   answered from [`Faults::placement_groups`] (`GroupId.N`,
//!   `GroupName.N`, the `state` filter), with EC2's
//!   `InvalidPlacementGroup.Unknown` for a name or id it does not know.
//!
//! Every request's action is logged, so tests can count calls (dry-runs
//! apart: a `DryRun=true` request goes to moto as it is, which answers
//! `DryRunOperation` unless the action is denied here).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does to requests.
#[derive(Default)]
pub struct Faults {
    /// Action -> how many more of its calls are throttled.
    pub throttle: HashMap<String, u32>,
    /// Action -> until when every call of it is throttled.
    pub throttle_until: HashMap<String, Instant>,
    /// How long an instance CreateFleet launched stays unknown to EC2's
    /// reads (see the module documentation).
    pub unlisted_for: Option<Duration>,
    /// Instance id -> when CreateFleet launched it.
    pub launched_at: HashMap<String, Instant>,
    /// Access key ids whose session token has expired.
    pub expired_keys: BTreeSet<String>,
    /// Actions answered with access denied.
    pub deny: BTreeSet<String>,
    /// Actions whose service is down: answered 503 `ServiceUnavailable`.
    pub unavailable: BTreeSet<String>,
    /// Instance types CreateFleet has no capacity for (every zone).
    pub no_capacity: BTreeSet<String>,
    /// Subnets with no free address.
    pub full_subnets: BTreeSet<String>,
    /// How many more instances EC2 has capacity for, whatever the type: a
    /// CreateFleet for more launches what is left and reports the rest
    /// `InsufficientInstanceCapacity` (partial success).
    pub fleet_capacity: Option<u32>,
    /// Spot CreateFleets fail for want of the Spot service-linked role.
    pub spot_role_missing: bool,
    /// How many more CreateFleet answers are lost: the fleet is launched,
    /// then the caller gets a 503.
    pub lose_fleet_answers: u32,
    /// ClientToken -> the answer to the first CreateFleet carrying it.
    pub fleet_answers: HashMap<String, Vec<u8>>,
    /// Recorded GetProducts responses (JSON bodies), served in order: the
    /// request with `NextToken` T gets the page after the one that
    /// returned T.
    pub pricing_pages: Vec<String>,
    /// The same for the bare-metal query (product family `Compute
    /// Instance (bare metal)`).
    pub pricing_metal_pages: Vec<String>,
    /// TerminateInstances is answered as if the instance kept running,
    /// and not carried out.
    pub terminate_keeps_running: bool,
    /// Images EC2 reports deprecated (another account's, so hidden
    /// unless the request asks for deprecated images).
    pub deprecated_images: BTreeSet<String>,
    /// Capacity reservations EC2 has.
    pub reservations: Vec<Reservation>,
    /// Placement groups EC2 has: (id, name, strategy, partition count,
    /// state).
    pub placement_groups: Vec<(String, String, String, u32, String)>,
    /// Launch template id -> the reservation its data targets.
    pub template_reservations: HashMap<String, String>,
    /// Instance id -> the reservation it was launched into.
    pub instance_reservations: HashMap<String, String>,
}

/// A capacity reservation as the proxy's EC2 has it.
#[derive(Debug, Clone)]
pub struct Reservation {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub owner_id: String,
    /// `open` or `targeted`.
    pub match_criteria: String,
    /// `default` or `capacity-block`.
    pub reservation_type: String,
    pub state: String,
    pub end_date: Option<String>,
    pub tags: BTreeMap<String, String>,
    /// What DescribeCapacityReservations reports as available.
    pub available: u32,
    /// How many more instances CreateFleet launches into it (EC2's count
    /// may lag behind launches; tests set both).
    pub room: u32,
}

impl Reservation {
    fn matches(&self, ids: &[String], filters: &[(String, Vec<String>)]) -> bool {
        (ids.is_empty() || ids.contains(&self.id))
            && filters.iter().all(|(name, values)| {
                let got = match name.as_str() {
                    "state" => Some(self.state.clone()),
                    "owner-id" => Some(self.owner_id.clone()),
                    "instance-match-criteria" => Some(self.match_criteria.clone()),
                    "tag-key" => return values.iter().any(|k| self.tags.contains_key(k)),
                    n => match n.strip_prefix("tag:") {
                        Some(k) => self.tags.get(k).cloned(),
                        None => None,
                    },
                };
                got.is_some_and(|g| values.contains(&g))
            })
    }

    fn xml(&self) -> String {
        let tags: String = self
            .tags
            .iter()
            .map(|(k, v)| format!("<item><key>{k}</key><value>{v}</value></item>"))
            .collect();
        let end = self
            .end_date
            .as_ref()
            .map(|e| format!("<endDate>{e}</endDate>"))
            .unwrap_or_default();
        format!(
            "<item><capacityReservationId>{id}</capacityReservationId><ownerId>{owner}</ownerId>\
             <instanceType>{it}</instanceType><instancePlatform>Linux/UNIX</instancePlatform>\
             <availabilityZone>{zone}</availabilityZone><tenancy>default</tenancy>\
             <totalInstanceCount>{total}</totalInstanceCount><availableInstanceCount>{avail}</availableInstanceCount>\
             <state>{state}</state>{end}<instanceMatchCriteria>{imc}</instanceMatchCriteria>\
             <reservationType>{rt}</reservationType><tagSet>{tags}</tagSet></item>",
            id = self.id,
            owner = self.owner_id,
            it = self.instance_type,
            zone = self.zone,
            total = self.available.max(1),
            avail = self.available,
            state = self.state,
            imc = self.match_criteria,
            rt = self.reservation_type,
        )
    }
}

/// DescribeCapacityReservations answered from the proxy's reservations.
fn describe_reservations(body: &str, faults: &Arc<Mutex<Faults>>) -> (String, Vec<u8>) {
    let params = form(body);
    let ids: Vec<String> = params
        .iter()
        .filter(|(k, _)| k.starts_with("CapacityReservationId."))
        .map(|(_, v)| v.clone())
        .collect();
    let mut filters: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for (k, v) in &params {
        let parts: Vec<&str> = k.split('.').collect();
        match parts.as_slice() {
            ["Filter", n, "Name"] => filters.entry(n.to_string()).or_default().0 = v.clone(),
            ["Filter", n, "Value", _] => {
                filters.entry(n.to_string()).or_default().1.push(v.clone())
            }
            _ => {}
        }
    }
    let filters: Vec<(String, Vec<String>)> = filters.into_values().collect();
    let f = faults.lock().unwrap();
    if let Some(missing) = ids
        .iter()
        .find(|id| !f.reservations.iter().any(|r| &r.id == *id))
    {
        return (
            "400 Bad Request".to_string(),
            ec2_error(
                "InvalidCapacityReservationId.NotFound",
                &format!("The capacity reservation ID '{missing}' does not exist"),
            ),
        );
    }
    let items: String = f
        .reservations
        .iter()
        .filter(|r| r.matches(&ids, &filters))
        .map(Reservation::xml)
        .collect();
    (
        "200 OK".to_string(),
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeCapacityReservationsResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>dovetail-proxy</requestId><capacityReservationSet>{items}</capacityReservationSet></DescribeCapacityReservationsResponse>"
        )
        .into_bytes(),
    )
}

/// DescribePlacementGroups answered from the proxy's placement groups.
fn describe_placement_groups(body: &str, faults: &Arc<Mutex<Faults>>) -> (String, Vec<u8>) {
    let params = form(body);
    let named = |prefix: &str| -> Vec<String> {
        params
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect()
    };
    let (ids, names) = (named("GroupId."), named("GroupName."));
    let states: Vec<String> = params
        .iter()
        .filter(|(k, _)| k.starts_with("Filter.") && k.contains(".Value."))
        .map(|(_, v)| v.clone())
        .collect();
    let f = faults.lock().unwrap();
    let known = |v: &String, by_id: bool| {
        f.placement_groups
            .iter()
            .any(|g| if by_id { &g.0 == v } else { &g.1 == v })
    };
    if let Some(missing) = ids
        .iter()
        .map(|i| (i, true))
        .chain(names.iter().map(|n| (n, false)))
        .find(|(v, by_id)| !known(v, *by_id))
    {
        return (
            "400 Bad Request".to_string(),
            ec2_error(
                "InvalidPlacementGroup.Unknown",
                &format!("The Placement Group '{}' is unknown.", missing.0),
            ),
        );
    }
    let items: String = f
        .placement_groups
        .iter()
        .filter(|g| ids.is_empty() || ids.contains(&g.0))
        .filter(|g| names.is_empty() || names.contains(&g.1))
        .filter(|g| states.is_empty() || states.contains(&g.4))
        .map(|(id, name, strategy, partitions, state)| {
            let count = if *partitions > 0 {
                format!("<partitionCount>{partitions}</partitionCount>")
            } else {
                String::new()
            };
            format!(
                "<item><groupName>{name}</groupName><groupId>{id}</groupId><state>{state}</state><strategy>{strategy}</strategy>{count}</item>"
            )
        })
        .collect();
    (
        "200 OK".to_string(),
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribePlacementGroupsResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>dovetail-proxy</requestId><placementGroupSet>{items}</placementGroupSet></DescribePlacementGroupsResponse>"
        )
        .into_bytes(),
    )
}

/// A request as the proxy saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub action: String,
    pub body: String,
    /// `DryRun=true`: an authorization check, which does nothing.
    pub dry_run: bool,
    /// When it arrived.
    pub at: Instant,
    /// The access key id it was signed with.
    pub key: Option<String>,
}

pub struct Proxy {
    pub addr: SocketAddr,
    pub faults: Arc<Mutex<Faults>>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Proxy {
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many calls of `action` reached the proxy, dry-runs apart.
    pub fn count(&self, action: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.action == action && !s.dry_run)
            .count()
    }

    /// How many dry-runs of `action` reached the proxy.
    pub fn dry_runs(&self, action: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.action == action && s.dry_run)
            .count()
    }

    /// Calls of `action` per minute since `start`, dry-runs apart: the
    /// count in each whole or partial minute up to now.
    pub fn per_minute(&self, action: &str, start: Instant) -> Vec<usize> {
        let minutes = (start.elapsed().as_secs() / 60 + 1) as usize;
        let mut out = vec![0; minutes];
        for s in self.seen.lock().unwrap().iter() {
            if s.action == action && !s.dry_run && s.at >= start {
                let m = ((s.at - start).as_secs() / 60) as usize;
                if let Some(c) = out.get_mut(m) {
                    *c += 1;
                }
            }
        }
        out
    }

    /// The access key ids requests were signed with, in first-seen order.
    pub fn keys(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in self.seen.lock().unwrap().iter() {
            if let Some(k) = &s.key
                && !out.contains(k)
            {
                out.push(k.clone());
            }
        }
        out
    }

    /// The bodies of the calls of `action`, dry-runs apart.
    pub fn bodies(&self, action: &str) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.action == action && !s.dry_run)
            .map(|s| s.body.clone())
            .collect()
    }
}

/// Starts a proxy to `upstream` (moto) on a free port of 127.0.0.1, served
/// by a task of the current tokio runtime.
pub async fn start(upstream: SocketAddr) -> Proxy {
    assert!(upstream.ip().is_loopback(), "tests only talk to 127.0.0.1");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let faults = Arc::new(Mutex::new(Faults::default()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (f, s) = (faults.clone(), seen.clone());
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let (f, s) = (f.clone(), s.clone());
            tokio::spawn(async move {
                let _ = serve(conn, upstream, f, s).await;
            });
        }
    });
    Proxy { addr, faults, seen }
}

struct Request {
    head: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

async fn read_request(conn: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let text = String::from_utf8_lossy(&buf[..header_end]).to_string();
    let mut lines = text.split("\r\n");
    let head = lines.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[header_end + 4..].to_vec();
    while body.len() < len {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(Some(Request {
        head,
        headers,
        body,
    }))
}

async fn respond(
    conn: &mut TcpStream,
    status: &str,
    content_type: &str,
    extra: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes()).await?;
    conn.write_all(body).await?;
    conn.flush().await
}

/// An AWS error answer with `status`: in the JSON protocols' form
/// (`__type` and the `x-amzn-ErrorType` header) when `json`, else in
/// EC2's XML.
async fn respond_error(
    conn: &mut TcpStream,
    (json, status): (bool, &str),
    code: &str,
    message: &str,
) -> std::io::Result<()> {
    if json {
        let body = serde_json::json!({"__type": code, "message": message}).to_string();
        respond(
            conn,
            status,
            "application/x-amz-json-1.1",
            &[("x-amzn-ErrorType", code)],
            body.as_bytes(),
        )
        .await
    } else {
        respond(conn, status, "text/xml", &[], &ec2_error(code, message)).await
    }
}

/// Sends a request to moto and returns (status line, content type, body).
async fn forward(
    upstream: SocketAddr,
    req: &Request,
    body: &[u8],
) -> std::io::Result<(String, String, Vec<u8>)> {
    let mut up = TcpStream::connect(upstream).await?;
    let (method_path, _) = req.head.rsplit_once(' ').unwrap_or((&req.head, ""));
    // HTTP/1.0 with Connection: close: the answer ends at EOF, unchunked.
    let mut out = format!("{method_path} HTTP/1.0\r\n");
    for (k, v) in &req.headers {
        let lower = k.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "content-length" | "connection" | "transfer-encoding"
        ) {
            continue;
        }
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    up.write_all(out.as_bytes()).await?;
    up.write_all(body).await?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer).await?;
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(answer.len());
    let head = String::from_utf8_lossy(&answer[..end]).to_string();
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_once(' '))
        .map(|(_, s)| s.to_string())
        .unwrap_or_else(|| "502 Bad Gateway".to_string());
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| "text/xml".to_string());
    Ok((
        status,
        content_type,
        answer[(end + 4).min(answer.len())..].to_vec(),
    ))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

/// The form parameters of an EC2 query request, decoded, in order.
fn form(body: &str) -> Vec<(String, String)> {
    body.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn ec2_error(code: &str, message: &str) -> Vec<u8> {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>dovetail-proxy</RequestID></Response>"
    )
    .into_bytes()
}

/// A removed CreateFleet override.
struct Refused {
    instance_type: String,
    subnet: String,
    zone: String,
    template: String,
    code: &'static str,
}

/// Takes the overrides of faulted types and full subnets out of a
/// CreateFleet request. Returns the new body (configs and overrides
/// renumbered), the refused overrides and whether any override is left.
fn strip_overrides(
    params: &[(String, String)],
    faulted: &BTreeSet<String>,
    full_subnets: &BTreeSet<String>,
    full_templates: &BTreeSet<String>,
) -> (String, Vec<Refused>, bool) {
    // (config, override) -> fields
    let mut overrides: BTreeMap<(usize, usize), BTreeMap<String, String>> = BTreeMap::new();
    let mut templates: BTreeMap<usize, String> = BTreeMap::new();
    let mut rest = Vec::new();
    for (k, v) in params {
        let parts: Vec<&str> = k.split('.').collect();
        match parts.as_slice() {
            ["LaunchTemplateConfigs", c, "Overrides", o, field] => {
                let key = (c.parse().unwrap_or(0), o.parse().unwrap_or(0));
                overrides
                    .entry(key)
                    .or_default()
                    .insert(field.to_string(), v.clone());
            }
            [
                "LaunchTemplateConfigs",
                c,
                "LaunchTemplateSpecification",
                field,
            ] => {
                let c: usize = c.parse().unwrap_or(0);
                if *field == "LaunchTemplateId" || *field == "LaunchTemplateName" {
                    templates.insert(c, v.clone());
                }
                rest.push((k.clone(), v.clone()));
            }
            _ => rest.push((k.clone(), v.clone())),
        }
    }
    let mut refused = Vec::new();
    let mut kept: BTreeMap<usize, Vec<BTreeMap<String, String>>> = BTreeMap::new();
    for ((c, _), fields) in overrides {
        let it = fields.get("InstanceType").cloned().unwrap_or_default();
        let subnet = fields.get("SubnetId").cloned().unwrap_or_default();
        let template = templates.get(&c).cloned().unwrap_or_default();
        let code = if full_templates.contains(&template) {
            Some("ReservationCapacityExceeded")
        } else if faulted.contains(&it) {
            Some("InsufficientInstanceCapacity")
        } else if full_subnets.contains(&subnet) {
            Some("InsufficientFreeAddressesInSubnet")
        } else {
            None
        };
        if let Some(code) = code {
            refused.push(Refused {
                instance_type: it,
                subnet,
                zone: fields.get("AvailabilityZone").cloned().unwrap_or_default(),
                template: templates.get(&c).cloned().unwrap_or_default(),
                code,
            });
        } else {
            kept.entry(c).or_default().push(fields);
        }
    }
    // Configs keep their numbers' order; those left empty are dropped.
    let renumber: BTreeMap<usize, usize> =
        kept.keys().enumerate().map(|(i, c)| (*c, i + 1)).collect();
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in rest {
        let parts: Vec<&str> = k.split('.').collect();
        if let ["LaunchTemplateConfigs", c, tail @ ..] = parts.as_slice() {
            let c: usize = c.parse().unwrap_or(0);
            if let Some(n) = renumber.get(&c) {
                out.push((format!("LaunchTemplateConfigs.{n}.{}", tail.join(".")), v));
            }
            continue;
        }
        out.push((k, v));
    }
    for (c, list) in &kept {
        let n = renumber[c];
        for (o, fields) in list.iter().enumerate() {
            for (field, v) in fields {
                out.push((
                    format!("LaunchTemplateConfigs.{n}.Overrides.{}.{field}", o + 1),
                    v.clone(),
                ));
            }
        }
    }
    let body = out
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    (body, refused, !kept.is_empty())
}

fn error_set(refused: &[Refused], lifecycle: &str) -> String {
    let mut out = String::from("<errorSet>");
    for r in refused {
        let template = if r.template.starts_with("lt-") {
            format!("<launchTemplateId>{}</launchTemplateId>", r.template)
        } else {
            format!("<launchTemplateName>{}</launchTemplateName>", r.template)
        };
        let message = match r.code {
            "InsufficientFreeAddressesInSubnet" => format!(
                "There are not enough free addresses in subnet '{}' to satisfy the requested number of instances.",
                r.subnet
            ),
            "ReservationCapacityExceeded" => {
                "Insufficient capacity in the targeted capacity reservation.".to_string()
            }
            "AuthFailure.ServiceLinkedRoleCreationNotPermitted" => {
                "The provided credentials do not have permission to create the service-linked role for EC2 Spot Instances.".to_string()
            }
            _ => format!(
                "We currently do not have sufficient {} capacity in the Availability Zone you requested ({}).",
                r.instance_type, r.zone
            ),
        };
        out.push_str(&format!(
            "<item><launchTemplateAndOverrides><launchTemplateSpecification>{template}<version>1</version></launchTemplateSpecification>\
             <overrides><instanceType>{it}</instanceType><subnetId>{subnet}</subnetId><availabilityZone>{zone}</availabilityZone></overrides></launchTemplateAndOverrides>\
             <lifecycle>{lifecycle}</lifecycle><errorCode>{code}</errorCode>\
             <errorMessage>{message}</errorMessage></item>",
            it = r.instance_type,
            subnet = r.subnet,
            zone = r.zone,
            code = r.code,
        ));
    }
    out.push_str("</errorSet>");
    out
}

/// A CreateFleet as EC2 would answer it under the faults: a token seen
/// before gets its first answer again; a spot fleet without the Spot
/// service-linked role fails; overrides of faulted types and full subnets
/// are refused and moto launches from the rest.
async fn fleet(
    upstream: SocketAddr,
    req: &Request,
    body: &str,
    faults: &Arc<Mutex<Faults>>,
) -> std::io::Result<(String, String, Vec<u8>)> {
    let mut params = form(body);
    // EC2 has room for so many instances in all: a fleet for more gets
    // what is left.
    let shortfall = {
        let mut f = faults.lock().unwrap();
        match f.fleet_capacity.as_mut() {
            Some(left) => {
                let total: u32 = params
                    .iter()
                    .find(|(k, _)| k == "TargetCapacitySpecification.TotalTargetCapacity")
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(1);
                let launched = total.min(*left);
                *left -= launched;
                for (k, v) in params.iter_mut() {
                    if k.starts_with("TargetCapacitySpecification.")
                        && k.ends_with("TargetCapacity")
                    {
                        let asked: u32 = v.parse().unwrap_or(0);
                        *v = asked.min(launched).to_string();
                    }
                }
                total - launched
            }
            None => 0,
        }
    };
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let token = param("ClientToken");
    let lifecycle = param("TargetCapacitySpecification.DefaultTargetCapacityType")
        .unwrap_or_else(|| "on-demand".to_string());
    // The templates the request names, and those whose reservation is full.
    let named: BTreeSet<String> = params
        .iter()
        .filter(|(k, _)| k.ends_with(".LaunchTemplateSpecification.LaunchTemplateId"))
        .map(|(_, v)| v.clone())
        .collect();
    let (faulted, full, role_missing, full_templates) = {
        let f = faults.lock().unwrap();
        if let Some(answer) = token.as_ref().and_then(|t| f.fleet_answers.get(t)) {
            return Ok(("200 OK".to_string(), "text/xml".to_string(), answer.clone()));
        }
        let full_templates: BTreeSet<String> = named
            .iter()
            .filter(|t| {
                f.template_reservations
                    .get(*t)
                    .is_some_and(|id| f.reservations.iter().any(|r| &r.id == id && r.room == 0))
            })
            .cloned()
            .collect();
        (
            f.no_capacity.clone(),
            f.full_subnets.clone(),
            f.spot_role_missing,
            full_templates,
        )
    };
    let empty = |errors: String| {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CreateFleetResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>dovetail-proxy</requestId><fleetId>fleet-00000000-0000-0000-0000-000000000000</fleetId>{errors}<fleetInstanceSet/></CreateFleetResponse>"
        )
        .into_bytes()
    };
    let (stripped, mut refused, mut any_left) =
        strip_overrides(&params, &faulted, &full, &full_templates);
    if shortfall > 0 {
        // Reported against the first override, as EC2 reports a fleet
        // it could not fill.
        let (_, all, _) = strip_overrides(
            &params,
            &params
                .iter()
                .filter(|(k, _)| k.ends_with(".InstanceType"))
                .map(|(_, v)| v.clone())
                .collect(),
            &BTreeSet::new(),
            &BTreeSet::new(),
        );
        refused.extend(all.into_iter().take(1));
        any_left &= params
            .iter()
            .any(|(k, v)| k == "TargetCapacitySpecification.TotalTargetCapacity" && v != "0");
    }
    let answer = if role_missing && lifecycle == "spot" {
        // EC2 reports it once, against the override it tried first.
        let (_, all, _) = strip_overrides(
            &params,
            &params
                .iter()
                .filter(|(k, _)| k.ends_with(".InstanceType"))
                .map(|(_, v)| v.clone())
                .collect(),
            &BTreeSet::new(),
            &BTreeSet::new(),
        );
        let mut first: Vec<Refused> = all.into_iter().take(1).collect();
        for r in &mut first {
            r.code = "AuthFailure.ServiceLinkedRoleCreationNotPermitted";
        }
        (
            "200 OK".to_string(),
            "text/xml".to_string(),
            empty(error_set(&first, &lifecycle)),
        )
    } else if refused.is_empty() {
        forward(upstream, req, &req.body).await?
    } else if !any_left {
        (
            "200 OK".to_string(),
            "text/xml".to_string(),
            empty(error_set(&refused, &lifecycle)),
        )
    } else {
        let errors = error_set(&refused, &lifecycle);
        let (status, ct, answer) = forward(upstream, req, stripped.as_bytes()).await?;
        let text = String::from_utf8_lossy(&answer).to_string();
        let text = match text.rfind("</CreateFleetResponse>") {
            Some(i) => format!("{}{errors}{}", &text[..i], &text[i..]),
            None => text,
        };
        (status, ct, text.into_bytes())
    };
    // What launched into a reservation takes its room.
    if answer.0.starts_with("200") && String::from_utf8_lossy(&answer.2).contains("<instanceIds>") {
        let mut f = faults.lock().unwrap();
        let now = Instant::now();
        for id in fleet_instances(&String::from_utf8_lossy(&answer.2)) {
            f.launched_at.entry(id).or_insert(now);
        }
        let targeted: Vec<String> = named
            .iter()
            .filter(|t| !full_templates.contains(*t))
            .filter_map(|t| f.template_reservations.get(t).cloned())
            .collect();
        let launched = fleet_instances(&String::from_utf8_lossy(&answer.2));
        for id in targeted {
            if let Some(r) = f.reservations.iter_mut().find(|r| r.id == id) {
                r.room = r.room.saturating_sub(1);
            }
            for instance in &launched {
                f.instance_reservations.insert(instance.clone(), id.clone());
            }
        }
    }
    if let Some(t) = token
        && answer.0.starts_with("200")
    {
        faults
            .lock()
            .unwrap()
            .fleet_answers
            .insert(t, answer.2.clone());
    }
    Ok(answer)
}

async fn serve(
    mut conn: TcpStream,
    upstream: SocketAddr,
    faults: Arc<Mutex<Faults>>,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> std::io::Result<()> {
    let Some(req) = read_request(&mut conn).await? else {
        return Ok(());
    };
    let body = String::from_utf8_lossy(&req.body).to_string();
    let target = req.header("x-amz-target").map(str::to_string);
    let json = target.is_some();
    let action = match &target {
        Some(t) => t.rsplit('.').next().unwrap_or_default().to_string(),
        None => form(&body)
            .into_iter()
            .find(|(k, _)| k == "Action")
            .map(|(_, v)| v)
            .unwrap_or_default(),
    };
    let dry_run = target.is_none()
        && form(&body)
            .iter()
            .any(|(k, v)| k == "DryRun" && v == "true");
    // `Authorization: AWS4-HMAC-SHA256 Credential=AKID/date/region/...`
    let key = req
        .header("authorization")
        .and_then(|a| a.split_once("Credential="))
        .and_then(|(_, c)| c.split('/').next())
        .map(str::to_string);
    seen.lock().unwrap().push(Seen {
        action: action.clone(),
        body: body.clone(),
        dry_run,
        at: Instant::now(),
        key: key.clone(),
    });
    enum Plan {
        Expired,
        Unknown(String),
        Throttle,
        Deny,
        Unavailable,
        Pricing(Option<String>),
        Fleet,
        KeepRunning,
        Images(BTreeSet<String>),
        Reservations,
        PlacementGroups,
        Template,
        Instances(HashMap<String, String>),
        Forward,
    }
    let plan = {
        let mut f = faults.lock().unwrap();
        let unknown = unlisted_named(&f, &action, &body);
        if key.as_ref().is_some_and(|k| f.expired_keys.contains(k)) {
            Plan::Expired
        } else if f
            .throttle_until
            .get(&action)
            .is_some_and(|until| Instant::now() < *until)
        {
            Plan::Throttle
        } else if let Some(n) = f.throttle.get_mut(&action).filter(|n| **n > 0) {
            *n -= 1;
            Plan::Throttle
        } else if let Some(id) = unknown {
            Plan::Unknown(id)
        } else if action == "DescribeInstances" && unlisted(&f).next().is_some() {
            Plan::Instances(f.instance_reservations.clone())
        } else if f.deny.contains(&action) {
            Plan::Deny
        } else if f.unavailable.contains(&action) {
            Plan::Unavailable
        } else if target
            .as_deref()
            .is_some_and(|t| t.starts_with("AWSPriceListService."))
        {
            let token = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| {
                    v.get("NextToken")
                        .and_then(|t| t.as_str())
                        .map(str::to_string)
                });
            let pages = if body.contains("Compute Instance (bare metal)") {
                &f.pricing_metal_pages
            } else {
                &f.pricing_pages
            };
            let index = match &token {
                None => Some(0),
                Some(t) => pages
                    .iter()
                    .position(|p| {
                        serde_json::from_str::<serde_json::Value>(p)
                            .ok()
                            .and_then(|v| {
                                v.get("NextToken").and_then(|x| x.as_str()).map(|x| x == t)
                            })
                            .unwrap_or(false)
                    })
                    .map(|i| i + 1),
            };
            Plan::Pricing(index.and_then(|i| pages.get(i).cloned()))
        } else if action == "TerminateInstances" && f.terminate_keeps_running {
            Plan::KeepRunning
        } else if action == "CreateFleet" && !dry_run {
            Plan::Fleet
        } else if action == "DescribeImages" && !f.deprecated_images.is_empty() {
            Plan::Images(f.deprecated_images.clone())
        } else if action == "DescribeCapacityReservations" {
            Plan::Reservations
        } else if action == "DescribePlacementGroups" {
            Plan::PlacementGroups
        } else if action == "DescribeInstances" && !f.instance_reservations.is_empty() {
            Plan::Instances(f.instance_reservations.clone())
        } else if action == "CreateLaunchTemplate" && !dry_run {
            Plan::Template
        } else {
            Plan::Forward
        }
    };
    match plan {
        Plan::Expired if json => {
            respond_error(
                &mut conn,
                (true, "400 Bad Request"),
                "ExpiredTokenException",
                "The security token included in the request is expired",
            )
            .await
        }
        Plan::Expired => {
            respond_error(
                &mut conn,
                (false, "400 Bad Request"),
                "ExpiredToken",
                "The security token included in the request is expired",
            )
            .await
        }
        Plan::Unknown(id) => {
            respond_error(
                &mut conn,
                (false, "400 Bad Request"),
                "InvalidInstanceID.NotFound",
                &format!("The instance ID '{id}' does not exist"),
            )
            .await
        }
        Plan::Throttle if json => {
            respond_error(
                &mut conn,
                (true, "400 Bad Request"),
                "ThrottlingException",
                "Rate exceeded",
            )
            .await
        }
        Plan::Throttle => {
            respond_error(
                &mut conn,
                (false, "503 Service Unavailable"),
                "RequestLimitExceeded",
                "Request limit exceeded.",
            )
            .await
        }
        Plan::Unavailable if json => {
            respond_error(
                &mut conn,
                (true, "503 Service Unavailable"),
                "ServiceUnavailableException",
                "Service is unavailable",
            )
            .await
        }
        Plan::Unavailable => {
            respond_error(
                &mut conn,
                (false, "503 Service Unavailable"),
                "Unavailable",
                "The service is unavailable.",
            )
            .await
        }
        Plan::Deny if json => {
            respond_error(
                &mut conn,
                (true, "400 Bad Request"),
                "AccessDeniedException",
                &format!(
                    "User: arn:aws:sts::123456789012:assumed-role/dovetail/x is not authorized to perform: {action}"
                ),
            )
            .await
        }
        Plan::Deny => {
            respond_error(
                &mut conn,
                (false, "403 Forbidden"),
                "UnauthorizedOperation",
                "You are not authorized to perform this operation.",
            )
            .await
        }
        Plan::Pricing(Some(page)) => {
            respond(
                &mut conn,
                "200 OK",
                "application/x-amz-json-1.1",
                &[],
                page.as_bytes(),
            )
            .await
        }
        Plan::Pricing(None) => {
            respond_error(
                &mut conn,
                (true, "400 Bad Request"),
                "InvalidNextTokenException",
                "no such page",
            )
            .await
        }
        Plan::Fleet => {
            let answer = fleet(upstream, &req, &body, &faults).await?;
            let lost = {
                let mut f = faults.lock().unwrap();
                let lost = f.lose_fleet_answers > 0;
                f.lose_fleet_answers = f.lose_fleet_answers.saturating_sub(1);
                lost
            };
            if lost {
                return respond(
                    &mut conn,
                    "503 Service Unavailable",
                    "text/xml",
                    &[],
                    &ec2_error("ServiceUnavailable", "The service is unavailable."),
                )
                .await;
            }
            let (status, ct, answer) = answer;
            respond(&mut conn, &status, &ct, &[], &answer).await
        }
        Plan::KeepRunning => {
            let id = form(&body)
                .into_iter()
                .find(|(k, _)| k == "InstanceId.1")
                .map(|(_, v)| v)
                .unwrap_or_default();
            let xml = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<TerminateInstancesResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>dovetail-proxy</requestId><instancesSet><item><instanceId>{id}</instanceId>\
                 <currentState><code>16</code><name>running</name></currentState><previousState><code>16</code><name>running</name></previousState></item></instancesSet></TerminateInstancesResponse>"
            );
            respond(&mut conn, "200 OK", "text/xml", &[], xml.as_bytes()).await
        }
        Plan::Images(deprecated) => {
            let (status, ct, answer) = forward(upstream, &req, &req.body).await?;
            let answer = deprecate(&String::from_utf8_lossy(&answer), &body, &deprecated);
            respond(&mut conn, &status, &ct, &[], answer.as_bytes()).await
        }
        Plan::Reservations => {
            let (status, answer) = describe_reservations(&body, &faults);
            respond(&mut conn, &status, "text/xml", &[], &answer).await
        }
        Plan::PlacementGroups => {
            let (status, answer) = describe_placement_groups(&body, &faults);
            respond(&mut conn, &status, "text/xml", &[], &answer).await
        }
        Plan::Instances(reserved) => {
            let (status, ct, answer) = forward(upstream, &req, &req.body).await?;
            let mut text = String::from_utf8_lossy(&answer).to_string();
            let hidden: Vec<String> = unlisted(&faults.lock().unwrap()).collect();
            for id in hidden {
                text = without_instance(&text, &id);
            }
            for (instance, reservation) in &reserved {
                let tag = format!("<instanceId>{instance}</instanceId>");
                text = text.replace(
                    &tag,
                    &format!(
                        "{tag}<capacityReservationId>{reservation}</capacityReservationId><capacityReservationSpecification><capacityReservationPreference>capacity-reservations-only</capacityReservationPreference></capacityReservationSpecification>"
                    ),
                );
            }
            respond(&mut conn, &status, &ct, &[], text.as_bytes()).await
        }
        Plan::Template => {
            let (status, ct, answer) = forward(upstream, &req, &req.body).await?;
            let target = form(&body).into_iter().find(|(k, _)| {
                k == "LaunchTemplateData.CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"
            });
            let text = String::from_utf8_lossy(&answer);
            let id = text
                .split_once("<launchTemplateId>")
                .and_then(|(_, rest)| rest.split_once("</launchTemplateId>"))
                .map(|(id, _)| id.to_string());
            if let (Some((_, reservation)), Some(id)) = (target, id) {
                faults
                    .lock()
                    .unwrap()
                    .template_reservations
                    .insert(id, reservation);
            }
            respond(&mut conn, &status, &ct, &[], &answer).await
        }
        Plan::Forward => {
            let (status, ct, answer) = forward(upstream, &req, &req.body).await?;
            respond(&mut conn, &status, &ct, &[], &answer).await
        }
    }
}

/// The instance ids of a CreateFleet answer.
fn fleet_instances(text: &str) -> Vec<String> {
    text.split("<instanceIds>")
        .skip(1)
        .filter_map(|s| s.split("</instanceIds>").next())
        .flat_map(|ids| {
            ids.split("<item>")
                .skip(1)
                .filter_map(|i| i.split("</item>").next())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The instances EC2's reads do not know yet.
fn unlisted(f: &Faults) -> impl Iterator<Item = String> + '_ {
    let now = Instant::now();
    f.launched_at
        .iter()
        .filter(move |(_, at)| f.unlisted_for.is_some_and(|d| now < **at + d))
        .map(|(id, _)| id.clone())
}

/// The first instance not known yet that a DescribeInstances, CreateTags
/// or TerminateInstances request names.
fn unlisted_named(f: &Faults, action: &str, body: &str) -> Option<String> {
    let prefix = match action {
        "DescribeInstances" | "TerminateInstances" => "InstanceId.",
        "CreateTags" => "ResourceId.",
        _ => return None,
    };
    let hidden: BTreeSet<String> = unlisted(f).collect();
    form(body)
        .into_iter()
        .find(|(k, v)| k.starts_with(prefix) && hidden.contains(v))
        .map(|(_, v)| v)
}

/// A DescribeInstances answer without the instance `id`: the item of an
/// `<instancesSet>` that holds its `<instanceId>` (elements come in
/// alphabetical order, so the id is not the item's first) is cut out,
/// nested items and all.
fn without_instance(xml: &str, id: &str) -> String {
    let marker = format!("<instanceId>{id}</instanceId>");
    let mut out = String::with_capacity(xml.len());
    let mut rest = xml;
    while let Some(at) = rest.find("<instancesSet>") {
        let body = at + "<instancesSet>".len();
        out.push_str(&rest[..body]);
        rest = &rest[body..];
        // The set's top-level items, up to its end.
        let mut depth = 0usize;
        let mut item_start = 0;
        let mut i = 0;
        let mut kept = String::new();
        while i < rest.len() {
            let tail = &rest[i..];
            if tail.starts_with("<item>") {
                if depth == 0 {
                    item_start = i;
                }
                depth += 1;
                i += "<item>".len();
            } else if tail.starts_with("</item>") {
                depth = depth.saturating_sub(1);
                i += "</item>".len();
                if depth == 0 {
                    let item = &rest[item_start..i];
                    if !item.contains(&marker) {
                        kept.push_str(item);
                    }
                }
            } else if depth == 0 && tail.starts_with("</instancesSet>") {
                break;
            } else {
                let c = tail.chars().next().map_or(1, char::len_utf8);
                if depth == 0 {
                    kept.push_str(&tail[..c]);
                }
                i += c;
            }
        }
        out.push_str(&kept);
        rest = &rest[i..];
    }
    out.push_str(rest);
    out
}

/// A DescribeImages answer as EC2 gives it when `deprecated` images are
/// deprecated: each carries a past `deprecationTime`, and is left out
/// unless the request (`request`, form-encoded) sets `IncludeDeprecated`
/// or names it in `ImageId.N`.
fn deprecate(xml: &str, request: &str, deprecated: &BTreeSet<String>) -> String {
    const DEPRECATED_AT: &str = "2024-06-30T00:00:00.000Z";
    let params = form(request);
    let include_all = params
        .iter()
        .any(|(k, v)| k == "IncludeDeprecated" && v == "true");
    let named: BTreeSet<&str> = params
        .iter()
        .filter(|(k, _)| k.starts_with("ImageId."))
        .map(|(_, v)| v.as_str())
        .collect();
    let Some(start) = xml.find("<imagesSet>").map(|i| i + "<imagesSet>".len()) else {
        return xml.to_string();
    };
    let Some(end) = xml.rfind("</imagesSet>") else {
        return xml.to_string();
    };
    // The set's top-level items (images hold nested items: tags, block
    // devices).
    let mut out = xml[..start].to_string();
    let (mut depth, mut item_start, mut at) = (0usize, start, start);
    while at < end {
        let rest = &xml[at..end];
        let open = rest.find("<item>");
        let close = rest.find("</item>");
        match (open, close) {
            (Some(o), Some(c)) if o < c => {
                if depth == 0 {
                    item_start = at + o;
                }
                depth += 1;
                at += o + "<item>".len();
            }
            (_, Some(c)) => {
                depth -= 1;
                at += c + "</item>".len();
                if depth == 0 {
                    let item = &xml[item_start..at];
                    let id = item
                        .split_once("<imageId>")
                        .and_then(|(_, r)| r.split_once("</imageId>"))
                        .map(|(id, _)| id)
                        .unwrap_or_default();
                    if !deprecated.contains(id) {
                        out.push_str(item);
                    } else if include_all || named.contains(id) {
                        let body = &item[..item.len() - "</item>".len()];
                        out.push_str(&format!(
                            "{body}<deprecationTime>{DEPRECATED_AT}</deprecationTime></item>"
                        ));
                    }
                }
            }
            _ => break,
        }
    }
    out.push_str(&xml[end..]);
    out
}

#[test]
fn an_instance_not_listed_yet_is_cut_out_of_describe_instances() {
    let xml = "<reservationSet><item><reservationId>r-1</reservationId><instancesSet>\
               <item><architecture>x86_64</architecture><blockDeviceMapping><item><deviceName>a</deviceName></item></blockDeviceMapping><instanceId>i-1</instanceId></item>\
               <item><instanceId>i-2</instanceId><tagSet><item><key>k</key></item></tagSet></item>\
               </instancesSet></item></reservationSet>";
    let cut = without_instance(xml, "i-1");
    assert!(
        !cut.contains("i-1") && !cut.contains("<deviceName>"),
        "{cut}"
    );
    assert!(
        cut.contains("<instanceId>i-2</instanceId><tagSet><item><key>k</key></item></tagSet>"),
        "{cut}"
    );
    assert!(
        cut.ends_with("</instancesSet></item></reservationSet>"),
        "{cut}"
    );
    assert_eq!(without_instance(xml, "i-3"), xml);
}

#[test]
fn deprecated_images_are_hidden_unless_asked_for_as_ec2_hides_them() {
    let xml = "<R><imagesSet><item><imageId>ami-1</imageId><tagSet><item><key>k</key></item></tagSet></item>\
               <item><imageId>ami-2</imageId></item></imagesSet></R>";
    let gone: BTreeSet<String> = ["ami-1".to_string()].into();
    let hidden = deprecate(xml, "Action=DescribeImages", &gone);
    assert_eq!(
        hidden,
        "<R><imagesSet><item><imageId>ami-2</imageId></item></imagesSet></R>"
    );
    for request in [
        "Action=DescribeImages&IncludeDeprecated=true",
        "Action=DescribeImages&ImageId.1=ami-1",
    ] {
        let shown = deprecate(xml, request, &gone);
        assert!(
            shown.contains("<key>k</key></item></tagSet><deprecationTime>2024-06-30T00:00:00.000Z</deprecationTime></item>"),
            "{request}: {shown}"
        );
        assert!(shown.contains("ami-2"), "{shown}");
    }
}

#[test]
fn create_fleet_overrides_of_faulted_types_are_taken_out_and_renumbered() {
    let body = "Action=CreateFleet&LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateId=lt-1\
        &LaunchTemplateConfigs.1.Overrides.1.InstanceType=c5.large&LaunchTemplateConfigs.1.Overrides.1.SubnetId=subnet-a\
        &LaunchTemplateConfigs.1.Overrides.2.InstanceType=m5.large&LaunchTemplateConfigs.1.Overrides.2.SubnetId=subnet-a\
        &LaunchTemplateConfigs.2.LaunchTemplateSpecification.LaunchTemplateId=lt-2\
        &LaunchTemplateConfigs.2.Overrides.1.InstanceType=c5.large&LaunchTemplateConfigs.2.Overrides.1.SubnetId=subnet-b\
        &TagSpecification.1.Tag.1.Value=a%2Bb";
    let params = form(body);
    let faulted = BTreeSet::from(["c5.large".to_string()]);
    let (stripped, refused, left) =
        strip_overrides(&params, &faulted, &BTreeSet::new(), &BTreeSet::new());
    assert!(left);
    assert_eq!(refused.len(), 2);
    assert_eq!(refused[1].template, "lt-2");
    let again: BTreeMap<String, String> = form(&stripped).into_iter().collect();
    assert_eq!(
        again["LaunchTemplateConfigs.1.Overrides.1.InstanceType"],
        "m5.large"
    );
    assert!(!again.contains_key("LaunchTemplateConfigs.1.Overrides.2.InstanceType"));
    assert!(
        !again
            .keys()
            .any(|k| k.starts_with("LaunchTemplateConfigs.2"))
    );
    assert_eq!(again["TagSpecification.1.Tag.1.Value"], "a+b");
}
