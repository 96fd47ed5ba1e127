-- ctxfs for Neovim: `:checkhealth ctxfs`. It reports the binary and its version, the protocol
-- it speaks (asked of the running servers, else of a short-lived `ctxfs lsp` it starts and
-- ends), the servers running and their posture and mode, the embedder's files and whether the
-- data directory is writable. It changes nothing but a probe file it removes again.
local client = require('ctxfs.client')
local config = require('ctxfs.config')

local M = {}

local h = vim.health

local function frame(msg)
  local body = vim.json.encode(msg)
  return 'Content-Length: ' .. #body .. '\r\n\r\n' .. body
end

--- Starts `exe lsp`, sends initialize, reads the answer and ends the process.
---@param exe string
---@return table? result
---@return string? err
function M.probe(exe)
  local out = ''
  local ok, proc = pcall(vim.system, { exe, 'lsp' }, {
    stdin = true,
    env = { CTXFS_LOG = 'error' },
    stdout = function(_, data)
      if data then
        out = out .. data
      end
    end,
  })
  if not ok then
    return nil, tostring(proc)
  end
  proc:write(frame({
    jsonrpc = '2.0',
    id = 1,
    method = 'initialize',
    params = {
      processId = vim.NIL,
      rootUri = vim.NIL,
      capabilities = vim.empty_dict(),
      initializationOptions = vim.empty_dict(),
    },
  }))
  local result, err
  vim.wait(10000, function()
    local pos = 1
    while true do
      local s, e, len = out:find('Content%-Length: (%d+)\r\n\r\n', pos)
      if not s or #out < e + tonumber(len) then
        return false
      end
      local body = out:sub(e + 1, e + tonumber(len))
      pos = e + tonumber(len) + 1
      local dok, msg = pcall(vim.json.decode, body)
      if dok and type(msg) == 'table' and msg.id == 1 then
        result, err = msg.result, msg.error and (msg.error.message or 'error')
        return true
      end
    end
  end, 20)
  pcall(function()
    proc:write(frame({ jsonrpc = '2.0', id = 2, method = 'shutdown' }))
    proc:write(frame({ jsonrpc = '2.0', method = 'exit' }))
    proc:write(nil)
  end)
  -- wait() ends the process itself when it has not exited in time.
  pcall(proc.wait, proc, 3000)
  if not result and not err then
    err = 'no answer to initialize within 10 s'
  end
  return result, err
end

local function data_dir()
  if config.options.data then
    return vim.fs.normalize(config.options.data)
  end
  local base = vim.env.XDG_DATA_HOME
  if not base or base == '' then
    base = vim.fs.normalize('~/.local/share')
  end
  return base .. '/ctxfs'
end

local function writable(dir)
  local existed = vim.fn.isdirectory(dir) == 1
  if not existed then
    -- A server starting meanwhile may make it first: mkdir then raises
    -- E739, and the directory is there all the same.
    local ok, made = pcall(vim.fn.mkdir, dir, 'p')
    if not ((ok and made == 1) or vim.fn.isdirectory(dir) == 1) then
      return false, 'it cannot be created'
    end
  end
  local probe = dir .. '/.ctxfs-health-' .. vim.fn.getpid()
  local f = io.open(probe, 'w')
  if not f then
    return false, 'a file cannot be created in it'
  end
  f:write('ok')
  f:close()
  os.remove(probe)
  return true, existed and 'exists' or 'created'
end

-- Where ctxfs looks for an embedder's model directory, in its order (see index/embed.rs).
local function model_candidates(name, env_var, exe)
  local out = {}
  local env = vim.env[env_var]
  if env and env ~= '' then
    table.insert(out, env)
  end
  table.insert(out, data_dir() .. '/models/' .. name)
  if exe then
    local real = vim.uv.fs_realpath(exe) or exe
    local bin = vim.fs.dirname(real)
    table.insert(out, vim.fs.normalize(bin .. '/../share/ctxfs/' .. name))
    -- A build from a checkout also looks in the checkout's models/.
    local checkout = real:match('^(.*)/target/[^/]+/ctxfs$')
    if checkout then
      table.insert(out, checkout .. '/models/' .. name)
    end
  end
  return out
end

local function has_model(dir)
  return vim.fn.filereadable(dir .. '/model.safetensors') == 1 and vim.fn.filereadable(dir .. '/tokenizer.json') == 1
end

