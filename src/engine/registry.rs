//! The tool table: names, generated schemas, and dispatch to `tools`.
//!
//! One place lists every tool. Its schema and description come from the
//! parameter type (`tools::params`), so what the model reads is what the
//! code takes. Argument errors become tool errors the model can fix.

use super::ToolInfo;
use crate::access::ToolError;
use crate::tools::params::*;
use crate::tools::{files, find, nodes, search, skills, Ctx, ToolResult};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

/// Every tool, in the order `tools/list` shows them.
pub const TOOL_NAMES: [&str; 18] = [
    "read",
    "write",
    "edit",
    "multiedit",
    "apply_patch",
    "list",
    "glob",
    "grep",
    "search",
    "mkdir",
    "mv",
    "rm",
    "stat",
    "recall",
    "skills_list",
    "skill_view",
    "skill_manage",
    "tag",
];

fn info<P: JsonSchema>(name: &str) -> ToolInfo {
    let mut schema = serde_json::to_value(schemars::schema_for!(P)).expect("schemas serialise");
    drop_null_options(&mut schema);
    let object = schema.as_object_mut().expect("a parameter schema is an object");
    object.remove("$schema");
    object.remove("title");
    // Some clients insist on `properties`, even for a tool without arguments.
    object.entry("properties").or_insert_with(|| serde_json::json!({}));
    let description = object
        .remove("description")
        .and_then(|d| d.as_str().map(str::to_string))
        .unwrap_or_default()
        .replace('\n', " ");
    ToolInfo { name: name.to_string(), description, input_schema: schema }
}

/// An optional argument is shown as optional, not as nullable: models do
/// better with `"type": "integer"` than with `["integer", "null"]`.
fn drop_null_options(value: &mut serde_json::Value) {
    use serde_json::Value;
    let Value::Object(map) = value else {
        if let Value::Array(items) = value {
            items.iter_mut().for_each(drop_null_options);
        }
        return;
    };
    if map.get("default") == Some(&Value::Null) {
        map.remove("default");
    }
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            map.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(options)) = map.get("anyOf") {
        let rest: Vec<Value> =
            options.iter().filter(|o| o.get("type") != Some(&Value::from("null"))).cloned().collect();
        if rest.len() == 1 {
            map.remove("anyOf");
            if let Value::Object(only) = &rest[0] {
                for (k, v) in only {
                    map.insert(k.clone(), v.clone());
                }
            }
        }
    }
    map.values_mut().for_each(drop_null_options);
}

/// The tools with their schemas.
pub fn tools() -> Vec<ToolInfo> {
    TOOL_NAMES
        .iter()
        .map(|name| match *name {
            "read" => info::<ReadParams>(name),
            "write" => info::<WriteParams>(name),
            "edit" => info::<EditParams>(name),
            "multiedit" => info::<MultiEditParams>(name),
            "apply_patch" => info::<ApplyPatchParams>(name),
            "list" => info::<ListParams>(name),
            "glob" => info::<GlobParams>(name),
            "grep" => info::<GrepParams>(name),
            "search" => info::<SearchParams>(name),
            "mkdir" => info::<MkdirParams>(name),
            "mv" => info::<MvParams>(name),
            "rm" => info::<RmParams>(name),
            "stat" => info::<StatParams>(name),
            "recall" => info::<RecallParams>(name),
            "skills_list" => info::<SkillsListParams>(name),
            "skill_view" => info::<SkillViewParams>(name),
            "skill_manage" => info::<SkillManageParams>(name),
            "tag" => info::<TagParams>(name),
            other => unreachable!("{other} is in TOOL_NAMES without a schema"),
        })
        .collect()
}

/// An argument error, in words the model can act on.
pub fn args_error(tool: &str, error: &serde_json::Error) -> ToolError {
    ToolError::Message(format!("Invalid arguments for {tool}: {error}."))
}

fn run<P: DeserializeOwned>(
    ctx: &mut Ctx<'_>,
    tool: &str,
    args: serde_json::Value,
    f: fn(&mut Ctx<'_>, P) -> ToolResult,
) -> ToolResult {
    let args = if args.is_null() { serde_json::Value::Object(Default::default()) } else { args };
    let params = serde_json::from_value::<P>(args).map_err(|e| args_error(tool, &e))?;
    f(ctx, params)
}

/// Runs the tool `tool` (all but recall, which hygiene answers).
pub fn dispatch(ctx: &mut Ctx<'_>, tool: &str, args: serde_json::Value) -> ToolResult {
    match tool {
        "read" => run(ctx, tool, args, files::read),
        "write" => run(ctx, tool, args, files::write),
        "edit" => run(ctx, tool, args, files::edit),
        "multiedit" => run(ctx, tool, args, files::multiedit),
        "apply_patch" => run(ctx, tool, args, files::apply_patch),
        "list" => run(ctx, tool, args, nodes::list),
        "glob" => run(ctx, tool, args, find::glob),
        "grep" => run(ctx, tool, args, find::grep),
        "search" => run(ctx, tool, args, search::search),
        "mkdir" => run(ctx, tool, args, nodes::mkdir),
        "mv" => run(ctx, tool, args, nodes::mv),
        "rm" => run(ctx, tool, args, nodes::rm),
        "stat" => run(ctx, tool, args, nodes::stat),
        "skills_list" => run(ctx, tool, args, skills::skills_list),
        "skill_view" => run(ctx, tool, args, skills::skill_view),
        "skill_manage" => run(ctx, tool, args, skills::skill_manage),
        "tag" => run(ctx, tool, args, search::tag),
        other => Err(ToolError::Message(format!("Unknown tool {other:?}. The tools are: {}.", TOOL_NAMES.join(", ")))),
    }
}
