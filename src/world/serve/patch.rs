//! The patch types of `PATCH`: JSON merge patch (RFC 7386), JSON patch
//! (RFC 6902) and Kubernetes' strategic merge patch, as the API server
//! applies them to the stored object's JSON.

use serde_json::{Map, Value};

use crate::cluster::ApiError;

/// A `PATCH` body's type, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn of(content_type: &str) -> Option<PatchType> {
        match content_type.split(';').next().unwrap_or_default().trim() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

fn bad(message: String) -> ApiError {
    ApiError::BadRequest { message }
}

/// Applies a JSON, merge or strategic merge patch to `target`.
pub fn apply(kind: PatchType, target: &Value, patch: &[u8]) -> Result<Value, ApiError> {
    let mut out = target.clone();
    match kind {
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_slice(patch)
                .map_err(|e| bad(format!("error decoding patch: {e}")))?;
            // On the copy, without json_patch::patch's undo: a failed patch
            // leaves the copy to be dropped, and the undo panics on some
            // patches (an append at `/-` followed by a failing operation).
            json_patch::patch_unsafe(&mut out, &ops).map_err(|e| ApiError::Invalid {
                resource: String::new(),
                key: Default::default(),
                messages: vec![format!(
                    "the server rejected our request due to an error in our request: {e}"
                )],
            })?;
        }
        PatchType::Merge => {
            let p: Value = serde_json::from_slice(patch)
                .map_err(|e| bad(format!("error decoding patch: {e}")))?;
            match p {
                Value::Object(_) => merge(&mut out, &p),
                // As the API server's json-patch: an array replaces the
                // document; anything else is refused.
                Value::Array(_) => out = without_nulls(p),
                _ => return Err(bad("Invalid JSON Patch".into())),
            }
        }
        PatchType::Strategic => {
            let p: Value = serde_json::from_slice(patch)
                .map_err(|e| bad(format!("error decoding patch: {e}")))?;
            // `null` decodes into an empty patch; anything else but an
            // object does not decode at all.
            if p.is_null() {
                return Ok(out);
            }
            if !p.is_object() {
                return Err(bad("invalid JSON document".into()));
            }
            strategic(&mut out, &p).map_err(bad)?;
        }
        PatchType::Apply => {
            return Err(bad("apply patches are merged by server-side apply".into()));
        }
    }
    Ok(out)
}

/// A JSON merge patch as the API server's json-patch (evanphx v4) merges
/// one: a `null` member deletes, an object merges into an object, anything
/// else replaces; what is put where there was nothing, `null` or a
/// non-object loses the `null` members of its objects, however deep (an
/// array keeps its `null` items), and what replaces an object is kept as
/// it is.
fn merge(target: &mut Value, patch: &Value) {
    let (Some(t), Some(p)) = (target.as_object_mut(), patch.as_object()) else {
        // evanphx v4 prunes what replaces anything but an object, and
        // takes what replaces an object as it is.
        *target = if target.is_object() {
            patch.clone()
        } else {
            without_nulls(patch.clone())
        };
        return;
    };
    for (key, value) in p {
        match (value, t.get_mut(key)) {
            (Value::Null, _) => {
                t.remove(key);
            }
            (_, Some(current)) if !current.is_null() => merge(current, value),
            _ => {
                t.insert(key.clone(), without_nulls(value.clone()));
            }
        }
    }
}

fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        v => v,
    }
}

/// Whether a patch sets `metadata.resourceVersion`: then it is a
/// precondition and a conflict is the client's to resolve.
pub fn sets_resource_version(kind: PatchType, patch: &[u8]) -> bool {
    let Ok(p) = serde_json::from_slice::<Value>(patch) else {
        return false;
    };
    match kind {
        PatchType::Json => {
            p.as_array().into_iter().flatten().any(|op| {
                op.get("path").and_then(Value::as_str) == Some("/metadata/resourceVersion")
            })
        }
        _ => p
            .pointer("/metadata/resourceVersion")
            .is_some_and(|v| !v.is_null()),
    }
}

/// The merge key of a list field, as the built-in types' `patchMergeKey`
/// tags declare it; `None` for lists that a patch replaces.
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "containerStatuses"
        | "initContainerStatuses" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ports" => "containerPort",
        "conditions" | "addresses" => "type",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    })
}

/// Lists of scalars whose patch strategy is `merge` (a set union).
fn merges_scalars(field: &str) -> bool {
    field == "finalizers"
}

