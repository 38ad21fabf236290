//! `dovetail diff` end to end, on git repositories built in temporary
//! directories: created, changed, deleted and moved objects; changes that are
//! not changes (key order, spelled-out defaults); transition rules;
//! `--merge-base`; exit codes; and the text, Markdown and JSON outputs.

use std::path::Path;

use git2::{BranchType, IndexAddOption, Oid, Repository, RepositoryInitOptions, Signature, Time};
use serde_json::Value;

use crate::support::{Output, assert_matches_file, dovetail, root};

/// A git repository in a temporary directory, committing with a fixed clock
/// so that shas are the same on every run.
pub(crate) struct Repo {
    dir: tempfile::TempDir,
    git: Repository,
    commits: i64,
}

impl Repo {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = RepositoryInitOptions::new();
        opts.initial_head("main");
        let git = Repository::init_opts(dir.path(), &opts).unwrap();
        Repo {
            dir,
            git,
            commits: 0,
        }
    }

    pub(crate) fn path(&self) -> &str {
        self.dir.path().to_str().unwrap()
    }

    /// Writes `path` with the content of the fixture `fixture`.
    fn put(&self, path: &str, fixture: &str) -> &Self {
        let content = std::fs::read_to_string(root().join("tests/fixtures/diff").join(fixture))
            .unwrap_or_else(|e| panic!("{fixture}: {e}"));
        self.write(path, &content)
    }

    pub(crate) fn write(&self, path: &str, content: &str) -> &Self {
        let p = self.dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
        self
    }

    fn remove(&self, path: &str) -> &Self {
        std::fs::remove_file(self.dir.path().join(path)).unwrap();
        self
    }

    /// Commits everything on disk on HEAD; returns the sha.
    pub(crate) fn commit(&mut self, message: &str) -> String {
        self.commits += 1;
        let mut index = self.git.index().unwrap();
        index.add_all(["*"], IndexAddOption::DEFAULT, None).unwrap();
        index.update_all(["*"], None).unwrap();
        index.write().unwrap();
        let tree = self.git.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = Signature::new(
            "t",
            "t@example.com",
            &Time::new(1_700_000_000 + self.commits, 0),
        )
        .unwrap();
        let parent = self.git.head().ok().and_then(|h| h.peel_to_commit().ok());
        let parents: Vec<_> = parent.iter().collect();
        let oid: Oid = self
            .git
            .commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)
            .unwrap();
        oid.to_string()
    }

    /// Creates `name` at HEAD and checks it out (files on disk included).
    fn branch(&self, name: &str) {
        let head = self.git.head().unwrap().peel_to_commit().unwrap();
        self.git.branch(name, &head, false).unwrap();
        self.checkout(name);
    }

    fn checkout(&self, name: &str) {
        let branch = self.git.find_branch(name, BranchType::Local).unwrap();
        let refname = branch.get().name().unwrap().to_string();
        let tree = branch.get().peel_to_tree().unwrap();
        self.git
            .checkout_tree(
                tree.as_object(),
                Some(
                    git2::build::CheckoutBuilder::new()
                        .force()
                        .remove_untracked(true),
                ),
            )
            .unwrap();
        self.git.set_head(&refname).unwrap();
    }

    pub(crate) fn diff(&self, args: &[&str]) -> Output {
        let mut all = vec!["diff", self.path()];
        all.extend_from_slice(args);
        dovetail(&all)
    }

    /// `out` with this repository's path and the given shas replaced by
    /// stable placeholders.
    fn redact(&self, out: &str, shas: &[(&str, &str)]) -> String {
        let mut s = out.replace(&format!("{}/", self.path()), "");
        for (sha, name) in shas {
            s = s.replace(sha, &format!("<{name}>"));
            s = s.replace(&sha[..7], &format!("<{name}>"));
        }
        s
    }
}

/// main: an EC2NodeClass and the NodePools `general` and `legacy`.
fn base() -> (Repo, String) {
    let mut repo = Repo::new();
    repo.put("classes.yaml", "nodeclass.yaml")
        .put("pools/general.yaml", "general.yaml")
        .put("pools/legacy.yaml", "legacy.yaml");
    let sha = repo.commit("base");
    (repo, sha)
}

