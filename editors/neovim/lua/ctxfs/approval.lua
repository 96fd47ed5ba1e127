-- ctxfs for Neovim: approvals. ctxfs first sends `ctxfs/approvalRequest` (the change as data),
-- then asks with `window/showMessageRequest`; this module shows the change's diff in a float
-- beside the choice, asks through vim.ui.select (so picker plugins apply), answers the prompt
-- and closes the float. Prompts that are not ctxfs approvals go to Neovim's own handler.
local config = require('ctxfs.config')
local log = require('ctxfs.log')

local M = {}

--- Approval requests announced and not yet asked, per client.
---@type table<integer, table[]>
M.pending = {}

--- The float of the approval being asked, if any (tests and users can look at it).
---@type integer?
M.float_win = nil

--- `ctxfs/approvalRequest` notification.
function M.on_approval_request(_, params, ctx)
  if type(params) ~= 'table' then
    return
  end
  local list = M.pending[ctx.client_id] or {}
  table.insert(list, params)
  -- Only the last few matter: a prompt follows its notification at once.
  while #list > 8 do
    table.remove(list, 1)
  end
  M.pending[ctx.client_id] = list
end

local function take(client_id, message)
  local list = M.pending[client_id]
  if not list or #list == 0 then
    return nil
  end
  for i, req in ipairs(list) do
    if req.message == message then
      return table.remove(list, i)
    end
  end
  return nil
end

--- The diff text shown for a request: the server's summary, else one built from the texts.
---@param req table
---@return string[]
function M.diff_lines(req)
  local text = req.summary or ''
  if text == '' and type(req.files) == 'table' then
    local parts = {}
    for _, f in ipairs(req.files) do
      local before = type(f.before) == 'string' and f.before or ''
      local after = type(f.after) == 'string' and f.after or ''
      local d = vim.diff(before, after, { result_type = 'unified', ctxlen = 3 })
      if type(d) == 'string' and d ~= '' then
        table.insert(parts, '--- a/' .. f.path .. '\n+++ b/' .. f.path .. '\n' .. d)
      end
    end
    text = table.concat(parts, '')
  end
  if text == '' then
    text = req.description or ''
  end
  return vim.split((text:gsub('\n$', '')), '\n', { plain = true })
end

--- Opens the float with a request's diff at the top right, not focused.
---@param req table
---@return integer? win
function M.open_float(req)
  local lines = M.diff_lines(req)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].filetype = 'diff'
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = 'wipe'
  local columns, rows = vim.o.columns, vim.o.lines - vim.o.cmdheight
  local widest = 20
  for _, l in ipairs(lines) do
    widest = math.max(widest, vim.fn.strdisplaywidth(l))
  end
  local title = ' ctxfs: ' .. (req.description or req.tool or 'change') .. ' '
  widest = math.max(widest, vim.fn.strdisplaywidth(title) + 1)
  local width = math.max(20, math.min(widest + 1, math.floor(columns * 0.6)))
  local height = math.max(1, math.min(#lines, math.floor(rows * 0.6)))
  local footer = nil
  if type(req.notes) == 'table' and #req.notes > 0 then
    footer = ' ' .. table.concat(req.notes, ' · ') .. ' '
  end
  local ok, win = pcall(vim.api.nvim_open_win, buf, false, {
    relative = 'editor',
    row = 1,
    col = math.max(0, columns - width - 2),
    width = width,
    height = height,
    style = 'minimal',
    border = 'rounded',
    title = title,
    title_pos = 'left',
    footer = footer,
    footer_pos = footer and 'left' or nil,
    focusable = false,
    zindex = 45,
    noautocmd = true,
  })
  if not ok then
    log.add('warn', 'plugin', 'the approval float could not be opened: ' .. tostring(win))
    pcall(vim.api.nvim_buf_delete, buf, { force = true })
    return nil
  end
  vim.w[win].ctxfs_approval = true
  vim.wo[win].wrap = false
  require('ctxfs.highlight').apply(buf)
  return win
end

local function close(win)
  if win and vim.api.nvim_win_is_valid(win) then
    pcall(vim.api.nvim_win_close, win, true)
  end
  if M.float_win == win then
    M.float_win = nil
  end
end

--- `window/showMessageRequest`: a ctxfs approval is asked with its diff beside it.
--- Runs in the coroutine Neovim gives server requests; it yields until the user has chosen.
function M.show_message_request(err, params, ctx)
  local req = params and take(ctx.client_id, params.message)
  local co, is_main = coroutine.running()
  if not req or not co or is_main then
    return vim.lsp.handlers['window/showMessageRequest'](err, params, ctx)
  end
  local win = config.options.approval_float and M.open_float(req) or nil
  M.float_win = win
  pcall(vim.cmd.redraw)
  local prompt = 'ctxfs: ' .. (req.description or 'a change') .. '?'
  local ok, e = pcall(vim.ui.select, params.actions or {}, {
    prompt = prompt,
    kind = 'ctxfs_approval',
    format_item = function(action)
      return action.title
    end,
  }, function(choice)
    close(win)
    vim.schedule(function()
      coroutine.resume(co, choice)
    end)
  end)
  if not ok then
    close(win)
    log.add('error', 'plugin', 'the approval prompt failed: ' .. tostring(e))
    return vim.NIL
  end
  local choice = coroutine.yield()
  log.add(
    'info',
    'plugin',
    string.format('approval for %s: %s', req.description or '?', choice and choice.title or 'closed without an answer')
  )
  return choice or vim.NIL
end

return M
