-- ctxfs for Neovim: the language-server side. It builds the vim.lsp config for `ctxfs lsp`,
-- checks the server's protocol, keeps one ctxfs session per client (resumed after a restart),
-- sends requests with readable errors, and notices a server that exits. It draws no
-- buffers (views.lua) and asks no questions except whether to restart.
local config = require('ctxfs.config')
local log = require('ctxfs.log')

local M = {}

--- The oldest `experimental.ctxfs.protocol` this plugin speaks.
M.PROTOCOL = 2

---@class ctxfs.ClientState
---@field client vim.lsp.Client
---@field root string
---@field ready boolean initialized and accepted
---@field refused? string why the plugin stopped it at start
---@field info? table experimental.ctxfs from the initialize answer
---@field version? string
---@field session? string
---@field opening? fun(err: string?, session: string?)[] callbacks waiting for the session
---@field waiting fun(err: string?, client: vim.lsp.Client?)[] callbacks waiting for initialize
---@field describe? string the posture, as the server described it
---@field server_mode? string the mode the server said sessions start in
---@field cannot_serve? string why the server cannot serve (it said so at start)
---@field stopping? boolean the plugin or the user stopped it

---@type table<integer, ctxfs.ClientState>
M.state = {}
--- The last session of each root, resumed by the next server on that root.
---@type table<string, string>
M.session_by_root = {}
--- The mode the user chose for each root, put back after a resume.
---@type table<string, string>
M.mode_by_root = {}

local exiting = false
vim.api.nvim_create_autocmd('VimLeavePre', {
  group = vim.api.nvim_create_augroup('ctxfs.client', { clear = true }),
  callback = function()
    exiting = true
  end,
})

local function notify(msg, level)
  vim.notify('ctxfs: ' .. msg, level or vim.log.levels.INFO)
end
M.notify = notify

local warned_binary = {}

--- The sentence said when the binary cannot be run.
---@return string
function M.missing_binary()
  local bin = config.options.binary
  return string.format(
    'cannot start: the binary %q is not %s. Install ctxfs, or set require("ctxfs").setup{ binary = "/path/to/ctxfs" }; :checkhealth ctxfs says more.',
    bin,
    bin:find('/') and 'an executable file' or 'on PATH'
  )
end

local function warn_missing_binary()
  local bin = config.options.binary
  if not warned_binary[bin] then
    warned_binary[bin] = true
    log.add('error', 'plugin', M.missing_binary())
    notify(M.missing_binary(), vim.log.levels.ERROR)
  end
end

--- The roots of the running ctxfs clients (a buffer without markers inside one belongs to it).
---@return string[]
function M.folders()
  local out = {}
  for _, st in pairs(M.state) do
    if not st.client:is_stopped() then
      table.insert(out, st.root)
    end
  end
  return out
end

local function fire(list, ...)
  for _, cb in ipairs(list or {}) do
    local ok, e = pcall(cb, ...)
    if not ok then
      log.add('error', 'plugin', 'a callback failed: ' .. tostring(e))
    end
  end
end

local function refuse(client, st, why)
  st.refused = why
  st.stopping = true
  log.add('error', st.root, why)
  notify(why, vim.log.levels.ERROR)
  local waiting = st.waiting
  st.waiting = {}
  fire(waiting, why, nil)
  vim.schedule(function()
    client:stop(true)
  end)
end

local function on_init(client, result)
  local root = client.root_dir or (client.workspace_folders and client.workspace_folders[1] and vim.uri_to_fname(
    client.workspace_folders[1].uri
  )) or '?'
  local st = M.state[client.id] or { waiting = {} }
  st.client, st.root = client, root
  M.state[client.id] = st
  local exp = result and result.capabilities and result.capabilities.experimental
  local info = type(exp) == 'table' and exp.ctxfs or nil
  local exe = config.executable() or config.options.binary
  if type(info) ~= 'table' then
    return refuse(
      client,
      st,
      string.format('%s did not answer as ctxfs (no experimental.ctxfs in its capabilities); ctxfs is stopped for %s.', exe, root)
    )
  end
  st.info = info
  st.version = info.version or (result.serverInfo and result.serverInfo.version) or '?'
  local protocol = tonumber(info.protocol) or 0
  if protocol < M.PROTOCOL then
    return refuse(
      client,
      st,
      string.format(
        'ctxfs %s at %s speaks protocol %d, and this plugin needs protocol %d or newer: the binary is too old. '
          .. 'Update ctxfs (in its checkout: cargo install --path .) or point require("ctxfs").setup{ binary = ... } '
          .. 'at a newer build, then :Ctxfs restart. ctxfs is stopped for %s.',
        st.version,
        exe,
        protocol,
        M.PROTOCOL,
        root
      )
    )
  end
  st.ready = true
  log.add('info', root, string.format('started %s (ctxfs %s, protocol %d)', exe, st.version, protocol))
  local waiting = st.waiting
  st.waiting = {}
  fire(waiting, nil, client)