/// base, then: `gpu` created, `general` changed, `legacy` deleted, and the
/// EC2NodeClass moved to another file unchanged.
fn changed() -> (Repo, String, String) {
    let (mut repo, from) = base();
    repo.put("pools/gpu.yaml", "gpu.yaml")
        .put("pools/general.yaml", "general-changed.yaml")
        .remove("pools/legacy.yaml")
        .remove("classes.yaml")
        .put("nodeclasses/default.yaml", "nodeclass.yaml");
    let to = repo.commit("change");
    (repo, from, to)
}

fn json(out: &Output) -> Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

fn object<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("no object {name} in {doc}"))
}

#[test]
fn create_change_delete_and_move_in_json() {
    let (repo, from, to) = changed();
    let out = repo.diff(&["--from", "main~1", "--to", "main", "--output", "json"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let doc = json(&out);
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["from"]["ref"], "main~1");
    assert_eq!(doc["from"]["sha"], from.as_str());
    assert_eq!(doc["to"]["ref"], "main");
    assert_eq!(doc["to"]["sha"], to.as_str());
    assert_eq!(doc["merge_base"], false);
    assert_eq!(
        doc["summary"],
        serde_json::json!({"created": 1, "changed": 1, "deleted": 1, "unchanged": 1})
    );
    let names: Vec<&str> = doc["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "general", "gpu", "legacy"]);

    let prefix = format!("{}/", repo.path());
    let general = object(&doc, "general");
    assert_eq!(general["kind"], "NodePool");
    assert_eq!(general["change"], "changed");
    assert_eq!(general["file"], format!("{prefix}pools/general.yaml"));
    assert_eq!(general["previous_file"], Value::Null);
    assert_eq!(
        general["changed_paths"],
        serde_json::json!([
            "spec.limits.cpu",
            "spec.template.spec.requirements[0].values[1]",
            "spec.weight"
        ])
    );
    let diff = general["diff"].as_str().unwrap();
    assert!(
        diff.contains("-    cpu: \"100\"\n+    cpu: \"200\"\n"),
        "{diff}"
    );
    assert!(diff.contains("+  weight: 10\n"), "{diff}");

    let gpu = object(&doc, "gpu");
    assert_eq!(gpu["change"], "created");
    assert!(gpu["diff"].as_str().unwrap().starts_with("--- /dev/null\n"));
    let legacy = object(&doc, "legacy");
    assert_eq!(legacy["change"], "deleted");
    assert_eq!(legacy["file"], format!("{prefix}pools/legacy.yaml"));
    assert!(legacy["diff"].as_str().unwrap().contains("+++ /dev/null\n"));

    // Renaming the file that holds the EC2NodeClass is a move, not a change.
    let class = object(&doc, "default");
    assert_eq!(class["kind"], "EC2NodeClass");
    assert_eq!(class["change"], "unchanged");
    assert_eq!(class["file"], format!("{prefix}nodeclasses/default.yaml"));
    assert_eq!(class["previous_file"], format!("{prefix}classes.yaml"));
    assert_eq!(class["diff"], "");
    assert_eq!(class["changed_paths"], serde_json::json!([]));
    let diags = doc["diagnostics"].as_array().unwrap();
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(diags[0]["severity"], "note");
    assert_eq!(diags[0]["code"], "moved");
    assert_eq!(diags[0]["object"], "EC2NodeClass/default");
    assert_eq!(diags[0]["line"], 4);
}

#[test]
fn text_output_snapshot() {
    let (repo, from, to) = changed();
    let out = repo.diff(&["--from", "main~1", "--to", "main"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stderr, "");
    assert!(!out.stdout.contains('\x1b'), "no colour off a terminal");
    let text = repo.redact(&out.stdout, &[(&from, "from"), (&to, "to")]);
    assert_matches_file(
        &text,
        Path::new("tests/fixtures/diff/changed.text.expected"),
    );
}

#[test]
fn markdown_output_snapshot() {
    let (repo, from, to) = changed();
    let out = repo.diff(&["--from", "main~1", "--to", "main", "--output", "markdown"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let md = repo.redact(&out.stdout, &[(&from, "from"), (&to, "to")]);
    assert!(md.starts_with("### dovetail diff\n"), "{md}");
    assert!(md.contains("| 1 | 1 | **1** | 1 |"), "{md}");
    assert!(md.contains("| `NodePool/legacy` | **deleted** |"), "{md}");
    assert_eq!(md.matches("<details>").count(), 3, "{md}");
    assert_eq!(md.matches("```diff\n").count(), 3, "{md}");
    assert_eq!(md.matches("</details>").count(), 3, "{md}");
    assert_matches_file(
        &md,
        Path::new("tests/fixtures/diff/changed.markdown.expected"),
    );
}

#[test]
fn same_commit_has_no_differences() {
    let (repo, _) = base();
    let out = repo.diff(&["--from", "main", "--to", "main"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("0 created, 0 changed, 0 deleted, 3 unchanged")
    );
    assert!(out.stdout.contains("no differences\n"), "{}", out.stdout);
}

#[test]
fn key_order_and_spelled_out_defaults_are_no_change() {
    let (mut repo, _) = base();
    repo.put("classes.yaml", "nodeclass-spelled-out.yaml")
        .put("pools/general.yaml", "general-spelled-out.yaml");
    repo.commit("reorder and spell out defaults");
    let out = repo.diff(&["--from", "main~1", "--to", "main", "--output", "json"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let doc = json(&out);
    assert_eq!(doc["summary"]["unchanged"], 3, "{doc}");
    assert_eq!(doc["summary"]["changed"], 0, "{doc}");
}

#[test]
fn status_server_metadata_and_dovetail_annotations_are_no_change() {
    let (mut repo, _) = base();
    let general = std::fs::read_to_string(root().join("tests/fixtures/diff/general.yaml")).unwrap();
    let annotated = general.replace(
        "  name: general\n",
        "  name: general\n  uid: 6f1c\n  resourceVersion: \"42\"\n  generation: 7\n  creationTimestamp: \"2026-01-01T00:00:00Z\"\n  annotations:\n    dovetail.dev/revision: main@sha1:abc\n",
    ) + "status:\n  nodes: 4\n";
    repo.write("pools/general.yaml", &annotated);
    repo.commit("as a live object");
    let out = repo.diff(&["--from", "main~1", "--to", "main"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
}

#[test]
fn changing_the_nodeclassref_group_violates_a_transition_rule() {
    let (mut repo, _) = base();
    let general = std::fs::read_to_string(root().join("tests/fixtures/diff/general.yaml")).unwrap();
    repo.write(
        "pools/general.yaml",
        &general.replace("group: karpenter.k8s.aws", "group: example.com"),
    );
    repo.commit("change the group");
    let out = repo.diff(&[
        "--from",
        "main~1",
        "--to",
        "main",
        "--allow-external-nodeclass",
    ]);
    // The new group is itself rejected by validate (dovetail provisions
    // EC2NodeClass nodes only), so --to is invalid before the transition.
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);

    // The same transition checked from an old group the API accepted, to
    // the supported one.
    let (mut repo, _) = base();
    repo.write(
        "pools/general.yaml",
        &general.replace("group: karpenter.k8s.aws", "group: example.com"),
    );
    repo.commit("an old NodePool with another group");
    repo.write("pools/general.yaml", &general);
    repo.commit("back to karpenter.k8s.aws");
    let out = repo.diff(&["--from", "main~1", "--to", "main", "--output", "json"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    let doc = json(&out);
    let errors: Vec<&Value> = doc["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] == "error")
        .collect();
    assert_eq!(errors.len(), 1, "{doc}");
    assert_eq!(errors[0]["code"], "transition");
    assert_eq!(errors[0]["message"], "nodeClassRef.group is immutable");
    assert_eq!(errors[0]["path"], "spec.template.spec.nodeClassRef.group");
    assert_eq!(errors[0]["object"], "NodePool/general");
    assert_eq!(
        errors[0]["file"],
        format!("{}/pools/general.yaml", repo.path())
    );
    assert_eq!(
        (errors[0]["line"].as_u64(), errors[0]["column"].as_u64()),
        (Some(9), Some(9))
    );
    assert!(
        out.stderr.contains(&format!(
            "{}/pools/general.yaml:9:9: error: NodePool/general: spec.template.spec.nodeClassRef.group: nodeClassRef.group is immutable\n",
            repo.path()
        )),
        "{}",
        out.stderr
    );
}

#[test]
fn switching_between_static_and_dynamic_violates_a_transition_rule() {
    let (mut repo, _) = base();
    repo.put("pools/general.yaml", "static.yaml");
    repo.commit("make general static");
    for (from, to, line) in [("main~1", "main", "6:3"), ("main", "main~1", "5:1")] {
        let out = repo.diff(&["--from", from, "--to", to]);
        assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
        let expected = format!(
            "{}/pools/general.yaml:{line}: error: NodePool/general: spec.replicas: Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes\n",
            repo.path()
        );
        assert!(out.stdout.contains(&expected), "{}", out.stdout);
        assert!(
            out.stdout
                .contains("hint: the API server rejects this update")
        );
    }
}

#[test]
fn merge_base_compares_with_where_the_branch_started() {
    let (mut repo, _) = base();
    repo.branch("feature");
    repo.put("pools/gpu.yaml", "gpu.yaml");
    repo.commit("feature: add gpu");
    repo.checkout("main");
    repo.put("pools/general.yaml", "general-changed.yaml");
    repo.commit("main: change general");

    // Directly, main's later change shows up reverted.
    let out = repo.diff(&["--from", "main", "--to", "feature", "--output", "json"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let doc = json(&out);
    assert_eq!(object(&doc, "general")["change"], "changed");
    assert_eq!(object(&doc, "gpu")["change"], "created");

    // From the merge base, only the branch's own change.
    let out = repo.diff(&[
        "--from",
        "main",
        "--to",
        "feature",
        "--merge-base",
        "--output",
        "json",
    ]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let doc = json(&out);
    assert_eq!(doc["merge_base"], true);
    let base = repo.git.revparse_single("main~1").unwrap().id().to_string();
    assert_eq!(doc["from"]["sha"], base.as_str());
    assert_eq!(object(&doc, "general")["change"], "unchanged");
    assert_eq!(object(&doc, "gpu")["change"], "created");
    assert_eq!(
        doc["summary"],
        serde_json::json!({"created": 1, "changed": 0, "deleted": 0, "unchanged": 3})
    );
}

#[test]
fn unknown_ref_is_an_error_with_a_hint() {
    let (repo, _) = base();
    let out = repo.diff(&["--from", "mian", "--to", "main"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr.starts_with("error: ref `mian` does not exist\n"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("hint: did you mean `main`?"),
        "{}",
        out.stderr
    );
}

#[test]
fn invalid_to_is_an_error_with_the_validators_diagnostics() {
    let (mut repo, _) = base();
    let general = std::fs::read_to_string(root().join("tests/fixtures/diff/general.yaml")).unwrap();
    repo.write(
        "pools/general.yaml",
        &general.replace("  limits:\n", "  weight: 1000\n  limits:\n"),
    );
    repo.commit("weight out of range");
    let out = repo.diff(&["--from", "main~1", "--to", "main", "--output", "json"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stdout, "");
    let validate = dovetail(&["validate", repo.path()]);
    assert_eq!(validate.code, 1);
    // Everything validate prints but its summary line.
    let diagnostics = validate
        .stdout
        .strip_suffix("validate: 1 error, 1 warning in 3 files (3 objects)\n")
        .unwrap_or_else(|| panic!("{}", validate.stdout));
    assert!(diagnostics.contains("spec.weight: 1000 is greater than the maximum of 100"));
    assert!(
        out.stderr.starts_with(diagnostics),
        "{}\n---\n{diagnostics}",
        out.stderr
    );
    assert!(out.stderr.contains("error: `main` ("), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("is invalid (1 error); diff needs a valid --to revision")
    );
}

#[test]
fn invalid_from_is_compared_with_a_warning() {
    let (mut repo, _) = base();
    let general = std::fs::read_to_string(root().join("tests/fixtures/diff/general.yaml")).unwrap();
    repo.write(
        "pools/general.yaml",
        &general.replace("  limits:\n", "  weight: 1000\n  limits:\n"),
    );
    repo.commit("broken main");
    repo.write("pools/general.yaml", &general);
    repo.commit("repair");
    let out = repo.diff(&["--from", "main~1", "--to", "main", "--output", "json"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let doc = json(&out);
    assert_eq!(
        object(&doc, "general")["changed_paths"],
        serde_json::json!(["spec.weight"])
    );
    assert_eq!(doc["diagnostics"][0]["severity"], "warning");
    assert_eq!(doc["diagnostics"][0]["code"], "invalid-from");
    assert!(out.stderr.contains("warning: `main~1` ("), "{}", out.stderr);
    let from = repo.git.revparse_single("main~1").unwrap().id();
    assert_eq!(
        doc["diagnostics"][0]["hint"],
        format!(
            "`dovetail validate {}/ --ref {from}` shows the errors",
            repo.path()
        )
    );
}

#[test]
fn a_plain_directory_is_an_error_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let out = dovetail(&["diff", path, "--from", "main"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        out.stderr,
        format!(
            "error: `{path}` is not in a git repository; diff compares two commits\nhint: run diff on a git repository (or a directory inside one); `dovetail validate` checks a plain directory\n"
        )
    );
}

#[test]
fn unsupported_output_format_is_a_usage_error() {
    let (repo, _) = base();
    let out = repo.diff(&["--from", "main", "--output", "junit"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("[possible values: text, markdown, json]"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_directory_added_by_the_change_makes_every_object_created() {
    let mut repo = Repo::new();
    repo.write("README.md", "config\n");
    repo.commit("empty");
    repo.put("config/classes.yaml", "nodeclass.yaml")
        .put("config/general.yaml", "general.yaml");
    repo.commit("add config");
    let config = format!("{}/config", repo.path());
    let out = dovetail(&["diff", &config, "--from", "main~1", "--output", "json"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let doc = json(&out);
    assert_eq!(doc["summary"]["created"], 2, "{doc}");
    assert_eq!(doc["diagnostics"][0]["code"], "path-not-in-revision");
    assert_eq!(
        object(&doc, "general")["file"],
        format!("{config}/general.yaml")
    );
}

#[test]
fn markdown_lists_problems_and_says_when_nothing_changes() {
    let (mut repo, _) = base();
    repo.put("pools/general.yaml", "static.yaml");
    repo.commit("make general static");
    let out = repo.diff(&["--from", "main~1", "--output", "markdown"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    let line = format!(
        "- **error** `{}/pools/general.yaml:6:3` `NodePool/general` `spec.replicas`: Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes (hint: ",
        repo.path()
    );
    assert!(out.stdout.contains(&line), "{}", out.stdout);
    // The error is in the log too, for a CI job whose stdout goes to a file.
    assert!(
        out.stderr
            .contains("error: NodePool/general: spec.replicas"),
        "{}",
        out.stderr
    );

    let out = repo.diff(&["--from", "main", "--output", "markdown"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("| 0 | 0 | 0 | 3 |\n"), "{}", out.stdout);
    assert!(out.stdout.contains("No differences.\n"), "{}", out.stdout);
    assert!(!out.stdout.contains("<details>"), "{}", out.stdout);
}

#[test]
fn allow_external_nodeclass_is_passed_to_validation() {
    let (mut repo, _) = base();
    let general = std::fs::read_to_string(root().join("tests/fixtures/diff/general.yaml")).unwrap();
    repo.write(
        "pools/general.yaml",
        &general.replace("name: default", "name: managed-elsewhere"),
    );
    repo.commit("use an external EC2NodeClass");
    let out = repo.diff(&["--from", "main~1"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("EC2NodeClass \"managed-elsewhere\" is not defined"),
        "{}",
        out.stderr
    );
    let out = repo.diff(&["--from", "main~1", "--allow-external-nodeclass"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("spec.template.spec.nodeClassRef.name"),
        "{}",
        out.stdout
    );
}
