//! `dovetail simulate --output html`: the bundled demo's report opened in
//! headless Chromium with the network cut off (skipped, with a message,
//! where Chromium is not installed: Debian's `chromium` package), and the
//! file checks that need no browser.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{demo_outputs, dovetail};

/// Chromium's executable on this machine, if any.
pub fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("DOVETAIL_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .iter()
    .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
    .find(|p| p.is_file())
}

/// Runs headless Chromium on `page` with its network cut off: every
/// request goes to a proxy at 127.0.0.1:9, where nothing listens, and
/// Chromium's own background traffic is switched off. `extra` picks the
/// output (`--dump-dom`, `--screenshot=...`). Returns stdout and how long
/// Chromium took.
pub fn headless(chromium: &Path, page: &Path, extra: &[&str]) -> (String, Duration) {
    let profile = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--proxy-server=http://127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
            "--window-size=1280,1600",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (String::from_utf8_lossy(&out.stdout).into_owned(), took)
}

/// The markup of the element with `id` (from its start tag to the matching
/// end tag of the same name).
fn element<'a>(dom: &'a str, tag: &str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("<{tag} id=\"{id}\""))
        .unwrap_or_else(|| panic!("no <{tag} id=\"{id}\"> in the page"));
    let end = dom[start..]
        .find(&format!("</{tag}>"))
        .unwrap_or_else(|| panic!("<{tag} id=\"{id}\"> is not closed"));
    &dom[start..start + end]
}

