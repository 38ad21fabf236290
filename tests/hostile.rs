//! Hostile and large input: no write outside the target whatever the
//! symlinks, errors that name the file and line, bounded work.

use std::path::{Path, PathBuf};

use crate::support::{Output, dovetail, root};

/// A temporary directory with a configuration repository `repo/` (the
/// commit scenario's) and a directory `outside/` that must stay untouched.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("repo")).unwrap();
        std::fs::create_dir(dir.path().join("outside")).unwrap();
        std::fs::copy(
            root().join("tests/scenarios/commit-repo/config.yaml"),
            dir.path().join("repo/config.yaml"),
        )
        .unwrap();
        Sandbox { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Writes the scenario `s.yaml` and runs it.
    fn simulate(&self, scenario: &str) -> Output {
        let file = self.path("s.yaml");
        std::fs::write(&file, scenario).unwrap();
        dovetail(&["simulate", file.to_str().unwrap(), "-o", "json"])
    }

    fn scenario_name(&self) -> String {
        self.path("s.yaml").display().to_string()
    }

    fn outside_is_untouched(&self) {
        let left: Vec<_> = std::fs::read_dir(self.path("outside"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("victim.yaml")]);
        assert_eq!(
            std::fs::read_to_string(self.path("outside/victim.yaml")).unwrap(),
            "precious\n"
        );
        assert!(!self.dir.path().join("w.yaml").exists());
    }
}

fn commit_scenario(files: &str) -> String {
    format!("config: repo\ntimeline:\n  - at: 1m\n    commit:\n      files:\n{files}until: 2m\n")
}

/// A pull request that adds a scenario and a symlink must not be able to
/// make `simulate` write outside the repository. Before, the private copy
/// kept the links and the step wrote through them.
#[cfg(unix)]
#[test]
fn a_commit_step_never_writes_through_a_symlink() {
    use std::os::unix::fs::symlink;
    for (link, target, file) in [
        ("linkdir", "../outside", "linkdir/w.yaml"),
        ("up", "..", "up/w.yaml"),
        (
            "config-link.yaml",
            "../outside/victim.yaml",
            "config-link.yaml",
        ),
        ("deep", "../outside", "deep/er/w.yaml"),
    ] {
        let sb = Sandbox::new();
        std::fs::write(sb.path("outside/victim.yaml"), "precious\n").unwrap();
        symlink(target, sb.path("repo").join(link)).unwrap();
        let out = sb.simulate(&commit_scenario(&format!(
            "        {file}: |\n          apiVersion: v1\n          kind: ConfigMap\n"
        )));
        assert_eq!(out.code, 2, "{file}: {}", out.stderr);
        let expected = format!("{}:6:9: error: commit: \"{file}\": ", sb.scenario_name());
        assert!(out.stderr.starts_with(&expected), "{file}: {}", out.stderr);
        assert!(
            out.stderr.contains("never writes through a symlink"),
            "{}",
            out.stderr
        );
        sb.outside_is_untouched();
    }
}

/// Deleting through a symlinked directory would remove a file outside.
#[cfg(unix)]
#[test]
fn a_commit_step_never_deletes_through_a_symlink() {
    let sb = Sandbox::new();
    std::fs::write(sb.path("outside/victim.yaml"), "precious\n").unwrap();
    std::os::unix::fs::symlink("../outside", sb.path("repo/linkdir")).unwrap();
    let out = sb.simulate(&commit_scenario("        linkdir/victim.yaml: null\n"));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .starts_with(&format!("{}:6:9: error: commit: ", sb.scenario_name())),
        "{}",
        out.stderr
    );
    sb.outside_is_untouched();
}

/// Both used to print a bare path or `error: commit: cannot delete ...`,
/// without the scenario's file and line.
#[test]
fn a_missing_config_and_a_missing_file_to_delete_name_the_scenario_line() {
    let sb = Sandbox::new();
    let out = sb.simulate("# a scenario\nconfig: nowhere\nuntil: 1m\n");
    assert_eq!(out.code, 2);
    let expected = format!(
        "{}:2:9: error: config: cannot read the configuration repository ",
        sb.scenario_name()
    );
    assert!(out.stderr.starts_with(&expected), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("hint: `config` is relative to the scenario file"),
        "{}",
        out.stderr
    );

    let out = sb.simulate(&commit_scenario(
        "        config.yaml: null\n        absent.yaml: null\n",
    ));
    assert_eq!(out.code, 2);
    let expected = format!(
        "{}:7:9: error: commit: cannot delete \"absent.yaml\": it is not in the configuration repository ",
        sb.scenario_name()
    );
    assert!(out.stderr.starts_with(&expected), "{}", out.stderr);

    // A file written by an earlier step may be deleted by a later one; one
    // deleted earlier may not be deleted again.
    let two_steps = "config: repo\ntimeline:\n  - at: 1m\n    commit:\n      files:\n        extra.yaml: |\n          apiVersion: v1\n          kind: ConfigMap\n          metadata: {name: x}\n  - at: 2m\n    commit:\n      files:\n        extra.yaml: null\n  - at: 3m\n    commit:\n      files:\n        extra.yaml: null\nuntil: 4m\n";
    let out = sb.simulate(two_steps);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.starts_with(&format!(
            "{}:17:9: error: commit: cannot delete \"extra.yaml\"",
            sb.scenario_name()
        )),
        "{}",
        out.stderr
    );
    assert!(Path::new(&sb.path("repo/config.yaml")).exists());
}
