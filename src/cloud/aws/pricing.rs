//! Prices: on-demand from the AWS Pricing API (GetProducts), a price file
//! or the built-in table; spot from DescribeSpotPriceHistory.
//!
//! # On-demand
//! GetProducts is asked twice, as Karpenter v1.14.1 asks: for EC2 compute
//! instances in the region with Linux, no pre-installed software, capacity
//! status `Used` and market option `OnDemand` ([`COMMON_FILTERS`]), once
//! with shared tenancy ([`SHARED_FILTERS`]) and once for bare metal, which
//! the price list files under the product family `Compute Instance (bare
//! metal)` with dedicated tenancy ([`METAL_FILTERS`]). Each answer is a
//! JSON document per product; its `terms.OnDemand` price dimension in USD
//! (CNY in China) is the hourly price. A type listed more than once keeps
//! its lowest non-zero price.
//!
//! # Built-in prices
//! `builtin-prices.json`, compiled into the binary: the us-east-1
//! on-demand prices of the published catalog (`../shared/data/aws-catalog.json`,
//! itself from Karpenter's generated price table, dated in the file).
//! They are the prices until the Pricing API answers, and stay when it
//! fails, in isolated VPCs, and in GovCloud (which has no Pricing API).
//! Other regions use the us-east-1 table, as Karpenter does for regions
//! its table lacks: the order of types holds, the amounts are rough. A
//! test (`builtin_prices_are_generated_from_the_published_catalog`)
//! regenerates the file with `DOVETAIL_BLESS=1`.
//!
//! # Price file (`--pricing-file`)
//!
//! ```json
//! {"schema_version": 1,
//!  "regions": {"us-east-1": {"on_demand": {"m5.large": 0.096, "c5.large": 0.085}}}}
//! ```
//!
//! Optional `source` and `date` keys describe it. Its prices replace the
//! built-in ones; the Pricing API's replace both where it has one.
//!
//! # Spot
//! The newest `Linux/UNIX` price per instance type and zone. Until a type
//! has one in a zone, its on-demand price stands in; an offering with no
//! price at all is not offered.

use std::collections::BTreeMap;
use std::path::Path;

use aws_sdk_ec2::primitives::DateTime;
use serde::Deserialize;
use serde_json::Value;

use super::error::{AwsError, RetrySettings, paginate};

/// The GetProducts filters (`TERM_MATCH` field and value) of both queries
/// besides the region's `regionCode`.
pub const COMMON_FILTERS: [(&str, &str); 5] = [
    ("serviceCode", "AmazonEC2"),
    ("preInstalledSw", "NA"),
    ("operatingSystem", "Linux"),
    ("capacitystatus", "Used"),
    ("marketoption", "OnDemand"),
];
/// Instances on shared hardware.
pub const SHARED_FILTERS: [(&str, &str); 2] =
    [("tenancy", "Shared"), ("productFamily", "Compute Instance")];
/// Bare-metal instances, which the price list files apart.
pub const METAL_FILTERS: [(&str, &str); 2] = [
    ("tenancy", "Dedicated"),
    ("productFamily", "Compute Instance (bare metal)"),
];
/// The region whose table stands in for regions the built-in prices lack.
const BUILTIN_FALLBACK_REGION: &str = "us-east-1";
/// The built-in prices (see the module documentation).
const BUILTIN: &str = include_str!("builtin-prices.json");
/// The product description of Linux spot prices.
const SPOT_PRODUCT: &str = "Linux/UNIX";

