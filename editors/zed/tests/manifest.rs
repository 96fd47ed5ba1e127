//! Checks extension.toml and the crate's packaging against what Zed and its extension registry
//! require: the required keys, an id and name without "zed", a licence file of an accepted kind,
//! a context server, agent servers in the form current Zed runs, and a cdylib crate of its own.
//! It reads files only; it does not load the extension into Zed (no Zed binary runs here).

use std::path::{Path, PathBuf};

use toml::{Table, Value};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read_toml(path: &Path) -> Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.parse::<Table>().unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn manifest() -> Table {
    read_toml(&dir().join("extension.toml"))
}

fn string<'a>(table: &'a Table, key: &str) -> &'a str {
    table.get(key).and_then(Value::as_str).unwrap_or_else(|| panic!("extension.toml needs a string {key:?}"))
}

#[test]
fn required_keys_are_present_and_well_formed() {
    let m = manifest();
    for key in ["id", "name", "version", "description", "repository"] {
        assert!(!string(&m, key).trim().is_empty(), "{key} is empty");
    }
    assert_eq!(m.get("schema_version").and_then(Value::as_integer), Some(1), "schema_version must be 1");
    let authors = m.get("authors").and_then(Value::as_array).expect("authors must be an array");
    assert!(!authors.is_empty() && authors.iter().all(|a| a.as_str().is_some_and(|s| !s.is_empty())));
    let id = string(&m, "id");
    assert!(
        id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
        "id {id:?} must be lowercase letters, digits and dashes"
    );
    let version = string(&m, "version");
    let parts: Vec<&str> = version.split('.').collect();
    assert!(parts.len() == 3 && parts.iter().all(|p| p.parse::<u32>().is_ok()), "version {version:?} is not X.Y.Z");
    assert!(string(&m, "repository").starts_with("https://"), "repository must be an https URL");
}

#[test]
fn neither_id_nor_name_contains_zed() {
    let m = manifest();
    for key in ["id", "name"] {
        let value = string(&m, key).to_lowercase();
        assert!(!value.contains("zed"), "{key} {value:?} must not contain \"zed\"");
    }
}

#[test]
fn only_keys_zed_knows_are_used() {
    const KNOWN: &[&str] = &[
        "id",
        "name",
        "version",
        "schema_version",
        "description",
        "repository",
        "authors",
        "lib",
        "themes",
        "icon_themes",
        "languages",
        "grammars",
        "language_servers",
        "context_servers",
        "agent_servers",
        "slash_commands",
        "snippets",
        "capabilities",
        "debug_adapters",
        "debug_locators",
    ];
    for key in manifest().keys() {
        assert!(KNOWN.contains(&key.as_str()), "unknown top-level key {key:?} in extension.toml");
    }
}

#[test]
fn a_licence_file_of_an_accepted_kind_is_present() {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        let upper = name.to_uppercase();
        if upper.starts_with("LICENSE") || upper.starts_with("LICENCE") {
            found.push(name);
        }
    }
    assert!(!found.is_empty(), "the extension directory needs a LICENSE file");
    for name in found {
        let text = std::fs::read_to_string(dir().join(&name)).unwrap();
        // Zed's registry accepts MIT among others; this crate is MIT, as Cargo.toml says.
        assert!(text.starts_with("MIT License"), "{name} is not the MIT licence");
        assert!(text.contains("Permission is hereby granted, free of charge"), "{name} is not the MIT text");
    }
    let cargo = read_toml(&dir().join("Cargo.toml"));
    assert_eq!(cargo["package"]["license"].as_str(), Some("MIT"));
}

#[test]
fn the_context_server_is_declared_under_the_id_the_code_serves() {
    let m = manifest();
    let servers = m.get("context_servers").and_then(Value::as_table).expect("[context_servers] is missing");
    assert_eq!(servers.keys().collect::<Vec<_>>(), ["ctxfs"]);
    let code = std::fs::read_to_string(dir().join("src/config.rs")).unwrap();
    assert!(code.contains("pub(crate) const SERVER_ID: &str = \"ctxfs\";"), "config.rs serves another id");
}

#[test]
fn agent_servers_run_ctxfs_acp_from_the_release_archive() {
    let m = manifest();
    let version = string(&m, "version");
    let release = format!("{}/releases/download/v{version}/ctxfs-{version}-", string(&m, "repository"));
    let agents = m.get("agent_servers").and_then(Value::as_table).expect("[agent_servers] is missing");
    assert!(agents.len() >= 3, "expected agent servers for several agents");
    for (id, agent) in agents {
        assert!(!id.to_lowercase().contains("zed"), "agent id {id} must not contain zed");
        let agent = agent.as_table().unwrap();
        assert!(agent.get("name").and_then(Value::as_str).is_some_and(|n| !n.is_empty()), "{id} needs a name");
        let targets = agent.get("targets").and_then(Value::as_table).unwrap_or_else(|| panic!("{id} needs targets"));
        assert!(targets.contains_key("linux-x86_64"), "{id} needs a linux-x86_64 target");
        let mut seen_args: Option<Vec<String>> = None;
        for (platform, target) in targets {
            let (os, arch) = platform.split_once('-').unwrap_or_else(|| panic!("{id}: bad platform {platform}"));
            assert!(["linux", "darwin", "windows"].contains(&os), "{id}: bad os in {platform}");
            assert!(["x86_64", "aarch64"].contains(&arch), "{id}: bad arch in {platform}");
            let archive = target["archive"].as_str().unwrap();
            assert!(archive.starts_with(&release), "{id}/{platform}: {archive} is not this version's release");
            assert!(archive.ends_with(".tar.gz") || archive.ends_with(".zip"), "{id}/{platform}: archive type");
            let rust_arch = arch;
            assert!(archive.contains(rust_arch), "{id}/{platform}: archive for another architecture");
            assert_eq!(target["cmd"].as_str(), Some("./ctxfs"), "{id}/{platform}: Zed runs only ./relative commands");
            let args: Vec<String> =
                target["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
            assert!(args.len() >= 3 && args[0] == "acp" && args[1] == "--", "{id}/{platform}: args {args:?}");
            if let Some(previous) = &seen_args {
                assert_eq!(previous, &args, "{id}: targets disagree on the agent");
            }
            seen_args = Some(args);
        }
    }
}

#[test]
fn the_crate_is_a_cdylib_in_its_own_workspace_on_the_pinned_api() {
    let cargo = read_toml(&dir().join("Cargo.toml"));
    assert!(cargo.contains_key("workspace"), "Cargo.toml needs [workspace] so it stays out of the ctxfs crate");
    let types: Vec<&str> = cargo["lib"]["crate-type"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert!(types.contains(&"cdylib"), "Zed loads a cdylib");
    assert_eq!(cargo["dependencies"]["zed_extension_api"].as_str(), Some("=0.7.0"));
    assert_eq!(cargo["package"]["version"].as_str(), Some(string(&manifest(), "version")), "versions differ");
}
