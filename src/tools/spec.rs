//! The one definition of each tool, and the table of them.
//!
//! A tool is a type implementing [`Tool`]: its name, its parameter type
//! (whose doc comments are the description the model reads, and from which
//! `schemas/tools/` is generated), what calling it does to the world (its
//! [`Traits`], which default to the most guarded), how it runs, and how an
//! approval prompt describes its change from its typed parameters. [`TABLE`]
//! lists every tool once; every other list of tools (the MCP and LSP tool
//! lists, which calls the gate asks about, which run on a protocol thread,
//! which are deduplicated by result, which wait for the index or report
//! progress) is derived from it. Adding a tool is its file and one line here.
//! This module runs no tool itself.

use super::params::*;
use super::{files, find, memory, nodes, repo, search, skills, Change, Ctx, RecordChange, ToolResult};
use crate::access::ToolError;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// What a call does to the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Reads only.
    Reads,
    /// Changes files (the gate asks, the view's write level applies).
    ChangesFiles,
    /// Changes what the search index records about files, not the files.
    ChangesIndex,
    /// Changes records that are not files (memory): the gate asks about the change the tool's
    /// `preview` finds, and the mode applies as to files.
    ChangesRecords,
}

/// What a call looks like to a user watching it, for doors that show tool
/// calls by kind (ACP's `kind`: an icon and a grouping in the app).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Read,
    Search,
    Edit,
    Delete,
    Move,
    Other,
}

impl Action {
    /// ACP's name of the kind.
    pub fn acp_kind(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Search => "search",
            Action::Edit => "edit",
            Action::Delete => "delete",
            Action::Move => "move",
            Action::Other => "other",
        }
    }
}

/// How a tool behaves, for the doors, the gate and hygiene.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traits {
    pub effect: Effect,
    /// Whether a call may take long or wait on something (the user, the
    /// index, a walk of a tree). Only tools that never do run on a door's
    /// protocol thread, and even then only for small inputs.
    pub may_block: bool,
    /// The same call with the same result is answered with a stub.
    pub dedupes: bool,
    /// A long call reports progress (`$/progress`, `notifications/progress`).
    pub progress: bool,
    /// A call waits for the index to take in files written just before.
    pub needs_index: bool,
    /// Answered from the session's stored results, not by running a tool.
    pub from_history: bool,
    /// How a user watching the call sees it.
    pub action: Action,
    /// A change may take something away (overwrite, delete, forget); false for a tool that
    /// only ever adds (mkdir, a commit, a tag).
    pub takes_away: bool,
    /// The same call twice does what it does once.
    pub idempotent: bool,
}

impl Traits {
    /// The most guarded: changes files (seen as an edit), may block, nothing else.
    pub const GUARDED: Traits = Traits {
        action: Action::Edit,
        effect: Effect::ChangesFiles,
        may_block: true,
        dedupes: false,
        progress: false,
        needs_index: false,
        from_history: false,
        takes_away: true,
        idempotent: false,
    };

    /// Reads only (seen as a read); may still block.
    pub const fn reads(self) -> Traits {
        Traits { effect: Effect::Reads, action: Action::Read, takes_away: false, idempotent: true, ..self }
    }

    /// Only ever adds to the world (never overwrites, deletes or forgets).
    pub const fn adds_only(self) -> Traits {
        Traits { takes_away: false, ..self }
    }

    /// Twice is the same as once.
    pub const fn idempotent(self) -> Traits {
        Traits { idempotent: true, ..self }
    }

    /// Seen by a user as `action` (a search, a deletion, a move…).
    pub const fn action(self, action: Action) -> Traits {
        Traits { action, ..self }
    }

    /// Never waits on anything; its cost is that of one file or directory.
    pub const fn quick(self) -> Traits {
        Traits { may_block: false, ..self }
    }

    pub const fn dedupes(self) -> Traits {
        Traits { dedupes: true, ..self }
    }

