//! `schemas/tools/*.json` must be exactly what the parameter types generate.
//! Run with `CTXFS_BLESS=1` to write them after changing a parameter type.

use std::path::Path;

#[test]
fn tool_schemas_are_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/tools");
    let bless = std::env::var_os("CTXFS_BLESS").is_some();
    let mut stale = Vec::new();
    let tools = ctxfs::engine::registry::tools();
    for tool in &tools {
        let text = serde_json::to_string_pretty(tool).unwrap() + "\n";
        let path = dir.join(format!("{}.json", tool.name));
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(tool.name.clone());
        }
    }
    let on_disk: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    for name in on_disk {
        if !tools.iter().any(|t| format!("{}.json", t.name) == name) {
            stale.push(format!("{name} (no such tool)"));
        }
    }
    assert!(stale.is_empty(), "stale schemas: {stale:?}; regenerate with CTXFS_BLESS=1 cargo test --test schemas");
}

#[test]
fn every_tool_has_a_description_and_documented_arguments() {
    for tool in ctxfs::engine::registry::tools() {
        assert!(tool.description.len() > 40, "{} has no real description", tool.name);
        assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
        let empty = serde_json::Map::new();
        let props = tool.input_schema["properties"].as_object().unwrap_or(&empty);
        for (name, prop) in props {
            let described = prop.get("description").is_some()
                || prop.get("items").is_some()
                || prop.get("$ref").is_some()
                || prop.get("anyOf").is_some();
            assert!(described, "{}.{name} has no description", tool.name);
        }
    }
}

/// What the search tools honour is said where the model reads it (issue 13, items 1–4).
#[test]
fn search_descriptions_say_what_they_honour() {
    let tools = ctxfs::engine::registry::tools();
    let described = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).expect("a tool");
        format!("{} {}", tool.description, tool.input_schema)
    };
    for name in ["glob", "grep"] {
        let text = described(name);
        for needle in [".rgignore", ".ignore", ".gitignore", "above", "outside a"] {
            assert!(text.contains(needle), "{name}'s description does not mention {needle:?}");
        }
    }
    let grep = described("grep");
    assert!(grep.contains("matching lines per file"), "grep's count is not said to count lines");
    assert!(grep.contains("`!*.rs`"), "grep's glob does not say it takes a leading `!`");
    assert!(described("glob").contains("leading `!` is refused"), "glob does not say it refuses `!`");
}

/// `schemas/view.json` must be exactly what the view file's type generates
/// (regenerate with `CTXFS_BLESS=1`).
#[test]
fn the_view_file_schema_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/view.json");
    let schema = schemars::schema_for!(ctxfs::access::ViewFile);
    let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
    if std::env::var_os("CTXFS_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(&path).ok().as_deref(),
        Some(text.as_str()),
        "schemas/view.json is stale; regenerate with CTXFS_BLESS=1 cargo test --test schemas"
    );
    for key in ["grants", "floors", "mounts"] {
        assert!(text.contains(&format!("\"{key}\"")), "the view schema has no {key}");
    }
}