/// Kubernetes' strategic merge patch for the built-in kinds: maps merge,
/// `null` deletes, lists with a merge key merge element by element
/// (`$patch: delete` removes one, `{"$patch": "replace"}` replaces the
/// list), `finalizers` unite, other lists are replaced; `$patch: replace`
/// replaces a map and `$patch: delete` empties it, and
/// `$deleteFromPrimitiveList/<field>` removes scalars. A patch that
/// `strategicpatch` refuses (another `$patch` value, a list element
/// without its merge key) is refused with its message.
pub fn strategic(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return Ok(());
    };
    match patch.get("$patch") {
        None => {}
        Some(Value::String(d)) if d == "replace" => {
            let mut replaced = patch.clone();
            replaced.remove("$patch");
            *target = Value::Object(replaced);
            return Ok(());
        }
        Some(Value::String(d)) if d == "delete" => {
            *target = Value::Object(Map::new());
            return Ok(());
        }
        Some(other) => {
            return Err(format!(
                "unknown patch type: {other} in map: {}",
                Value::Object(patch.clone())
            ));
        }
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(t) = target.as_object_mut() else {
        return Ok(());
    };
    for (key, value) in patch {
        if let Some(list) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Some(remove)) = (t.get_mut(list), value.as_array()) {
                items.retain(|i| !remove.contains(i));
            }
            continue;
        }
        if key.starts_with('$') {
            // `$setElementOrder/...`, `$retainKeys`: ordering hints.
            continue;
        }
        if value.is_null() {
            t.remove(key);
            continue;
        }
        match (value, t.get_mut(key)) {
            (Value::Object(_), Some(current @ Value::Object(_))) => strategic(current, value)?,
            (Value::Array(items), Some(Value::Array(existing))) => {
                *existing = match merge_key(key) {
                    Some(k) => merge_by_key(existing, items, k)?,
                    None if merges_scalars(key) => {
                        let kind = |v: &Value| std::mem::discriminant(v);
                        let mut all = existing.iter().chain(items);
                        let first = all.next().map(kind);
                        if all.any(|v| Some(kind(v)) != first) {
                            return Err(format!(
                                "list element types are not identical: {}",
                                Value::Array(existing.iter().chain(items).cloned().collect())
                            ));
                        }
                        let mut out = existing.clone();
                        for i in items {
                            if !out.contains(i) {
                                out.push(i.clone());
                            }
                        }
                        normalize_order(out, items, existing, &|v| Some(v.clone()))
                    }
                    None => items.clone(),
                };
            }
            // Absent, or of another type (`null` is one): the patch's
            // value, without its nulls and its directives.
            _ => match without_directives(without_nulls(value.clone())) {
                Some(v) => drop(t.insert(key.clone(), v)),
                None => drop(t.remove(key)),
            },
        }
    }
    Ok(())
}

/// strategicpatch's `removeDirectives`: a map with `$patch` goes, and so
/// does any list element or member that is one.
fn without_directives(value: Value) -> Option<Value> {
    match value {
        Value::Object(m) if m.contains_key("$patch") => None,
        Value::Object(m) => Some(Value::Object(
            m.into_iter()
                .filter_map(|(k, v)| Some((k, without_directives(v)?)))
                .collect(),
        )),
        Value::Array(items) => Some(Value::Array(
            items.into_iter().filter_map(without_directives).collect(),
        )),
        v => Some(v),
    }
}

/// A list merged by its merge key, as strategicpatch's `mergeSlice` does:
/// elements with `$patch: delete` remove their match, one with `$patch:
/// replace` makes the list the patch's other elements, then each element
/// merges into its match or is appended, and the result is ordered as
/// [`normalize_order`] orders it.
fn merge_by_key(existing: &[Value], patch: &[Value], key: &str) -> Result<Vec<Value>, String> {
    let no_key = |p: &Value| format!("map: {p} does not contain declared merge key: {key}");
    let mut out = existing.to_vec();
    let mut plain = Vec::new();
    let mut replace = false;
    for p in patch {
        match p.get("$patch") {
            None => plain.push(p),
            Some(Value::String(d)) if d == "delete" => {
                let id = p.get(key).ok_or_else(|| no_key(p))?;
                out.retain(|e| e.get(key) != Some(id));
            }
            Some(Value::String(d)) if d == "replace" => replace = true,
            Some(Value::String(d)) if d == "merge" => {
                return Err("merging lists cannot yet be specified in the patch".into());
            }
            Some(other) => return Err(format!("unknown patch type: {other} in map: {p}")),
        }
    }
    if let Some(p) = plain.iter().find(|p| p.get(key).is_none()) {
        return Err(no_key(p));
    }
    if replace {
        return Ok(plain.into_iter().cloned().collect());
    }
    let server_order = out.clone();
    for p in &plain {
        match out.iter().position(|e| e.get(key) == p.get(key)) {
            Some(i) => strategic(&mut out[i], p)?,
            None => out.push((*p).clone()),
        }
    }
    let patch_order: Vec<Value> = plain.into_iter().cloned().collect();
    Ok(normalize_order(out, &patch_order, &server_order, &|v| {
        v.get(key).cloned()
    }))
}