end

local restart_root

local function on_exit(code, signal, client_id)
  local st = M.state[client_id]
  local why = signal ~= 0 and string.format('signal %d', signal) or string.format('exit code %d', code)
  if not st then
    -- It never answered initialize: not ctxfs, or it failed at once.
    if not exiting and (code ~= 0 or signal ~= 0) then
      vim.schedule(function()
        log.add('error', 'plugin', 'the server exited before it was ready (' .. why .. ')')
        notify('the server exited before it was ready (' .. why .. '); :Ctxfs log and :checkhealth ctxfs say more', vim.log.levels.ERROR)
      end)
    end
    return
  end
  M.state[client_id] = nil
  local waiting = st.waiting
  st.waiting = {}
  local opening = st.opening
  st.opening = nil
  vim.schedule(function()
    fire(waiting, 'ctxfs stopped before it was ready (' .. why .. ')', nil)
    fire(opening, 'ctxfs stopped (' .. why .. ')', nil)
    local deliberate = st.stopping or st.refused or (st.client and st.client._is_stopping) or exiting
    if deliberate then
      log.add('info', st.root, 'stopped (' .. why .. ')')
      return
    end
    if not st.ready then
      -- It never answered initialize: restarting it would only fail again.
      local msg = 'the server exited before it was ready (' .. why .. '); :Ctxfs log and :checkhealth ctxfs say more'
      log.add('error', st.root, msg)
      return notify(msg, vim.log.levels.ERROR)
    end
    local session = M.session_by_root[st.root]
    local msg = string.format(
      'the server for %s stopped unexpectedly (%s)%s',
      vim.fn.fnamemodify(st.root, ':~'),
      why,
      session and ('; session ' .. session .. ' is kept') or ''
    )
    log.add('error', st.root, msg)
    local policy = config.options.restart
    if policy == 'always' then
      notify(msg .. '; restarting.', vim.log.levels.WARN)
      restart_root(st.root)
    elseif policy == 'ask' then
      -- Short, so the question below follows without a "Press ENTER".
      notify(msg .. '.', vim.log.levels.ERROR)
      vim.ui.select(
        { 'Restart ctxfs and resume the session', 'Leave it stopped (:Ctxfs restart later)' },
        { prompt = 'ctxfs stopped for ' .. vim.fn.fnamemodify(st.root, ':~') .. ':', kind = 'ctxfs_restart' },
        function(_, idx)
          if idx == 1 then
            restart_root(st.root)
          end
        end
      )
    else
      notify(msg .. '; :Ctxfs restart starts it again.', vim.log.levels.ERROR)
    end
  end)
end

-- window/logMessage: kept for :Ctxfs log and read for the posture and mode, then passed on.
local function on_log_message(err, params, ctx)
  local st = M.state[ctx.client_id]
  local source = st and st.root or 'ctxfs'
  local text = params and params.message or ''
  log.add(log.level_of(params and params.type), source, text)
  if st then
    local version, describe, mode = text:match('^ctxfs (%S+): serving (.-); .-; mode (%S+)$')
    if describe then
      st.describe, st.server_mode = describe, mode
      st.version = st.version or version
    end
    local cannot = text:match('^ctxfs cannot serve: (.*)$')
    if cannot then
      st.cannot_serve = cannot
      notify('the server for ' .. st.root .. ' cannot serve: ' .. cannot, vim.log.levels.ERROR)
    end
  end
  return vim.lsp.handlers['window/logMessage'](err, params, ctx)
