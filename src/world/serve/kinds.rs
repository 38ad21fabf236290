//! The kinds the served API knows, each with a type-erased face over the
//! typed [`MemoryCluster`] store: the HTTP layer speaks JSON, the store
//! speaks Rust types, and [`ServedKind`] is the seam between them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate,
    Secret, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use tokio::sync::watch;

use super::DeleteParams;
use crate::api::{ApiKind, CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use crate::cluster::{
    ApiError, ApplyParams, DeleteOutcome, EventType, Object, ObjectKey, Selector,
};
use crate::world::MemoryCluster;

/// A stored object of any served kind.
pub trait AnyObject: Send + Sync {
    fn meta(&self) -> &ObjectMeta;
    /// The object as the API serves it.
    fn to_json(&self) -> Value;
    /// Appends the object's JSON to `out`.
    fn write_json(&self, out: &mut Vec<u8>);
}

impl<K: Object> AnyObject for K {
    fn meta(&self) -> &ObjectMeta {
        kube::Resource::meta(self)
    }

    fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    fn write_json(&self, out: &mut Vec<u8>) {
        // Serializing a stored, typed object cannot fail: its maps have
        // string keys.
        let _ = serde_json::to_writer(&mut *out, self);
    }
}

/// A shared stored object.
pub type Stored = Arc<dyn AnyObject>;

/// One change of a served kind.
pub struct Change {
    pub event_type: EventType,
    pub object: Stored,
    pub resource_version: u64,
}

/// What discovery says of a kind.
#[derive(Debug, Clone)]
pub struct KindMeta {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// Subresources beside `status` that the kind serves (`eviction`,
    /// `binding`).
    pub extra_subresources: &'static [&'static str],
    /// The kind's CustomResourceDefinition, for dovetail's kinds: their
    /// schema decides about unknown fields and structural errors, as the
    /// API server's decoding of a custom resource does.
    pub crd: Option<ApiKind>,
}

impl KindMeta {
    /// `group/version`, or `version` for the core group.
    pub fn group_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn singular(&self) -> String {
        self.kind.to_ascii_lowercase()
    }

    /// `Kind` or `Kind.group`, as the API server names the kind of an
    /// invalid object.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// Whether the kind has a protobuf message (the built-in kinds).
    pub fn has_protobuf(&self) -> bool {
        super::protobuf::message_for(&self.group_version(), &self.kind).is_some()
    }

