//! The ctxfs extension for Zed: starts `ctxfs mcp` as the project's context server (MCP), with
//! the binary, mode and flags from the user's settings, and describes those settings to Zed.
//! It is glue only: the tools, the gate and the result ids live in the ctxfs binary, and the
//! agent servers (`ctxfs acp -- AGENT`) are declared in extension.toml, which Zed runs without
//! calling this code.

mod config;

use zed_extension_api::{
    self as zed, settings::ContextServerSettings, ContextServerConfiguration, ContextServerId, Project,
};

struct CtxfsExtension;

impl From<config::Launch> for zed::Command {
    fn from(launch: config::Launch) -> Self {
        zed::Command { command: launch.program, args: launch.args, env: launch.env }
    }
}

fn check_id(id: &ContextServerId) -> zed::Result<()> {
    if id.as_ref() == config::SERVER_ID {
        Ok(())
    } else {
        Err(format!("the ctxfs extension has no context server named {id}"))
    }
}

impl zed::Extension for CtxfsExtension {
    fn new() -> Self {
        CtxfsExtension
    }

    fn context_server_command(&mut self, id: &ContextServerId, project: &Project) -> zed::Result<zed::Command> {
        check_id(id)?;
        let stored = ContextServerSettings::for_project(id.as_ref(), project)?;
        let settings = config::Settings::from_json(stored.settings.as_ref())?;
        Ok(settings.mcp_command().into())
    }

    fn context_server_configuration(
        &mut self,
        id: &ContextServerId,
        _project: &Project,
    ) -> zed::Result<Option<ContextServerConfiguration>> {
        check_id(id)?;
        Ok(Some(ContextServerConfiguration {
            installation_instructions: config::INSTALL.to_string(),
            settings_schema: config::settings_schema().to_string(),
            default_settings: serde_json::to_string_pretty(&config::default_settings()).map_err(|e| e.to_string())?,
        }))
    }
}

zed::register_extension!(CtxfsExtension);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_becomes_zeds_command_unchanged() {
        let launch = config::Settings::from_json(Some(&serde_json::json!({"env": {"K": "v"}}))).unwrap().mcp_command();
        let command: zed::Command = launch.clone().into();
        assert_eq!(command.command, launch.program);
        assert_eq!(command.args, launch.args);
        assert_eq!(command.env, vec![("K".to_string(), "v".to_string())]);
    }
}
