//! The tools as the doors show them: schemas and descriptions from the tool
//! table (`tools::spec`), and dispatch through it. Not where tools are listed.

use super::{ToolHints, ToolInfo};
use crate::access::ToolError;
use crate::tools::spec::{self, ToolDef, TABLE};
use crate::tools::{Ctx, ToolResult};

fn info(tool: &ToolDef) -> ToolInfo {
    let name = tool.name;
    let mut schema = tool.schema().to_value();
    simplify_for_clients(&mut schema);
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
    let traits = tool.traits;
    let read_only = traits.effect == spec::Effect::Reads;
    let hints = ToolHints { read_only, destructive: !read_only && traits.takes_away, idempotent: traits.idempotent };
    ToolInfo { name: name.to_string(), title: tool.title.to_string(), description, input_schema: schema, hints }
}

/// The schema as clients and models take it best: an optional argument shown as
/// optional, not as nullable (models do better with `"type": "integer"` than with
/// `["integer", "null"]`), and no number formats JSON Schema does not define.
fn simplify_for_clients(value: &mut serde_json::Value) {
    use serde_json::Value;
    let Value::Object(map) = value else {
        if let Value::Array(items) = value {
            items.iter_mut().for_each(simplify_for_clients);
        }
        return;
    };
    if map.get("default") == Some(&Value::Null) {
        map.remove("default");
    }
    // schemars names Rust's number types as formats (`uint64`); JSON Schema defines no
    // such formats and strict validators (Ajv) refuse the schema. `minimum` says the rest.
    const RUST_NUMBER_FORMATS: [&str; 11] =
        ["uint", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float", "double"];
    if map.get("format").and_then(Value::as_str).is_some_and(|f| RUST_NUMBER_FORMATS.contains(&f)) {
        map.remove("format");
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
    map.values_mut().for_each(simplify_for_clients);
}

/// The tools with their schemas, in the table's order.
pub fn tools() -> Vec<ToolInfo> {
    TABLE.iter().map(info).collect()
}

/// Runs the tool `tool` (all but recall, which hygiene answers).
pub fn dispatch(ctx: &mut Ctx<'_>, tool: &str, args: serde_json::Value) -> ToolResult {
    match spec::find(tool) {
        Some(def) => def.run(ctx, args),
        None => {
            let names: Vec<&str> = spec::names().collect();
            Err(ToolError::Message(format!("Unknown tool {tool:?}. The tools are: {}.", names.join(", "))))
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every tool schema validates under strict validators: no format JSON Schema does not define.
    #[test]
    fn schemas_hold_only_formats_json_schema_defines() {
        fn formats(value: &serde_json::Value, out: &mut Vec<String>) {
            match value {
                serde_json::Value::Object(map) => {
                    if let Some(f) = map.get("format").and_then(serde_json::Value::as_str) {
                        out.push(f.to_string());
                    }
                    map.values().for_each(|v| formats(v, out));
                }
                serde_json::Value::Array(items) => items.iter().for_each(|v| formats(v, out)),
                _ => {}
            }
        }
        const DEFINED: [&str; 8] = ["date-time", "date", "time", "email", "uri", "uuid", "hostname", "regex"];
        for tool in super::tools() {
            let mut found = Vec::new();
            formats(&tool.input_schema, &mut found);
            found.retain(|f| !DEFINED.contains(&f.as_str()));
            assert!(found.is_empty(), "{}: formats {found:?}", tool.name);
        }
    }
}
