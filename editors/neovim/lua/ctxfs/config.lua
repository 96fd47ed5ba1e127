-- ctxfs for Neovim: the user's options (`require('ctxfs').setup{}`), their defaults and checks,
-- the `initializationOptions` they become, and how a buffer's project root is found.
-- It starts no process and talks to no server; client.lua does that.
local M = {}

local MODES = { 'read-only', 'ask', 'accept-edits', 'trust' }
local HOSTS = { 'resend', 'fresh' }
M.modes = MODES

---@class ctxfs.Options
---@field binary string The ctxfs executable: a name on PATH or a path.
---@field args string[] Extra flags for `ctxfs lsp`.
---@field mode? string The permission mode sessions start in.
---@field embedder? string static, minilm, none, or an http:// embedding server.
---@field embedder_model? string The model an embedding server is asked for.
---@field host? string resend or fresh: what the agent's next model request carries.
---@field approval_timeout? number Seconds an approval prompt waits before the change is refused.
---@field edit_timeout_ms? integer How long a write to an open buffer waits for Neovim.
---@field data? string Where ctxfs keeps sessions, results and the trash.
---@field config? string ctxfs's config directory (global AGENTS.md, skills, rules).
---@field start? string|fun(root: string, bufnr: integer): string? The start directory.
---@field root_markers (string|string[])[] Files or directories that mark a project root.
---@field root? string|fun(bufnr: integer): string? Decides the root instead of the markers.
---@field init_options table Extra initializationOptions fields, sent as given.
---@field restart 'ask'|'always'|'never' What to do when the server exits unexpectedly.
---@field approval_float boolean Show a change's diff in a float while an approval is asked.
---@field enable boolean Whether setup() calls vim.lsp.enable('ctxfs').
---@field client_name? string The name sessions record with files they create.

---@type ctxfs.Options
M.defaults = {
  binary = 'ctxfs',
  args = {},
  mode = nil,
  embedder = nil,
  embedder_model = nil,
  host = nil,
  approval_timeout = nil,
  edit_timeout_ms = nil,
  data = nil,
  config = nil,
  start = nil,
  -- A version-control root wins; without one, the nearest instruction file or project file.
  root_markers = { '.git', '.hg', '.jj', '.svn', { 'AGENTS.md', 'CLAUDE.md' } },
  root = nil,
  init_options = {},
  restart = 'ask',
  approval_float = true,
  enable = true,
  client_name = nil,
}

---@type ctxfs.Options
M.options = vim.deepcopy(M.defaults)

local function one_of(list)
  return function(v)
    return v == nil or vim.tbl_contains(list, v), 'one of ' .. table.concat(list, ', ')
  end
end

local checks = {
  binary = function(v)
    return type(v) == 'string' and v ~= '', 'a non-empty string'
  end,
  args = function(v)
    return vim.islist(v), 'a list of strings'
  end,
  mode = one_of(MODES),
  host = one_of(HOSTS),
  embedder = function(v)
    local ok = v == nil
      or (type(v) == 'string' and (vim.tbl_contains({ 'static', 'minilm', 'none' }, v) or v:match('^http://') ~= nil))
    return ok, 'static, minilm, none or an http://HOST:PORT[/path] URL'
  end,
  embedder_model = function(v)
    return v == nil or type(v) == 'string', 'a string'
  end,
  approval_timeout = function(v)
    return v == nil or (type(v) == 'number' and v > 0), 'a number of seconds above 0'
  end,
  edit_timeout_ms = function(v)
    return v == nil or (type(v) == 'number' and v >= 0), 'a number of milliseconds'
  end,
  data = function(v)
    return v == nil or type(v) == 'string', 'a directory'
  end,
  config = function(v)
    return v == nil or type(v) == 'string', 'a directory'
  end,
  start = function(v)
    return v == nil or type(v) == 'string' or type(v) == 'function', 'a directory or a function'
  end,
  root_markers = function(v)
    return type(v) == 'table', 'a list of file names'
  end,
  root = function(v)
    return v == nil or type(v) == 'string' or type(v) == 'function', 'a directory or a function'
  end,
  init_options = function(v)
    return type(v) == 'table', 'a table'
  end,
  restart = one_of({ 'ask', 'always', 'never' }),
  approval_float = function(v)
    return type(v) == 'boolean', 'true or false'
  end,
  enable = function(v)
    return type(v) == 'boolean', 'true or false'
  end,
  client_name = function(v)
    return v == nil or type(v) == 'string', 'a string'
  end,
}

