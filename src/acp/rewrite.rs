//! The relay's pure edits of ACP messages: the injected MCP server, the
//! system-prompt addition, ctxfs's tools recognised under the names agents
//! give them, `kind` / `locations` / `diff` content for their tool calls,
//! and the gate's answers as ACP permission options.
//!
//! Everything here takes and returns `serde_json::Value`s and touches only
//! the fields it names, so whatever else a message carries (`_meta`, fields
//! of a newer protocol) passes through as it came. No I/O, no state.

use crate::tools::spec;
use serde_json::{json, Map, Value};

/// The name of the injected MCP server in every session.
pub(crate) const SERVER_NAME: &str = "ctxfs";

/// What the model is told, where the agent takes a system-prompt addition.
pub(crate) const PROMPT_ADDITION: &str = "\
Files: ctxfs serves this project's files through the MCP tools of its \"ctxfs\" server (read, edit, \
multiedit, write, apply_patch, list, glob, grep, search, mv, rm, mkdir, stat, recall). Use them for \
every file you read, search or change, instead of the built-in file tools: they follow the user's \
permission settings, show the user each change as a diff, and start every result with an id in \
brackets such as [#0001] that recall shows again.";

/// ctxfs's tool behind a name as an agent reports it: `mcp__ctxfs__read`
/// (Claude Code), `ctxfs_read` (opencode), `ctxfs.read`, `ctxfs/read`,
/// `ctxfs__read`, `Tool: ctxfs/read`, `read (ctxfs MCP Server)` (Gemini CLI).
pub(crate) fn ctxfs_tool(name: &str) -> Option<&'static str> {
    let name = name.trim();
    let known = |tool: &str| spec::find(tool).map(|t| t.name);
    if let Some(tool) = name.strip_suffix(&format!(" ({SERVER_NAME} MCP Server)")) {
        return known(tool.trim());
    }
    let at = name.rfind(SERVER_NAME)?;
    let before = &name[..at];
    if before.chars().last().is_some_and(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let rest = &name[at + SERVER_NAME.len()..];
    let tool = rest.trim_start_matches(['_', '.', '/', ':', '-']);
    if tool.len() == rest.len() || rest.len() - tool.len() > 2 {
        return None;
    }
    known(tool)
}

/// ctxfs's tool named by a `tool_call`, a `tool_call_update` or a
/// permission request's `toolCall`: Claude Code's `_meta.claudeCode.toolName`,
/// else the programmatic `name`, else the `title`.
pub(crate) fn tool_of(call: &Value) -> Option<&'static str> {
    let meta = call.pointer("/_meta/claudeCode/toolName").and_then(Value::as_str);
    [meta, call.get("name").and_then(Value::as_str), call.get("title").and_then(Value::as_str)]
        .into_iter()
        .flatten()
        .find_map(ctxfs_tool)
}

/// Whether a title is only the tool's raw name (what agents show for an MCP tool).
pub(crate) fn is_raw_name(title: &str) -> bool {
    ctxfs_tool(title).is_some() && !title.contains(' ')
}

/// ACP's kind for a ctxfs tool.
pub(crate) fn kind(tool: &str) -> &'static str {
    spec::find(tool).map_or("other", |t| t.traits.action.acp_kind())
}

fn arg<'a>(args: &'a Value, name: &str) -> Option<&'a str> {
    args.get(name).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The paths a call names in its arguments, as given (maybe relative), with
