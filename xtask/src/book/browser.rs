//! The built book as a reader sees it: a day's notes page opened from disk in headless
//! Chromium shows its results tables and its plot. A copy of the page with a probe script reports, once the
//! page has loaded, how many tables and images it has and how many images failed to decode;
//! a second copy whose plot points at a missing file must be reported broken, so the probe is
//! known to see a broken image. A screenshot of the page, from the table before its plot, is
//! kept in `target/book-check/`.
//!
//! Without Chromium the test prints one `SKIPPED` line; `REQUIRE_CHROMIUM=1` (CI) fails
//! instead.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use regex::Regex;

/// A day whose notes have results tables and a plot (`sweep.svg`), and the page they become.
const DAY: &str = "day05_vectorized_softmax";
const PAGE: &str = "NOTES.html";
const PLOT: &str = "sweep.svg";

/// The browsers tried, in order, after `$CHROMIUM`.
const BROWSERS: &[&str] = &["chromium", "chromium-browser", "google-chrome"];

/// Waited for one headless run (the page itself asks for at most 10 s of virtual time).
const RUN_LIMIT: Duration = Duration::from_secs(90);

/// Written into the page once it has loaded: every image must be decoded (`complete` alone is
/// also true of an image that failed).
const PROBE: &str = r#"<script>
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var broken = images.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  var out = document.createElement("pre");
  out.textContent = "book-check tables=" + document.querySelectorAll("table").length +
    " images=" + images.length + " broken=" + broken.length;
  document.body.appendChild(out);
});
</script>
</body>"#;

/// Written into the page copy that is photographed: it starts at the table before the first
/// plot (a headless screenshot shows the top of a page, and a scrolled one comes out blank).
const FROM_THE_PLOT: &str = r#"<script>
(function () {
  var main = document.querySelector("main");
  var top = document.images[0];
  while (top.parentElement !== main) top = top.parentElement;
  var start = top;
  while (start.previousElementSibling && !start.querySelector("table")) {
    start = start.previousElementSibling;
  }
  while (main.firstElementChild !== start) main.removeChild(main.firstElementChild);
})();
</script>
</body>"#;

/// What the probe reported.
#[derive(Debug)]
struct Rendered {
    tables: usize,
    images: usize,
    broken: usize,
}

#[test]
fn a_days_notes_show_their_tables_and_their_plot() {
    let Some(chromium) = chromium_or_skip("book page in Chromium") else {
        return;
    };
    let root = crate::workspace_root();
    let check_dir = root.join("target").join("book-check");
    let site = check_dir.join("site");
    let summary = super::build(&root, &site).expect("the book builds and its links open");
    println!("{summary}");

    let page = site.join(DAY).join(PAGE);
    let html = fs::read_to_string(&page).expect("the day's notes page was built");
    let rendered = render(&chromium, &page, &html, "probe", &check_dir);
    println!("{DAY} in Chromium: {rendered:?}");
    assert!(
        rendered.tables >= 1 && rendered.images >= 1 && rendered.broken == 0,
        "{DAY}'s page should show a table and every image: {rendered:?}"
    );

    // The same page with its plot pointed at a file that is not there: the probe must see it.
    let plot_src = format!("src=\"{PLOT}\"");
    assert!(html.contains(&plot_src), "{DAY}'s page shows {PLOT}");
    let without_plot = html.replace(&plot_src, "src=\"missing-plot.svg\"");
    let rendered = render(
        &chromium,
        &page,
        &without_plot,
        "probe-missing-plot",
        &check_dir,
    );
    println!("{DAY} with its plot missing: {rendered:?}");
    assert!(
        rendered.broken >= 1,
        "a plot that is not there must count as broken: {rendered:?}"
    );

    let screenshot = check_dir.join(format!("{DAY}.png"));
    let _ = fs::remove_file(&screenshot);
    let shown = copy_with(&page, &html, "screenshot", FROM_THE_PLOT);
    headless(
        &chromium,
        &[
            "--virtual-time-budget=10000".to_string(),
            format!("--screenshot={}", screenshot.display()),
            "--window-size=1280,2400".to_string(),
            format!("file://{}", shown.display()),
        ],
        &check_dir,
    );
    let size = fs::metadata(&screenshot).map_or(0, |m| m.len());
    assert!(size > 0, "no screenshot at {}", screenshot.display());
}

/// Opens `html` (the page `page`, perhaps changed) with the probe and returns what the probe
/// wrote into the DOM.
fn render(chromium: &Path, page: &Path, html: &str, suffix: &str, work: &Path) -> Rendered {
    let copy = copy_with(page, html, suffix, PROBE);
    let dump = headless(
        chromium,
        &[
            "--virtual-time-budget=10000".to_string(),
            "--dump-dom".to_string(),
            format!("file://{}", copy.display()),
        ],
        work,
    );
    let found = Regex::new(r"book-check tables=(\d+) images=(\d+) broken=(\d+)")
        .expect("a valid pattern")
        .captures(&dump)
        .map(|caps| Rendered {
            tables: caps[1].parse().expect("digits"),
            images: caps[2].parse().expect("digits"),
            broken: caps[3].parse().expect("digits"),
        });
    found.unwrap_or_else(|| {
        let tail = &dump[dump.len().saturating_sub(2000)..];
        panic!(
            "the probe wrote nothing into {}; the DOM ends:\n{tail}",
            copy.display()
        )
    })
}

/// Writes `html` with `script_and_end` in place of `</body>` next to `page` (so its relative
/// links hold) as `index-<suffix>.html`, and returns its path.
fn copy_with(page: &Path, html: &str, suffix: &str, script_and_end: &str) -> PathBuf {
    let copy = page.with_file_name(format!("index-{suffix}.html"));
    let changed = html.replacen("</body>", script_and_end, 1);
    assert_ne!(changed, html, "{} has no </body>", page.display());
    fs::write(&copy, changed).expect("writing a copy of the page");
    copy
}

/// Runs headless Chromium with a fresh profile and returns what it printed; panics when it
/// fails or outlives `RUN_LIMIT`.
fn headless(chromium: &Path, args: &[String], work: &Path) -> String {
    fs::create_dir_all(work).expect("creating the check folder");
    let profile = std::env::temp_dir().join(format!(
        "xtask-book-chromium-{}-{}",
        std::process::id(),
        PROFILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&profile);
    let stdout_path = work.join("chromium.out");
    let stderr_path = work.join("chromium.err");
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&stdout_path).expect("creating chromium.out"))
        .stderr(fs::File::create(&stderr_path).expect("creating chromium.err"))
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", chromium.display()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for Chromium") {
            break status;
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("Chromium ran past {RUN_LIMIT:?}: {args:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = fs::remove_dir_all(&profile);
    let stderr = fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(
        status.success(),
        "Chromium failed ({status}): {args:?}\n{stderr}"
    );
    fs::read_to_string(&stdout_path).expect("reading Chromium's output")
}

static PROFILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `$CHROMIUM`, else the first of `BROWSERS` on `PATH`; None after one `SKIPPED` line, or a
/// panic when `REQUIRE_CHROMIUM=1`.
fn chromium_or_skip(what: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = BROWSERS.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        let why = format!("no Chromium (CHROMIUM is unset and none of {BROWSERS:?} is on PATH)");
        if std::env::var("REQUIRE_CHROMIUM").is_ok_and(|v| v == "1") {
            panic!("{what}: {why} (and REQUIRE_CHROMIUM=1 forbids skipping)");
        }
        // To the process's stderr: the harness captures print!, and this line should show.
        let _ = writeln!(std::io::stderr(), "SKIPPED {what}: {why}");
    }
    found
}