/// Hourly on-demand prices by instance type.
pub type OnDemandPrices = BTreeMap<String, f64>;
/// Hourly spot prices by (instance type, zone).
pub type SpotPrices = BTreeMap<(String, String), f64>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceFile {
    schema_version: u32,
    /// Where the prices come from (free text).
    #[serde(default)]
    source: Option<String>,
    /// When they were read (free text, e.g. `2026-07`).
    #[serde(default)]
    date: Option<String>,
    regions: BTreeMap<String, RegionPrices>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RegionPrices {
    #[serde(default)]
    on_demand: BTreeMap<String, f64>,
}

/// Reads the on-demand prices of `region` from a price file. An error names
/// the file and what is wrong; a region the file does not list has no
/// prices (an empty table).
pub fn read_price_file(path: &Path, region: &str) -> Result<OnDemandPrices, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading the price file {}: {e}", path.display()))?;
    parse_price_file(&text, region).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses a price file (see the module documentation).
pub fn parse_price_file(text: &str, region: &str) -> Result<OnDemandPrices, String> {
    let doc: PriceFile = serde_json::from_str(text)
        .map_err(|e| format!("line {}, column {}: {e}", e.line(), e.column()))?;
    if doc.schema_version != 1 {
        return Err(format!(
            "schema_version {} is not supported (expected 1)",
            doc.schema_version
        ));
    }
    let Some(prices) = doc.regions.get(region) else {
        return Ok(OnDemandPrices::new());
    };
    for (name, price) in &prices.on_demand {
        if !price.is_finite() || *price <= 0.0 {
            return Err(format!(
                "regions.{region}.on_demand.{name}: {price} is not a positive price"
            ));
        }
    }
    Ok(prices.on_demand.clone())
}

/// The built-in on-demand prices for `region` (those of us-east-1 where
/// the table has none for it), and the region they are for.
pub fn builtin(region: &str) -> (OnDemandPrices, &'static str) {
    static TABLE: std::sync::OnceLock<BTreeMap<String, OnDemandPrices>> =
        std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let doc: PriceFile = serde_json::from_str(BUILTIN).expect("builtin-prices.json is valid");
        doc.regions
            .into_iter()
            .map(|(r, p)| (r, p.on_demand))
            .collect()
    });
    match table.get_key_value(region) {
        Some((r, p)) => (p.clone(), r.as_str()),
        None => (
            table
                .get(BUILTIN_FALLBACK_REGION)
                .cloned()
                .unwrap_or_default(),
            BUILTIN_FALLBACK_REGION,
        ),
    }
}

/// The source and date of the built-in prices.
pub fn builtin_source() -> (String, String) {
    let doc: PriceFile = serde_json::from_str(BUILTIN).expect("builtin-prices.json is valid");
    (doc.source.unwrap_or_default(), doc.date.unwrap_or_default())
}

/// Whether `region` has a Pricing API to ask (GovCloud has none).
pub fn has_pricing_api(region: &str) -> bool {
    !region.starts_with("us-gov-")
}

/// The on-demand prices in GetProducts' `PriceList` documents. A document
/// that is not valid JSON is an error; products without an instance type
/// or an on-demand price are skipped.
pub fn parse_products<S: AsRef<str>>(price_list: &[S]) -> Result<OnDemandPrices, String> {
    let mut out = OnDemandPrices::new();
    for (i, doc) in price_list.iter().enumerate() {
        let v: Value = serde_json::from_str(doc.as_ref())
            .map_err(|e| format!("PriceList[{i}] is not JSON: {e}"))?;
        let Some(name) = v
            .pointer("/product/attributes/instanceType")
            .and_then(Value::as_str)
        else {
            continue;
        };
        let prices = v
            .pointer("/terms/OnDemand")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|terms| terms.values())
            .filter_map(|term| term.get("priceDimensions")?.as_object())
            .flat_map(|dims| dims.values())
            .filter_map(|dim| {
                let per_unit = dim.get("pricePerUnit")?;
                let s = per_unit
                    .get("USD")
                    .or_else(|| per_unit.get("CNY"))?
                    .as_str()?;
                s.parse::<f64>().ok()
            })
            .filter(|p| p.is_finite() && *p > 0.0);
        for price in prices {
            out.entry(name.to_string())
                .and_modify(|p: &mut f64| *p = p.min(price))
                .or_insert(price);
        }
    }
    Ok(out)
}

