//! The served API through HTTP, against the API server's documented
//! behaviour.

use super::*;

#[test]
fn routes_split_group_version_namespace_and_subresource() {
    let kinds = Kinds::standard();
    assert_eq!(route(&kinds, "/version"), Route::Version);
    assert_eq!(
        route(&kinds, "/apis/karpenter.sh/v1"),
        Route::Resources("karpenter.sh".into(), "v1".into())
    );
    assert_eq!(
        route(&kinds, "/api/v1/namespaces/ns/pods/web/eviction"),
        Route::Object {
            group: String::new(),
            version: "v1".into(),
            namespace: Some("ns".into()),
            plural: "pods".into(),
            name: Some("web".into()),
            sub: Some("eviction".into()),
        }
    );
    assert_eq!(
        route(&kinds, "/api/v1/namespaces/ns/status"),
        Route::Object {
            group: String::new(),
            version: "v1".into(),
            namespace: None,
            plural: "namespaces".into(),
            name: Some("ns".into()),
            sub: Some("status".into()),
        }
    );
    assert_eq!(
        route(&kinds, "/apis/karpenter.sh/v1beta1/nodepools"),
        Route::NotFound
    );
}
