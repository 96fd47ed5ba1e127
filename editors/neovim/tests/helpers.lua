-- ctxfs for Neovim, tests: a small harness for the headless test files (run by tests/run.py).
-- Assertions, waiting, project folders, a record of vim.notify, and an end that stops every
-- ctxfs server and checks that each exited before Neovim quits. It is not part of the plugin.
local H = {}

H.tmp = assert(vim.env.CTXFS_TEST_TMP, 'run through tests/run.py')
H.bin = assert(vim.env.CTXFS_BIN, 'CTXFS_BIN')
H.plugin = assert(vim.env.CTXFS_PLUGIN, 'CTXFS_PLUGIN')

--- Prints a line of the test's output at once.
function H.say(line)
  io.stdout:write(line .. '\n')
  io.stdout:flush()
end

H.failures = 0
H.passed = 0
H.messages = {}

-- Every message the plugin shows is kept (and echoed to the test's output).
local real_notify = vim.notify
vim.notify = function(msg, level)
  table.insert(H.messages, { msg = tostring(msg), level = level or vim.log.levels.INFO })
  H.say(string.format('    [notify %s] %s', level or 2, tostring(msg)))
end
H.real_notify = real_notify

--- Forgets the kept messages.
function H.clear_messages()
  H.messages = {}
end

--- The kept messages matching a Lua pattern.
function H.messages_matching(pattern)
  local out = {}
  for _, m in ipairs(H.messages) do
    if m.msg:find(pattern) then
      table.insert(out, m)
    end
  end
  return out
end

local function fail(msg, level)
  error(msg, (level or 1) + 1)
end

function H.ok(cond, msg)
  if not cond then
    fail('expected: ' .. (msg or 'a true value'), 2)
  end
  return cond
end

function H.eq(want, got, msg)
  if not vim.deep_equal(want, got) then
    fail(string.format('%s\n      want: %s\n      got:  %s', msg or 'values differ', vim.inspect(want), vim.inspect(got)), 2)
  end
end

--- Whether `text` contains `part` (plain text, not a pattern).
function H.has(text, part, msg)
  if type(text) ~= 'string' or not text:find(part, 1, true) then
    fail(string.format('%s\n      want: %s\n      in:   %s', msg or 'not found', part, vim.inspect(text)), 2)
  end
end

function H.match(text, pattern, msg)
  if type(text) ~= 'string' or not text:find(pattern) then
    fail(string.format('%s\n      pattern: %s\n      text: %s', msg or 'no match', pattern, vim.inspect(text)), 2)
  end
end

function H.no_match(text, pattern, msg)
  if type(text) == 'string' and text:find(pattern) then
    fail(string.format('%s\n      pattern: %s\n      text: %s', msg or 'unexpected match', pattern, vim.inspect(text)), 2)
  end
end

--- Waits for `cond()` (a safety net, not a measurement); fails with `what` when it never holds.
function H.wait(cond, what, timeout)
  local ok = vim.wait(timeout or 20000, function()
    local good, v = pcall(cond)
    return good and v
  end, 20)
  if not ok then
    fail('timed out waiting for ' .. (what or 'a condition'), 2)
  end
end

--- Calls an async function `fn(..., cb)` and waits for its callback; returns the callback's arguments.
function H.await(fn, ...)
  local args = { ... }
  local done, res = false, nil
  table.insert(args, function(...)
    done, res = true, { n = select('#', ...), ... }
  end)
  fn(unpack(args))
  H.wait(function()
    return done
  end, 'a callback', 30000)
  return unpack(res, 1, res.n)
end

--- Writes files under a new project folder (with .git, so it is a root) and returns its path.
---@param name string
---@param files table<string, string>
function H.project(name, files)
  local root = vim.fs.normalize(H.tmp .. '/' .. name)
  vim.fn.mkdir(root .. '/.git', 'p')
  for path, text in pairs(files or {}) do
    local full = root .. '/' .. path
    vim.fn.mkdir(vim.fs.dirname(full), 'p')
    local f = assert(io.open(full, 'w'))
    f:write(text)
    f:close()
  end
  return vim.uv.fs_realpath(root)
end

function H.read(path)
  local f = io.open(path, 'r')
  if not f then
    return nil
  end
  local text = f:read('*a')
  f:close()
  return text
end

function H.lines(buf)
  assert(buf, 'no buffer (a view that is not shown?)')
  return vim.api.nvim_buf_get_lines(buf, 0, -1, false)
end

function H.text(buf)
  return table.concat(H.lines(buf), '\n')
end

--- The ready ctxfs client of a buffer (waits for it).
function H.client(buf)
  buf = buf or vim.api.nvim_get_current_buf()
  local c
  H.wait(function()
    c = vim.lsp.get_clients({ bufnr = buf, name = 'ctxfs' })[1]
    local st = c and require('ctxfs.client').state[c.id]
    return st and st.ready
  end, 'a ready ctxfs client on buffer ' .. buf)
  return c
end

--- Opens a file and waits for ctxfs to attach.
function H.edit(path)
  vim.cmd.edit(vim.fn.fnameescape(path))
  local buf = vim.api.nvim_get_current_buf()
  return buf, H.client(buf)
end

--- ctxfs.call, waited for.
function H.call(tool, args, bufnr)
  local err, result = H.await(function(cb)
    require('ctxfs').call(tool, args, cb, { bufnr = bufnr })
  end)
  H.ok(err == nil, 'call ' .. tool .. ' ran: ' .. tostring(err))
  return result
end

--- Replaces vim.ui.select for the length of `fn`: `chooser(items, opts)` returns the item to pick.
function H.with_select(chooser, fn)
  local real = vim.ui.select
  local seen = {}
  vim.ui.select = function(items, opts, on_choice)
    table.insert(seen, { items = items, opts = opts })
    local pick = chooser(items, opts)
    local idx
    for i, it in ipairs(items) do
      if it == pick then
        idx = i
      end
    end
    on_choice(pick, idx)
  end
  local ok, e = pcall(fn, seen)
  vim.ui.select = real
  if not ok then
    error(e, 0)
  end
  return seen
end

--- The windows showing a buffer whose b:ctxfs_view is `kind` (or any floating window with `w:var`).
function H.view_buf(kind)
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_valid(b) and vim.b[b].ctxfs_view == kind and #vim.fn.win_findbuf(b) > 0 then
      return b
    end
  end
end

--- Extmark highlight groups on a buffer: list of {row, col, end_col, group}.
function H.marks(buf)
  local ns = require('ctxfs.highlight').ns
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do
    table.insert(out, { m[2], m[3], m[4].end_col, m[4].hl_group })
  end
  return out
end

--- Runs one named test; a failure is reported and counted, and the file goes on.
function H.test(name, fn)
  H.say('  - ' .. name)
  local ok, e = xpcall(fn, debug.traceback)
  if vim.env.CTXFS_TEST_DEBUG then
    H.say('    clients: ' .. vim.inspect(vim.tbl_map(function(c)
      return { c.id, c.root_dir, c.initialized, c:is_stopped(), vim.tbl_keys(c.attached_buffers) }
    end, vim.lsp.get_clients())))
  end
  if ok then
    H.passed = H.passed + 1
    H.say('    ok   ' .. name)
  else
    H.failures = H.failures + 1
    H.say('    FAIL ' .. name .. '\n      ' .. tostring(e):gsub('\n', '\n      '))
  end
end

--- The pids of processes whose command line runs the ctxfs binary under test.
function H.server_pids()
  local pids = {}
  for _, name in ipairs(vim.fn.readdir('/proc')) do
    if name:match('^%d+$') then
      local f = io.open('/proc/' .. name .. '/cmdline', 'rb')
      if f then
        local cmd = f:read('*a') or ''
        f:close()
        local stat = H.read('/proc/' .. name .. '/stat') or ''
        local state = stat:match('%) (%a)')
        if cmd:find(H.bin, 1, true) == 1 and cmd:find('\0lsp', 1, true) and state ~= 'Z' then
          local ppid = tonumber(stat:match('%) %a (%d+)'))
          if ppid == vim.fn.getpid() then
            table.insert(pids, tonumber(name))
          end
        end
      end
    end
  end
  return pids
end

--- Stops every LSP client and checks every server it started has exited.
function H.stop_all()
  -- Starts already scheduled (by a setup() that re-enabled the config) may still come: stop
  -- those too, until nothing runs.
  local ok = vim.wait(20000, function()
    for _, c in ipairs(vim.lsp.get_clients()) do
      if not c._is_stopping then
        require('ctxfs.client').stop(c)
      end
    end
    return #vim.lsp.get_clients() == 0 and #H.server_pids() == 0
  end, 20)
  if not ok then
    fail(string.format('servers still running: clients %s, processes %s', vim.inspect(vim.tbl_map(function(c)
      return { c.id, c.name, c:is_stopped() }
    end, vim.lsp.get_clients())), vim.inspect(H.server_pids())), 2)
  end
end

--- Ends the file: stops the servers (a failure when one does not exit) and quits with a status.
function H.finish()
  local ok, e = pcall(H.stop_all)
  if not ok then
    H.failures = H.failures + 1
    H.say('    FAIL servers did not all exit: ' .. tostring(e))
  end
  H.say(string.format('  %d passed, %d failed', H.passed, H.failures))
  io.stdout:flush()
  os.exit(H.failures == 0 and 0 or 1)
end

--- The plugin set up the way a user would, with the binary under test.
function H.setup(opts)
  opts = vim.tbl_extend('force', { binary = H.bin, restart = 'never' }, opts or {})
  require('ctxfs').setup(opts)
end

return H
