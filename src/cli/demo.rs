//! `ctxfs demo`: a scripted session over a temporary workspace.
//!
//! It lays out a small tree with a view (a writable directory, a read-only
//! one, a hidden one and a granted file under a passage), then runs the tools
//! against it and prints each call with its answer, so a newcomer sees the
//! view, the exact errors, ids, stubs and diffs in one screen. It writes only
//! inside its own temporary directory.

use crate::engine::{Config, Engine, Posture, SessionOptions};
use serde_json::json;
use std::io::Write;
use std::path::Path;

fn lay_out(tree: &Path) -> std::io::Result<()> {
    let files: [(&str, &str); 6] = [
        ("AGENTS.md", "# House rules\nKeep answers short.\n"),
        ("Notes/todo.md", "# Todo\n- retry failed uploads\n- write the changelog\n"),
        ("Notes/Private/diary.md", "Nobody may read this.\n"),
        ("Archive/2025.md", "Old notes, read-only.\n"),
        ("Dir1/FILE1.txt", "Under a passage.\n"),
        ("Dir1/Dir3/shared.txt", "Granted on its own.\n"),
    ];
    for (path, text) in files {
        let path = tree.join(path);
        std::fs::create_dir_all(path.parent().expect("files have parents"))?;
        std::fs::write(path, text)?;
    }
    Ok(())
}

/// Runs the demo, printing to `out`.
pub fn run(mut out: impl Write) -> anyhow::Result<()> {
    let scratch = std::env::temp_dir().join(format!("ctxfs-demo-{}", std::process::id()));
    let tree = scratch.join("tree");
    let data = scratch.join("data");
    std::fs::create_dir_all(&tree)?;
    lay_out(&tree)?;
    let view = json!({
        "grants": {"/AGENTS.md": "ro", "/Notes": "stage", "/Notes/Private": "none", "/Archive": "ro", "/Dir1/Dir3": "ro"},
    });
    let view_path = scratch.join("view.json");
    std::fs::write(&view_path, serde_json::to_string_pretty(&view)?)?;
    let engine = Engine::new(Config {
        start: Some("/Notes".into()),
        data_dir: Some(data),
        ..Config::new(Posture::Tree { dir: tree.clone(), view: view_path })
    })?;
    let session = engine.open_session(SessionOptions { client_name: Some("demo".into()), ..Default::default() })?;
    writeln!(out, "A tree presented as /, with this view:\n{}\n", serde_json::to_string_pretty(&view)?)?;
    writeln!(out, "What the model is told:\n{}", session.instructions())?;
    let calls = [
        ("list", json!({"path": "/Notes"})),
        ("read", json!({"file_path": "todo.md"})),
        ("read", json!({"file_path": "todo.md", "offset": 2, "limit": 1})),
        (
            "edit",
            json!({"file_path": "todo.md", "old_string": "- write the changelog", "new_string": "- write the changelog\n- ship it"}),
        ),
        ("write", json!({"file_path": "/Notes/ideas.md", "content": "# Ideas\n"})),
        ("grep", json!({"pattern": "retry", "path": "/Notes"})),
        ("grep", json!({"pattern": "retry", "path": "/Notes"})),
        ("read", json!({"file_path": "/Notes/Private/diary.md"})),
        ("write", json!({"file_path": "/Notes/Private", "content": "x"})),
        ("write", json!({"file_path": "/Archive/2025.md", "content": "x"})),
        ("list", json!({"path": "/Dir1"})),
        ("read", json!({"file_path": "/Dir1/Dir3/shared.txt"})),
        ("read", json!({"file_path": "../../etc/passwd"})),
        ("recall", json!({"id": "#0002"})),
    ];
    for (tool, args) in calls {
        let answer = session.call(tool, args.clone());
        writeln!(out, "> {tool} {args}\n{}\n", answer.text.trim_end())?;
    }
    writeln!(out, "Compaction adds this table:\n{}", session.compact())?;
    std::fs::remove_dir_all(&scratch)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_demo_runs_and_shows_the_views_refusals() {
        let mut out = Vec::new();
        super::run(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        #[allow(clippy::print_stdout)] // the demo is read in a terminal
        {
            print!("{text}");
        }
        assert!(text.contains("No such file or directory: /Notes/Private/diary.md"));
        assert!(text.contains("Access denied: /Notes/Private is not open to this session."));
        assert!(text.contains("Read-only: /Archive/2025.md can be read in this session but not changed."));
        assert!(text.contains("Access denied: /Dir1 is not open to this session."));
        assert!(text.contains("Unchanged since #0002"));
        assert!(text.contains("Same result as #0006."));
    }
}
