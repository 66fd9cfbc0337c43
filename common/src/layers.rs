//! The test that keeps the crate's layers honest: a module may use only modules declared
//! before it (in lib.rs, then in each folder's `mod.rs`), so the crate has no import loops and
//! each layer reads without the ones above it. Comments and test modules are not counted.

use std::fs;
use std::path::{Path, PathBuf};

/// The `pub mod` names a module file declares, in order.
fn declared(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

/// Every `.rs` file under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The crate's modules in the order lib.rs and each folder's `mod.rs` declare them (a folder
/// first, then its modules), each with its files; a module's private submodules (a split
/// `norm/`) count as the module.
fn modules_in_order(src: &Path) -> Vec<(String, Vec<PathBuf>)> {
    let mut out = Vec::new();
    let walk = |prefix: &str, dir: &Path, text: &str, out: &mut Vec<(String, Vec<PathBuf>)>| {
        for name in declared(text) {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}::{name}")
            };
            let file = dir.join(format!("{name}.rs"));
            if file.exists() {
                out.push((path, vec![file]));
                continue;
            }
            let folder = dir.join(&name);
            let mod_rs = folder.join("mod.rs");
            let mod_text = fs::read_to_string(&mod_rs).unwrap();
            let children = declared(&mod_text);
            if children.is_empty() {
                out.push((path, files_under(&folder)));
            } else {
                out.push((path.clone(), vec![mod_rs]));
                for child in children {
                    let child_file = folder.join(format!("{child}.rs"));
                    let files = if child_file.exists() {
                        vec![child_file]
                    } else {
                        files_under(&folder.join(&child))
                    };
                    out.push((format!("{path}::{child}"), files));
                }
            }
        }
    };
    walk(
        "",
        src,
        &fs::read_to_string(src.join("lib.rs")).unwrap(),
        &mut out,
    );
    out
}

/// The paths a file names as `crate::a::b::...`, outside comments and its test module.
fn used_paths(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut used = Vec::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (i, _) in line.match_indices("crate::") {
            let path: String = line[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let path = path.trim_end_matches(':').to_string();
            if !path.is_empty() && !used.contains(&path) {
                used.push(path);
            }
        }
    }
    used
}

/// The module a used path falls in: the longest module path it starts with.
fn module_of<'a>(path: &str, modules: &'a [(String, Vec<PathBuf>)]) -> Option<&'a str> {
    modules
        .iter()
        .map(|(m, _)| m.as_str())
        .filter(|m| path == *m || path.starts_with(&format!("{m}::")))
        .max_by_key(|m| m.len())
}

#[test]
fn every_module_uses_only_modules_declared_before_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    if !src.join("lib.rs").exists() {
        // A test executable copied to a GPU host without the source tree: the check ran
        // where the tree is (CI, every `cargo test`).
        crate::testing::note_skip("common layers", "the source tree is not on this machine");
        return;
    }
    let modules = modules_in_order(&src);
    assert!(
        modules.len() > 20,
        "lib.rs and the folders list the modules"
    );
    let position = |m: &str| modules.iter().position(|(name, _)| name == m);
    let mut upward = Vec::new();
    for (at, (module, files)) in modules.iter().enumerate() {
        for file in files {
            for used in used_paths(&fs::read_to_string(file).unwrap()) {
                let Some(target) = module_of(&used, &modules) else {
                    continue;
                };
                if position(target).is_some_and(|p| p > at) {
                    upward.push(format!("{} ({module}) uses crate::{used}", file.display()));
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layers:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_scan_sees_code_not_comments_or_tests() {
    let text = "use crate::a::X;\n// crate::b in a comment\nfn f() { crate::c::g(); }\n\
                #[cfg(test)]\nmod tests { use crate::d; }\n";
    assert_eq!(used_paths(text), ["a::X", "c::g"]);
}