/// Checks the page (the file, or Chromium's DOM after its script ran)
/// against the JSON report of the same scenario.
fn assert_charts(page: &str, r: &Value) {
    let series = &r["series"];
    let pools: BTreeSet<&str> = series["nodes"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert!(pools.len() >= 2, "{pools:?}");
    let nodes = element(page, "svg", "chart-nodes");
    assert_eq!(nodes.matches("<path class=\"series").count(), pools.len());
    for p in &pools {
        assert!(nodes.contains(&format!("data-series=\"{p}\"")), "{p}");
    }
    let price = element(page, "svg", "chart-price");
    assert_eq!(price.matches("<path class=\"series").count(), 2);
    let pending = element(page, "svg", "chart-pending");
    assert_eq!(pending.matches("<path class=\"series").count(), 1);
    // One mark per decision, in a lane per reason, each linked to its row.
    let decisions = r["disruptions"].as_array().unwrap();
    let marks = element(page, "svg", "chart-disruptions");
    assert_eq!(marks.matches("class=\"mark\"").count(), decisions.len());
    let reasons: BTreeSet<&str> = decisions
        .iter()
        .map(|d| d["reason"].as_str().unwrap())
        .collect();
    assert_eq!(marks.matches("<g class=\"lane\"").count(), reasons.len());
    let table = element(page, "section", "disruptions");
    assert_eq!(table.matches("<tr id=\"d-").count(), decisions.len());
    for i in 0..decisions.len() {
        assert!(
            marks.contains(&format!("href=\"#d-{i}\"")),
            "mark {i} links to its row"
        );
        assert!(
            table.contains(&format!("href=\"#m-{i}\"")),
            "row {i} links to its mark"
        );
    }
    // Every chart on the same time axis: the same ticks under each.
    let ticks = |svg: &str| -> Vec<String> {
        let axis = &svg[svg.find("<g class=\"axis\">").unwrap()..];
        let axis = &axis[..axis.find("</g>").unwrap()];
        // Each tick's x and label (the y depends on the chart's height).
        axis.split("<text x=\"")
            .skip(1)
            .map(|t| {
                let x = &t[..t.find('"').unwrap()];
                let label = &t[t.find('>').unwrap() + 1..t.find('<').unwrap()];
                format!("{x} {label}")
            })
            .collect()
    };
    let first = ticks(nodes);
    assert!(first.len() > 4, "{first:?}");
    for svg in [price, pending, marks] {
        assert_eq!(ticks(svg), first);
    }
    // Cost and utilization per NodePool.
    let per_pool = element(page, "section", "nodepools");
    for p in r["summary"]["nodepools"].as_array().unwrap() {
        let name = p["nodepool"].as_str().unwrap();
        assert!(
            per_pool.contains(&format!("data-nodepool=\"{name}\"")),
            "{name}"
        );
    }
}

#[test]
fn the_html_report_is_one_self_contained_file() {
    let demo = demo_outputs();
    let html = &demo.html;
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(
        html.contains("default-src 'none'"),
        "a CSP forbids loading anything"
    );
    for reference in ["src=", "<link", "@import", "url(", "http://", "https://"] {
        assert!(
            !html.contains(reference),
            "the page refers to something: {reference}"
        );
    }
    assert!(html.len() < 1_000_000, "{} bytes", html.len());
    assert_charts(html, &demo.report);
    // The pods still pending, with their reasons (the demo places every
    // pod, so the section says so).
    let pending = element(html, "section", "pending");
    assert_eq!(demo.report["unschedulable"].as_array().unwrap().len(), 0);
    assert!(pending.contains("every pod was placed"), "{pending}");
}

/// The README links the demo's page, `docs/demo-report.html`: it is the
/// page the demo writes now (`DOVETAIL_BLESS=1` rewrites it, and the
/// screenshot `docs/images/demo-report.png` is taken from it).
#[test]
fn the_committed_demo_report_is_the_demo_s() {
    crate::support::assert_matches_file(&demo_outputs().html, Path::new("docs/demo-report.html"));
}

#[test]
fn pending_pods_are_listed_with_their_reasons_grouped_by_workload() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("pending.html");
    let out = dovetail(&[
        "simulate",
        "tests/scenarios/pending-end.yaml",
        "-o",
        "html",
        "--output-file",
        html.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let json = dovetail(&["simulate", "tests/scenarios/pending-end.yaml", "-o", "json"]);
    let r: Value = serde_json::from_str(&json.stdout).unwrap();
    let page = std::fs::read_to_string(&html).unwrap();
    let section = element(&page, "section", "pending");
    let unschedulable = r["unschedulable"].as_array().unwrap();
    assert!(!unschedulable.is_empty());
    for u in unschedulable {
        let reason = u["reason"].as_str().unwrap();
        let escaped = reason
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
            .replace('\'', "&apos;");
        assert!(section.contains(&escaped), "{reason}");
    }
}

#[test]
fn the_output_file_is_never_written_through_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere.html");
    std::fs::write(&target, "keep").unwrap();
    let link = dir.path().join("report.html");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for flag in ["--output-file", "--metrics"] {
        let out = dovetail(&[
            "simulate",
            "tests/scenarios/stable.yaml",
            "-o",
            "html",
            flag,
            link.to_str().unwrap(),
        ]);
        assert_eq!(out.code, 2, "{flag}: {}", out.stderr);
        assert!(
            out.stderr
                .contains("is a symlink; dovetail never writes through a symlink"),
            "{flag}: {}",
            out.stderr
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
    // Usage errors of the metrics flags, before any run.
    let out = dovetail(&["simulate", "--metrics-every", "1m"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--metrics"), "{}", out.stderr);
    let m = dir.path().join("m.prom");
    let out = dovetail(&[
        "simulate",
        "--metrics",
        m.to_str().unwrap(),
        "--metrics-every",
        "0s",
    ]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("the shortest interval is 1s"),
        "{}",
        out.stderr
    );
    let out = dovetail(&[
        "simulate",
        "--metrics",
        m.to_str().unwrap(),
        "--metrics-label",
        "__name__=x",
    ]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("is not a label name"), "{}", out.stderr);
    assert!(!m.exists());
}

#[test]
fn the_demo_report_renders_in_headless_chromium_without_the_network() {
    let Some(chromium) = chromium() else {
        crate::missing(
            "Chromium is not installed (Debian: apt-get install chromium; or set DOVETAIL_CHROMIUM)",
        );
        return;
    };
    let demo = demo_outputs();
    let (dom, took) = headless(&chromium, &demo.html_path, &["--dump-dom"]);
    // The script ran (it marks the page ready) and nothing the page tried
    // to load was refused: it loads nothing.
    let body = &dom[dom.find("<body").unwrap()..];
    let body_tag = &body[..body.find('>').unwrap()];
    assert!(body_tag.contains("data-ready=\"1\""), "{body_tag}");
    assert!(!body_tag.contains("data-csp-violations"), "{body_tag}");
    assert_charts(&dom, &demo.report);
    let screenshot = demo.dir.join("demo-report.png");
    let _ = std::fs::remove_file(&screenshot);
    headless(
        &chromium,
        &demo.html_path,
        &[&format!("--screenshot={}", screenshot.display())],
    );
    let png = std::fs::read(&screenshot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert!(png.len() > 20_000, "{} bytes: an empty page?", png.len());
    println!(
        "chromium rendered the demo's report in {:.2} s; screenshot: {}",
        took.as_secs_f64(),
        screenshot.display()
    );
}