/// Fetches `region`'s on-demand prices from the Pricing API: the shared
/// and the bare-metal queries (every page of each). Either one answering
/// no price at all is an error, as in Karpenter.
pub async fn fetch_on_demand(
    pricing: &aws_sdk_pricing::Client,
    retry: &RetrySettings,
    region: &str,
) -> Result<OnDemandPrices, AwsError> {
    let mut out = query(pricing, retry, region, &SHARED_FILTERS).await?;
    let metal = query(pricing, retry, region, &METAL_FILTERS).await?;
    if out.is_empty() || metal.is_empty() {
        return Err(AwsError::Transport {
            action: "pricing:GetProducts",
            message: format!(
                "no on-demand prices for {region} ({} shared, {} bare metal)",
                out.len(),
                metal.len()
            ),
        });
    }
    for (k, v) in metal {
        out.entry(k).or_insert(v);
    }
    Ok(out)
}

/// One GetProducts query, every page.
async fn query(
    pricing: &aws_sdk_pricing::Client,
    retry: &RetrySettings,
    region: &str,
    extra: &[(&str, &str)],
) -> Result<OnDemandPrices, AwsError> {
    use aws_sdk_pricing::types::{Filter, FilterType};
    let mut filters = Vec::new();
    for (field, value) in std::iter::once(("regionCode", region))
        .chain(COMMON_FILTERS)
        .chain(extra.iter().copied())
    {
        filters.push(
            Filter::builder()
                .r#type(FilterType::TermMatch)
                .field(field)
                .value(value)
                .build()
                .map_err(|e| AwsError::Transport {
                    action: "pricing:GetProducts",
                    message: e.to_string(),
                })?,
        );
    }
    let documents = paginate(
        retry,
        "pricing:GetProducts",
        |token| {
            pricing
                .get_products()
                .service_code("AmazonEC2")
                .format_version("aws_v1")
                .set_filters(Some(filters.clone()))
                .max_results(100)
                .set_next_token(token)
                .send()
        },
        |page| {
            (
                page.price_list().to_vec(),
                page.next_token().map(str::to_string),
            )
        },
    )
    .await?;
    parse_products(&documents).map_err(|message| AwsError::Transport {
        action: "pricing:GetProducts",
        message,
    })
}

/// Fetches the current Linux spot prices of every type and zone.
pub async fn fetch_spot(
    ec2: &aws_sdk_ec2::Client,
    retry: &RetrySettings,
) -> Result<SpotPrices, AwsError> {
    let now = DateTime::from(std::time::SystemTime::now());
    let history = paginate(
        retry,
        "ec2:DescribeSpotPriceHistory",
        |token| {
            ec2.describe_spot_price_history()
                .product_descriptions(SPOT_PRODUCT)
                .start_time(now)
                .max_results(1000)
                .set_next_token(token)
                .send()
        },
        |page| {
            (
                page.spot_price_history().to_vec(),
                page.next_token().map(str::to_string),
            )
        },
    )
    .await?;
    Ok(newest_spot_prices(&history))
}

