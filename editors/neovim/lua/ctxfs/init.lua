-- ctxfs for Neovim: the public Lua API. `setup{}` for users; `tools()`, `call()`, `recall()`,
-- `new_request()`, `compact()` and `mcp_cmd()` for agent plugins (CodeCompanion, MCP-capable
-- chat plugins); the views behind `:Ctxfs`. The LSP plumbing is in client.lua, the buffers in
-- views.lua; this file only wires them and checks what callers pass.
local client = require('ctxfs.client')
local config = require('ctxfs.config')

local M = {}

--- Sets the options and (unless `enable = false`) enables the `ctxfs` language server config,
--- so every file buffer inside a project attaches to it. Safe to call again.
---@param opts ctxfs.Options|table|nil
function M.setup(opts)
  local problems = config.set(opts)
  if #problems > 0 then
    client.notify('setup: ' .. table.concat(problems, '; '), vim.log.levels.WARN)
  end
  require('ctxfs.highlight').define()
  if #vim.api.nvim_get_runtime_file('lsp/ctxfs.lua', false) == 0 then
    -- Installed without its lsp/ folder on the runtimepath: register the config directly.
    vim.lsp.config('ctxfs', client.lsp_config())
  end
  if config.options.enable then
    vim.lsp.enable('ctxfs')
  end
end

--- The current options (after setup).
---@return ctxfs.Options
function M.options()
  return config.options
end

local function shape(tools, opts)
  local prefix = opts.prefix or ''
  local out = {}
  for _, t in ipairs(tools or {}) do
    local schema = t.inputSchema or vim.empty_dict()
    if opts.format == 'mcp' then
      table.insert(out, { name = prefix .. t.name, description = t.description, inputSchema = schema })
    elseif opts.format == 'anthropic' then
      table.insert(out, { name = prefix .. t.name, description = t.description, input_schema = schema })
    else
      table.insert(out, {
        type = 'function',
        ['function'] = { name = prefix .. t.name, description = t.description, parameters = schema },
      })
    end
  end
  return out
end

local function tools_of(c, cb)
  local st = client.state[c.id]
  if st and st.tools then
    return cb(nil, st.tools)
  end
  client.request(c, 'ctxfs/tools', nil, function(e, r)
    if e then
      return cb(e)
    end
    if st then
      st.tools = r.tools
    end
    cb(nil, r.tools)
  end)
end

