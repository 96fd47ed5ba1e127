//! The relay's state machine, message by message: injection, pass-through,
//! versions, permissions, rendering, matching results to calls, context
//! events and a dead agent. The wire and processes are tested end to end in
//! `tests/acp` (Node, against the built binary).

use super::*;
use crate::acp::link::{Choice, Texts};

fn fresh() -> Core {
    Core::new(Injection {
        exe: "/bin/ctxfs".into(),
        socket: "/tmp/x/link.sock".into(),
        world: World::Root(None),
        start: None,
        flags: vec!["--mode".into(), "ask".into()],
    })
}

fn bytes(value: Value) -> Vec<u8> {
    serde_json::to_vec(&value).unwrap()
}

fn parsed(effect: &Effect) -> Value {
    match effect {
        Effect::Client(line) | Effect::Agent(line) => serde_json::from_slice(line).unwrap(),
        other => panic!("not a line: {other:?}"),
    }
}

/// A core with one session `s1` in `/w` whose server (token `t1`) is connected.
fn with_session() -> Core {
    let mut core = fresh();
    core.on_client(&bytes(
        json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}}),
    ));
    core.on_agent(&bytes(json!({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}})));
    assert!(core.link_up("t1"));
    core
}

fn update(update: Value) -> Vec<u8> {
    bytes(json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": update}}))
}

fn reported(id: &str, tool: &str, files: Vec<FileText>) -> Reported {
    Reported {
        token: "t1".into(),
        tool: tool.into(),
        id: id.into(),
        is_error: false,
        paths: files.iter().map(|f| f.path.clone()).collect(),
        files,
    }
}

#[test]
fn session_requests_get_the_server_and_keep_everything_else() {
    let mut core = fresh();
    let request = json!({"jsonrpc": "2.0", "id": 7, "method": "session/new", "params": {"cwd": "/w",
        "mcpServers": [{"name": "mine", "command": "m", "args": [], "env": []}], "_meta": {"app": {"x": [1, 2]}}}});
    let effects = core.on_client(&bytes(request));
    let sent = parsed(&effects[0]);
    let servers = sent["params"]["mcpServers"].as_array().unwrap();
    assert_eq!(servers[0]["name"], "mine");
    assert_eq!(servers[1]["name"], "ctxfs");
    assert_eq!(servers[1]["command"], "/bin/ctxfs");
    let args: Vec<&str> = servers[1]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(args, ["mcp", "--root", "/w", "--mode", "ask", "--acp-link", "/tmp/x/link.sock", "--acp-token", "t1"]);
    assert_eq!(sent["params"]["_meta"], json!({"app": {"x": [1, 2]}}));
    assert!(sent["params"]["_meta"].get("systemPrompt").is_none(), "only for an agent that takes it");

    let effects = core.on_client(&bytes(
        json!({"jsonrpc": "2.0", "id": 8, "method": "session/load", "params": {"sessionId": "old", "cwd": "/v", "mcpServers": []}}),
    ));
    let args = &parsed(&effects[0])["params"]["mcpServers"][0]["args"];
    assert_eq!(args[2], "/v");
    assert_eq!(args[8], "t2");
    assert!(core.link_up("t2"));
    assert!(!core.link_up("t9"), "an unknown token is refused");
    // A fork names its source; its server serves the new session the answer names.
    let effects = core.on_client(&bytes(
        json!({"jsonrpc": "2.0", "id": 10, "method": "session/fork", "params": {"sessionId": "old", "cwd": "/v", "mcpServers": []}}),
    ));
    assert_eq!(parsed(&effects[0])["params"]["mcpServers"][0]["args"][8], "t3");
    core.on_agent(&bytes(json!({"jsonrpc": "2.0", "id": 10, "result": {"sessionId": "forked"}})));
    assert_eq!(core.tokens["t3"].session.as_deref(), Some("forked"));
    let bare = bytes(json!({"jsonrpc": "2.0", "id": 9, "method": "session/new", "params": {"mcpServers": []}}));
    assert_eq!(core.on_client(&bare), vec![Effect::Agent(bare.clone())], "nothing says where to work");
}

#[test]
fn what_the_relay_does_not_act_on_passes_as_the_same_bytes() {
    let mut core = with_session();
    let odd = br#"{"jsonrpc":"2.0", "id":"x-1","method":"_vendor/thing","params":{"_meta":{"k":"v"},"n":1.50}}"#;
    assert_eq!(core.on_client(odd), vec![Effect::Agent(odd.to_vec())]);
    let answer = br#"{"jsonrpc":"2.0","id":"x-1","result":{"_meta":{"z":null},"weird":[1e3]}}"#;
    assert_eq!(core.on_agent(answer), vec![Effect::Client(answer.to_vec())]);
    let note = br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"plan","entries":[],"_meta":{"a":1}}}}"#;
    assert_eq!(core.on_agent(note), vec![Effect::Client(note.to_vec())]);
    let other_tool = update(json!({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "Read", "kind": "read"}));
    assert_eq!(core.on_agent(&other_tool), vec![Effect::Client(other_tool.clone())]);
    let garbage = b"{not json";
    assert_eq!(core.on_client(garbage), vec![Effect::Agent(garbage.to_vec())], "the agent answers its parse error");
    let cancel = br#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}"#;
    assert_eq!(core.on_client(cancel), vec![Effect::Agent(cancel.to_vec())]);
}

