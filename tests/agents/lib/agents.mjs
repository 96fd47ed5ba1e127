// How to start each real ACP agent installed from npm so that it runs offline against a scripted
// model server: its command, the environment and config files it needs, how it authenticates,
// and what it wants in session/new. Shared by the agent tests and by anything else that drives a
// real agent (a relay test can prefix the command with `ctxfs acp --`). It does not start
// anything: `prepareAgent` returns a plan and writes the agent's config files under `home`.

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));

/** The folder of the installed npm packages (tests/agents/node_modules, set up by scripts/test-agents). */
export const nodeModules = process.env.CTXFS_AGENTS_NODE_MODULES ?? path.resolve(here, "..", "node_modules");

/** The installed executable `bin` (from node_modules/.bin); throws when it is missing. */
export function agentBin(bin) {
  const file = path.join(nodeModules, ".bin", bin);
  if (!fs.existsSync(file)) {
    throw new Error(`the agent executable ${bin} is not installed at ${file}: run scripts/test-agents (it installs tests/agents/package-lock.json)`);
  }
  return file;
}

/**
 * The agents, by name. `dialect` is the model API the agent speaks to the fake model server.
 * Each `setup({home, tmp, modelUrl})` writes the agent's files and returns {env, authenticate,
 * sessionMeta}: `env` is added to a clean base environment, `authenticate` (if set) is the
 * `authenticate` request's params, `sessionMeta` goes in session/new's `_meta`.
 */
export const AGENTS = {
  opencode: {
    package: "opencode-ai",
    bin: "opencode",
    args: ["acp"],
    dialect: "openai",
    setup({ home, modelUrl }) {
      const configDir = path.join(home, ".config", "opencode");
      // opencode installs @opencode-ai/plugin from npm into its config folder in the background
      // unless node_modules exists and the lock file names the package; it is only needed for
      // user plugins, so it is marked as present and nothing is downloaded at run time.
      fs.mkdirSync(path.join(configDir, "node_modules"), { recursive: true });
      fs.writeFileSync(
        path.join(configDir, "package-lock.json"),
        JSON.stringify({ lockfileVersion: 3, packages: { "": { dependencies: { "@opencode-ai/plugin": "*" } } } }),
      );
      const builtIn = ["read", "write", "edit", "bash", "glob", "grep", "list", "patch", "todowrite", "todoread", "webfetch", "task"];
      const config = {
        provider: {
          scripted: {
            npm: "@ai-sdk/openai-compatible",
            name: "Scripted",
            options: { baseURL: `${modelUrl}/v1`, apiKey: "test-key" },
            models: { model: { name: "Scripted model", tool_call: true } },
          },
        },
        model: "scripted/model",
        small_model: "scripted/model",
        autoupdate: false,
        share: "disabled",
        tools: Object.fromEntries(builtIn.map((t) => [t, false])),
      };
      return {
        env: {
          OPENCODE_CONFIG_CONTENT: JSON.stringify(config),
          OPENCODE_DISABLE_MODELS_FETCH: "true",
          OPENCODE_DISABLE_AUTOUPDATE: "true",
          OPENCODE_DISABLE_DEFAULT_PLUGINS: "true",
          OPENCODE_DISABLE_LSP_DOWNLOAD: "true",
        },
      };
    },
  },
  claude: {
    package: "@zed-industries/claude-agent-acp",
    bin: "claude-agent-acp",
    args: [],
    dialect: "anthropic",
    setup({ modelUrl }) {
      return {
        env: {
          // As root, Claude Code offers its bypassPermissions mode only with IS_SANDBOX=1; any
          // other value (some machines set IS_SANDBOX=yes) makes session/new fail. The tests
          // use the default mode, so this only overrides whatever the caller inherited.
          IS_SANDBOX: "1",
          ANTHROPIC_BASE_URL: modelUrl,
          ANTHROPIC_API_KEY: "test-key",
          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
          DISABLE_AUTOUPDATER: "1",
          DISABLE_TELEMETRY: "1",
        },
        // Claude Code's own file tools off, so the model has only ctxfs's.
        sessionMeta: { claudeCode: { options: { tools: [] } } },
      };
    },
  },
  gemini: {
    package: "@google/gemini-cli",
    bin: "gemini",
    // A fixed model skips Gemini CLI's routing classifier, which would ask the model for JSON first.
    args: ["--acp", "--model", "gemini-2.5-flash"],
    dialect: "gemini",
    setup({ home, modelUrl }) {
      const dir = path.join(home, ".gemini");
      fs.mkdirSync(dir, { recursive: true });
      const settings = {
        general: { disableAutoUpdate: true, disableUpdateNag: true },
        privacy: { usageStatisticsEnabled: false },
        telemetry: { enabled: false },
        tools: { useRipgrep: false },
      };
      fs.writeFileSync(path.join(dir, "settings.json"), JSON.stringify(settings, null, 2));
      return {
        env: {
          GEMINI_API_KEY: "test-key",
          GOOGLE_GEMINI_BASE_URL: modelUrl,
          // Gemini CLI hands the session's MCP servers to the model only in a trusted folder.
          GEMINI_CLI_TRUST_WORKSPACE: "true",
          GEMINI_TELEMETRY_ENABLED: "false",
        },
        authenticate: { methodId: "gemini-api-key" },
      };
    },
  },
  codex: {
    package: "@zed-industries/codex-acp",
    bin: "codex-acp",
    args: [],
    dialect: "responses",
    setup({ home, modelUrl }) {
      const codexHome = path.join(home, ".codex");
      fs.mkdirSync(codexHome, { recursive: true });
      // OPENAI_BASE_URL is not enough: the built-in OpenAI provider talks websockets to its own
      // host. A provider of our own speaks the Responses API over HTTP to the fake server.
      fs.writeFileSync(
        path.join(codexHome, "config.toml"),
        [
          'model = "scripted"',
          'model_provider = "scripted"',
          "[model_providers.scripted]",
          'name = "Scripted"',
          `base_url = "${modelUrl}/v1"`,
          'env_key = "OPENAI_API_KEY"',
          'wire_api = "responses"',
          "",
        ].join("\n"),
      );
      return {
        env: { CODEX_HOME: codexHome, OPENAI_API_KEY: "test-key", RUST_LOG: "warn" },
        authenticate: { methodId: "openai-api-key" },
      };
    },
  },
};

