//! The context server's settings and the `ctxfs mcp` command built from them: plain data in,
//! plain data out, so it is tested natively. Nothing here talks to Zed; `lib.rs` reads the
//! settings from Zed and hands the command back.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};

/// The context server's id, as declared under `[context_servers.ctxfs]` in extension.toml.
pub(crate) const SERVER_ID: &str = "ctxfs";

/// ctxfs's permission modes (`--mode`), as the user writes them in the settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Ask,
    AcceptEdits,
    ReadOnly,
    Trust,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::Ask, Mode::AcceptEdits, Mode::ReadOnly, Mode::Trust];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Ask => "ask",
            Mode::AcceptEdits => "accept-edits",
            Mode::ReadOnly => "read-only",
            Mode::Trust => "trust",
        }
    }

    fn parse(text: &str) -> Result<Mode, String> {
        Mode::ALL.into_iter().find(|m| m.as_str() == text).ok_or_else(|| {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.as_str()).collect();
            format!("ctxfs settings: \"mode\" must be one of {}, not {text:?}", names.join(", "))
        })
    }
}

/// The settings as written under `context_servers.ctxfs.settings` in Zed's settings.json.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    binary: Option<String>,
    mode: Option<String>,
    root: Option<String>,
    start: Option<String>,
    data: Option<String>,
    embedder: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
}

/// The settings once checked, with defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The ctxfs binary: a path, or a name looked up on PATH by Zed. Default `ctxfs`.
    pub(crate) binary: String,
    /// The gate's mode. Default `accept-edits` (see `default_settings`).
    pub(crate) mode: Mode,
    /// The project root. Default `.`: Zed starts a local context server in the project's
    /// directory, so `.` is the project.
    pub(crate) root: String,
    pub(crate) start: Option<String>,
    pub(crate) data: Option<String>,
    pub(crate) embedder: Option<String>,
    /// Further arguments, appended after the ones above.
    pub(crate) args: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
}

/// A command to start: what Zed's `Command` carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Launch {
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
}

fn non_empty(key: &str, value: Option<String>) -> Result<Option<String>, String> {
    match value {
        Some(v) if v.trim().is_empty() => Err(format!("ctxfs settings: \"{key}\" must not be empty")),
        other => Ok(other),
    }
}

impl Settings {
    /// Reads the settings object; absent or `null` means all defaults. Unknown keys and wrong
    /// types are errors that name the key, so a typo does not silently fall back to a default.
    pub(crate) fn from_json(value: Option<&Value>) -> Result<Settings, String> {
        let raw: Raw = match value {
            None | Some(Value::Null) => Raw::default(),
            Some(v @ Value::Object(_)) => {
                serde_json::from_value(v.clone()).map_err(|e| format!("ctxfs settings: {e}"))?
            }
            Some(other) => return Err(format!("ctxfs settings: expected an object, found {other}")),
        };
        let mode = match raw.mode.as_deref() {
            None => Mode::AcceptEdits,
            Some(text) => Mode::parse(text)?,
        };
        let env = raw.env.unwrap_or_default();
        if let Some(bad) = env.keys().find(|k| k.is_empty() || k.contains('=')) {
            return Err(format!("ctxfs settings: \"env\" has an invalid variable name {bad:?}"));
        }
        Ok(Settings {
            binary: non_empty("binary", raw.binary)?.unwrap_or_else(|| "ctxfs".to_string()),
            mode,
            root: non_empty("root", raw.root)?.unwrap_or_else(|| ".".to_string()),
            start: non_empty("start", raw.start)?,
            data: non_empty("data", raw.data)?,
            embedder: non_empty("embedder", raw.embedder)?,
            args: raw.args.unwrap_or_default(),
            env,
        })
    }

    /// The `ctxfs mcp` command for these settings.
    pub(crate) fn mcp_command(&self) -> Launch {
        let mut args = vec!["mcp".to_string(), "--root".to_string(), self.root.clone()];
        args.extend(["--mode".to_string(), self.mode.as_str().to_string()]);
        for (flag, value) in [("--start", &self.start), ("--data", &self.data), ("--embedder", &self.embedder)] {
            if let Some(value) = value {
                args.extend([flag.to_string(), value.clone()]);
            }
        }
        args.extend(self.args.iter().cloned());
        Launch {
            program: self.binary.clone(),
            args,
            env: self.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }
    }
}

/// The JSON schema Zed uses to check and complete the settings.
pub(crate) fn settings_schema() -> Value {
    let modes: Vec<&str> = Mode::ALL.iter().map(|m| m.as_str()).collect();
    json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "binary": {
                "type": "string",
                "description": "The ctxfs binary: an absolute path, or a name on PATH. Default: ctxfs."
            },
            "mode": {
                "type": "string",
                "enum": modes,
                "default": "accept-edits",
                "description": "ctxfs's permission mode (--mode). `ask` needs a client with MCP elicitation; without it every change is refused with a message saying so."
            },
            "root": {
                "type": "string",
                "description": "The boundary (--root). Default: the project's directory, where Zed starts the server."
            },
            "start": { "type": "string", "description": "The start directory (--start), inside the root." },
            "data": { "type": "string", "description": "Where ctxfs keeps stored results, the trash and the index (--data)." },
            "embedder": { "type": "string", "description": "static, minilm, none, or http://HOST:PORT (--embedder)." },
            "args": { "type": "array", "items": { "type": "string" }, "description": "More arguments for ctxfs mcp." },
            "env": {
                "type": "object",
                "additionalProperties": { "type": "string" },
                "description": "Environment variables for the server."
            }
        }
    })
}