    pub const fn progress(self) -> Traits {
        Traits { progress: true, ..self }
    }

    pub const fn needs_index(self) -> Traits {
        Traits { needs_index: true, ..self }
    }

    pub const fn effect(self, effect: Effect) -> Traits {
        Traits { effect, ..self }
    }
}

/// What an approval prompt knows of one file's change when it describes it.
pub struct ChangeContext<'a> {
    /// The file's path relative to the boundary.
    pub path: &'a str,
    pub change: &'a Change,
    /// The file's text before the change, when it had one.
    pub before: Option<&'a str>,
}

/// One tool. See the module documentation.
pub trait Tool {
    /// Its name, as the model calls it.
    const NAME: &'static str;
    /// A short title for people (a client's tool list, an approval).
    const TITLE: &'static str;
    /// What calling it does; `Traits::GUARDED` unless said otherwise.
    const TRAITS: Traits = Traits::GUARDED;
    /// Its arguments; the type's doc comment is the tool's description.
    type Params: DeserializeOwned + JsonSchema;

    fn run(ctx: &mut Ctx<'_>, params: Self::Params) -> ToolResult;

    /// The one line an approval prompt shows for a change of one file, from
    /// the call's typed arguments (`replace 2 occurrences in notes/a.md`);
    /// `None` for the generic words.
    fn describe(_params: &Self::Params, _change: &ChangeContext<'_>) -> Option<String> {
        None
    }

    /// For a tool whose effect is `ChangesRecords`: the change this call would make, checked
    /// (a refusal is the call's answer) but not made, with the approval's words; `None` when the
    /// call changes nothing (a look-up). File changes are found by a dry run instead.
    fn preview(_ctx: &mut Ctx<'_>, _params: &Self::Params) -> Result<Option<RecordChange>, ToolError> {
        Ok(None)
    }
}

/// A tool in the table: its definition, with its parameter type erased.
pub struct ToolDef {
    pub name: &'static str,
    pub title: &'static str,
    pub traits: Traits,
    schema: fn() -> schemars::Schema,
    parse_and_run: fn(&mut Ctx<'_>, serde_json::Value) -> ToolResult,
    describe: fn(&serde_json::Value, &ChangeContext<'_>) -> Option<String>,
    preview: fn(&mut Ctx<'_>, serde_json::Value) -> Result<Option<RecordChange>, ToolError>,
}

fn schema_of<T: Tool>() -> schemars::Schema {
    schemars::schema_for!(T::Params)
}

/// Arguments as the tool's typed parameters, or an error the model can act on.
///
/// Models often send numbers and booleans as strings (`"offset": "2"`): where the
/// schema wants a number or a boolean, such a string is taken as one. An argument the
/// tool does not have is named with the parameter it most likely meant; a value of the
/// wrong kind is named with the kind wanted, in plain words.
pub fn parse<T: Tool>(args: serde_json::Value) -> Result<T::Params, ToolError> {
    let mut args = if args.is_null() { serde_json::Value::Object(Default::default()) } else { args };
    // Well-formed arguments (nearly every call) never build the schema: it is read only to
    // take strings as numbers and to say what is wrong.
    if let Ok(params) = T::Params::deserialize(&args) {
        return Ok(params);
    }
    let schema = schema_of::<T>();
    let properties = schema.as_value().get("properties").and_then(serde_json::Value::as_object);
    if let (Some(given), Some(properties)) = (args.as_object_mut(), properties) {
        for (key, value) in given.iter_mut() {
            let Some(property) = properties.get(key) else {
                return Err(unknown_argument(T::NAME, key, properties));
            };
            coerce(value, property);
            if let Some(problem) = kind_problem(value, property) {
                return Err(ToolError::Message(format!("Invalid arguments for {}: `{key}` {problem}.", T::NAME)));
            }
        }
    }
    serde_json::from_value::<T::Params>(args).map_err(|e| args_error(T::NAME, &e))
}

/// The JSON types a property's schema allows (`null` for an optional one); none when it
/// names them otherwise (a reference, a choice of values).
fn schema_types(property: &serde_json::Value) -> Vec<&str> {
    match property.get("type") {
        Some(serde_json::Value::String(one)) => vec![one.as_str()],
        Some(serde_json::Value::Array(many)) => many.iter().filter_map(serde_json::Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// A string where the schema wants a number or a boolean, taken as one when it reads as one.
fn coerce(value: &mut serde_json::Value, property: &serde_json::Value) {
    let serde_json::Value::String(text) = &*value else { return };
    let types = schema_types(property);
    let text = text.trim();
    let number = if types.contains(&"integer") {
        text.parse::<i64>().ok().map(serde_json::Value::from)
    } else if types.contains(&"number") {
        text.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(serde_json::Value::Number)
    } else {
        None
    };
    let boolean = types.contains(&"boolean").then(|| text.parse::<bool>().ok().map(serde_json::Value::Bool)).flatten();
    if let Some(taken) = number.or(boolean) {
        *value = taken;
    }
}

/// What is wrong with a value of the wrong kind, or below the schema's minimum.
fn kind_problem(value: &serde_json::Value, property: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    let types = schema_types(property);
    if types.is_empty() {
        return None;
    }
    let fits = |t: &str| match t {
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    };
    if !types.iter().any(|t| fits(t)) {
        let wanted: Vec<&str> = types
            .iter()
            .filter_map(|t| match *t {
                "integer" => Some("a whole number"),
                "number" => Some("a number"),
                "boolean" => Some("true or false"),
                "string" => Some("a string"),
                "array" => Some("a list"),
                "object" => Some("an object"),
                _ => None,
            })
            .collect();
        let given = match value {
            Value::Null => "null".to_string(),
            Value::String(s) => format!("the string {s:?}"),
            Value::Array(_) => "a list".to_string(),
            Value::Object(_) => "an object".to_string(),
            other => other.to_string(),
        };
        return Some(format!("must be {}, not {given}", wanted.join(" or ")));
    }
    let minimum = property.get("minimum").and_then(Value::as_f64)?;
    let number = value.as_f64()?;
    (number < minimum).then(|| format!("must be at least {minimum}, not {value}"))
}

/// An argument the tool does not have: the closest parameter, and the list of them.
fn unknown_argument(tool: &str, key: &str, properties: &serde_json::Map<String, serde_json::Value>) -> ToolError {
    let names: Vec<&str> = properties.keys().map(String::as_str).collect();
    let likeness = |name: &str| {
        let (a, b) = (key.to_ascii_lowercase(), name.to_ascii_lowercase());
        // A parameter the argument starts with or ends with (`output_mode`, `path_name`) is meant.
        let contained = a.starts_with(&b) || a.ends_with(&b) || b.starts_with(&a);
        if contained {
            1.0
        } else {
            strsim::jaro_winkler(&a, &b)
        }
    };
    let best = names.iter().map(|n| (likeness(n), *n)).max_by(|x, y| x.0.total_cmp(&y.0));
    let hint = match best {
        Some((score, name)) if score >= 0.8 => format!(" Did you mean `{name}`?"),
        _ => String::new(),
    };
    ToolError::Message(format!(
        "Invalid arguments for {tool}: it has no argument `{key}`.{hint} Its arguments: {}.",
        names.join(", ")
    ))
}

fn parse_and_run<T: Tool>(ctx: &mut Ctx<'_>, args: serde_json::Value) -> ToolResult {
    T::run(ctx, parse::<T>(args)?)
}

fn preview_of<T: Tool>(ctx: &mut Ctx<'_>, args: serde_json::Value) -> Result<Option<RecordChange>, ToolError> {
    T::preview(ctx, &parse::<T>(args)?)
}

fn describe_of<T: Tool>(args: &serde_json::Value, change: &ChangeContext<'_>) -> Option<String> {
    let params = serde_json::from_value::<T::Params>(args.clone()).ok()?;
    T::describe(&params, change)
}

impl ToolDef {
    pub const fn of<T: Tool>() -> ToolDef {
        ToolDef {
            name: T::NAME,
            title: T::TITLE,
            traits: T::TRAITS,
            schema: schema_of::<T>,
            parse_and_run: parse_and_run::<T>,
            describe: describe_of::<T>,
            preview: preview_of::<T>,
        }
    }

    /// The JSON Schema of the arguments, as generated from the parameter type.
    pub fn schema(&self) -> schemars::Schema {
        (self.schema)()
    }

    /// Parses the arguments and runs the tool.
    pub fn run(&self, ctx: &mut Ctx<'_>, args: serde_json::Value) -> ToolResult {
        (self.parse_and_run)(ctx, args)
    }

    /// The approval prompt's words for a change of one file, if the tool has its own.
    pub fn describe(&self, args: &serde_json::Value, change: &ChangeContext<'_>) -> Option<String> {
        (self.describe)(args, change)
    }

    /// The change a call would make to records (see `Tool::preview`), or the call's refusal.
    pub fn preview(&self, ctx: &mut Ctx<'_>, args: serde_json::Value) -> Result<Option<RecordChange>, ToolError> {
        (self.preview)(ctx, args)
    }

    /// Whether the gate decides about its calls.
    pub fn gated(&self) -> bool {
        matches!(self.traits.effect, Effect::ChangesFiles | Effect::ChangesRecords)
    }
}

/// An argument error, in words the model can act on.
pub fn args_error(tool: &str, error: &serde_json::Error) -> ToolError {
    let text = error.to_string();
    // Serde's words, said plainly: the field names stay, the Rust type names go.
    let plain = if let Some(field) = text.strip_prefix("missing field ").map(|f| f.trim_matches('`')) {
        format!("`{field}` is required")
    } else if let Some(rest) = text.strip_prefix("unknown variant ") {
        // "unknown variant `lines`, expected one of `content`, `files`, `count`"; with two
        // choices "expected `project` or `user`", with one "expected `a`".
        let (given, choices) = rest
            .split_once(", expected one of ")
            .or_else(|| rest.split_once(", expected "))
            .map(|(given, choices)| (given, choices.replace("` or `", "`, `")))
            .unwrap_or((rest, String::new()));
        format!("{given} is not one of the choices ({choices})")
    } else {
        let mut plain = text.replace("invalid type: ", "wrong kind of value: ").replace("invalid value: ", "");
        for rust in ["u64", "u32", "u16", "u8", "usize"] {
            plain = plain.replace(&format!("expected {rust}"), "expected a whole number of at least 0");
        }
        for rust in ["i64", "i32"] {
            plain = plain.replace(&format!("expected {rust}"), "expected a whole number");
        }
        plain
    };
    ToolError::Message(format!("Invalid arguments for {tool}: {plain}."))
}

/// recall: answered from the session's stored results (by `hygiene`).
pub struct Recall;

impl Tool for Recall {
    const NAME: &'static str = "recall";
    const TITLE: &'static str = "Recall an earlier result";
    const TRAITS: Traits = Traits { from_history: true, ..Traits::GUARDED.reads() };
    type Params = RecallParams;

    fn run(_ctx: &mut Ctx<'_>, _params: RecallParams) -> ToolResult {
        Err(ToolError::Message("recall is answered from the session's results.".into()))
    }
}

/// Every tool, in the order tool lists show them.
pub static TABLE: &[ToolDef] = &[
    ToolDef::of::<files::Read>(),
    ToolDef::of::<files::Write>(),
    ToolDef::of::<files::Edit>(),
    ToolDef::of::<files::MultiEdit>(),
    ToolDef::of::<files::ApplyPatch>(),
    ToolDef::of::<nodes::List>(),
    ToolDef::of::<find::Glob>(),
    ToolDef::of::<find::Grep>(),
    ToolDef::of::<search::Search>(),
    ToolDef::of::<nodes::Mkdir>(),
    ToolDef::of::<nodes::Mv>(),
    ToolDef::of::<nodes::Rm>(),
    ToolDef::of::<nodes::Stat>(),
    ToolDef::of::<Recall>(),
    ToolDef::of::<skills::SkillsList>(),
    ToolDef::of::<skills::SkillView>(),
    ToolDef::of::<skills::SkillManage>(),
    ToolDef::of::<search::Tag>(),
    ToolDef::of::<memory::MemoryTool>(),
    ToolDef::of::<repo::Commit>(),
    ToolDef::of::<repo::Branch>(),
    ToolDef::of::<repo::Merge>(),
    ToolDef::of::<repo::GitTag>(),
    ToolDef::of::<repo::Pr>(),
    ToolDef::of::<repo::Release>(),
];

/// The tool of this name.
pub fn find(name: &str) -> Option<&'static ToolDef> {
    TABLE.iter().find(|t| t.name == name)
}

/// The names of every tool, in table order.
pub fn names() -> impl Iterator<Item = &'static str> {
    TABLE.iter().map(|t| t.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One walk over the table: names unique and plain, every schema an object
    /// with a description, and the traits consistent with what the tools do.
    #[test]
    fn the_table_is_consistent() {
        let mut seen = std::collections::HashSet::new();
        for tool in TABLE {
            assert!(seen.insert(tool.name), "{} is in the table twice", tool.name);
            assert!(tool.name.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{}", tool.name);
            let schema = tool.schema().to_value();
            assert_eq!(schema["type"], "object", "{}", tool.name);
            assert!(schema["description"].as_str().is_some_and(|d| d.len() > 20), "{} has no description", tool.name);
            if tool.traits.effect != Effect::Reads {
                assert!(tool.traits.may_block, "{} changes something yet runs on a protocol thread", tool.name);
                assert!(!tool.traits.dedupes, "{} changes something yet is deduplicated", tool.name);
            }
        }
        let gated: Vec<&str> = TABLE.iter().filter(|t| t.gated()).map(|t| t.name).collect();
        assert_eq!(
            gated,
            [
                "write",
                "edit",
                "multiedit",
                "apply_patch",
                "mkdir",
                "mv",
                "rm",
                "skill_manage",
                "memory",
                "commit",
                "branch",
                "merge",
                "git_tag"
            ]
        );
        let quick: Vec<&str> = TABLE.iter().filter(|t| !t.traits.may_block).map(|t| t.name).collect();
        assert_eq!(quick, ["read", "list", "stat", "skills_list", "skill_view", "pr", "release"]);
        let dedupes: Vec<&str> = TABLE.iter().filter(|t| t.traits.dedupes).map(|t| t.name).collect();
        assert_eq!(dedupes, ["list", "glob", "grep", "search"]);
        // What clients are told a change does (MCP's hints, the editors' tags) comes from here.
        let adds_only: Vec<&str> =
            TABLE.iter().filter(|t| t.traits.effect != Effect::Reads && !t.traits.takes_away).map(|t| t.name).collect();
        assert_eq!(adds_only, ["mkdir", "tag", "commit", "branch", "merge", "git_tag"]);
        let mut titles: Vec<&str> = TABLE.iter().map(|t| t.title).collect();
        assert!(titles.iter().all(|t| !t.is_empty() && t.chars().next().is_some_and(char::is_uppercase)));
        titles.sort();
        titles.dedup();
        assert_eq!(titles.len(), TABLE.len(), "every tool has its own title");
    }

    /// A tool not in the table is treated as the most guarded.
    #[test]
    fn an_unknown_tool_is_guarded() {
        assert!(find("nope").is_none());
        assert_eq!(Traits::GUARDED.effect, Effect::ChangesFiles);
    }
}
