//! The layering of ARCHITECTURE.md, enforced: every `crate::` path in `src/` names a module of a
//! lower layer, or one of the few sideways edges listed here. Not a style check of anything else.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Each top-level module of `src/` and its layer; a module may use modules of lower layers.
const LAYERS: &[(&str, u8)] = &[
    ("paths", 0),
    ("text", 0),
    ("hash", 0),
    ("sqlite", 0),
    ("vfs", 1),
    ("access", 2),
    ("tools", 3),
    ("hygiene", 3),
    ("instructions", 3),
    ("index", 3),
    ("gate", 3),
    ("memory", 3),
    ("engine", 4),
    ("wire", 5),
    ("lsp", 6),
    ("mcp", 6),
    ("acp", 6),
    ("agent", 6),
    ("cli", 6),
];

/// The edges allowed inside one layer, each with its reason. They must stay acyclic.
const SIDEWAYS: &[(&str, &str, &str)] = &[
    ("tools", "index", "the search tool asks the index"),
    ("tools", "memory", "the memory tool reads and changes the records through the memory store"),
    ("memory", "index", "memory search ranks records with the index's word splitter, BM25 and embedder"),
    ("gate", "tools", "the gate reads the tool table and what a dry run would change"),
    ("hygiene", "tools", "hygiene formats the tools' outcomes and asks the table which tools dedupe"),
    ("acp", "mcp", "the ACP relay's side channel serves the MCP door to the agent it starts"),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(name, _)| *name == module).map(|(_, layer)| *layer)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`None` for lib.rs and main.rs).
fn owner(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    if rel.components().count() == 1 {
        let stem = first.trim_end_matches(".rs");
        return (stem != "lib" && stem != "main").then(|| stem.to_string());
    }
    Some(first)
}

/// The modules named by `crate::NAME` in code (comments left out), grouped imports included.
fn used_modules(code: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let line = match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            if let Some(group) = after.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !name.is_empty() {
                        used.insert(name);
                    }
                }
            } else {
                let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    used.insert(name);
                }
            }
            rest = after;
        }
    }
    used
}

#[test]
fn modules_depend_one_way_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut wrong = Vec::new();
    for file in &files {
        let Some(module) = owner(&src, file) else { continue };
        let Some(own) = layer(&module) else {
            wrong.push(format!("{}: module `{module}` has no layer in ARCHITECTURE.md", file.display()));
            continue;
        };
        let code = std::fs::read_to_string(file).unwrap();
        for used in used_modules(&code) {
            if used == module {
                continue;
            }
            let Some(theirs) = layer(&used) else {
                wrong.push(format!("{}: uses `crate::{used}`, which has no layer", file.display()));
                continue;
            };
            let sideways = SIDEWAYS.iter().any(|(from, to, _)| *from == module && *to == used);
            if theirs > own || (theirs == own && !sideways) {
                wrong.push(format!("{}: `{module}` uses `{used}`", file.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn every_module_has_a_layer_and_lib_declares_them() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    for line in lib.lines() {
        if let Some(name) = line.trim().strip_prefix("pub mod ").or_else(|| line.trim().strip_prefix("mod ")) {
            let name = name.trim_end_matches(';');
            assert!(layer(name).is_some(), "src/lib.rs declares `{name}`, which has no layer here");
        }
    }
}

#[test]
fn sideways_edges_are_acyclic() {
    // With so few edges, a cycle would need an edge and its reverse, or a path through a third.
    for (from, to, _) in SIDEWAYS {
        let mut reach = vec![*to];
        let mut seen = BTreeSet::new();
        while let Some(at) = reach.pop() {
            assert_ne!(at, *from, "the sideways edges {from} -> {to} close a cycle");
            if seen.insert(at) {
                reach.extend(SIDEWAYS.iter().filter(|(f, _, _)| *f == at).map(|(_, t, _)| *t));
            }
        }
    }
}

#[test]
fn the_scanner_sees_grouped_and_qualified_uses() {
    let code = "use crate::{paths::VPath, vfs};\nlet x = crate::engine::may_wait(t); // crate::mcp\n/// crate::lsp\n";
    let used: Vec<String> = used_modules(code).into_iter().collect();
    assert_eq!(used, ["engine", "paths", "vfs"]);
}
