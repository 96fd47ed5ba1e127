//! `ctxfs grants list|revoke [TARGET]`: the project's remembered grants and
//! the rules files in force, as text for a terminal.

use super::policy::{self, Policy, Project};

/// Lists (`revoke: None`) or revokes (`Some(target)`, `Some(None)`: all);
/// answers the text to print and whether all went well.
pub fn grants(project: &Project, revoke: Option<Option<&str>>) -> (String, bool) {
    match revoke {
        None => list(project),
        Some(target) => match policy::revoke(project, target) {
            Err(e) => (format!("Nothing revoked: {e}\n"), false),
            Ok(gone) if gone.is_empty() => match target {
                Some(t) => (format!("No grant {t} to revoke for {}.\n", project.key), false),
                None => (format!("No grants to revoke for {}.\n", project.key), true),
            },
            Ok(gone) => {
                let mut text = String::new();
                for grant in &gone {
                    text.push_str(&format!("Revoked {}\n", grant.shown()));
                }
                (text, true)
            }
        },
    }
}

fn list(project: &Project) -> (String, bool) {
    let policy = Policy::load(project);
    let mut ok = true;
    let mut text = format!("Project: {}\n", project.key);
    let grants_path = project.grants_path();
    text.push_str(&format!("Grants ({}):\n", grants_path.display()));
    match policy.problems.iter().find(|p| p.source == policy::Source::Grants) {
        Some(problem) => {
            ok = false;
            text.push_str(&format!("  {problem}; it grants nothing until it is fixed\n"));
        }
        None if policy.grants.is_empty() => text.push_str("  none\n"),
        None => {
            for grant in &policy.grants {
                let kind = match grant.kind {
                    policy::GrantKind::File => "file",
                    policy::GrantKind::Memory => "memory",
                };
                text.push_str(&format!("  {kind} {}\n", grant.target));
            }
        }
    }
    text.push_str("Rules:\n");
    let mut files = Vec::new();
    if let Some(user) = project.user_rules_path() {
        files.push((policy::Source::UserRules, "user", user));
    }
    files.push((policy::Source::ProjectRules, "project", project.project_rules_path()));
    for (source, name, path) in files {
        let problem = policy.problems.iter().find(|p| p.source == source);
        let line = if let Some(problem) = problem {
            ok = false;
            format!("{problem}; every change asks until it is fixed")
        } else if !path.exists() {
            format!("{} (none)", path.display())
        } else {
            let rules = |list: &[policy::Rule]| {
                list.iter()
                    .filter(|r| r.source == source)
                    .map(|r| format!("{} {}", r.kind.map_or("*", super::Kind::as_str), r.pattern))
                    .collect::<Vec<_>>()
            };
            let (allow, deny) = (rules(&policy.allow), rules(&policy.deny));
            let show = |v: &[String]| if v.is_empty() { "none".to_string() } else { v.join(", ") };
            format!("{} (allow: {}; deny: {})", path.display(), show(&allow), show(&deny))
        };
        text.push_str(&format!("  {name}: {line}\n"));
    }
    (text, ok)
}