#[test]
fn versions_are_negotiated_down_to_one_and_others_refused() {
    let mut core = fresh();
    let effects = core.on_client(&bytes(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 3, "clientCapabilities": {}}})));
    assert_eq!(parsed(&effects[0])["params"]["protocolVersion"], 1);
    let effects = core.on_agent(&bytes(json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 2}})));
    let [Effect::Fatal(why)] = effects.as_slice() else { panic!("{effects:?}") };
    assert!(why.contains("version 2"), "{why}");
    let answers = core.agent_gone(why);
    let answer = parsed(&answers[0]);
    assert_eq!(answer["id"], 0);
    assert!(answer["error"]["message"].as_str().unwrap().contains("version 2"));
    let later = core.on_client(&bytes(json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {}})));
    assert!(parsed(&later[0])["error"]["message"].as_str().unwrap().contains("version 2"));
    assert!(core.on_client(br#"{"jsonrpc":"2.0","method":"session/cancel","params":{}}"#).is_empty());

    let mut fine = core_initialized(json!({"protocolVersion": 1, "agentCapabilities": {"_meta": {"claudeCode": {}}}}));
    let effects = fine.on_client(&bytes(
        json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}}),
    ));
    let sent = parsed(&effects[0]);
    assert!(sent["params"]["_meta"]["systemPrompt"]["append"].as_str().unwrap().contains("ctxfs"));
}

fn core_initialized(result: Value) -> Core {
    let mut core = fresh();
    core.on_client(&bytes(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}),
    ));
    let answer = bytes(json!({"jsonrpc": "2.0", "id": 0, "result": result}));
    assert_eq!(core.on_agent(&answer), vec![Effect::Client(answer.clone())]);
    core
}

#[test]
fn the_agents_own_prompt_for_a_ctxfs_tool_is_answered_by_the_relay() {
    let mut core = with_session();
    let options = json!([{"kind": "allow_always", "optionId": "always", "name": "Always"},
        {"kind": "allow_once", "optionId": "once", "name": "Once"}, {"kind": "reject_once", "optionId": "no", "name": "No"}]);
    let ours =
        bytes(json!({"jsonrpc": "2.0", "id": 5, "method": "session/request_permission", "params": {"sessionId": "s1",
        "toolCall": {"toolCallId": "c1", "title": "mcp__ctxfs__edit"}, "options": options}}));
    let effects = core.on_agent(&ours);
    let answer = parsed(&effects[0]);
    assert!(matches!(effects[0], Effect::Agent(_)));
    assert_eq!(answer["result"]["outcome"], json!({"outcome": "selected", "optionId": "once"}));
    // Known by its earlier tool_call only.
    core.on_agent(&update(json!({"sessionUpdate": "tool_call", "toolCallId": "c2", "title": "ctxfs_write"})));
    let by_id =
        bytes(json!({"jsonrpc": "2.0", "id": 6, "method": "session/request_permission", "params": {"sessionId": "s1",
        "toolCall": {"toolCallId": "c2"}, "options": options}}));
    assert!(matches!(core.on_agent(&by_id)[0], Effect::Agent(_)));
    let theirs =
        bytes(json!({"jsonrpc": "2.0", "id": 7, "method": "session/request_permission", "params": {"sessionId": "s1",
        "toolCall": {"toolCallId": "c3", "title": "Bash"}, "options": options}}));
    assert_eq!(core.on_agent(&theirs), vec![Effect::Client(theirs.clone())]);
}