/// The newest positive price per (instance type, zone) of a spot price
/// history.
pub fn newest_spot_prices(history: &[aws_sdk_ec2::types::SpotPrice]) -> SpotPrices {
    // (price, its timestamp in seconds) per (type, zone): the newest wins.
    let mut newest: BTreeMap<(String, String), (f64, i64)> = BTreeMap::new();
    for p in history {
        let (Some(it), Some(zone), Some(price)) = (
            p.instance_type(),
            p.availability_zone(),
            p.spot_price().and_then(|s| s.parse::<f64>().ok()),
        ) else {
            continue;
        };
        if !price.is_finite() || price <= 0.0 {
            continue;
        }
        let at = p.timestamp().map_or(i64::MIN, DateTime::secs);
        let key = (it.as_str().to_string(), zone.to_string());
        if newest.get(&key).is_none_or(|(_, seen)| *seen <= at) {
            newest.insert(key, (price, at));
        }
    }
    newest.into_iter().map(|(k, (p, _))| (k, p)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn price_files_are_read_per_region_and_checked() {
        let text = r#"{"schema_version": 1, "regions": {
            "us-east-1": {"on_demand": {"m5.large": 0.096, "c5.large": 0.085}},
            "eu-west-1": {"on_demand": {"m5.large": 0.107}}}}"#;
        let p = parse_price_file(text, "us-east-1").expect("valid");
        assert_eq!(p.get("m5.large"), Some(&0.096));
        assert_eq!(p.len(), 2);
        assert!(
            parse_price_file(text, "ap-south-1")
                .expect("valid")
                .is_empty()
        );
        let bad =
            r#"{"schema_version": 1, "regions": {"us-east-1": {"on_demand": {"m5.large": -1}}}}"#;
        let e = parse_price_file(bad, "us-east-1").unwrap_err();
        assert!(e.contains("on_demand.m5.large"), "{e}");
        let e = parse_price_file(r#"{"schema_version": 2, "regions": {}}"#, "x").unwrap_err();
        assert!(e.contains("schema_version 2"), "{e}");
        let e = parse_price_file("{\n\"regions\": 3}", "x").unwrap_err();
        assert!(e.starts_with("line 2"), "{e}");
        let e =
            parse_price_file(r#"{"schema_version": 1, "regions": {}, "x": 1}"#, "x").unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
    }

    #[test]
    fn builtin_prices_cover_us_east_1_and_stand_in_elsewhere() {
        let (us, region) = builtin("us-east-1");
        assert_eq!(region, "us-east-1");
        assert_eq!(us.get("m5.large"), Some(&0.096));
        assert!(us.contains_key("m5.metal"), "bare metal is priced");
        let (eu, region) = builtin("eu-west-3");
        assert_eq!(region, "us-east-1");
        assert_eq!(eu, us);
        let (source, date) = builtin_source();
        assert!(source.contains("aws-catalog.json"), "{source}");
        assert_eq!(date.len(), "2026-07".len(), "{date}");
        assert!(!has_pricing_api("us-gov-west-1") && has_pricing_api("eu-west-1"));
    }

    /// A GetProducts document as the API returns it (abridged attributes).
    fn product(instance_type: &str, usd: &str) -> String {
        serde_json::json!({
            "product": {"productFamily": "Compute Instance", "sku": "ABC",
                "attributes": {"instanceType": instance_type, "regionCode": "us-east-1",
                    "operatingSystem": "Linux", "tenancy": "Shared"}},
            "serviceCode": "AmazonEC2",
            "terms": {"OnDemand": {"ABC.JRTCKXETXF": {
                "offerTermCode": "JRTCKXETXF", "sku": "ABC",
                "priceDimensions": {"ABC.JRTCKXETXF.6YS6EN2CT7": {
                    "unit": "Hrs", "beginRange": "0", "endRange": "Inf",
                    "pricePerUnit": {"USD": usd}}}}}}
        })
        .to_string()
    }

    #[test]
    fn products_give_the_lowest_positive_hourly_price_per_type() {
        let list = [
            product("m5.large", "0.0960000000"),
            product("m5.large", "0.0000000000"),
            product("c5.large", "0.0850000000"),
            product("c5.large", "0.0900000000"),
            r#"{"product": {"attributes": {}}}"#.to_string(),
        ];
        let p = parse_products(&list).expect("valid");
        assert_eq!(
            p,
            OnDemandPrices::from([
                ("c5.large".to_string(), 0.085),
                ("m5.large".to_string(), 0.096),
            ])
        );
        let e = parse_products(&["{".to_string()]).unwrap_err();
        assert!(e.starts_with("PriceList[0]"), "{e}");
    }

    #[test]
    fn the_newest_spot_price_per_type_and_zone_wins() {
        use aws_sdk_ec2::types::{InstanceType, SpotPrice};
        let price = |zone: &str, price: &str, at: i64| {
            SpotPrice::builder()
                .instance_type(InstanceType::M5Large)
                .availability_zone(zone)
                .spot_price(price)
                .timestamp(DateTime::from_secs(at))
                .build()
        };
        let got = newest_spot_prices(&[
            price("us-east-1a", "0.0350", 100),
            price("us-east-1a", "0.0410", 200),
            price("us-east-1a", "0.0300", 150),
            price("us-east-1b", "0.0380", 100),
            price("us-east-1c", "not a price", 100),
            price("us-east-1d", "0", 100),
        ]);
        let key = |z: &str| ("m5.large".to_string(), z.to_string());
        assert_eq!(got.get(&key("us-east-1a")), Some(&0.041));
        assert_eq!(got.get(&key("us-east-1b")), Some(&0.038));
        assert_eq!(got.len(), 2);
    }
}