/** The environment every agent starts from: PATH and locale only, HOME and temp in the scratch folder. */
export function baseEnv({ home, tmp }) {
  const keep = ["PATH", "LANG", "LC_ALL", "TERM", "SSL_CERT_FILE", "SSL_CERT_DIR"];
  const env = Object.fromEntries(keep.filter((k) => process.env[k] !== undefined).map((k) => [k, process.env[k]]));
  return {
    ...env,
    HOME: home,
    TMPDIR: tmp,
    XDG_CONFIG_HOME: path.join(home, ".config"),
    XDG_DATA_HOME: path.join(home, ".local", "share"),
    XDG_CACHE_HOME: path.join(home, ".cache"),
    XDG_STATE_HOME: path.join(home, ".local", "state"),
    NO_COLOR: "1",
  };
}

/**
 * Everything needed to start agent `name` offline against `modelUrl`, with its files written
 * under `home`: {command, args, env, authenticate, sessionMeta, dialect}.
 */
export function prepareAgent(name, { home, tmp, modelUrl }) {
  const agent = AGENTS[name];
  if (!agent) throw new Error(`no agent named ${name}; known: ${Object.keys(AGENTS).join(", ")}`);
  fs.mkdirSync(home, { recursive: true });
  fs.mkdirSync(tmp, { recursive: true });
  const { env = {}, authenticate = null, sessionMeta = null } = agent.setup({ home, tmp, modelUrl });
  return {
    command: agentBin(agent.bin),
    args: [...agent.args],
    env: { ...baseEnv({ home, tmp }), ...env },
    authenticate,
    sessionMeta,
    dialect: agent.dialect,
  };
}