#[test]
fn a_ctxfs_call_gets_kind_locations_title_and_its_diff() {
    let mut core = with_session();
    let started = core.on_agent(&update(json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "mcp__ctxfs__edit",
        "kind": "other", "status": "pending", "rawInput": {"file_path": "notes/a.md", "old_string": "a", "new_string": "b"},
        "_meta": {"claudeCode": {"toolName": "mcp__ctxfs__edit"}}})));
    let shown = parsed(&started[0])["params"]["update"].clone();
    assert_eq!(shown["kind"], "edit");
    assert_eq!(shown["title"], "edit notes/a.md");
    assert_eq!(shown["locations"], json!([{"path": "/w/notes/a.md"}]));
    assert_eq!(shown["_meta"]["claudeCode"]["toolName"], "mcp__ctxfs__edit");

    let file = FileText {
        path: "/w/notes/a.md".into(),
        change: "modified".into(),
        texts: Some(Texts { before: Some("a\n".into()), after: "b\n".into() }),
    };
    assert!(!core.reported(reported("#0002", "edit", vec![file])));
    let text = "```\n[#0002 notes/a.md] edited\n@@ -1 +1 @@\n-a\n+b\n```";
    let done = core
        .on_agent(&update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed",
        "title": "mcp__ctxfs__edit", "content": [{"type": "content", "content": {"type": "text", "text": text}}]})));
    let shown = parsed(&done[0])["params"]["update"].clone();
    assert_eq!(shown["kind"], "edit");
    assert_eq!(shown["content"][0]["content"]["text"], text, "the bracketed id stays");
    assert_eq!(
        shown["content"][1],
        json!({"type": "diff", "path": "/w/notes/a.md", "oldText": "a\n", "newText": "b\n"})
    );
    assert_eq!(shown["locations"], json!([{"path": "/w/notes/a.md"}]));
}

#[test]
fn results_match_their_calls_by_id_else_by_order() {
    let mut core = with_session();
    for (call, path) in [("c1", "a.md"), ("c2", "b.md")] {
        core.on_agent(&update(json!({"sessionUpdate": "tool_call", "toolCallId": call, "title": "ctxfs_read", "rawInput": {"file_path": path}})));
    }
    core.reported(reported("#0001", "read", vec![]));
    core.reported(Reported { paths: vec!["/w/b.md".into()], ..reported("#0002", "read", vec![]) });
    // The second call finishes first and names its result.
    let done = core
        .on_agent(&update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "c2", "status": "completed",
        "rawOutput": [{"type": "text", "text": "[#0002 b.md lines 1-1 of 1 sha 00000000]\n1: x"}]})));
    assert_eq!(parsed(&done[0])["params"]["update"]["locations"], json!([{"path": "/w/b.md"}]));
    // The first shows no id: the oldest unmatched read is its result.
    let done =
        core.on_agent(&update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"})));
    assert_eq!(parsed(&done[0])["params"]["update"]["kind"], "read");
    assert!(core.take_result("s1", "read", "").is_none(), "both were used");
}

#[test]
fn a_cancelled_turn_forgets_late_results_until_the_next_prompt() {
    let mut core = with_session();
    assert!(!core.reported(reported("#0001", "read", vec![])));
    core.on_client(br#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}"#);
    assert!(core.reported(reported("#0002", "read", vec![])));
    core.on_client(&bytes(
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {"sessionId": "s1", "prompt": []}}),
    ));
    assert!(!core.reported(reported("#0003", "read", vec![])));
}

