//! The MCP layer against a fake engine, over an in-memory pipe.

use super::transport::MAX_MESSAGE;
use super::*;
use crate::engine::{Facts, ToolHints};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf};

#[derive(Default)]
struct Fake {
    log: Mutex<Vec<i64>>,
    opened: Mutex<Vec<SessionOptions>>,
    running: AtomicUsize,
    max_running: AtomicUsize,
}

struct FakeHost(Arc<Fake>);

struct FakeSession {
    id: String,
    fake: Arc<Fake>,
}

impl Host for FakeHost {
    type Session = FakeSession;
    fn tools(&self) -> Vec<ToolInfo> {
        vec![ToolInfo {
            name: "echo".into(),
            title: "Echo".into(),
            description: "Echo.".into(),
            input_schema: json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
            hints: ToolHints { read_only: true, destructive: false, idempotent: true },
        }]
    }
    fn open_session(&self, options: SessionOptions) -> anyhow::Result<Arc<FakeSession>> {
        let mut opened = self.0.opened.lock().unwrap();
        opened.push(options);
        Ok(Arc::new(FakeSession { id: format!("s{}", opened.len()), fake: self.0.clone() }))
    }
}

impl HostSession for FakeSession {
    fn id(&self) -> &str {
        &self.id
    }
    fn call(&self, tool: &str, args: Value) -> ToolAnswer {
        let now = self.fake.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.fake.max_running.fetch_max(now, Ordering::SeqCst);
        if tool == "panic" {
            self.fake.running.fetch_sub(1, Ordering::SeqCst);
            panic!("boom");
        }
        let n = args.get("n").and_then(Value::as_i64).unwrap_or(-1);
        // Earlier calls sleep longer: run concurrently, they would finish last.
        std::thread::sleep(Duration::from_millis(args.get("sleep").and_then(Value::as_u64).unwrap_or(0)));
        self.fake.log.lock().unwrap().push(n);
        self.fake.running.fetch_sub(1, Ordering::SeqCst);
        ToolAnswer {
            id: format!("#{n:04}"),
            text: format!("[#{n:04}] {tool} on {}", self.id),
            is_error: tool != "echo",
            facts: Facts::default(),
        }
    }
    fn instructions(&self) -> String {
        "Be careful.".into()
    }
}

struct Client {
    write: WriteHalf<DuplexStream>,
    read: BufReader<ReadHalf<DuplexStream>>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Client {
    fn start(fake: Arc<Fake>, max: usize) -> Client {
        let (client_end, server_end) = tokio::io::duplex(1 << 20);
        let (server_read, server_write) = tokio::io::split(server_end);
        let (client_read, client_write) = tokio::io::split(client_end);
        let transport = transport::LineTransport::new(server_read, server_write, Sequencer::new()).with_max(max);
        let server = tokio::spawn(serve_transport_with(Arc::new(FakeHost(fake)), None, transport, None));
        Client { write: client_write, read: BufReader::new(client_read), server }
    }

    async fn send(&mut self, text: &str) {
        self.write.write_all(text.as_bytes()).await.unwrap();
        self.write.write_all(b"\n").await.unwrap();
        self.write.flush().await.unwrap();
    }

    async fn send_json(&mut self, value: Value) {
        self.send(&value.to_string()).await;
    }

    async fn recv(&mut self) -> Value {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(20), self.read.read_line(&mut line))
            .await
            .expect("no answer within 20 s")
            .unwrap();
        assert!(n > 0, "server closed its output");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad line from server: {e}: {line}"))
    }

    /// Reads until the answer to `id`, skipping anything else.
    async fn answer_to(&mut self, id: i64) -> Value {
        loop {
            let message = self.recv().await;
            if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
                return message;
            }
        }
    }

    async fn initialize(&mut self, capabilities: Value) -> Value {
        self.send_json(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": "tester", "version": "1"}}}))
            .await;
        self.answer_to(1).await
    }
}

