-- ctxfs for Neovim: the plugin's own event log, a ring of recent lines shown by `:Ctxfs log`.
-- It keeps what the servers said (window/logMessage, window/showMessage) and what the plugin
-- did (starts, exits, restarts, refusals); it is not Neovim's LSP log (vim.lsp.log), which it
-- only points to.
local M = {}

--- How many lines are kept.
M.limit = 1000

---@class ctxfs.LogEntry
---@field time string
---@field level string
---@field source string
---@field text string

---@type ctxfs.LogEntry[]
M.entries = {}

local listeners = {}

local names = { [1] = 'error', [2] = 'warn', [3] = 'info', [4] = 'log', [5] = 'debug' }

--- The level name of an LSP MessageType.
---@param kind integer?
---@return string
function M.level_of(kind)
  return names[kind or 4] or 'log'
end

--- Adds one entry (several when `text` has several lines).
---@param level string error|warn|info|log|debug
---@param source string who said it: the root of a server, or 'plugin'
---@param text string
function M.add(level, source, text)
  local time = os.date('%H:%M:%S')
  for _, line in ipairs(vim.split(tostring(text), '\n', { plain = true })) do
    table.insert(M.entries, { time = time, level = level, source = source, text = line })
  end
  while #M.entries > M.limit do
    table.remove(M.entries, 1)
  end
  for _, listener in ipairs(listeners) do
    pcall(listener)
  end
end

--- Calls `fn` after every addition (the log buffer refreshes itself with it).
---@param fn fun()
function M.on_change(fn)
  table.insert(listeners, fn)
end

--- The entries as display lines.
---@return string[]
function M.lines()
  local out = {}
  for _, e in ipairs(M.entries) do
    table.insert(out, string.format('%s  %-5s  %s  %s', e.time, e.level, e.source, e.text))
  end
  return out
end

return M