#[test]
fn loads_reset_and_compactions_compact_the_live_servers() {
    let mut core = core_initialized(
        json!({"protocolVersion": 1, "agentCapabilities": {"_meta": {"claudeCode": {"promptQueueing": true}}}}),
    );
    core.on_client(&bytes(
        json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}}),
    ));
    core.on_agent(&bytes(json!({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}})));
    core.link_up("t1");
    let chunk = update(
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "\n\nCompacting completed."}}),
    );
    let effects = core.on_agent(&chunk);
    assert_eq!(effects[0], Effect::Client(chunk.clone()));
    assert_eq!(
        effects[1],
        Effect::Link { token: "t1".into(), message: json!({"method": "context", "params": {"event": "compact"}}) }
    );
    let effects = core.on_client(&bytes(json!({"jsonrpc": "2.0", "id": 2, "method": "session/load", "params": {"sessionId": "s1", "cwd": "/w", "mcpServers": []}})));
    assert_eq!(
        effects[0],
        Effect::Link { token: "t1".into(), message: json!({"method": "context", "params": {"event": "reset"}}) }
    );
    assert!(matches!(effects[1], Effect::Agent(_)));
    core.link_down("t1");
    assert!(core
        .on_client(&bytes(
            json!({"jsonrpc": "2.0", "id": 3, "method": "session/resume", "params": {"sessionId": "s1", "cwd": "/w"}})
        ))
        .iter()
        .all(|e| matches!(e, Effect::Agent(_))));
}

fn shown_id(request: &Value) -> String {
    request["params"]["toolCall"]["toolCallId"].as_str().unwrap().to_string()
}

fn asked(tool: &str, files: Vec<FileText>) -> Asked {
    Asked {
        token: "t1".into(),
        tool: tool.into(),
        description: "edit a.md (+1 −1 lines)".into(),
        message:
            "Allow ctxfs to edit a.md (+1 −1 lines)?\n\n--- a/a.md\n+++ b/a.md\n@@ -1 +1 @@\n-a\n+b\n\nNote: mode ask"
                .into(),
        options: ["allow_once", "allow_session", "always_file", "deny"]
            .iter()
            .map(|id| Choice { id: id.to_string(), label: id.replace('_', " ") })
            .collect(),
        paths: vec!["/w/a.md".into()],
        files,
        timeout: 120.0,
    }
}

#[test]
fn the_gates_prompt_goes_to_the_app_on_the_agents_call() {
    let mut core = with_session();
    core.on_agent(&update(
        json!({"sessionUpdate": "tool_call", "toolCallId": "c9", "title": "mcp__ctxfs__edit", "status": "pending"}),
    ));
    let file = FileText {
        path: "/w/a.md".into(),
        change: "modified".into(),
        texts: Some(Texts { before: Some("a\n".into()), after: "b\n".into() }),
    };
    let Asking { id, effects, shown } = core.ask(&asked("edit", vec![file]), false).unwrap().unwrap();
    assert_eq!(shown, None, "asked on the agent's call");
    assert!(id.starts_with(RELAY_ID_PREFIX));
    let request = parsed(&effects[0]);
    assert_eq!(effects.len(), 1);
    assert_eq!(request["method"], "session/request_permission");
    assert_eq!(request["params"]["toolCall"]["toolCallId"], "c9");
    assert_eq!(request["params"]["toolCall"]["kind"], "edit");
    let kinds: Vec<&str> =
        request["params"]["options"].as_array().unwrap().iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "allow_always", "reject_once"]);
    let content = &request["params"]["toolCall"]["content"];
    assert_eq!(content[0]["content"]["text"], "Allow ctxfs to edit a.md (+1 −1 lines)?\n\nNote: mode ask");
    assert_eq!(content[1], json!({"type": "diff", "path": "/w/a.md", "oldText": "a\n", "newText": "b\n"}));
    let response =
        json!({"jsonrpc": "2.0", "id": id, "result": {"outcome": {"outcome": "selected", "optionId": "deny"}}});
    assert_eq!(core.on_client(&bytes(response.clone())), vec![Effect::Answer { id: id.clone(), response }]);

    // A second prompt of that tool is not asked on the same call.
    assert!(core.ask(&asked("edit", vec![]), false).unwrap().is_none());
    // No call to ask on: the relay waits (None), then shows one, and the text keeps the summary.
    assert!(core.ask(&asked("rm", vec![]), false).unwrap().is_none());
    let Asking { effects, shown: made, .. } = core.ask(&asked("rm", vec![]), true).unwrap().unwrap();
    let shown = parsed(&effects[0]);
    assert_eq!(shown["params"]["update"]["sessionUpdate"], "tool_call");
    assert_eq!(shown["params"]["update"]["kind"], "delete");
    let request = parsed(&effects[1]);
    assert_eq!(request["params"]["toolCall"]["toolCallId"], shown["params"]["update"]["toolCallId"]);
    assert!(request["params"]["toolCall"]["content"][0]["content"]["text"].as_str().unwrap().contains("+++ b/a.md"));
    let (session, call) = made.unwrap();
    assert_eq!(call, shown_id(&request));
    let finished = parsed(&finish_shown(&session, &call, false));
    assert_eq!(
        finished["params"]["update"],
        json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "failed"})
    );

    let mut unbound = fresh();
    assert!(unbound.ask(&asked("edit", vec![]), true).is_err());
}

