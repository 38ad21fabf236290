//! Reader of instance-type catalogs (`../shared/data/README.md` format),
//! shared by `plan` and the simulator.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::instance_type::{InstanceType, Offering, Overhead};
use super::quantity::QuantityError;
use super::requirements::{Operator, Requirement, RequirementError, Requirements};
use super::resources::Resources;

/// Why a catalog could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("reading {file}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}:{line}:{column}: {message}")]
    Parse {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{file}: instance type {name:?}: {message}")]
    Invalid {
        file: String,
        name: String,
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CatalogDoc {
    instance_types: Vec<TypeDoc>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeDoc {
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    capacity: BTreeMap<String, String>,
    #[serde(default)]
    overhead: OverheadDoc,
    #[serde(default)]
    allocatable: BTreeMap<String, String>,
    #[serde(default)]
    requirements: Vec<RequirementDoc>,
    #[serde(default)]
    offerings: Vec<OfferingDoc>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct OverheadDoc {
    #[serde(default)]
    kube_reserved: BTreeMap<String, String>,
    #[serde(default)]
    system_reserved: BTreeMap<String, String>,
    #[serde(default)]
    eviction_threshold: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RequirementDoc {
    key: String,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OfferingDoc {
    zone: String,
    capacity_type: String,
    price: f64,
    #[serde(default = "yes")]
    available: bool,
}

fn yes() -> bool {
    true
}

/// Reads a catalog file.
pub fn read_catalog(path: &Path) -> Result<Vec<InstanceType>, CatalogError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Read {
        file: file.clone(),
        source,
    })?;
    parse_catalog(&file, &text)
}

/// Parses catalog text; `file` names it in errors.
pub fn parse_catalog(file: &str, text: &str) -> Result<Vec<InstanceType>, CatalogError> {
    let doc: CatalogDoc = serde_json::from_str(text).map_err(|e| CatalogError::Parse {
        file: file.to_string(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    doc.instance_types
        .into_iter()
        .map(|t| {
            let name = t.name.clone();
            convert(t).map_err(|message| CatalogError::Invalid {
                file: file.to_string(),
                name,
                message,
            })
        })
        .collect()
}

fn resources(map: &BTreeMap<String, String>) -> Result<Resources, String> {
    Resources::parse(map.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|(name, e): (String, QuantityError)| format!("{name}: {e}"))
}

fn convert(t: TypeDoc) -> Result<InstanceType, String> {
    let mut requirements = Requirements::from_labels(&t.labels);
    for r in &t.requirements {
        let op = Operator::parse(&r.operator)
            .ok_or_else(|| RequirementError::UnknownOperator(r.operator.clone()).to_string())?;
        let req = Requirement::new(&r.key, op, &r.values).map_err(|e| e.to_string())?;
        requirements.add(&r.key, req);
    }
    let offerings = t
        .offerings
        .into_iter()
        .map(|o| {
            if !o.price.is_finite() || o.price < 0.0 {
                return Err(format!(
                    "offering in {} has invalid price {}",
                    o.zone, o.price
                ));
            }
            Ok(Offering {
                zone: o.zone,
                capacity_type: o.capacity_type,
                price: o.price,
                available: o.available,
                reservations: Vec::new(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut it = InstanceType {
        name: t.name,
        requirements,
        capacity: resources(&t.capacity)?,
        overhead: Overhead {
            kube_reserved: resources(&t.overhead.kube_reserved)?,
            system_reserved: resources(&t.overhead.system_reserved)?,
            eviction_threshold: resources(&t.overhead.eviction_threshold)?,
        },
        allocatable: resources(&t.allocatable)?,
        offerings,
    };
    it.complete_capacity();
    it.complete_requirements();
    Ok(it)
}

/// The catalog document of `types` (the format [`parse_catalog`] reads):
/// labels from single-valued requirements, other requirements as such,
/// capacity, overhead, allocatable and offerings. Zones and capacity types
/// are left to the offerings, as the reader fills them in from there.
pub fn catalog_json(types: &[InstanceType]) -> serde_json::Value {
    use super::labels::{CAPACITY_TYPE, ZONE};
    use serde_json::json;
    let quantities = |r: &Resources| json!(r.to_strings());
    let docs: Vec<serde_json::Value> = types
        .iter()
        .map(|it| {
            let mut labels = BTreeMap::new();
            let mut requirements = Vec::new();
            for (key, req) in &it.requirements.0 {
                if key == ZONE || key == CAPACITY_TYPE {
                    continue;
                }
                if let Some(v) = it.requirements.single_value(key) {
                    labels.insert(key.clone(), v.to_string());
                    continue;
                }
                let (operator, values): (&str, Vec<String>) = match req.operator() {
                    Operator::In => ("In", req.values.iter().cloned().collect()),
                    Operator::NotIn => ("NotIn", req.values.iter().cloned().collect()),
                    Operator::Exists => ("Exists", Vec::new()),
                    Operator::DoesNotExist => ("DoesNotExist", Vec::new()),
                    Operator::Gt | Operator::Gte => {
                        ("Gt", req.greater_than.iter().map(i64::to_string).collect())
                    }
                    Operator::Lt | Operator::Lte => {
                        ("Lt", req.less_than.iter().map(i64::to_string).collect())
                    }
                };
                requirements.push(json!({"key": key, "operator": operator, "values": values}));
            }
            let mut doc = json!({
                "name": it.name,
                "labels": labels,
                "capacity": quantities(&it.capacity),
                "overhead": {
                    "kubeReserved": quantities(&it.overhead.kube_reserved),
                    "systemReserved": quantities(&it.overhead.system_reserved),
                    "evictionThreshold": quantities(&it.overhead.eviction_threshold),
                },
                "allocatable": quantities(&it.allocatable),
                "offerings": it.offerings.iter().map(|o| json!({
                    "zone": o.zone,
                    "capacityType": o.capacity_type,
                    "price": o.price,
                    "available": o.available,
                })).collect::<Vec<_>>(),
            });
            if !requirements.is_empty() {
                doc["requirements"] = json!(requirements);
            }
            doc
        })
        .collect();
    serde_json::Value::Array(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_small_catalog() {
        let text = r#"{"instanceTypes":[{"name":"m5.large",
            "labels":{"kubernetes.io/arch":"amd64"},
            "allocatable":{"cpu":"1930m","memory":"7134Mi","pods":"29"},
            "offerings":[{"zone":"us-east-1a","capacityType":"on-demand","price":0.096}]}]}"#;
        let c = parse_catalog("c.json", text).unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].allocatable.get("cpu"), 1930);
        assert!(c[0].offerings[0].available);
        assert_eq!(
            c[0].requirements
                .single_value("node.kubernetes.io/instance-type"),
            Some("m5.large")
        );
    }

    #[test]
    fn written_catalogs_read_back_the_same() {
        let text = r#"{"instanceTypes":[{"name":"m5.large",
            "labels":{"kubernetes.io/arch":"amd64"},
            "capacity":{"cpu":"2","memory":"7577Mi","pods":"29"},
            "overhead":{"kubeReserved":{"cpu":"70m","memory":"574Mi"},
                        "evictionThreshold":{"memory":"100Mi"}},
            "requirements":[{"key":"example.com/tier","operator":"In","values":["a","b"]}],
            "offerings":[{"zone":"us-east-1a","capacityType":"on-demand","price":0.096},
                         {"zone":"us-east-1b","capacityType":"spot","price":0.035,"available":false}]}]}"#;
        let types = parse_catalog("c.json", text).unwrap();
        let written = serde_json::json!({"instanceTypes": catalog_json(&types)});
        let again = parse_catalog("again.json", &written.to_string()).unwrap();
        assert_eq!(again, types);
        assert_eq!(again[0].allocatable.get("memory"), 6903 << 20);
    }

    #[test]
    fn errors_name_file_and_line() {
        let err = parse_catalog("c.json", "{\n\"instanceTypes\": [\n{\"name\": 3}]}").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("c.json:3:"), "{msg}");
        let bad = r#"{"instanceTypes":[{"name":"x","allocatable":{"cpu":"lots"}}]}"#;
        let msg = parse_catalog("c.json", bad).unwrap_err().to_string();
        assert!(msg.contains("\"x\"") && msg.contains("cpu"), "{msg}");
    }
}