/// The settings Zed offers when the user configures the server.
pub(crate) fn default_settings() -> Value {
    json!({ "binary": "ctxfs", "mode": "accept-edits" })
}

/// Shown by Zed when the server is configured (Markdown).
pub(crate) const INSTALL: &str = "\
ctxfs gives the agent its file tools (read, edit, write, grep, search, ...): every result has an id \
like `[#0001 ...]`, unchanged re-reads are short stubs, edits answer with their diff, and a file must \
be read before it is changed.

Install the `ctxfs` binary (from the ctxfs repository: `cargo install --path .`) so that it is on \
PATH, or set `binary` to its absolute path. The server runs `ctxfs mcp --root <project> --mode \
<mode>` in the project's directory.";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: Value) -> Result<Settings, String> {
        Settings::from_json(Some(&value))
    }

    #[test]
    fn absent_and_null_settings_give_the_defaults() {
        for settings in [Settings::from_json(None), Settings::from_json(Some(&Value::Null)), parse(json!({}))] {
            let launch = settings.unwrap().mcp_command();
            assert_eq!(launch.program, "ctxfs");
            assert_eq!(launch.args, ["mcp", "--root", ".", "--mode", "accept-edits"]);
            assert!(launch.env.is_empty());
        }
    }

    #[test]
    fn every_setting_reaches_the_command_in_order() {
        let settings = parse(json!({
            "binary": "/opt/ctxfs/bin/ctxfs",
            "mode": "ask",
            "root": "/home/me/project",
            "start": "src",
            "data": "/tmp/ctxfs-data",
            "embedder": "none",
            "args": ["--host", "fresh"],
            "env": {"RUST_LOG": "debug", "A": "1"}
        }))
        .unwrap();
        let launch = settings.mcp_command();
        assert_eq!(launch.program, "/opt/ctxfs/bin/ctxfs");
        assert_eq!(
            launch.args,
            [
                "mcp",
                "--root",
                "/home/me/project",
                "--mode",
                "ask",
                "--start",
                "src",
                "--data",
                "/tmp/ctxfs-data",
                "--embedder",
                "none",
                "--host",
                "fresh"
            ]
        );
        assert_eq!(launch.env, [("A".to_string(), "1".to_string()), ("RUST_LOG".to_string(), "debug".to_string())]);
    }

    #[test]
    fn every_mode_is_passed_by_its_flag_name() {
        for mode in ["ask", "accept-edits", "read-only", "trust"] {
            let launch = parse(json!({ "mode": mode })).unwrap().mcp_command();
            let at = launch.args.iter().position(|a| a == "--mode").unwrap();
            assert_eq!(launch.args[at + 1], mode);
        }
    }

    #[test]
    fn a_wrong_mode_is_an_error_listing_the_modes() {
        let err = parse(json!({ "mode": "acceptEdits" })).unwrap_err();
        assert!(err.contains("ask, accept-edits, read-only, trust"), "{err}");
        assert!(err.contains("acceptEdits"), "{err}");
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_errors_naming_them() {
        let err = parse(json!({ "binray": "ctxfs" })).unwrap_err();
        assert!(err.contains("binray"), "{err}");
        let err = parse(json!({ "args": "--host fresh" })).unwrap_err();
        assert!(err.starts_with("ctxfs settings:"), "{err}");
        let err = parse(json!(["ctxfs"])).unwrap_err();
        assert!(err.contains("expected an object"), "{err}");
    }

    #[test]
    fn empty_paths_and_bad_variable_names_are_refused() {
        assert!(parse(json!({ "binary": "  " })).unwrap_err().contains("\"binary\""));
        assert!(parse(json!({ "root": "" })).unwrap_err().contains("\"root\""));
        assert!(parse(json!({ "env": {"A=B": "1"} })).unwrap_err().contains("A=B"));
    }

    #[test]
    fn the_default_settings_parse_and_match_the_schema() {
        let defaults = default_settings();
        let settings = Settings::from_json(Some(&defaults)).unwrap();
        assert_eq!(settings.mode, Mode::AcceptEdits);
        let schema = settings_schema();
        let properties = schema["properties"].as_object().unwrap();
        for key in defaults.as_object().unwrap().keys() {
            assert!(properties.contains_key(key), "default key {key} is not in the schema");
        }
        assert_eq!(schema["properties"]["mode"]["default"], defaults["mode"]);
    }

    #[test]
    fn the_schema_names_exactly_the_keys_the_parser_takes() {
        let schema = settings_schema();
        let mut sample = serde_json::Map::new();
        for (key, spec) in schema["properties"].as_object().unwrap() {
            let value = match spec["type"].as_str().unwrap() {
                "string" if key == "mode" => json!("trust"),
                "string" => json!("x"),
                "array" => json!(["x"]),
                "object" => json!({"K": "v"}),
                other => panic!("unexpected type {other}"),
            };
            sample.insert(key.clone(), value);
        }
        Settings::from_json(Some(&Value::Object(sample))).expect("every schema key is accepted");
        let modes: Vec<&str> =
            schema["properties"]["mode"]["enum"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
        assert_eq!(modes, ["ask", "accept-edits", "read-only", "trust"]);
    }
}