    /// `plural` or `plural.group`, as the API server's messages name it.
    pub fn resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// A served kind, over the typed store.
pub trait ServedKind: Send + Sync {
    fn meta(&self) -> &KindMeta;
    fn list(
        &self,
        c: &MemoryCluster,
        namespace: Option<&str>,
        labels: &Selector,
    ) -> (Vec<Stored>, u64);
    fn get(&self, c: &MemoryCluster, key: &ObjectKey) -> Result<Stored, ApiError>;
    fn create(&self, c: &MemoryCluster, obj: Value, dry_run: bool) -> Result<Stored, ApiError>;
    fn replace(&self, c: &MemoryCluster, obj: Value, dry_run: bool) -> Result<Stored, ApiError>;
    fn replace_status(
        &self,
        c: &MemoryCluster,
        obj: Value,
        dry_run: bool,
    ) -> Result<Stored, ApiError>;
    fn apply(
        &self,
        c: &MemoryCluster,
        obj: Value,
        params: &ApplyParams,
    ) -> Result<Stored, ApiError>;
    /// Deletes; `true` with the object when it is gone, `false` when it
    /// stays terminating.
    fn delete(
        &self,
        c: &MemoryCluster,
        key: &ObjectKey,
        params: &DeleteParams,
    ) -> Result<(bool, Stored), ApiError>;
    fn changes_after(&self, c: &MemoryCluster, rv: u64) -> Result<Vec<Change>, ApiError>;
    /// The fields of `raw` the kind does not declare, as `.spec.foo`
    /// paths: what `fieldValidation=Strict` refuses.
    fn unknown_fields(&self, raw: &Value) -> Result<Vec<String>, ApiError>;
    fn subscribe(&self, c: &MemoryCluster) -> Result<watch::Receiver<u64>, ApiError>;
}

struct Typed<K> {
    meta: KindMeta,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K: Object> Typed<K> {
    /// An update of an existing object by `write`; a dry run checks that
    /// it exists and runs admission.
    fn update(
        &self,
        c: &MemoryCluster,
        obj: Value,
        dry_run: bool,
        write: fn(&MemoryCluster, K) -> Result<Arc<K>, ApiError>,
    ) -> Result<Stored, ApiError> {
        let obj: K = decode(&self.meta, obj)?;
        if dry_run {
            let key = ObjectKey::of(&obj);
            c.get::<K>(&key).map_err(|e| rename(e, &self.meta))?;
            c.dry_run(&obj)?;
            return Ok(Arc::new(obj));
        }
        write(c, obj).map(erase)
    }
}

/// Decodes a request body into `K`, as the API server's decoder would
/// answer a body that does not fit the kind.
pub fn decode<K: Object>(meta: &KindMeta, mut obj: Value) -> Result<K, ApiError> {
    let Some(map) = obj.as_object_mut() else {
        return Err(ApiError::BadRequest {
            message: "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml".into(),
        });
    };
    match map.get("kind").and_then(Value::as_str) {
        Some(kind) if kind != meta.kind => {
            return Err(ApiError::BadRequest {
                message: format!(
                    "the API version in the data ({}) does not match the expected API version ({})",
                    map.get("apiVersion")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                    meta.group_version()
                ),
            });
        }
        _ => {}
    }
    match map.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v != meta.group_version() => {
            return Err(ApiError::BadRequest {
                message: format!(
                    "the API version in the data ({v}) does not match the expected API version ({})",
                    meta.group_version()
                ),
            });
        }
        _ => {}
    }
    map.insert("apiVersion".into(), meta.group_version().into());
    map.insert("kind".into(), meta.kind.clone().into());
    if let Some(kind) = meta.crd {
        let schema = crate::api::structural::schema(kind);
        crate::api::structural::prune_nulls(schema, &mut obj);
        crate::api::structural::apply_defaults(schema, &mut obj);
        // A custom resource is checked against its schema and rules as
        // JSON, before it has to fit the Rust type: what does not fit is
        // a 422 naming the field, not a decoding error.
        let errors = crate::config::validate::check_object(kind, &obj);
        if !errors.is_empty() {
            let field = |f: &str| {
                obj.pointer(&format!("/metadata/{f}"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            return Err(ApiError::Invalid {
                resource: meta.qualified_kind(),
                key: ObjectKey::new(field("namespace"), field("name")),
                messages: errors,
            });
        }
    }
    serde_json::from_value(obj).map_err(|e| ApiError::BadRequest {
        message: format!("error decoding {}: {e}", meta.kind),
    })
}

fn erase<K: Object>(obj: Arc<K>) -> Stored {
    obj
}

impl<K: Object> ServedKind for Typed<K> {
    fn meta(&self) -> &KindMeta {
        &self.meta
    }

    fn list(
        &self,
        c: &MemoryCluster,
        namespace: Option<&str>,
        labels: &Selector,
    ) -> (Vec<Stored>, u64) {
        let list = c.list::<K>(namespace, labels);
        (
            list.items.into_iter().map(erase).collect(),
            list.resource_version,
        )
    }

    fn get(&self, c: &MemoryCluster, key: &ObjectKey) -> Result<Stored, ApiError> {
        c.get::<K>(key)
            .map(erase)
            .map_err(|e| rename(e, &self.meta))
    }

    fn create(&self, c: &MemoryCluster, obj: Value, dry_run: bool) -> Result<Stored, ApiError> {
        let obj: K = decode(&self.meta, obj)?;
        if dry_run {
            let key = ObjectKey::of(&obj);
            if c.get_opt::<K>(&key).is_some() {
                return Err(ApiError::AlreadyExists {
                    resource: self.meta.resource(),
                    key,
                });
            }
            c.dry_run(&obj)?;
            return Ok(Arc::new(obj));
        }
        c.create(obj).map(erase)
    }

    fn replace(&self, c: &MemoryCluster, obj: Value, dry_run: bool) -> Result<Stored, ApiError> {
        self.update(c, obj, dry_run, MemoryCluster::replace)
    }

    fn replace_status(
        &self,
        c: &MemoryCluster,
        obj: Value,
        dry_run: bool,
    ) -> Result<Stored, ApiError> {
        self.update(c, obj, dry_run, MemoryCluster::update_status)
    }

    fn apply(
        &self,
        c: &MemoryCluster,
        obj: Value,
        params: &ApplyParams,
    ) -> Result<Stored, ApiError> {
        let obj: K = decode(&self.meta, obj)?;
        c.apply(obj, params).map(erase)
    }

    fn delete(
        &self,
        c: &MemoryCluster,
        key: &ObjectKey,
        params: &DeleteParams,
    ) -> Result<(bool, Stored), ApiError> {
        match c
            .delete_with::<K>(key, params)
            .map_err(|e| rename(e, &self.meta))?
        {
            DeleteOutcome::Deleted(o) => Ok((true, erase(o))),
            DeleteOutcome::Terminating(o) => Ok((false, erase(o))),
        }
    }

    fn changes_after(&self, c: &MemoryCluster, rv: u64) -> Result<Vec<Change>, ApiError> {
        Ok(c.watch_from::<K>(rv)?
            .into_iter()
            .map(|e| Change {
                event_type: e.event_type,
                object: erase(e.object),
                resource_version: e.resource_version,
            })
            .collect())
    }

    fn subscribe(&self, c: &MemoryCluster) -> Result<watch::Receiver<u64>, ApiError> {
        c.subscribe::<K>()
    }

    fn unknown_fields(&self, raw: &Value) -> Result<Vec<String>, ApiError> {
        if let Some(kind) = self.meta.crd {
            // The CRD's schema: a field of the Rust type that the CRD does
            // not declare is unknown too.
            return Ok(crate::config::validate::schema::check(kind, raw)
                .into_iter()
                .filter(|f| f.keyword == "additionalProperties")
                .map(|f| format!(".{}", f.path))
                .collect());
        }
        let typed: K = decode(&self.meta, raw.clone())?;
        let known = serde_json::to_value(&typed).unwrap_or(Value::Null);
        let mut out = Vec::new();
        unknown(raw, &known, String::new(), &mut out);
        Ok(out)
    }
}

/// The paths in `raw` that decoding into the kind's type dropped: its
/// undeclared fields. `null`s are not fields.
fn unknown(raw: &Value, known: &Value, path: String, out: &mut Vec<String>) {
    match (raw, known) {
        (Value::Object(r), Value::Object(k)) => {
            for (key, v) in r {
                if v.is_null() {
                    continue;
                }
                let p = format!("{path}.{key}");
                match k.get(key) {
                    Some(kv) => unknown(v, kv, p, out),
                    None => out.push(p),
                }
            }
        }
        (Value::Array(r), Value::Array(k)) => {
            for (i, (rv, kv)) in r.iter().zip(k).enumerate() {
                unknown(rv, kv, format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// A NotFound from a kind the store never held names the resource as the
/// API server does (`plural.group`).
fn rename(e: ApiError, meta: &KindMeta) -> ApiError {
    match e {
        ApiError::NotFound { key, .. } => ApiError::NotFound {
            resource: meta.resource(),
            key,
        },
        e => e,
    }
}

/// Every served kind, found by group, version and plural.
pub struct Kinds {
    kinds: Vec<Box<dyn ServedKind>>,
    by_resource: BTreeMap<(String, String, String), usize>,
}

/// How a kind is presented beyond what its Rust type says.
struct Presentation {
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    extra_subresources: &'static [&'static str],
}

const PLAIN: Presentation = Presentation {
    short_names: &[],
    categories: &[],
    extra_subresources: &[],
};

const fn named(short_names: &'static [&'static str]) -> Presentation {
    Presentation {
        short_names,
        categories: &[],
        extra_subresources: &[],
    }
}

const fn all(short_names: &'static [&'static str]) -> Presentation {
    Presentation {
        short_names,
        categories: &["all"],
        extra_subresources: &[],
    }
}

impl Kinds {
    /// The kinds dovetail reads and writes, the workloads that own pods,
    /// and the kinds kubectl's everyday commands touch.
    pub fn standard() -> Self {
        let mut k = Kinds {
            kinds: Vec::new(),
            by_resource: BTreeMap::new(),
        };
        k.add::<Pod>(Presentation {
            short_names: &["po"],
            categories: &["all"],
            extra_subresources: &["eviction", "binding"],
        });
        k.add::<Node>(named(&["no"]));
        k.add::<Namespace>(named(&["ns"]));
        k.add::<Event>(named(&["ev"]));
        k.add::<ConfigMap>(named(&["cm"]));
        k.add::<Secret>(PLAIN);
        k.add::<Service>(all(&["svc"]));
        k.add::<ServiceAccount>(Presentation {
            short_names: &["sa"],
            categories: &[],
            extra_subresources: &["token"],
        });
        k.add::<PersistentVolume>(named(&["pv"]));
        k.add::<PersistentVolumeClaim>(named(&["pvc"]));
        k.add::<Deployment>(all(&["deploy"]));
        k.add::<ReplicaSet>(all(&["rs"]));
        k.add::<StatefulSet>(all(&["sts"]));
        k.add::<DaemonSet>(all(&["ds"]));
        k.add::<Job>(all(&[]));
        k.add::<PodDisruptionBudget>(named(&["pdb"]));
        k.add::<Lease>(PLAIN);
        k.add::<StorageClass>(named(&["sc"]));
        k.add::<CSINode>(PLAIN);
        k.add::<VolumeAttachment>(PLAIN);
        k.add::<NodePool>(Presentation {
            short_names: &[],
            categories: &["karpenter"],
            extra_subresources: &[],
        });
        k.add::<NodeClaim>(Presentation {
            short_names: &[],
            categories: &["karpenter"],
            extra_subresources: &[],
        });
        k.add::<EC2NodeClass>(Presentation {
            short_names: &["ec2nc", "ec2ncs"],
            categories: &["karpenter"],
            extra_subresources: &[],
        });
        k.add::<NodeOverlay>(Presentation {
            short_names: &["overlays"],
            categories: &["karpenter"],
            extra_subresources: &[],
        });
        k.add::<CapacityBuffer>(Presentation {
            short_names: &["cb"],
            categories: &["autoscaling"],
            extra_subresources: &[],
        });
        k.add::<PodTemplate>(PLAIN);
        k
    }

    fn add<K: Object>(&mut self, p: Presentation) {
        let meta = KindMeta {
            group: K::group(&()).into_owned(),
            version: K::version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            plural: K::plural(&()).into_owned(),
            namespaced: <K::Scope as crate::cluster::KindScope>::NAMESPACED,
            short_names: p.short_names,
            categories: p.categories,
            extra_subresources: p.extra_subresources,
            crd: ApiKind::ALL
                .into_iter()
                .find(|k| k.group() == K::group(&()).as_ref() && k.kind() == K::kind(&()).as_ref()),
        };
        self.by_resource.insert(
            (
                meta.group.clone(),
                meta.version.clone(),
                meta.plural.clone(),
            ),
            self.kinds.len(),
        );
        self.kinds.push(Box::new(Typed::<K> {
            meta,
            _kind: std::marker::PhantomData,
        }));
    }

    /// The kind served at `group/version/plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&dyn ServedKind> {
        let i =
            self.by_resource
                .get(&(group.to_string(), version.to_string(), plural.to_string()))?;
        Some(self.kinds[*i].as_ref())
    }

    /// Every kind, in the order added.
    pub fn iter(&self) -> impl Iterator<Item = &dyn ServedKind> {
        self.kinds.iter().map(AsRef::as_ref)
    }

    /// Every served `(group, version)`, core first, in the order added.
    pub fn group_versions(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for k in self.iter() {
            let gv = (k.meta().group.clone(), k.meta().version.clone());
            if !out.contains(&gv) {
                out.push(gv);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, Timestamp};

    fn cluster() -> MemoryCluster {
        MemoryCluster::new(Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH)))
    }

    #[test]
    fn kinds_are_found_by_group_version_and_plural() {
        let kinds = Kinds::standard();
        assert_eq!(kinds.find("", "v1", "pods").unwrap().meta().kind, "Pod");
        let np = kinds.find("karpenter.sh", "v1", "nodepools").unwrap();
        assert!(!np.meta().namespaced);
        assert_eq!(np.meta().resource(), "nodepools.karpenter.sh");
        assert!(kinds.find("karpenter.sh", "v1beta1", "nodepools").is_none());
        let gvs = kinds.group_versions();
        assert_eq!(gvs[0], (String::new(), "v1".to_string()));
        assert!(gvs.contains(&("karpenter.k8s.aws".to_string(), "v1".to_string())));
    }

    #[test]
    fn undeclared_fields_are_found_by_what_decoding_drops() {
        let kinds = Kinds::standard();
        let pod = kinds.find("", "v1", "pods").unwrap();
        let raw = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "colour": "blue", "labels": {}},
            "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicy": "Always", "speed": 3}],
                     "nodeName": null}
        });
        assert_eq!(
            pod.unknown_fields(&raw).unwrap(),
            [".metadata.colour", ".spec.containers[0].speed"]
        );
    }

    /// A custom resource is checked against its CRD's schema before it
    /// must fit the Rust type, so what does not fit is a 422 that names
    /// the field, as the API server answers, not a 400 decoding error
    /// (found against a real API server, tests/differential).
    #[test]
    fn a_custom_resource_that_misses_a_required_field_is_invalid() {
        let c = cluster();
        let kinds = Kinds::standard();
        let pools = kinds.find("karpenter.sh", "v1", "nodepools").unwrap();
        let body = serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"weight": 1000, "template": {"spec": {"requirements": []}}}
        });
        let err = pools.create(&c, body, true).err().expect("refused");
        let ApiError::Invalid {
            resource, messages, ..
        } = &err
        else {
            panic!("not Invalid: {err}");
        };
        assert_eq!(resource, "NodePool.karpenter.sh");
        assert_eq!(
            messages,
            &[
                "spec.template.spec: missing required field `nodeClassRef`",
                "spec.weight: 1000 is greater than the maximum of 100",
            ]
        );
    }

    /// A created NodePool gets its CRD's defaults, as the API server
    /// applies them (found against a real API server, tests/differential).
    #[test]
    fn a_custom_resource_gets_its_crds_defaults() {
        let c = cluster();
        let kinds = Kinds::standard();
        let pools = kinds.find("karpenter.sh", "v1", "nodepools").unwrap();
        let body = serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"template": {"spec": {"requirements": [], "nodeClassRef":
                {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "x"}}},
                "disruption": {"consolidateAfter": "0s"}}
        });
        let created = pools.create(&c, body, false).unwrap().to_json();
        assert_eq!(
            created["spec"]["disruption"]["consolidationPolicy"],
            "WhenEmptyOrUnderutilized"
        );
        assert_eq!(
            created["spec"]["disruption"]["budgets"],
            serde_json::json!([{"nodes": "10%"}])
        );
        assert_eq!(created["spec"]["template"]["spec"]["expireAfter"], "720h");
    }

    /// The fields `fieldValidation` refuses are those the CRD does not
    /// declare, not those the Rust type drops: a subnet selector term has
    /// no `name` in the CRD though the type shares it with security
    /// groups; and a status the type cannot hold is not a decoding error.
    #[test]
    fn unknown_fields_of_a_custom_resource_are_the_crds() {
        let kinds = Kinds::standard();
        let classes = kinds
            .find("karpenter.k8s.aws", "v1", "ec2nodeclasses")
            .unwrap();
        let raw = serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "c"},
            "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"name": "x", "tags": {"a": "b"}}],
                     "securityGroupSelectorTerms": [{"name": "x"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        });
        assert_eq!(
            classes.unknown_fields(&raw).unwrap(),
            [".spec.subnetSelectorTerms[0].name"]
        );
    }

    #[test]
    fn json_goes_through_the_typed_store() {
        let c = cluster();
        let kinds = Kinds::standard();
        let cm = kinds.find("", "v1", "configmaps").unwrap();
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "v"}
        });
        let created = cm.create(&c, body.clone(), false).unwrap();
        assert_eq!(created.meta().resource_version.as_deref(), Some("1"));
        assert!(matches!(
            cm.create(&c, body.clone(), false),
            Err(ApiError::AlreadyExists { .. })
        ));
        let (items, rv) = cm.list(&c, Some("ns"), &Selector::everything());
        assert_eq!((items.len(), rv), (1, 1));
        let wrong = serde_json::json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "b"}});
        assert!(matches!(
            cm.create(&c, wrong, false),
            Err(ApiError::BadRequest { .. })
        ));
        let missing = kinds.find("karpenter.sh", "v1", "nodepools").unwrap();
        let err = missing
            .get(&c, &ObjectKey::cluster("x"))
            .err()
            .expect("not found");
        assert_eq!(err.to_string(), "nodepools.karpenter.sh \"x\" not found");
    }
}