/// Go's `sort.SliceStable`, step for step (insertion sort over blocks of
/// 20, then SymMerge): strategicpatch orders lists with a `less` that is
/// not a strict order (an element missing from the order is "less" than
/// anything), so only Go's own sequence of comparisons gives Go's order.
fn go_stable_sort<T>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    fn insertion<T>(v: &mut [T], a: usize, b: usize, less: &impl Fn(&T, &T) -> bool) {
        for i in a + 1..b {
            let mut j = i;
            while j > a && less(&v[j], &v[j - 1]) {
                v.swap(j, j - 1);
                j -= 1;
            }
        }
    }
    fn swap_range<T>(v: &mut [T], a: usize, b: usize, n: usize) {
        for i in 0..n {
            v.swap(a + i, b + i);
        }
    }
    fn rotate<T>(v: &mut [T], a: usize, m: usize, b: usize) {
        let (mut i, mut j) = (m - a, b - m);
        while i != j {
            if i > j {
                swap_range(v, m - i, m, j);
                i -= j;
            } else {
                swap_range(v, m - i, m + j - i, i);
                j -= i;
            }
        }
        swap_range(v, m - i, m, i);
    }
    fn sym_merge<T>(v: &mut [T], a: usize, m: usize, b: usize, less: &impl Fn(&T, &T) -> bool) {
        if m - a == 1 {
            let (mut i, mut j) = (m, b);
            while i < j {
                let h = (i + j) / 2;
                if less(&v[h], &v[a]) {
                    i = h + 1;
                } else {
                    j = h;
                }
            }
            for k in a..i - 1 {
                v.swap(k, k + 1);
            }
            return;
        }
        if b - m == 1 {
            let (mut i, mut j) = (a, m);
            while i < j {
                let h = (i + j) / 2;
                if !less(&v[m], &v[h]) {
                    i = h + 1;
                } else {
                    j = h;
                }
            }
            let mut k = m;
            while k > i {
                v.swap(k, k - 1);
                k -= 1;
            }
            return;
        }
        let mid = (a + b) / 2;
        let n = mid + m;
        let (mut start, mut r) = if m > mid { (n - b, mid) } else { (a, m) };
        let p = n - 1;
        while start < r {
            let c = (start + r) / 2;
            if !less(&v[p - c], &v[c]) {
                start = c + 1;
            } else {
                r = c;
            }
        }
        let end = n - start;
        if start < m && m < end {
            rotate(v, start, m, end);
        }
        if a < start && start < mid {
            sym_merge(v, a, start, mid, less);
        }
        if mid < end && end < b {
            sym_merge(v, mid, end, b, less);
        }
    }
    let n = v.len();
    let mut block = 20;
    let (mut a, mut b) = (0, block);
    while b <= n {
        insertion(v, a, b, less);
        a = b;
        b += block;
    }
    insertion(v, a, n, less);
    while block < n {
        let (mut a, mut b) = (0, 2 * block);
        while b <= n {
            sym_merge(v, a, a + block, b, less);
            a = b;
            b += 2 * block;
        }
        if a + block < n {
            sym_merge(v, a, a + block, n, less);
        }
        block *= 2;
    }
}