function M.check()
  h.start('ctxfs: Neovim and options')
  if vim.fn.has('nvim-0.11') == 1 then
    h.ok('Neovim ' .. tostring(vim.version()))
  else
    h.error('Neovim ' .. tostring(vim.version()) .. ' is too old', 'ctxfs needs Neovim 0.11 or newer')
  end
  local o = config.options
  h.info(
    string.format(
      'binary = %s, mode = %s, embedder = %s, host = %s, approval_timeout = %s',
      o.binary,
      o.mode or '(server default: ask)',
      o.embedder or '(server default)',
      o.host or '(server default: resend)',
      o.approval_timeout and (o.approval_timeout .. ' s') or '(server default: 120 s)'
    )
  )
  if vim.lsp.is_enabled and vim.lsp.is_enabled('ctxfs') then
    h.ok("the 'ctxfs' language server config is enabled")
  else
    h.warn("the 'ctxfs' config is not enabled: servers start only through :Ctxfs commands and the API", {
      "call require('ctxfs').setup{} or vim.lsp.enable('ctxfs')",
    })
  end

  h.start('ctxfs: binary')
  local exe = config.executable()
  if not exe then
    h.error(client.missing_binary(), { 'install ctxfs (cargo install --path . in its checkout)', 'or setup{ binary = "/path/to/ctxfs" }' })
  else
    local v = vim.system({ exe, '--version' }, { text = true }):wait(5000)
    local version = vim.trim(v.stdout or '')
    if v.code == 0 and version ~= '' then
      h.ok(string.format('%s (%s)', exe, version))
    else
      h.warn(string.format('%s does not say its version (%s)', exe, vim.trim(v.stderr or '')))
    end
  end

  h.start('ctxfs: servers')
  local running = {}
  for _, st in pairs(client.state) do
    table.insert(running, st)
  end
  table.sort(running, function(a, b)
    return a.root < b.root
  end)
  local protocol_known = false
  for _, st in ipairs(running) do
    local c = st.client
    local root = vim.fn.fnamemodify(st.root, ':~')
    if st.refused then
      h.error(root .. ': ' .. st.refused)
    elseif not st.ready then
      h.warn(root .. ': starting (no answer to initialize yet)')
    else
      protocol_known = true
      local protocol = tonumber(st.info and st.info.protocol) or 0
      h.ok(string.format('%s: ctxfs %s, protocol %d (this plugin needs %d or newer)', root, st.version or '?', protocol, client.PROTOCOL))
      local n = vim.tbl_count(c.attached_buffers or {})
      if n > 0 then
        h.ok(string.format('%s: client %d attached to %d buffer%s', root, c.id, n, n == 1 and '' or 's'))
      else
        h.warn(string.format('%s: client %d is attached to no buffer', root, c.id))
      end
      if st.cannot_serve then
        h.error(root .. ': the server cannot serve: ' .. st.cannot_serve)
      else
        h.ok(
          string.format(
            '%s: posture: %s; mode %s; session %s',
            root,
            st.describe or '(not reported yet)',
            st.mode or st.server_mode or '?',
            st.session or '(not opened yet)'
          )
        )
      end
    end
  end
  if #running == 0 then
    h.warn('no ctxfs server is running', {
      'open a file inside a project (a folder with .git, AGENTS.md, …); ctxfs starts for it',
    })
  end
  if exe and not protocol_known then
    local result, err = M.probe(exe)
    local info = result and result.capabilities and result.capabilities.experimental
    info = type(info) == 'table' and info.ctxfs or nil
    if err then
      h.error('asking ' .. exe .. ' for its protocol failed: ' .. err)
    elseif type(info) ~= 'table' then
      h.error(exe .. ' answered initialize without experimental.ctxfs: it is not ctxfs, or very old')
    else
      local protocol = tonumber(info.protocol) or 0
      if protocol >= client.PROTOCOL then
        h.ok(string.format('%s speaks protocol %d (asked with a short-lived server)', exe, protocol))
      else
        h.error(
          string.format('%s speaks protocol %d; this plugin needs %d or newer: the binary is too old', exe, protocol, client.PROTOCOL),
          { 'update ctxfs, or point setup{ binary = ... } at a newer build' }
        )
      end
    end
  end

  h.start('ctxfs: embedder')
  local embedder = o.embedder or 'static'
  if embedder == 'none' then
    h.ok('embedder none: search ranks by words only')
  elseif embedder:match('^http://') then
    h.ok('embedder ' .. embedder .. ' (an embedding server; not contacted by this check)')
  else
    local name, env_var = 'minilm-static', 'CTXFS_MODEL_DIR'
    if embedder == 'minilm' then
      name, env_var = 'minilm', 'CTXFS_BERT_DIR'
    end
    local found
    local looked = model_candidates(name, env_var, exe)
    for _, dir in ipairs(looked) do
      if has_model(dir) then
        found = dir
        break
      end
    end
    if found then
      h.ok(string.format('embedder %s: model files in %s', embedder, found))
    else
      h.warn(
        string.format('embedder %s: no model files (model.safetensors, tokenizer.json) found; search ranks by words only', embedder),
        { 'looked in: ' .. table.concat(looked, ', '), 'scripts/build-embedder in the ctxfs checkout makes them' }
      )
    end
  end

  h.start('ctxfs: data directory')
  local dir = data_dir()
  local ok, how = writable(dir)
  if ok then
    h.ok(string.format('%s is writable (%s)', dir, how))
  else
    h.error(string.format('%s is not writable: %s', dir, how), { 'set setup{ data = "/a/writable/dir" }' })
  end
end

return M