end

local function on_show_message(err, params, ctx)
  local st = M.state[ctx.client_id]
  log.add(log.level_of(params and params.type), st and st.root or 'ctxfs', params and params.message or '')
  return vim.lsp.handlers['window/showMessage'](err, params, ctx)
end

-- Closes the current undo block of a buffer, so an agent's edit is one step of `u` of its own.
local function undo_break(bufnr)
  if vim.api.nvim_buf_is_loaded(bufnr) then
    vim.api.nvim_buf_call(bufnr, function()
      vim.cmd('let &l:undolevels = &l:undolevels')
    end)
  end
end

-- workspace/applyEdit: the edit lands in the buffer as its own undo step; the user saves.
local function on_apply_edit(err, params, ctx)
  local bufs = {}
  local edit = params and params.edit or {}
  for uri in pairs(edit.changes or {}) do
    table.insert(bufs, vim.uri_to_bufnr(uri))
  end
  for _, change in ipairs(edit.documentChanges or {}) do
    if change.textDocument and change.textDocument.uri then
      table.insert(bufs, vim.uri_to_bufnr(change.textDocument.uri))
    end
  end
  for _, b in ipairs(bufs) do
    undo_break(b)
  end
  local answer = vim.lsp.handlers['workspace/applyEdit'](err, params, ctx)
  for _, b in ipairs(bufs) do
    undo_break(b)
  end
  local st = M.state[ctx.client_id]
  local names = vim.tbl_map(function(b)
    return vim.fn.fnamemodify(vim.api.nvim_buf_get_name(b), ':~:.')
  end, bufs)
  log.add(
    answer and answer.applied and 'info' or 'warn',
    st and st.root or 'ctxfs',
    (answer and answer.applied and 'edit applied to ' or 'edit refused for ')
      .. table.concat(names, ', ')
      .. (answer and answer.failureReason and (': ' .. tostring(answer.failureReason)) or '')
  )
  return answer
end

--- The vim.lsp config of ctxfs (what lsp/ctxfs.lua returns). Its functions read the current
--- options, so setup{} may come before or after vim.lsp.enable('ctxfs').
---@return vim.lsp.Config
function M.lsp_config()
  local approval = require('ctxfs.approval')
  return {
    cmd = function(dispatchers, cfg)
      return vim.lsp.rpc.start(config.cmd(), dispatchers, { cwd = cfg and type(cfg.root_dir) == 'string' and cfg.root_dir or nil })
    end,
    -- No filetypes: every file buffer in a project is the agent's to read.
    root_dir = function(bufnr, on_dir)
      local root = config.root_for(bufnr, M.folders())
      if not root then
        return
      end
      if not config.executable() then
        return warn_missing_binary()
      end
      on_dir(root)
    end,
    workspace_required = true,
    before_init = function(params, cfg)
      params.initializationOptions = config.init_options(cfg.root_dir, nil, cfg.init_options)
    end,
    on_init = on_init,
    on_exit = on_exit,
    handlers = {
      ['window/showMessageRequest'] = approval.show_message_request,
      ['ctxfs/approvalRequest'] = approval.on_approval_request,
      ['workspace/applyEdit'] = on_apply_edit,
      ['window/logMessage'] = on_log_message,
      ['window/showMessage'] = on_show_message,
    },
  }
end

--- The config used to start a client: vim.lsp.config's (with the user's overrides) when
--- lsp/ctxfs.lua is on the runtimepath, else ours.
local function resolved_config()
  local ok, cfg = pcall(function()
    return vim.lsp.config.ctxfs
  end)
  if ok and type(cfg) == 'table' and cfg.cmd then
    return vim.deepcopy(cfg)
  end
  local own = M.lsp_config()
  own.name = 'ctxfs'
  return own
end

--- A running ctxfs client on `root`.
---@param root string
---@return vim.lsp.Client?
function M.client_on(root)
  for _, st in pairs(M.state) do
    if st.root == root and not st.client:is_stopped() and not st.stopping then
      return st.client
    end
  end
end