/// strategicpatch's `normalizeElementOrder`: the merged list's elements
/// the patch names, in the patch's order, interleaved with the others in
/// the server's order (`mergeSortedSlice`). `id` is what `index` compares:
/// the merge key's value, or the element itself for a list of scalars.
fn normalize_order(
    merged: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    id: &impl Fn(&Value) -> Option<Value>,
) -> Vec<Value> {
    let index = |list: &[Value], v: &Value| {
        let key = id(v);
        list.iter().position(|e| id(e) == key)
    };
    let (mut from_patch, mut server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|v| index(patch_order, v).is_some());
    let by = |order: &[Value]| {
        let order = order.to_vec();
        move |x: &Value, y: &Value| match (index(&order, x), index(&order, y)) {
            (Some(i), Some(j)) => i < j,
            _ => true,
        }
    };
    go_stable_sort(&mut from_patch, &by(patch_order));
    go_stable_sort(&mut server_only, &by(server_order));
    // mergeSortedSlice(left = server-only, right = from the patch).
    let (mut left, mut right) = (
        server_only.into_iter().peekable(),
        from_patch.into_iter().peekable(),
    );
    let mut out = Vec::new();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!(
                (index(server_order, l), index(server_order, r)),
                (Some(i), Some(j)) if i < j
            ),
        };
        out.extend(if take_left { left.next() } else { right.next() });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_json_patch_after_an_append_is_refused_not_a_panic() {
        let target = serde_json::json!({"metadata": {"finalizers": ["a"], "labels": {"k": "v"}}});
        let patch = br#"[{"op": "add", "path": "/metadata/finalizers/-", "value": "b"},
                         {"op": "test", "path": "/metadata/labels/k", "value": "w"}]"#;
        assert!(apply(PatchType::Json, &target, patch).is_err());
    }

    #[test]
    fn merge_patches_merge_as_the_api_server_does() {
        let target = serde_json::json!({"a": {"b": 1, "c": 2}, "l": [1]});
        let merged =
            |p: serde_json::Value| apply(PatchType::Merge, &target, p.to_string().as_bytes());
        assert_eq!(
            merged(serde_json::json!({"a": {"b": null}, "l": [{"x": null, "y": 1}, null], "n": {"z": null}})).ok(),
            Some(serde_json::json!({"a": {"c": 2}, "l": [{"y": 1}, null], "n": {}}))
        );
        assert_eq!(
            merged(serde_json::json!([1, null])).ok(),
            Some(serde_json::json!([1, null]))
        );
        for refused in [
            serde_json::json!(null),
            serde_json::json!("x"),
            serde_json::json!(1),
        ] {
            assert!(merged(refused).is_err());
        }
    }
    use serde_json::json;

    #[test]
    fn merge_and_json_patches_follow_their_rfcs() {
        let t = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": [1, 2]}});
        let merged = apply(
            PatchType::Merge,
            &t,
            br#"{"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"x": [3]}}"#,
        )
        .unwrap();
        assert_eq!(
            merged,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"x": [3]}})
        );
        let patched = apply(
            PatchType::Json,
            &t,
            br#"[{"op": "add", "path": "/spec/x/-", "value": 9}, {"op": "remove", "path": "/metadata/labels/a"}]"#,
        )
        .unwrap();
        assert_eq!(
            patched,
            json!({"metadata": {"labels": {"b": "2"}}, "spec": {"x": [1, 2, 9]}})
        );
        let failed = apply(
            PatchType::Json,
            &t,
            br#"[{"op": "test", "path": "/spec/x/0", "value": 7}]"#,
        );
        assert_eq!(failed.unwrap_err().code(), 422);
        assert_eq!(apply(PatchType::Merge, &t, b"{").unwrap_err().code(), 400);
    }

    #[test]
    fn strategic_merge_merges_keyed_lists_and_unites_finalizers() {
        let t = json!({
            "metadata": {"finalizers": ["a"]},
            "spec": {"containers": [{"name": "app", "image": "v1"}, {"name": "side", "image": "s"}],
                     "tolerations": [{"key": "x"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        });
        let p = json!({
            "metadata": {"finalizers": ["b"]},
            "spec": {"containers": [{"name": "app", "image": "v2"}, {"name": "side", "$patch": "delete"}],
                     "tolerations": [{"key": "y"}],
                     "unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Other", "status": "True"}]}
        });
        let out = apply(PatchType::Strategic, &t, p.to_string().as_bytes()).unwrap();
        // strategicpatch's order: what the patch names first (checked
        // against the Go code by tests/differential/parsers.rs).
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "a"]));
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "app", "image": "v2"}])
        );
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "y"}]));
        assert_eq!(out["spec"]["unschedulable"], json!(true));
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "False"}, {"type": "Other", "status": "True"}])
        );
        let removed = apply(
            PatchType::Strategic,
            &out,
            br#"{"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}"#,
        )
        .unwrap();
        assert_eq!(removed["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn a_patch_that_names_a_resource_version_is_a_precondition() {
        assert!(sets_resource_version(
            PatchType::Merge,
            br#"{"metadata": {"resourceVersion": "5"}}"#
        ));
        assert!(!sets_resource_version(PatchType::Merge, br#"{"spec": {}}"#));
        assert!(sets_resource_version(
            PatchType::Json,
            br#"[{"op": "replace", "path": "/metadata/resourceVersion", "value": "5"}]"#
        ));
    }
}
