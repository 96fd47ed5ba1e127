-- ctxfs for Neovim: the `:Ctxfs` command — its subcommands, their completion, and a guard
-- that turns any unexpected Lua error into one message (details go to `:Ctxfs log`).
local M = {}

local function notify(msg, level)
  vim.notify('ctxfs: ' .. msg, level or vim.log.levels.INFO)
end

local function views()
  return require('ctxfs.views')
end

local function status_line()
  local st = require('ctxfs').status(0)
  if not st then
    local _, why = require('ctxfs.client').find(0)
    return 'not running for this buffer' .. (why and (': ' .. why) or '')
  end
  return string.format(
    'ctxfs %s (protocol %s) on %s · session %s · mode %s',
    st.version or '?',
    st.protocol or '?',
    vim.fn.fnamemodify(st.root, ':~'),
    st.session or '(not opened yet)',
    st.mode or '?'
  )
end

---@type table<string, {run: fun(args: string[]), complete?: fun(): string[], help: string}>
M.subcommands = {
  results = { run = function() views().results() end, help = 'the session’s results by id; <CR> opens one' },
  recall = {
    run = function(args)
      if args[1] then
        views().recall(args[1])
      else
        views().recall_under_cursor()
      end
    end,
    help = 'open a stored result: :Ctxfs recall #000c (default: the id under the cursor)',
  },
  changes = { run = function() views().changes() end, help = 'the session’s changes; <CR> shows a diff' },
  instructions = { run = function() views().instructions() end, help = 'the instruction chain, in order' },
  mode = {
    run = function(args)
      views().mode(args[1])
    end,
    complete = function()
      return require('ctxfs.config').modes
    end,
    help = 'set the session’s mode (read-only, ask, accept-edits, trust)',
  },
  grants = {
    run = function(args)
      if args[1] == 'revoke' then
        if not args[2] then
          return notify('which grant? :Ctxfs grants revoke TARGET (or * for all)', vim.log.levels.ERROR)
        end
        views().revoke(args[2])
      elseif args[1] then
        notify('unknown grants action ' .. args[1] .. ' (use revoke)', vim.log.levels.ERROR)
      else
        views().grants()
      end
    end,
    complete = function()
      return { 'revoke' }
    end,
    help = 'list grants (x revokes); :Ctxfs grants revoke TARGET',
  },
  log = { run = function() views().log() end, help = 'what the servers said and the plugin did' },
  restart = {
    run = function()
      local id, why = require('ctxfs.client').restart(0)
      if id then
        notify('restarted; the session resumes at the next use')
      elseif why then
        notify('could not restart: ' .. why, vim.log.levels.ERROR)
      end
    end,
    help = 'start the server again (the session resumes)',
  },
  status = { run = function() notify(status_line()) end, help = 'the server, session and mode of this buffer' },
}

--- Runs `:Ctxfs {args}`.
---@param line string
function M.run(line)
  local args = vim.split(vim.trim(line or ''), '%s+', { trimempty = true })
  local name = table.remove(args, 1)
  if not name then
    local names = vim.tbl_keys(M.subcommands)
    table.sort(names)
    return notify(status_line() .. '\nsubcommands: ' .. table.concat(names, ', '))
  end
  local sub = M.subcommands[name]
  if not sub then
    local names = vim.tbl_keys(M.subcommands)
    table.sort(names)
    return notify(string.format('unknown subcommand %q; try %s', name, table.concat(names, ', ')), vim.log.levels.ERROR)
  end
  local ok, e = xpcall(sub.run, debug.traceback, args)
  if not ok then
    require('ctxfs.log').add('error', 'plugin', ':Ctxfs ' .. line .. ' failed: ' .. tostring(e))
    notify(':Ctxfs ' .. name .. ' failed: ' .. tostring(e):match('^[^\n]*') .. ' (details in :Ctxfs log)', vim.log.levels.ERROR)
  end
end

--- Completion for `:Ctxfs`.
function M.complete(arglead, cmdline)
  local words = vim.split(cmdline, '%s+', { trimempty = false })
  if #words <= 2 then
    local names = vim.tbl_keys(M.subcommands)
    table.sort(names)
    return vim.tbl_filter(function(n)
      return n:find(arglead, 1, true) == 1
    end, names)
  end
  local sub = M.subcommands[words[2]]
  if sub and sub.complete and #words == 3 then
    return vim.tbl_filter(function(n)
      return n:find(arglead, 1, true) == 1
    end, sub.complete())
  end
  return {}
end

return M
