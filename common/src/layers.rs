//! The test that keeps `lib.rs`'s layers honest: a module may use only modules declared
//! before it there (its own layer or a lower one), so the crate has no import loops and each
//! layer reads without the ones above it. Comments and test modules are not counted.

use std::fs;
use std::path::{Path, PathBuf};

/// The `pub mod` names of lib.rs, in order.
fn declared_order(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

/// The source files of module `name`: `name.rs`, or every file under `name/`.
fn files_of(src: &Path, name: &str) -> Vec<PathBuf> {
    let single = src.join(format!("{name}.rs"));
    if single.exists() {
        return vec![single];
    }
    let mut files: Vec<PathBuf> = fs::read_dir(src.join(name))
        .unwrap_or_else(|e| panic!("module {name}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    files
}

/// The modules a file names as `crate::<module>`, outside comments and its test module.
fn used_modules(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut used = Vec::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (i, _) in line.match_indices("crate::") {
            let name: String = line[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && !used.contains(&name) {
                used.push(name);
            }
        }
    }
    used
}

#[test]
fn every_module_uses_only_modules_declared_before_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let order = declared_order(&fs::read_to_string(src.join("lib.rs")).unwrap());
    assert!(order.len() > 20, "lib.rs lists the modules");
    let mut upward = Vec::new();
    for (position, module) in order.iter().enumerate() {
        for file in files_of(&src, module) {
            for used in used_modules(&fs::read_to_string(&file).unwrap()) {
                match order.iter().position(|m| *m == used) {
                    Some(p) if p > position => {
                        upward.push(format!("{} uses crate::{used}", file.display()))
                    }
                    _ => {}
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
    assert_eq!(used_modules(text), ["a", "c"]);
}