#[test]
fn a_dead_agent_answers_every_waiting_and_later_request() {
    let mut core = with_session();
    core.on_client(&bytes(
        json!({"jsonrpc": "2.0", "id": 4, "method": "session/prompt", "params": {"sessionId": "s1", "prompt": []}}),
    ));
    core.on_client(&bytes(json!({"jsonrpc": "2.0", "id": "q", "method": "_x/y", "params": {}})));
    let effects = core.agent_gone("ctxfs acp: the agent closed its output");
    let ids: Vec<Value> = effects.iter().map(|e| parsed(e)["id"].clone()).collect();
    assert_eq!(ids, [json!("q"), json!(4)]);
    assert!(effects.iter().all(|e| matches!(e, Effect::Client(_))));
    assert!(core.agent_gone("again").is_empty());
    assert!(core.on_agent(b"{}").is_empty());
}

#[test]
fn an_agent_writing_other_things_on_stdout_is_broken_after_a_while() {
    let mut core = fresh();
    for _ in 0..MAX_GARBAGE_LINES {
        assert!(core.on_agent(b"Welcome to the agent!").is_empty());
    }
    assert!(matches!(core.on_agent(b"[1, 2]").as_slice(), [Effect::Fatal(why)] if why.contains("not ACP")));
}

#[test]
fn argument_paths_map_to_host_paths_in_each_posture() {
    let mut injection = fresh().injection.clone();
    assert_eq!(injection.host_path(Some("/w"), "a/../b.md").as_deref(), Some("/w/b.md"));
    assert_eq!(injection.host_path(Some("/w"), "/etc/x").as_deref(), Some("/etc/x"));
    injection.start = Some("sub".into());
    assert_eq!(injection.host_path(Some("/w"), "b.md").as_deref(), Some("/w/sub/b.md"));
    injection.world = World::Tree { dir: "/srv/tree".into(), view: "/srv/view.json".into() };
    assert_eq!(injection.host_path(None, "b.md").as_deref(), Some("/srv/tree/sub/b.md"));
    assert_eq!(injection.host_path(None, "/notes/c.md").as_deref(), Some("/srv/tree/notes/c.md"));
    assert_eq!(fresh().injection.args(Some("relative"), "t"), None, "no root, no absolute cwd: no server");
    let args = injection.args(None, "t3").unwrap();
    assert_eq!(&args[..5], ["mcp", "--tree", "/srv/tree", "--view", "/srv/view.json"]);
    assert!(args.windows(2).any(|w| w == ["--start", "sub"]));
}

#[test]
fn one_server_for_many_sessions_still_finds_calls_and_results() {
    // opencode keeps one MCP server per directory: the second session's server serves both.
    let mut core = with_session();
    core.on_client(&bytes(
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}}),
    ));
    core.on_agent(&bytes(json!({"jsonrpc": "2.0", "id": 2, "result": {"sessionId": "s2"}})));
    core.link_down("t1");
    core.link_up("t2");
    core.on_agent(&update(json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "ctxfs_write", "rawInput": {"file_path": "a.md"}})));
    let mut second = asked("write", vec![]);
    second.token = "t2".into();
    let effects = core.ask(&second, false).unwrap().unwrap().effects;
    let request = parsed(&effects[0]);
    assert_eq!(request["params"]["sessionId"], "s1", "asked where the call waits");
    assert_eq!(request["params"]["toolCall"]["toolCallId"], "c1");
    core.reported(Reported { token: "t2".into(), ..reported("#0007", "write", vec![]) });
    let done = core
        .on_agent(&update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed",
        "content": [{"type": "content", "content": {"type": "text", "text": "[#0007 a.md] created"}}]})));
    assert_eq!(parsed(&done[0])["params"]["update"]["kind"], "edit");
    assert!(core.tokens["t2"].results.is_empty(), "matched by its id across servers");
}