/// the line a read starts at.
pub(crate) fn named_paths(tool: &str, args: &Value) -> Vec<(String, Option<u64>)> {
    let one = |name: &str| arg(args, name).map(|p| vec![(p.to_string(), None)]).unwrap_or_default();
    match tool {
        "read" => arg(args, "file_path")
            .map(|p| vec![(p.to_string(), args.get("offset").and_then(Value::as_u64).filter(|n| *n > 0))])
            .unwrap_or_default(),
        "write" | "edit" | "multiedit" => one("file_path"),
        "list" | "glob" | "grep" | "search" | "mkdir" | "rm" | "stat" | "tag" => one("path"),
        "commit" | "branch" | "merge" | "git_tag" | "pr" | "release" => one("path"),
        "mv" => {
            let mut out = one("source");
            out.extend(one("destination"));
            out
        }
        "apply_patch" => arg(args, "patch")
            .and_then(|p| crate::text::parse_patch(p).ok())
            .map(|ops| {
                use crate::text::PatchOp;
                ops.iter()
                    .flat_map(|op| match op {
                        PatchOp::Add { path, .. } | PatchOp::Delete { path } => vec![path.clone()],
                        PatchOp::Update { path, move_to, .. } => {
                            std::iter::once(path.clone()).chain(move_to.clone()).collect()
                        }
                    })
                    .map(|p| (p, None))
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// A short title for a call: `read notes/a.md`, `grep TODO`, `mv a → b`.
pub(crate) fn title(tool: &str, args: &Value) -> String {
    let main = match tool {
        "glob" | "grep" => arg(args, "pattern").map(str::to_string),
        "search" => arg(args, "query").map(str::to_string),
        "recall" => arg(args, "id").map(str::to_string),
        "skill_view" | "skill_manage" => arg(args, "name").map(str::to_string),
        // `memory remove m3`, `memory search tabs`, `memory add`.
        "memory" => arg(args, "action").map(|action| match arg(args, "id").or_else(|| arg(args, "query")) {
            Some(what) => format!("{action} {what}"),
            None => action.to_string(),
        }),
        "mv" => match (arg(args, "source"), arg(args, "destination")) {
            (Some(from), Some(to)) => Some(format!("{from} → {to}")),
            _ => None,
        },
        _ => named_paths(tool, args).first().map(|(p, _)| p.clone()),
    };
    match main {
        Some(main) => {
            let main: String = main.chars().take(120).collect();
            format!("{tool} {main}")
        }
        None => tool.to_string(),
    }
}

/// A `ToolCallLocation`.
pub(crate) fn location(path: &str, line: Option<u64>) -> Value {
    match line {
        Some(line) => json!({"path": path, "line": line}),
        None => json!({"path": path}),
    }
}

/// A `{"type": "diff"}` tool call content.
pub(crate) fn diff_content(path: &str, old: Option<&str>, new: &str) -> Value {
    json!({"type": "diff", "path": path, "oldText": old, "newText": new})
}

/// A text tool call content.
pub(crate) fn text_content(text: &str) -> Value {
    json!({"type": "content", "content": {"type": "text", "text": text}})
}

/// Puts ctxfs's server into a session request's `mcpServers`, replacing a
/// server of the same name (the relay's posture wins). The client's other
/// servers and every other field stay as they were. False when `params` is
/// not an object.
pub(crate) fn inject_server(params: &mut Value, server: Value) -> bool {
    let Some(object) = params.as_object_mut() else { return false };
    let servers = object.entry("mcpServers").or_insert_with(|| Value::Array(Vec::new()));
    if !servers.is_array() {
        *servers = Value::Array(Vec::new());
    }
    let list = servers.as_array_mut().expect("made an array above");
    list.retain(|s| s.get("name").and_then(Value::as_str) != Some(SERVER_NAME));
    list.push(server);
    true
}

/// The stdio MCP server entry of ACP (`McpServerStdio`).
pub(crate) fn stdio_server(command: &str, args: &[String]) -> Value {
    json!({"name": SERVER_NAME, "command": command, "args": args, "env": []})
}

/// Extends a Claude Code system prompt in place: a whole prompt (a string)
/// or a preset (`{"append": …}`, made when missing).
fn extend_prompt(prompt: &mut Value, text: &str) {
    match prompt {
        Value::String(whole) => {
            whole.push_str("\n\n");
            whole.push_str(text);
        }
        Value::Object(spec) => match spec.get_mut("append") {
            Some(Value::String(append)) => {
                append.push_str("\n\n");
                append.push_str(text);
            }
            _ => {
                spec.insert("append".into(), Value::from(text));
            }
        },
        _ => {}
    }
}

/// Adds `text` to Claude Code's system prompt. The adapter takes
/// `_meta.systemPrompt` (a whole prompt, or `{"append": …}`), and an app's
/// own `_meta.claudeCode.options.systemPrompt` overrides that: the one in
/// force is extended, or an `append` is made.
pub(crate) fn append_claude_prompt(params: &mut Value, text: &str) {
    if let Some(prompt) = params.pointer_mut("/_meta/claudeCode/options/systemPrompt") {
        extend_prompt(prompt, text);
        return;
    }
    let Some(object) = params.as_object_mut() else { return };
    let meta = object.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else { return };
    match meta.get_mut("systemPrompt") {
        Some(prompt) => extend_prompt(prompt, text),
        None => {
            meta.insert("systemPrompt".into(), json!({"append": text}));
        }
    }
}

/// The ACP option kind for a gate answer (`allow_once`, …, `deny`).
pub(crate) fn option_kind(answer: &str) -> &'static str {
    match answer {
        "allow_once" => "allow_once",
        "allow_session" | "always_file" | "always_directory" => "allow_always",
        _ => "reject_once",
    }
}

/// The ACP `PermissionOption`s for the gate's offered answers (id, label).
pub(crate) fn permission_options(offered: &[(String, String)]) -> Vec<Value> {
    offered.iter().map(|(id, label)| json!({"optionId": id, "name": label, "kind": option_kind(id)})).collect()
}

/// The gate answer a `session/request_permission` response chose, or why
/// there is none (cancelled, an error, an option not offered).
pub(crate) fn chosen(response: &Value, offered: &[(String, String)]) -> Result<String, String> {
    if let Some(error) = response.get("error") {
        let message = error.get("message").and_then(Value::as_str).unwrap_or("an error");
        return Err(format!("the app could not show the prompt: {message}"));
    }
    let outcome = response.pointer("/result/outcome");
    match outcome.and_then(|o| o.get("outcome")).and_then(Value::as_str) {
        Some("selected") => {
            let id = outcome.and_then(|o| o.get("optionId")).and_then(Value::as_str).unwrap_or_default();
            if offered.iter().any(|(offered, _)| offered == id) {
                Ok(id.to_string())
            } else {
                Err(format!("the app answered {id:?}, which was not offered"))
            }
        }
        Some("cancelled") => Err("the prompt turn was cancelled".into()),
        _ => Err("the app's answer had no outcome".into()),
    }
}

/// The option of an agent's own permission request the relay picks for a
/// ctxfs tool (the gate decides for itself): allow once, else allow always.
pub(crate) fn allow_option(request: &Value) -> Option<String> {
    let options = request.get("options")?.as_array()?;
    ["allow_once", "allow_always"].iter().find_map(|kind| {
        options
            .iter()
            .find(|o| o.get("kind").and_then(Value::as_str) == Some(kind))
            .and_then(|o| o.get("optionId"))
            .and_then(Value::as_str)
            .map(str::to_string)
    })
}

/// Whether `text` shows the bracket of result `id` (`[#000c …]`).
pub(crate) fn mentions(text: &str, id: &str) -> bool {
    let needle = format!("[{id}");
    text.match_indices(&needle).any(|(at, _)| matches!(text.as_bytes().get(at + needle.len()), Some(b' ' | b']')))
}

/// The text a tool call update shows, where a result's bracket can be:
/// its content and its raw output, as JSON text.
pub(crate) fn shown_text(update: &Value) -> String {
    let mut text = String::new();
    for field in ["content", "rawOutput"] {
        if let Some(value) = update.get(field) {
            text.push_str(&value.to_string());
        }
    }
    text
}

/// The finishing status of an update (`completed`, `failed`), if it has one.
pub(crate) fn finished(update: &Value) -> bool {
    matches!(update.get("status").and_then(Value::as_str), Some("completed" | "failed"))
}

/// Sets a tool call's kind, locations and diffs. `content` is the content
/// the call shows now (the update's own, else the last one seen), kept
/// ahead of the diffs, so the bracketed id stays in the text.
pub(crate) fn render(
    update: &mut Value,
    tool: &str,
    locations: Vec<Value>,
    diffs: Vec<Value>,
    content: Option<&Value>,
) {
    let Some(object) = update.as_object_mut() else { return };
    object.insert("kind".into(), Value::from(kind(tool)));
    if !locations.is_empty() {
        object.insert("locations".into(), Value::Array(locations));
    }
    if diffs.is_empty() {
        return;
    }
    let mut shown: Vec<Value> = match object.get("content").or(content) {
        Some(Value::Array(items)) => {
            items.iter().filter(|c| c.get("type").and_then(Value::as_str) != Some("diff")).cloned().collect()
        }
        _ => Vec::new(),
    };
    shown.extend(diffs);
    object.insert("content".into(), Value::Array(shown));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_are_recognised_under_agents_names() {
        assert_eq!(ctxfs_tool("mcp__ctxfs__read"), Some("read"));
        assert_eq!(ctxfs_tool("ctxfs_apply_patch"), Some("apply_patch"));
        assert_eq!(ctxfs_tool("ctxfs.edit"), Some("edit"));
        assert_eq!(ctxfs_tool("Tool: ctxfs/grep"), Some("grep"));
        assert_eq!(ctxfs_tool("ctxfs__skills_list"), Some("skills_list"));
        assert_eq!(ctxfs_tool("rm (ctxfs MCP Server)"), Some("rm"));
        for other in ["mcp__other__read", "read", "notctxfs_read", "mcp__ctxfs__nope", "ctxfsread", "ctxfs____read", ""]
        {
            assert_eq!(ctxfs_tool(other), None, "{other}");
        }
        let claude = json!({"title": "mcp__ctxfs__edit", "_meta": {"claudeCode": {"toolName": "mcp__ctxfs__edit"}}});
        assert_eq!(tool_of(&claude), Some("edit"));
        assert_eq!(tool_of(&json!({"title": "Read a.md"})), None);
        assert!(is_raw_name("mcp__ctxfs__read") && !is_raw_name("read a.md"));
    }

    #[test]
    fn kinds_cover_every_tool() {
        let kinds: Vec<(&str, &str)> = spec::names().map(|t| (t, kind(t))).collect();
        assert!(kinds.contains(&("read", "read")) && kinds.contains(&("grep", "search")));
        assert!(
            kinds.contains(&("edit", "edit")) && kinds.contains(&("rm", "delete")) && kinds.contains(&("mv", "move"))
        );
        // memory and a repository's tools have no ACP kind of their own.
        assert_eq!(
            kinds.iter().filter(|(_, k)| *k == "other").map(|(t, _)| *t).collect::<Vec<_>>(),
            vec!["tag", "memory", "commit", "branch", "merge", "git_tag", "pr", "release"]
        );
    }

    #[test]
    fn paths_and_titles_come_from_arguments() {
        let read = json!({"file_path": "notes/a.md", "offset": 12});
        assert_eq!(named_paths("read", &read), vec![("notes/a.md".to_string(), Some(12))]);
        assert_eq!(title("read", &read), "read notes/a.md");
        assert_eq!(title("mv", &json!({"source": "a", "destination": "b"})), "mv a → b");
        assert_eq!(title("grep", &json!({"pattern": "TODO"})), "grep TODO");
        let patch = "*** Begin Patch\n*** Add File: n.md\n+x\n*** Delete File: old.md\n*** Update File: u.md\n*** Move to: v.md\n@@\n-a\n+b\n*** End Patch";
        let paths: Vec<String> =
            named_paths("apply_patch", &json!({"patch": patch})).into_iter().map(|p| p.0).collect();
        assert_eq!(paths, ["n.md", "old.md", "u.md", "v.md"]);
        assert!(named_paths("list", &json!({})).is_empty());
    }

    #[test]
    fn injection_keeps_the_clients_servers_and_replaces_a_namesake() {
        let mut params = json!({"cwd": "/w", "mcpServers": [
            {"name": "other", "command": "x", "args": [], "env": [], "_meta": {"k": 1}},
            {"name": "ctxfs", "command": "old", "args": [], "env": []}
        ], "_meta": {"keep": true}});
        assert!(inject_server(&mut params, stdio_server("/bin/ctxfs", &["mcp".into()])));
        let servers = params["mcpServers"].as_array().unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0]["_meta"]["k"], 1);
        assert_eq!(servers[1], json!({"name": "ctxfs", "command": "/bin/ctxfs", "args": ["mcp"], "env": []}));
        assert_eq!(params["_meta"]["keep"], true);
        let mut bare = json!({"sessionId": "s"});
        inject_server(&mut bare, stdio_server("c", &[]));
        assert_eq!(bare["mcpServers"].as_array().unwrap().len(), 1);
        assert!(!inject_server(&mut json!(null), stdio_server("c", &[])));
    }

    #[test]
    fn the_claude_prompt_addition_extends_what_is_there() {
        let mut none = json!({"cwd": "/w"});
        append_claude_prompt(&mut none, "X");
        assert_eq!(none["_meta"]["systemPrompt"], json!({"append": "X"}));
        let mut append = json!({"_meta": {"systemPrompt": {"append": "A"}, "claudeCode": {"options": {}}}});
        append_claude_prompt(&mut append, "X");
        assert_eq!(append["_meta"]["systemPrompt"]["append"], "A\n\nX");
        assert!(append["_meta"]["claudeCode"]["options"].is_object());
        let mut whole = json!({"_meta": {"systemPrompt": "P"}});
        append_claude_prompt(&mut whole, "X");
        assert_eq!(whole["_meta"]["systemPrompt"], "P\n\nX");
        // The app's own option wins in the adapter: that one is extended.
        let mut option = json!({"_meta": {"claudeCode": {"options": {"systemPrompt": {"type": "preset", "preset": "claude_code"}}}}});
        append_claude_prompt(&mut option, "X");
        assert_eq!(option["_meta"]["claudeCode"]["options"]["systemPrompt"]["append"], "X");
        assert!(option["_meta"].get("systemPrompt").is_none());
    }

    #[test]
    fn gate_answers_map_to_acp_options_and_back() {
        let offered: Vec<(String, String)> = [
            ("allow_once", "Allow once"),
            ("allow_session", "Allow a.md for this session"),
            ("always_file", "Always allow a.md"),
            ("always_directory", "Always allow notes/*"),
            ("deny", "Deny"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let options = permission_options(&offered);
        let kinds: Vec<&str> = options.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["allow_once", "allow_always", "allow_always", "allow_always", "reject_once"]);
        assert_eq!(options[2], json!({"optionId": "always_file", "name": "Always allow a.md", "kind": "allow_always"}));
        let selected = |id: &str| json!({"result": {"outcome": {"outcome": "selected", "optionId": id}}});
        assert_eq!(chosen(&selected("always_file"), &offered), Ok("always_file".into()));
        assert!(chosen(&selected("yolo"), &offered).unwrap_err().contains("not offered"));
        let cancelled = json!({"result": {"outcome": {"outcome": "cancelled"}}});
        assert!(chosen(&cancelled, &offered).unwrap_err().contains("cancelled"));
        assert!(chosen(&json!({"error": {"code": -1, "message": "no"}}), &offered).is_err());
        let claude = json!({"options": [
            {"kind": "allow_always", "optionId": "allow_always", "name": "Always Allow"},
            {"kind": "allow_once", "optionId": "allow", "name": "Allow"},
            {"kind": "reject_once", "optionId": "reject", "name": "Reject"}]});
        assert_eq!(allow_option(&claude).as_deref(), Some("allow"));
        assert_eq!(allow_option(&json!({"options": [{"kind": "reject_once", "optionId": "r"}]})), None);
    }

    #[test]
    fn brackets_are_found_only_whole() {
        assert!(mentions("```\n[#000c notes/a.md lines 1-3 of 3 sha 1c9e04ab]\n", "#000c"));
        assert!(mentions("[#000c]", "#000c"));
        assert!(!mentions("[#000c0 x]", "#000c"));
        assert!(!mentions("#000c x", "#000c"));
    }

    #[test]
    fn rendering_keeps_the_text_and_adds_diffs() {
        let mut update = json!({"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "[#0002 a.md] edited"}}], "_meta": {"x": 1}});
        render(
            &mut update,
            "edit",
            vec![location("/w/a.md", None)],
            vec![diff_content("/w/a.md", Some("a\n"), "b\n")],
            None,
        );
        assert_eq!(update["kind"], "edit");
        assert_eq!(update["locations"], json!([{"path": "/w/a.md"}]));
        assert_eq!(update["content"][0]["content"]["text"], "[#0002 a.md] edited");
        assert_eq!(
            update["content"][1],
            json!({"type": "diff", "path": "/w/a.md", "oldText": "a\n", "newText": "b\n"})
        );
        assert_eq!(update["_meta"]["x"], 1);
        let earlier = json!([{"type": "content", "content": {"type": "text", "text": "[#0003 b.md]"}}]);
        let mut bare = json!({"toolCallId": "t", "status": "completed"});
        render(&mut bare, "write", Vec::new(), vec![diff_content("/w/b.md", None, "x\n")], Some(&earlier));
        assert_eq!(bare["content"][0], earlier[0]);
        assert_eq!(bare["content"][1]["oldText"], Value::Null);
    }
}