fn call(id: i64, n: i64, sleep: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "echo", "arguments": {"n": n, "sleep": sleep}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn initialize_gives_instructions_and_tools() {
    let fake = Arc::new(Fake::default());
    let mut client = Client::start(fake.clone(), MAX_MESSAGE);
    let init = client.initialize(json!({})).await;
    assert_eq!(init["result"]["instructions"], "Be careful.");
    assert_eq!(init["result"]["serverInfo"]["name"], "ctxfs");
    assert!(init["result"]["capabilities"]["tools"].is_object());
    client.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    client.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#).await;
    let list = client.answer_to(2).await;
    assert_eq!(list["result"]["tools"][0]["name"], "echo");
    assert_eq!(list["result"]["tools"][0]["inputSchema"]["type"], "object");
    let opened = fake.opened.lock().unwrap();
    assert_eq!(opened.len(), 1);
    assert_eq!(opened[0].client_name.as_deref(), Some("tester"));
    assert!(opened[0].roots.is_none());
}

/// Forty calls sent at once, each earlier one slower: they run one at a time
/// and in arrival order, although rmcp hands each to a task of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_run_one_at_a_time_in_arrival_order() {
    let fake = Arc::new(Fake::default());
    let mut client = Client::start(fake.clone(), MAX_MESSAGE);
    client.initialize(json!({})).await;
    let mut burst = String::from("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    for i in 0..40 {
        burst.push_str(&call(100 + i, i, (40 - i as u64) / 4).to_string());
        burst.push('\n');
    }
    client.write.write_all(burst.as_bytes()).await.unwrap();
    client.write.flush().await.unwrap();
    for _ in 0..40 {
        let answer = client.recv().await;
        let id = answer["id"].as_i64().unwrap();
        let text = answer["result"]["content"][0]["text"].as_str().unwrap().to_string();
        assert_eq!(text, format!("[#{:04}] echo on s1", id - 100));
        assert_eq!(answer["result"]["isError"], false);
        assert_eq!(answer["result"]["_meta"]["ctxfs/id"], format!("#{:04}", id - 100));
    }
    assert_eq!(*fake.log.lock().unwrap(), (0..40).collect::<Vec<_>>());
    assert_eq!(fake.max_running.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_answered_and_survived() {
    let fake = Arc::new(Fake::default());
    let mut client = Client::start(fake.clone(), 2048);
    // Before the handshake: garbage, a stray notification, a stray response, a batch.
    client.send("this is not json").await;
    client.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    client.send(r#"{"jsonrpc":"2.0","id":99,"result":{}}"#).await;
    client.send("[1,2,3]").await;
    let first = client.recv().await; // "Invalid request" for the batch, without an id
    assert_eq!(first["error"]["code"], -32600, "{first}");
    let init = client.initialize(json!({})).await;
    assert!(init["result"]["serverInfo"].is_object());
    client.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;

    // Over the limit, id first (as the Python SDK writes it) and id last (as the TS SDK does).
    let big = "x".repeat(4000);
    client
        .send(&format!(
            r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"echo","arguments":{{"s":"{big}"}}}}}}"#
        ))
        .await;
    let answer = client.answer_to(5).await;
    assert_eq!(answer["error"]["code"], -32600);
    assert!(answer["error"]["message"].as_str().unwrap().contains("too large"), "{answer}");
    client
        .send(&format!(
            r#"{{"method":"tools/call","params":{{"name":"echo","arguments":{{"s":"{big}"}}}},"jsonrpc":"2.0","id":6}}"#
        ))
        .await;
    assert_eq!(client.answer_to(6).await["error"]["code"], -32600);
    // A long line without an id anywhere readable: an error without id, and still alive.
    client.send(&format!(r#"{{"method":"tools/call","params":{{"a":"{big}"}},"id":{{"x":1}}}}"#)).await;
    let anonymous = client.recv().await;
    assert_eq!(anonymous["error"]["code"], -32600);

    // Well-formed JSON, wrong shapes.
    client.send(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":"nope"}"#).await;
    assert_eq!(client.answer_to(7).await["error"]["code"], -32602);
    // Arguments that are not an object reach the tool, which refuses them as a tool error.
    client.send(r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":"str"}}"#).await;
    let answer = client.answer_to(8).await;
    assert!(answer["result"].is_object() && answer.get("error").is_none(), "{answer}");
    client.send(r#"{"jsonrpc":"2.0","id":9,"method":"no/such/method"}"#).await;
    assert_eq!(client.answer_to(9).await["error"]["code"], -32601);
    // Unknown tool: the engine answers, as a tool error.
    client.send(r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"nosuch"}}"#).await;
    assert_eq!(client.answer_to(10).await["result"]["isError"], true);
    // A panicking tool is an error answer too.
    client.send(r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"panic"}}"#).await;
    assert_eq!(client.answer_to(11).await["result"]["isError"], true);
    // CRLF and a byte-order mark are fine.
    client.send("\u{feff}{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"n\":12}}}\r").await;
    let ok = client.answer_to(12).await;
    assert_eq!(ok["result"]["content"][0]["text"], "[#0012] echo on s1");
    assert!(!client.server.is_finished());

    // Closing stdin ends the server cleanly.
    client.write.shutdown().await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(20), client.server).await.unwrap().unwrap();
    assert!(ended.is_ok(), "{ended:?}");
}

/// A client with roots: the session is re-opened narrowed to them, and a call
/// sent before the client answered roots/list waits for the narrowed session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roots_narrow_the_session_before_any_call() {
    let fake = Arc::new(Fake::default());
    let mut client = Client::start(fake.clone(), MAX_MESSAGE);
    client.initialize(json!({"roots": {"listChanged": true}})).await;
    client.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    client.send_json(call(2, 2, 0)).await;
    let ask = client.recv().await;
    assert_eq!(ask["method"], "roots/list", "{ask}");
    client
        .send_json(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": [
            {"uri": "file:///work/a%20b", "name": "a"}, {"uri": "https://example.com/x"}]}}))
        .await;
    let answer = client.answer_to(2).await;
    assert_eq!(answer["result"]["content"][0]["text"], "[#0002] echo on s2");
    {
        let opened = fake.opened.lock().unwrap();
        assert_eq!(opened.len(), 2);
        assert_eq!(opened[1].roots, Some(vec![PathBuf::from("/work/a b")]));
        assert_eq!(opened[1].client_name.as_deref(), Some("tester"));
    }
    // The roots change: asked again, re-opened again.
    client.send(r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#).await;
    client.send_json(call(3, 3, 0)).await;
    let ask = client.recv().await;
    assert_eq!(ask["method"], "roots/list", "{ask}");
    client
        .send_json(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": [{"uri": "file:///work/c"}]}}))
        .await;
    assert_eq!(client.answer_to(3).await["result"]["content"][0]["text"], "[#0003] echo on s3");
}