--- Starts (or reuses) the server for a buffer's project and attaches the buffer.
---@param bufnr integer
---@return integer? client_id
---@return string? why not
function M.start(bufnr)
  local root, why = config.root_for(bufnr, M.folders())
  if not root then
    return nil, why
  end
  if not config.executable() then
    return nil, M.missing_binary()
  end
  local cfg = resolved_config()
  cfg.name = 'ctxfs'
  cfg.root_dir = root
  local id = vim.lsp.start(cfg, { bufnr = bufnr, silent = true })
  if not id then
    return nil, 'the server could not be started for ' .. root .. ' (see :Ctxfs log and :checkhealth ctxfs)'
  end
  M.state[id] = M.state[id] or { waiting = {}, root = root, client = vim.lsp.get_client_by_id(id) }
  return id
end

local function alive(client)
  return client and not client:is_stopped()
end

--- The ctxfs client serving a buffer, without starting one.
---@param bufnr integer
---@return vim.lsp.Client?
---@return string? why there is none
function M.find(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local own = vim.b[bufnr].ctxfs_client
  if own then
    local c = vim.lsp.get_client_by_id(own)
    if alive(c) then
      return c
    end
    return nil, 'the server this buffer came from has stopped (:Ctxfs restart)'
  end
  local attached = vim.lsp.get_clients({ bufnr = bufnr, name = 'ctxfs' })
  if attached[1] and alive(attached[1]) then
    return attached[1]
  end
  local root, why = config.root_for(bufnr, M.folders())
  if root then
    local c = M.client_on(root)
    if c then
      return c
    end
    return nil, 'no server for ' .. root .. ' yet'
  end
  -- A buffer outside every project (a chat buffer, say): the only server, or the one on the cwd.
  local running = {}
  for _, st in pairs(M.state) do
    if alive(st.client) and st.ready then
      table.insert(running, st)
    end
  end
  if #running == 1 then
    return running[1].client
  end
  local cwd = vim.fs.normalize(vim.fn.getcwd())
  for _, st in ipairs(running) do
    if cwd == st.root or cwd:sub(1, #st.root + 1) == st.root .. '/' then
      return st.client
    end
  end
  return nil, why
end

--- Calls back with a ready client for a buffer, starting the server when the buffer has a root.
---@param bufnr integer?
---@param cb fun(err: string?, client: vim.lsp.Client?)
function M.with_client(bufnr, cb)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local client, why = M.find(bufnr)
  if not client then
    local root = config.root_for(bufnr, M.folders())
    if not root then
      return cb('no ctxfs here: ' .. (why or 'no project root'))
    end
    local id, err = M.start(bufnr)
    if not id then
      return cb(err)
    end
    client = vim.lsp.get_client_by_id(id)
    if not client then
      return cb('the server stopped as it started (see :Ctxfs log)')
    end
  end
  local st = M.state[client.id]
  if not st then
    st = { waiting = {}, client = client, root = client.root_dir or '?' }
    M.state[client.id] = st
  end
  if st.refused then
    return cb(st.refused)
  end
  if st.ready then
    return cb(nil, client)
  end
  table.insert(st.waiting, cb)
end

local function error_text(method, err)
  local msg = type(err) == 'table' and (err.message or vim.inspect(err)) or tostring(err)
  return string.format('%s failed: %s', method, msg)
end

--- Sends a request; the callback gets (error text, result, the JSON-RPC error with its `code`).
---@param client vim.lsp.Client
---@param method string
---@param params table?
---@param cb fun(err: string?, result: any, rpc_err: table?)
function M.request(client, method, params, cb)
  if client:is_stopped() then
    return cb('ctxfs has stopped (:Ctxfs restart starts it again)')
  end
  local ok = client:request(method, params, function(err, result)
    if err then
      cb(error_text(method, err), nil, type(err) == 'table' and err or nil)
    else
      cb(nil, result)
    end
  end)
  if not ok then
    cb('ctxfs has stopped (:Ctxfs restart starts it again)')
  end
end

--- Opens (or resumes, after a restart) the client's session.
---@param client vim.lsp.Client
---@param cb fun(err: string?, session: string?, st: ctxfs.ClientState?)
function M.session(client, cb)
  local st = M.state[client.id]
  if not st then
    return cb('ctxfs is not running here')
  end
  if st.session then
    return cb(nil, st.session, st)
  end
  if st.opening then
    table.insert(st.opening, function(err, session)
      cb(err, session, st)
    end)
    return
  end
  st.opening = {
    function(err, session)
      cb(err, session, st)
    end,
  }
  local resume = M.session_by_root[st.root]
  local function params(with_resume)
    local p = { resume = with_resume, clientName = config.options.client_name }
    return next(p) and p or vim.empty_dict()
  end
  local function done(err, result)
    local waiting = st.opening or {}
    st.opening = nil
    if err then
      return fire(waiting, err, nil)
    end
    st.session = result.session
    st.chain = result.chain
    st.instructions = result.instructions
    M.session_by_root[st.root] = result.session
    log.add('info', st.root, (result.resumed and 'resumed session ' or 'opened session ') .. result.session)
    local mode = M.mode_by_root[st.root]
    if result.resumed and mode then
      M.request(client, 'ctxfs/setMode', { session = result.session, mode = mode }, function(e)
        if e then
          log.add('warn', st.root, 'the mode could not be put back: ' .. e)
        end
      end)
    end
    if result.resumed then
      notify('session ' .. result.session .. ' resumed for ' .. vim.fn.fnamemodify(st.root, ':~'))
    end
    fire(waiting, nil, result.session)
  end
  M.request(client, 'ctxfs/openSession', params(resume), function(err, result)
    if err and resume then
      -- The session may be gone (another data directory, say): a new one, and say so.
      return M.request(client, 'ctxfs/openSession', params(nil), function(err2, result2)
        if not err2 then
          log.add('warn', st.root, 'session ' .. resume .. ' could not be resumed: ' .. err)
          notify('session ' .. resume .. ' could not be resumed (' .. err .. '); a new one is open', vim.log.levels.WARN)
        end
        done(err2, result2)
      end)
    end
    done(err, result)
  end)
end

--- Calls back with a ready client and its session for a buffer.
---@param bufnr integer?
---@param cb fun(err: string?, client: vim.lsp.Client?, session: string?, st: ctxfs.ClientState?)
function M.with_session(bufnr, cb)
  M.with_client(bufnr, function(err, client)
    if err or not client then
      return cb(err or 'no ctxfs client')
    end
    M.session(client, function(e, session, st)
      if e then
        return cb(e)
      end
      cb(nil, client, session, st)
    end)
  end)
end

--- Stops a client on purpose (no restart is offered).
---@param client vim.lsp.Client
function M.stop(client)
  local st = M.state[client.id]
  if st then
    st.stopping = true
  end
  client:stop()
end

--- Starts the server for `root` again, for each loaded buffer in it; the session resumes.
---@param root string
---@return integer? client_id
---@return string? why not
restart_root = function(root)
  local old = M.client_on(root)
  if old then
    M.stop(old)
  end
  local first, why
  local function go()
    for _, b in ipairs(vim.api.nvim_list_bufs()) do
      if vim.api.nvim_buf_is_loaded(b) and vim.bo[b].buftype == '' then
        local r = config.root_for(b, { root })
        if r == root then
          local id, err = M.start(b)
          first = first or id
          why = why or err
        end
      end
    end
    if not first then
      why = why or ('no open buffer in ' .. root .. ' to attach it to')
      notify('could not restart: ' .. why, vim.log.levels.ERROR)
    end
  end
  if old then
    -- The old process exits first, so its session is written before the new one resumes it.
    vim.wait(3000, function()
      return old:is_stopped()
    end, 20)
  end
  go()
  return first, why
end
M.restart_root = restart_root

--- Restarts the server of a buffer's project.
---@param bufnr integer?
---@return integer? client_id
---@return string? why not
function M.restart(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local client = M.find(bufnr)
  local root = client and M.state[client.id] and M.state[client.id].root
  if not root then
    local why
    root, why = config.root_for(bufnr, M.folders())
    if not root then
      -- The last server that stopped, when this buffer has no project of its own.
      local roots = vim.tbl_keys(M.session_by_root)
      if #roots == 1 then
        root = roots[1]
      else
        return nil, why
      end
    end
  end
  return restart_root(root)
end

return M