--- Merges `user` over the defaults. Unknown keys and bad values are reported (as one list of
--- problems) and left at their defaults, so a typo never stops Neovim's start-up.
---@param user table?
---@return string[] problems
function M.set(user)
  user = user or {}
  local merged = vim.deepcopy(M.defaults)
  local problems = {}
  for key, value in pairs(user) do
    local check = checks[key]
    if not check then
      table.insert(problems, string.format('unknown option %q (ignored)', tostring(key)))
    else
      local ok, want = check(value)
      if ok then
        merged[key] = value
      else
        table.insert(problems, string.format('option %s = %s must be %s (default kept)', key, vim.inspect(value), want))
      end
    end
  end
  M.options = merged
  return problems
end

--- Checks one value the way set() does; for `:Ctxfs mode NAME`.
---@param name string
---@return boolean
function M.is_mode(name)
  return vim.tbl_contains(MODES, name)
end

--- The command that starts the server.
---@return string[]
function M.cmd()
  local cmd = { M.options.binary, 'lsp' }
  vim.list_extend(cmd, M.options.args or {})
  return cmd
end

--- The binary's full path, or nil when it cannot be run.
---@return string?
function M.executable()
  local bin = M.options.binary
  if vim.fn.executable(bin) ~= 1 then
    return nil
  end
  local path = vim.fn.exepath(bin)
  return path ~= '' and path or bin
end

--- The `initializationOptions` for a server on `root`: the options above, then
--- `init_options` from setup(), then `extra` (a vim.lsp.config init_options table).
--- Always a JSON object: a Lua `{}` would be sent as `[]`.
---@param root string?
---@param bufnr integer?
---@param extra table?
---@return table
function M.init_options(root, bufnr, extra)
  local o = M.options
  local t = {
    mode = o.mode,
    embedder = o.embedder,
    embedderModel = o.embedder_model,
    host = o.host,
    approvalTimeout = o.approval_timeout,
    editTimeoutMs = o.edit_timeout_ms,
    data = o.data and vim.fs.normalize(o.data) or nil,
    config = o.config and vim.fs.normalize(o.config) or nil,
  }
  local start = o.start
  if type(start) == 'function' then
    local ok, value = pcall(start, root, bufnr)
    start = ok and value or nil
  end
  if type(start) == 'string' then
    t.start = vim.fs.normalize(start)
  end
  for _, more in ipairs({ o.init_options or {}, extra or {} }) do
    for k, v in pairs(more) do
      t[k] = v
    end
  end
  if next(t) == nil then
    return vim.empty_dict()
  end
  return t
end

--- The root folder every server session sees, for a buffer; nil and why when there is none.
---@param bufnr integer
---@param folders string[]? workspace folders of running ctxfs clients
---@return string? root
---@return string? why
function M.root_for(bufnr, folders)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return nil, 'the buffer is gone'
  end
  if vim.bo[bufnr].buftype ~= '' then
    return nil, 'this is not a file buffer'
  end
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name == '' then
    return nil, 'this buffer has no file name'
  end
  name = vim.fs.normalize(vim.fn.fnamemodify(name, ':p'))
  local o = M.options
  if o.root then
    local root = o.root
    if type(root) == 'function' then
      local ok, value = pcall(root, bufnr)
      if not ok then
        return nil, 'the root option failed: ' .. tostring(value)
      end
      root = value
    end
    if type(root) == 'string' and root ~= '' then
      return vim.fs.normalize(vim.fn.fnamemodify(root, ':p')):gsub('/$', ''), nil
    end
    return nil, 'the root option gave no folder for this buffer'
  end
  local root = vim.fs.root(name, o.root_markers)
  local home = vim.fs.normalize(vim.env.HOME or '~')
  if root and root ~= '/' and root ~= home then
    return root, nil
  end
  for _, folder in ipairs(folders or {}) do
    if name:sub(1, #folder + 1) == folder .. '/' then
      return folder, nil
    end
  end
  local markers = {}
  for _, m in ipairs(vim.iter(o.root_markers):flatten():totable()) do
    table.insert(markers, m)
  end
  return nil,
    string.format(
      'no project root above %s (looked for %s; the home folder and / do not count)',
      vim.fn.fnamemodify(name, ':~'),
      table.concat(markers, ', ')
    )
end

return M