--- ctxfs's tools, as chat plugins take them.
---
--- `opts.format`: `'openai'` (default: `{type = 'function', ['function'] = {name, description,
--- parameters}}`, the shape CodeCompanion's `schema` and OpenAI-style APIs use), `'anthropic'`
--- (`{name, description, input_schema}`) or `'mcp'` (`{name, description, inputSchema}`).
--- `opts.prefix` is put before every name (`'ctxfs_'` keeps them apart from a plugin's own).
--- `opts.bufnr` picks the project (default: the current buffer; a buffer outside every project,
--- such as a chat buffer, uses the only running server). The server is started when needed.
---
--- With `callback(err, tools)` it returns at once; without, it waits (at most `opts.timeout` ms,
--- default 10000) and returns `tools` or `nil, err`. Do not wait from inside a callback of the
--- event loop (vim.schedule is fine); use the callback form there.
---@param opts? {format?: string, prefix?: string, bufnr?: integer, timeout?: integer}|fun(err: string?, tools: table[]?)
---@param callback? fun(err: string?, tools: table[]?)
---@return table[]? tools
---@return string? err
function M.tools(opts, callback)
  if type(opts) == 'function' then
    opts, callback = {}, opts
  end
  opts = opts or {}
  if callback then
    client.with_client(opts.bufnr, function(err, c)
      if err or not c then
        return callback(err or 'no ctxfs server')
      end
      tools_of(c, function(e, tools)
        if e then
          return callback(e)
        end
        callback(nil, shape(tools, opts))
      end)
    end)
    return nil
  end
  local done, err, tools = false, nil, nil
  client.with_client(opts.bufnr, function(e, c)
    if e or not c then
      done, err = true, e or 'no ctxfs server'
      return
    end
    tools_of(c, function(te, t)
      done, err, tools = true, te, t
    end)
  end)
  if not vim.wait(opts.timeout or 10000, function()
    return done
  end, 10) then
    return nil, 'ctxfs did not answer in time'
  end
  if err then
    return nil, err
  end
  return shape(tools, opts), nil
end

local function as_object(t)
  if t == nil or (type(t) == 'table' and next(t) == nil) then
    return vim.empty_dict()
  end
  return t
end

--- Runs one tool call in the session of a buffer's project (opened on first use; the same
--- session as `:Ctxfs results` shows). `callback(err, result)`: `err` is a message when ctxfs
--- could not run it at all; otherwise `result = {id, text, isError, facts}`, where `text` is
--- what the model should read (a refusal is `isError = true` with the reason in `text`).
--- A change may first ask the user (mode `ask`); the callback comes after the answer.
---@param tool string a name from tools() (without any prefix you added)
---@param args table? the tool's arguments
---@param callback fun(err: string?, result: {id: string, text: string, isError: boolean, facts: table}?)
---@param opts? {bufnr?: integer}
function M.call(tool, args, callback, opts)
  opts = opts or {}
  callback = callback
    or function(err, result)
      if err then
        client.notify(err, vim.log.levels.ERROR)
      elseif result then
        client.notify(result.text)
      end
    end
  if type(tool) ~= 'string' or tool == '' then
    return callback('call: the tool must be a name such as "read"')
  end
  if args ~= nil and type(args) ~= 'table' then
    return callback('call: the arguments must be a table')
  end
  client.with_session(opts.bufnr, function(err, c, session)
    if err or not c then
      return callback(err or 'no ctxfs server')
    end
    client.request(c, 'ctxfs/call', { session = session, tool = tool, args = as_object(args) }, callback)
  end)
end

--- Tells ctxfs the agent starts a new model request; `carries_earlier`: it resends the
--- earlier results (then an unchanged re-read may be a stub naming one of them).
---@param carries_earlier boolean
---@param callback fun(err: string?)?
---@param opts? {bufnr?: integer}
function M.new_request(carries_earlier, callback, opts)
  callback = callback or function() end
  client.with_session((opts or {}).bufnr, function(err, c, session)
    if err or not c then
      return callback(err)
    end
    client.request(c, 'ctxfs/newRequest', { session = session, carriesEarlier = carries_earlier and true or false }, function(e)
      callback(e)
    end)
  end)
end

--- The agent compacts its context: `callback(err, text)` gets the table of files read, to keep.
---@param callback fun(err: string?, text: string?)
---@param opts? {bufnr?: integer}
function M.compact(callback, opts)
  client.with_session((opts or {}).bufnr, function(err, c, session)
    if err or not c then
      return callback(err)
    end
    client.request(c, 'ctxfs/compact', { session = session }, function(e, r)
      callback(e, r and r.text)
    end)
  end)
end

--- The command that serves the same project over MCP, for plugins that speak MCP
--- (CodeCompanion's `mcp.servers`, mcphub.nvim): `{binary, 'mcp', '--root', ROOT, ...}`.
--- Note that an MCP server reads files from disk, not Neovim's unsaved buffers.
---@param opts? {root?: string, mode?: string, bufnr?: integer}
---@return string[]
function M.mcp_cmd(opts)
  opts = opts or {}
  local root = opts.root
  if not root then
    root = config.root_for(opts.bufnr or vim.api.nvim_get_current_buf(), client.folders())
  end
  if not root then
    root = vim.fs.root(vim.fn.getcwd(), config.options.root_markers) or vim.fn.getcwd()
  end
  local cmd = { config.options.binary, 'mcp', '--root', root }
  local mode = opts.mode or config.options.mode
  if mode then
    vim.list_extend(cmd, { '--mode', mode })
  end
  return cmd
end

--- About the buffer's server and session (nil when there is none): for statuslines and checks.
---@param bufnr integer?
---@return {root: string, session: string?, version: string?, protocol: integer?, mode: string?, client_id: integer}?
function M.status(bufnr)
  local c = client.find(bufnr or 0)
  local st = c and client.state[c.id]
  if not st then
    return nil
  end
  return {
    root = st.root,
    session = st.session,
    version = st.version,
    protocol = st.info and tonumber(st.info.protocol),
    mode = st.mode or st.server_mode,
    client_id = c.id,
  }
end

--- Opens a stored result by id (`#000c`) in a scratch buffer.
function M.recall(id, bufnr, cb)
  return require('ctxfs.views').recall(id, bufnr, cb)
end

--- Opens the result whose id is under the cursor (map it in a chat buffer: `<Plug>(ctxfs-recall)`).
function M.recall_under_cursor()
  return require('ctxfs.views').recall_under_cursor()
end

--- Marks result ids, stubs and elisions in any buffer (a chat buffer showing tool results)
--- with the Ctxfs* highlight groups; call it again after the text changes.
---@param bufnr integer?
function M.highlight(bufnr)
  require('ctxfs.highlight').apply(bufnr and bufnr ~= 0 and bufnr or vim.api.nvim_get_current_buf())
end

--- Restarts the server of a buffer's project; its session resumes.
function M.restart(bufnr)
  return client.restart(bufnr)
end

for _, name in ipairs({ 'results', 'changes', 'instructions', 'grants', 'mode', 'log' }) do
  M[name] = function(...)
    return require('ctxfs.views')[name](...)
  end
end

return M
