-- ctxfs for Neovim: the buffers behind `:Ctxfs` — results (with recall of any id), changes
-- (diff float, side-by-side diff), the instruction chain, grants, the log — and the mode
-- picker. Every view is a scratch buffer tied to the client it came from; none of them
-- writes a file. Errors become one-line messages, never Lua errors.
local client_mod = require('ctxfs.client')
local config = require('ctxfs.config')
local hl = require('ctxfs.highlight')
local log = require('ctxfs.log')

local M = {}

local notify = client_mod.notify

--- What each line of a view stands for, per buffer: row (1-based) → item.
---@type table<integer, table<integer, table>>
M.items = {}

local function err(msg)
  notify(msg, vim.log.levels.ERROR)
end

local function human_size(n)
  n = tonumber(n) or 0
  if n < 1024 then
    return string.format('%d B', n)
  elseif n < 1024 * 1024 then
    return string.format('%.1f KiB', n / 1024)
  end
  return string.format('%.1f MiB', n / 1024 / 1024)
end

local function shown_path(path, root)
  if type(path) ~= 'string' then
    return ''
  end
  if root and path:sub(1, #root + 1) == root .. '/' then
    return path:sub(#root + 2)
  end
  return vim.fn.fnamemodify(path, ':~')
end

local function is_view(buf)
  return vim.api.nvim_buf_is_valid(buf) and vim.b[buf].ctxfs_view ~= nil
end

--- View buffers by name, so a view opened twice reuses its buffer.
---@type table<string, integer>
local by_name = {}

--- A scratch buffer by name (reused when it exists), filled with `lines`.
---@param name string
---@param lines string[]
---@param client vim.lsp.Client?
---@param kind string what view it is (results, recall, changes, …)
---@return integer buf
local function scratch(name, lines, client, kind)
  local buf = by_name[name]
  if not (buf and vim.api.nvim_buf_is_valid(buf)) then
    buf = vim.api.nvim_create_buf(false, true)
    pcall(vim.api.nvim_buf_set_name, buf, name)
    by_name[name] = buf
  end
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'hide'
  vim.bo[buf].swapfile = false
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  if vim.bo[buf].filetype ~= 'ctxfs' and kind ~= 'side' then
    vim.bo[buf].filetype = 'ctxfs'
  end
  if client then
    vim.b[buf].ctxfs_client = client.id
  end
  vim.b[buf].ctxfs_view = kind
  return buf
end

--- Shows a buffer: in the current window when it shows a view already, else in a split.
---@param buf integer
local function show(buf)
  local cur = vim.api.nvim_get_current_buf()
  if cur ~= buf and not is_view(cur) then
    vim.cmd('split')
  end
  vim.api.nvim_win_set_buf(0, buf)
  vim.wo[0][0].wrap = false
end

local function map(buf, lhs, fn, desc)
  vim.keymap.set('n', lhs, function()
    local ok, e = xpcall(fn, debug.traceback)
    if not ok then
      log.add('error', 'plugin', e)
      err('internal error (' .. desc .. '): ' .. tostring(e):match('^[^\n]*') .. ' — details in :Ctxfs log')
    end
  end, { buffer = buf, nowait = true, silent = true, desc = 'ctxfs: ' .. desc })
end

local function common_maps(buf, refresh)
  map(buf, 'q', function()
    if #vim.api.nvim_list_wins() > 1 then
      vim.cmd('close')
    else
      vim.cmd('bprevious')
    end
  end, 'close')
  if refresh then
    map(buf, 'R', refresh, 'refresh')
  end
end

local function mark_header(buf, count)
  for row = 0, (count or 1) - 1 do
    local line = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ''
    hl.mark(buf, row, 0, #line, row == 0 and 'CtxfsHeader' or 'CtxfsDim', 110)
  end
end

-- The state of the client behind a view buffer, with its session.
local function session_of(bufnr, cb)
  client_mod.with_session(bufnr, function(e, client, session, st)
    if e then
      return err(e)
    end
    cb(client, session, st)
  end)
end

------------------------------------------------------------------------------------------------
-- Recall
------------------------------------------------------------------------------------------------

local RECALL_PAGE = 2000

--- JSON-RPC's "Method not found": a ctxfs older than ctxfs/resultText.
local METHOD_NOT_FOUND = -32601

--- The results the views' own recalls added to a session, so the results list can tell them
--- from the agent's: session → id → true. Only a ctxfs without ctxfs/resultText makes these
--- (ctxfs/recall records a result like any call); ctxfs/resultText records nothing.
---@type table<string, table<string, boolean>>
M.own = {}

--- The whole text of a stored result through ctxfs/recall, page by page (an older ctxfs):
--- cb(err, lines, is_error), the first line recall's own bracket.
local function recall_pages(client, session, id, cb)
  local pages = {}
  local function page(offset)
    client_mod.request(client, 'ctxfs/recall', { session = session, id = id, offset = offset, limit = RECALL_PAGE }, function(re, result)
      if re then
        return cb(re)
      end
      if result.id then
        M.own[session] = M.own[session] or {}
        M.own[session][result.id] = true
      end
      local text = result.text or ''
      local head, body = text:match('^([^\n]*)\n?(.*)$')
      if offset == 1 then
        table.insert(pages, head)
      end
      if body ~= '' then
        table.insert(pages, (body:gsub('\n$', '')))
      end
      local last, total = head:match('lines %d+%-(%d+) of (%d+)')
      last, total = tonumber(last), tonumber(total)
      if not result.isError and last and total and last < total and offset < 100 * RECALL_PAGE then
        return page(last + 1)
      end
      cb(nil, vim.split(table.concat(pages, '\n'), '\n', { plain = true }), result.isError)
    end)
  end
  page(1)
end

--- The whole text of a stored result for the user: ctxfs/resultText, which records nothing in
--- the session; ctxfs/recall only when ctxfs does not know that method. cb(err, lines, is_error).
local function stored_lines(client, session, id, cb)
  client_mod.request(client, 'ctxfs/resultText', { session = session, id = id }, function(re, result, rpc)
    if re then
      if rpc and rpc.code == METHOD_NOT_FOUND then
        log.add('info', 'plugin', 'ctxfs has no ctxfs/resultText: ' .. id .. ' is recalled (a new result in the session)')
        return recall_pages(client, session, id, cb)
      end
      return cb(re)
    end
    local body = (result.text or ''):gsub('\n$', '')
    local lines = { string.format('%s · the stored result, in full (viewing it records nothing)', result.id or id) }
    vim.list_extend(lines, vim.split(body, '\n', { plain = true }))
    cb(nil, lines, false)
  end)
end

--- Opens the stored result `id` (all of it) in a scratch buffer, without adding to the session.
---@param id string like #000c (or 000c)
---@param bufnr integer? the buffer whose session it is in
---@param cb fun(err: string?, buf: integer?)?
function M.recall(id, bufnr, cb)
  cb = cb or function() end
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  id = tostring(id or '')
  if not id:match('^#?%x%x%x%x+$') then
    local msg = string.format('%q is not a result id (ids look like #000c)', id)
    err(msg)
    return cb(msg)
  end
  if id:sub(1, 1) ~= '#' then
    id = '#' .. id
  end
  id = id:lower()
  client_mod.with_session(bufnr, function(e, client, session, st)
    if e then
      err(e)
      return cb(e)
    end
    stored_lines(client, session, id, function(re, lines, is_error)
      if re then
        err(re)
        return cb(re)
      end
      local name = string.format('ctxfs://%s/%s', vim.fn.fnamemodify(st.root, ':t'), id)
      local buf = scratch(name, lines, client, 'recall')
      hl.apply(buf)
      if is_error then
        hl.mark(buf, 0, 0, #lines[1], 'CtxfsError', 130)
      end
      M.follow_maps(buf)
      common_maps(buf)
      show(buf)
      cb(nil, buf)
    end)
  end)
end

--- `<CR>` and `gd` in a view: open the id under the cursor (or the line's own item).
---@param buf integer
---@param fallback fun(item: table?)?
function M.follow_maps(buf, fallback)
  local function follow()
    local line = vim.api.nvim_get_current_line()
    local col = vim.api.nvim_win_get_cursor(0)[2] + 1
    local id = hl.id_at(line, col)
    if id then
      return M.recall(id, buf)
    end
    local row = vim.api.nvim_win_get_cursor(0)[1]
    local item = M.items[buf] and M.items[buf][row]
    if fallback then
      return fallback(item)
    end
    if item and item.id then
      return M.recall(item.id, buf)
    end
    notify('no result id under the cursor', vim.log.levels.WARN)
  end
  map(buf, '<CR>', follow, 'open the result under the cursor')
  map(buf, 'gd', follow, 'open the result under the cursor')
end

--- Recall of the id under the cursor in any buffer (a chat buffer, say).
function M.recall_under_cursor()
  local line = vim.api.nvim_get_current_line()
  local col = vim.api.nvim_win_get_cursor(0)[2] + 1
  local id = hl.id_at(line, col)
  if not id then
    -- The nearest id on the line, when the cursor is not on one.
    local hits = hl.ids_in(line)
    id = hits[1] and hits[1][3]
  end
  if not id then
    return notify('no result id (like #000c) under the cursor', vim.log.levels.WARN)
  end
  M.recall(id, vim.api.nvim_get_current_buf())
end

------------------------------------------------------------------------------------------------
-- Results
------------------------------------------------------------------------------------------------

local function pad(s, n)
  s = tostring(s or '')
  local w = vim.fn.strdisplaywidth(s)
  return w >= n and s or (s .. string.rep(' ', n - w))
end

--- `:Ctxfs results`.
---@param bufnr integer?
---@param cb fun(err: string?, buf: integer?)?
function M.results(bufnr, cb)
  cb = cb or function() end
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  session_of(bufnr, function(client, session, st)
    client_mod.request(client, 'ctxfs/results', { session = session }, function(e, result)
      if e then
        err(e)
        return cb(e)
      end
      local entries = result and result.results or {}
      local rows = {}
      local w = { id = 5, tool = 4, path = 4, lines = 0, size = 0 }
      for _, r in ipairs(entries) do
        local row = {
          id = r.id or '?',
          tool = r.tool or '?',
          path = shown_path(r.path, st.root),
          lines = r.lines and (r.lines .. (r.lines == 1 and ' line' or ' lines')) or '',
          size = human_size(r.size),
          flags = table.concat(
            vim.tbl_filter(function(x)
              return x ~= ''
            end, {
              r.stub and 'stub' or '',
              r.capped and 'capped' or '',
              r.isError and 'error' or '',
              (M.own[session] or {})[r.id] and 'viewed' or '',
            }),
            ' '
          ),
          title = r.title or '',
          entry = r,
        }
        for k in pairs(w) do
          w[k] = math.max(w[k], vim.fn.strdisplaywidth(row[k]))
        end
        table.insert(rows, row)
      end
      local lines = {
        string.format(
          'ctxfs results · %s · session %s · %d result%s, newest first',
          vim.fn.fnamemodify(st.root, ':~'),
          session,
          #entries,
          #entries == 1 and '' or 's'
        ),
        '<CR>/gd: open the result (or the id) under the cursor · R: refresh · q: close'
          .. (next(M.own[session] or {}) and ' · viewed: your own recalls' or ''),
        '',
      }
      local items = {}
      for _, row in ipairs(rows) do
        table.insert(
          lines,
          table.concat({
            pad(row.id, w.id),
            pad(row.tool, w.tool),
            pad(row.path, w.path),
            string.rep(' ', w.lines - vim.fn.strdisplaywidth(row.lines)) .. row.lines,
            string.rep(' ', w.size - vim.fn.strdisplaywidth(row.size)) .. row.size,
            pad(row.flags, 12),
            row.title,
          }, '  ')
        )
        items[#lines] = row.entry
      end
      if #rows == 0 then
        table.insert(lines, '(no results yet: the agent has not called a tool in this session)')
      end
      local name = string.format('ctxfs://%s/results', vim.fn.fnamemodify(st.root, ':t'))
      local buf = scratch(name, lines, client, 'results')
      M.items[buf] = items
      vim.api.nvim_buf_clear_namespace(buf, hl.ns, 0, -1)
      mark_header(buf, 2)
      hl.apply(buf, 2)
      -- Column marks: tool, path, flags.
      local off_tool = w.id + 2
      local off_path = off_tool + w.tool + 2
      local off_flags = off_path + w.path + 2 + w.lines + 2 + w.size + 2
      for row, entry in pairs(items) do
        local r = row - 1
        hl.mark(buf, r, off_tool, off_tool + #(entry.tool or ''), 'CtxfsTool')
        local p = shown_path(entry.path, st.root)
        hl.mark(buf, r, off_path, off_path + #p, 'CtxfsPath')
        if (M.own[session] or {})[entry.id] then
          -- A recall this view made, not the agent: dimmed.
          hl.mark(buf, r, 0, #lines[row], 'CtxfsDim', 170)
        elseif entry.isError then
          hl.mark(buf, r, off_flags, off_flags + 12, 'CtxfsError', 160)
        elseif entry.capped then
          hl.mark(buf, r, off_flags, off_flags + 12, 'CtxfsCapped', 160)
        elseif entry.stub then
          hl.mark(buf, r, off_flags, off_flags + 12, 'CtxfsStub', 160)
        end
      end
      M.follow_maps(buf)
      common_maps(buf, function()
        M.results(buf)
      end)
      show(buf)
      cb(nil, buf)
    end)
  end)
end

------------------------------------------------------------------------------------------------
-- Changes
------------------------------------------------------------------------------------------------

local function diff_counts(diff)
  local plus, minus = 0, 0
  for line in (diff or ''):gmatch('[^\n]+') do
    if line:sub(1, 1) == '+' and line:sub(1, 3) ~= '+++' then
      plus = plus + 1
    elseif line:sub(1, 1) == '-' and line:sub(1, 3) ~= '---' then
      minus = minus + 1
    end
  end
  return plus, minus
end

--- The diff of one change in a focused float (filetype diff); `s` opens it side by side.
---@param entry table a ctxfs/changes entry
---@param buf integer the changes view (for the session)
---@return integer? win
function M.diff_float(entry, buf, root)
  local text = entry.diff or ''
  if text == '' then
    text = string.format('(%s %s: no text diff)', entry.kind or 'changed', entry.path or '')
  end
  local lines = vim.split((text:gsub('\n$', '')), '\n', { plain = true })
  local fbuf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(fbuf, 0, -1, false, lines)
  vim.bo[fbuf].filetype = 'diff'
  vim.bo[fbuf].modifiable = false
  vim.bo[fbuf].bufhidden = 'wipe'
  vim.b[fbuf].ctxfs_client = vim.b[buf].ctxfs_client
  local width = math.max(40, math.floor(vim.o.columns * 0.8))
  local height = math.max(3, math.min(#lines, math.floor((vim.o.lines - vim.o.cmdheight) * 0.7)))
  local win = vim.api.nvim_open_win(fbuf, true, {
    relative = 'editor',
    row = math.floor((vim.o.lines - height) / 2) - 1,
    col = math.floor((vim.o.columns - width) / 2),
    width = width,
    height = height,
    border = 'rounded',
    title = string.format(' %s %s %s ', entry.id or '', entry.kind or '', shown_path(entry.path, root)),
    title_pos = 'left',
    footer = ' s: side by side (:diffsplit before/after) · q: close ',
    footer_pos = 'left',
  })
  vim.w[win].ctxfs_diff = true
  local function close()
    if vim.api.nvim_win_is_valid(win) then
      vim.api.nvim_win_close(win, true)
    end
  end
  map(fbuf, 'q', close, 'close')
  map(fbuf, '<Esc>', close, 'close')
  map(fbuf, 's', function()
    close()
    M.diffsplit(entry, buf)
  end, 'side by side')
  return win
end

local function text_lines(text)
  if type(text) ~= 'string' then
    return {}
  end
  return vim.split((text:gsub('\n$', '')), '\n', { plain = true })
end

--- Before and after of one change side by side, in a new tab, in diff mode.
---@param entry table a ctxfs/changes entry
---@param buf integer the changes view
---@param cb fun(err: string?, bufs: integer[]?)?
function M.diffsplit(entry, buf, cb)
  cb = cb or function() end
  session_of(buf, function(client, session, st)
    local params = { session = session, id = entry.id, path = entry.path }
    client_mod.request(client, 'ctxfs/changeText', params, function(e, result)
      if e then
        err(e)
        return cb(e)
      end
      local path = result.path or entry.path or 'file'
      local rel = shown_path(path, st.root)
      local ft = vim.filetype.match({ filename = path }) or ''
      local function side(which, text)
        local name = string.format('ctxfs://%s/%s/%s/%s', vim.fn.fnamemodify(st.root, ':t'), entry.id, which, rel)
        if type(text) ~= 'string' then
          name = name .. ' (did not exist)'
        end
        local b = scratch(name, text_lines(text), client, 'side')
        vim.bo[b].filetype = ft
        return b
      end
      local before = side('before', result.before)
      local after = side('after', result.after)
      vim.cmd('tab split')
      vim.api.nvim_win_set_buf(0, before)
      vim.cmd('diffthis')
      vim.cmd('rightbelow vsplit')
      vim.api.nvim_win_set_buf(0, after)
      vim.cmd('diffthis')
      for _, b in ipairs({ before, after }) do
        common_maps(b)
      end
      cb(nil, { before, after })
    end)
  end)
end

--- `:Ctxfs changes`.
---@param bufnr integer?
---@param cb fun(err: string?, buf: integer?)?
function M.changes(bufnr, cb)
  cb = cb or function() end
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  session_of(bufnr, function(client, session, st)
    client_mod.request(client, 'ctxfs/changes', { session = session }, function(e, result)
      if e then
        err(e)
        return cb(e)
      end
      local entries = result and result.changes or {}
      local w = { id = 5, kind = 8, path = 4 }
      for _, c in ipairs(entries) do
        w.id = math.max(w.id, #(c.id or ''))
        w.kind = math.max(w.kind, #(c.kind or ''))
        w.path = math.max(w.path, vim.fn.strdisplaywidth(shown_path(c.path, st.root)))
      end
      local lines = {
        string.format(
          'ctxfs changes · %s · session %s · %d change%s, newest first',
          vim.fn.fnamemodify(st.root, ':~'),
          session,
          #entries,
          #entries == 1 and '' or 's'
        ),
        '<CR>: the diff in a float · D: side by side (:diffsplit) · R: refresh · q: close',
        '',
      }
      local items = {}
      for _, c in ipairs(entries) do
        local plus, minus = diff_counts(c.diff)
        local extra = string.format('+%d -%d', plus, minus)
        if c.from then
          extra = extra .. '  (from ' .. shown_path(c.from, st.root) .. ')'
        end
        table.insert(
          lines,
          table.concat({ pad(c.id, w.id), pad(c.kind, w.kind), pad(shown_path(c.path, st.root), w.path), extra }, '  ')
        )
        items[#lines] = c
      end
      if #entries == 0 then
        table.insert(lines, '(no changes in this session yet)')
      end
      local name = string.format('ctxfs://%s/changes', vim.fn.fnamemodify(st.root, ':t'))
      local buf = scratch(name, lines, client, 'changes')
      M.items[buf] = items
      vim.api.nvim_buf_clear_namespace(buf, hl.ns, 0, -1)
      mark_header(buf, 2)
      hl.apply(buf, 2)
      local off_kind = w.id + 2
      local off_path = off_kind + w.kind + 2
      for row, c in pairs(items) do
        hl.mark(buf, row - 1, off_kind, off_kind + #(c.kind or ''), 'CtxfsTool')
        hl.mark(buf, row - 1, off_path, off_path + #shown_path(c.path, st.root), 'CtxfsPath')
      end
      local function current()
        return M.items[buf][vim.api.nvim_win_get_cursor(0)[1]]
      end
      map(buf, '<CR>', function()
        local c = current()
        if not c then
          return notify('no change on this line', vim.log.levels.WARN)
        end
        M.diff_float(c, buf, st.root)
      end, 'diff of the change')
      map(buf, 'D', function()
        local c = current()
        if not c then
          return notify('no change on this line', vim.log.levels.WARN)
        end
        M.diffsplit(c, buf)
      end, 'side by side')
      map(buf, 'gd', function()
        local line = vim.api.nvim_get_current_line()
        local id = hl.id_at(line, vim.api.nvim_win_get_cursor(0)[2] + 1) or (current() or {}).id
        if id then
          M.recall(id, buf)
        end
      end, 'open the result')
      common_maps(buf, function()
        M.changes(buf)
      end)
      show(buf)
      cb(nil, buf)
    end)
  end)
end

------------------------------------------------------------------------------------------------
-- Instructions
------------------------------------------------------------------------------------------------

-- A chain entry's path derived by hand (from a ctxfs that sends no `file`): absolute paths as
-- they are, labels like "~/x/AGENTS.md (global)" without the label, relative ones from the root.
local function derived_file(path, root)
  local p = tostring(path or ''):gsub(' %(%a+%)$', '')
  p = vim.fn.expand(p)
  if p:sub(1, 1) ~= '/' and root then
    p = root .. '/' .. p
  end
  return p
end

-- A chain entry's file on disk: the absolute host path ctxfs gives in `file`, else derived.
local function chain_file(f, root)
  if type(f.file) == 'string' and f.file:sub(1, 1) == '/' then
    return f.file
  end
  return derived_file(f.path, root)
end

--- `:Ctxfs instructions`.
---@param bufnr integer?
---@param cb fun(err: string?, buf: integer?)?
function M.instructions(bufnr, cb)
  cb = cb or function() end
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  session_of(bufnr, function(client, session, st)
    -- Asking for the open session again answers its chain as it is now.
    client_mod.request(client, 'ctxfs/openSession', { resume = session }, function(e, result)
      if e then
        err(e)
        return cb(e)
      end
      local chain = result.chain or {}
      local files = chain.files or {}
      table.sort(files, function(a, b)
        return (a.order or 0) < (b.order or 0)
      end)
      local lines = {
        string.format(
          'ctxfs instructions · %s · %d file%s, in the order the model reads them',
          vim.fn.fnamemodify(st.root, ':~'),
          #files,
          #files == 1 and '' or 's'
        ),
        '<CR>: open the file under the cursor · R: refresh · q: close',
        '',
      }
      -- Paths as the results view shows them: relative to the root when inside it (the server
      -- may send them relative to the boundary or absolute); labels such as "… (global)" as they are.
      for _, f in ipairs(files) do
        local p = tostring(f.path or '?')
        f.shown = p:find(' %(%a+%)$') and p or shown_path(chain_file(f, st.root), st.root)
      end
      local items = {}
      for i, f in ipairs(files) do
        table.insert(lines, string.format('%d  %-10s  %s', i, f.origin or '?', f.shown))
        items[#lines] = f
      end
      if #files == 0 then
        table.insert(lines, '(no AGENTS.md or CLAUDE.md from the root down to the start directory)')
      end
      for _, note in ipairs(chain.notes or {}) do
        table.insert(lines, 'Note: ' .. note)
      end
      for i, f in ipairs(files) do
        table.insert(lines, '')
        table.insert(lines, string.format('── %d · %s · %s ──', i, f.origin or '?', f.shown))
        items[#lines] = f
        vim.list_extend(lines, text_lines(f.text))
      end
      local name = string.format('ctxfs://%s/instructions', vim.fn.fnamemodify(st.root, ':t'))
      local buf = scratch(name, lines, client, 'instructions')
      M.items[buf] = items
      vim.api.nvim_buf_clear_namespace(buf, hl.ns, 0, -1)
      mark_header(buf, 2)
      for row, f in pairs(items) do
        local line = lines[row]
        local s, e = line:find(f.origin or '?', 1, true)
        if s then
          hl.mark(buf, row - 1, s - 1, e, 'CtxfsOrigin')
        end
        local ps, pe = line:find(f.shown, (e or 0) + 1, true)
        if ps then
          hl.mark(buf, row - 1, ps - 1, pe, 'CtxfsPath')
        end
        if line:sub(1, 3) == '──' then
          hl.mark(buf, row - 1, 0, #line, 'CtxfsHeader', 110)
        end
      end
      map(buf, '<CR>', function()
        local f = M.items[buf][vim.api.nvim_win_get_cursor(0)[1]]
        if not f then
          return notify('no instruction file on this line', vim.log.levels.WARN)
        end
        local file = chain_file(f, st.root)
        if vim.fn.filereadable(file) ~= 1 then
          return notify(file .. ' cannot be opened here', vim.log.levels.WARN)
        end
        vim.cmd('split ' .. vim.fn.fnameescape(file))
      end, 'open the file')
      common_maps(buf, function()
        M.instructions(buf)
      end)
      show(buf)
      cb(nil, buf)
    end)
  end)
end

------------------------------------------------------------------------------------------------
-- Grants
------------------------------------------------------------------------------------------------

--- Revokes grants of `target` ('*': all) in the buffer's session.
---@param target string
---@param bufnr integer?
---@param cb fun(err: string?, result: table?)?
function M.revoke(target, bufnr, cb)
  cb = cb or function() end
  session_of(bufnr or vim.api.nvim_get_current_buf(), function(client, session)
    client_mod.request(client, 'ctxfs/grants', { session = session, revoke = target }, function(e, result)
      if e then
        err(e)
        return cb(e)
      end
      notify(string.format('revoked %d grant%s of %s', result.revoked or 0, result.revoked == 1 and '' or 's', target))
      cb(nil, result)
    end)
  end)
end

--- `:Ctxfs grants`.
---@param bufnr integer?
---@param cb fun(err: string?, buf: integer?)?
function M.grants(bufnr, cb)
  cb = cb or function() end
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  session_of(bufnr, function(client, session, st)
    client_mod.request(client, 'ctxfs/grants', { session = session }, function(e, result)
      if e then
        err(e)
        return cb(e)
      end
      local grants = result.grants or {}
      local width = 6
      for _, g in ipairs(grants) do
        width = math.max(width, vim.fn.strdisplaywidth(g.target or ''))
      end
      local lines = {
        string.format('ctxfs grants · %s · session %s · changes these cover run without asking', vim.fn.fnamemodify(st.root, ':~'), session),
        'x or dd: revoke the grant under the cursor · X: revoke all · R: refresh · q: close',
        '',
      }
      local items = {}
      for _, g in ipairs(grants) do
        local scope = g.scope == 'always' and 'always   (remembered in grants.json)' or (g.scope or '?') .. '  (until the session ends)'
        table.insert(lines, pad(g.target, width) .. '  ' .. scope)
        items[#lines] = g
      end
      if #grants == 0 then
        table.insert(lines, '(no grants: changes ask or run as the mode says)')
      end
      local name = string.format('ctxfs://%s/grants', vim.fn.fnamemodify(st.root, ':t'))
      local buf = scratch(name, lines, client, 'grants')
      M.items[buf] = items
      vim.api.nvim_buf_clear_namespace(buf, hl.ns, 0, -1)
      mark_header(buf, 2)
      for row, g in pairs(items) do
        hl.mark(buf, row - 1, 0, #(g.target or ''), 'CtxfsPath')
      end
      local function refresh()
        M.grants(buf)
      end
      local function revoke_here()
        local g = M.items[buf][vim.api.nvim_win_get_cursor(0)[1]]
        if not g then
          return notify('no grant on this line', vim.log.levels.WARN)
        end
        vim.ui.select({ 'Revoke ' .. g.target, 'Keep it' }, { prompt = 'ctxfs: revoke the grant ' .. g.target .. '?' }, function(_, idx)
          if idx == 1 then
            M.revoke(g.target, buf, refresh)
          end
        end)
      end
      map(buf, 'x', revoke_here, 'revoke')
      map(buf, 'dd', revoke_here, 'revoke')
      map(buf, 'X', function()
        vim.ui.select({ 'Revoke every grant', 'Keep them' }, { prompt = 'ctxfs: revoke all grants of this project?' }, function(_, idx)
          if idx == 1 then
            M.revoke('*', buf, refresh)
          end
        end)
      end, 'revoke all')
      common_maps(buf, refresh)
      show(buf)
      cb(nil, buf)
    end)
  end)
end

------------------------------------------------------------------------------------------------
-- Mode
------------------------------------------------------------------------------------------------

--- `:Ctxfs mode [name]`: sets the mode of the buffer's session (asks with vim.ui.select without a name).
---@param name string?
---@param bufnr integer?
---@param cb fun(err: string?, result: table?)?
function M.mode(name, bufnr, cb)
  cb = cb or function() end
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  if name and name ~= '' and not config.is_mode(name) then
    local msg = string.format('%q is not a mode; the modes are %s', name, table.concat(config.modes, ', '))
    err(msg)
    return cb(msg)
  end
  session_of(bufnr, function(client, session, st)
    local function set(mode)
      client_mod.request(client, 'ctxfs/setMode', { session = session, mode = mode }, function(e, result)
        if e then
          err(e)
          return cb(e)
        end
        st.mode = result.mode
        client_mod.mode_by_root[st.root] = result.mode
        log.add('info', st.root, 'mode ' .. result.mode .. ' (was ' .. tostring(result.previous) .. ')')
        notify(string.format('mode %s (was %s)', result.mode, tostring(result.previous)))
        cb(nil, result)
      end)
    end
    if name and name ~= '' then
      return set(name)
    end
    local now = st.mode or st.server_mode or config.options.mode or 'ask'
    local descriptions = {
      ['read-only'] = 'read-only     nothing changes; every change is refused',
      ask = 'ask           every change asks first, unless a grant covers it',
      ['accept-edits'] = 'accept-edits  changes run; removing or moving out of the start folder asks',
      trust = 'trust         changes run without asking',
    }
    vim.ui.select(config.modes, {
      prompt = 'ctxfs mode (now ' .. now .. '):',
      kind = 'ctxfs_mode',
      format_item = function(m)
        return descriptions[m] or m
      end,
    }, function(choice)
      if choice then
        set(choice)
      else
        cb('no mode chosen')
      end
    end)
  end)
end

------------------------------------------------------------------------------------------------
-- Log
------------------------------------------------------------------------------------------------

local log_buf

local function fill_log()
  if not (log_buf and vim.api.nvim_buf_is_valid(log_buf)) then
    return
  end
  local lines = {
    'ctxfs log · what the servers said and what the plugin did · R: refresh · q: close',
    "Neovim's LSP log (messages on the wire, server stderr): " .. vim.lsp.get_log_path(),
    '',
  }
  vim.list_extend(lines, log.lines())
  vim.bo[log_buf].modifiable = true
  vim.api.nvim_buf_set_lines(log_buf, 0, -1, false, lines)
  vim.bo[log_buf].modifiable = false
  vim.api.nvim_buf_clear_namespace(log_buf, hl.ns, 0, -1)
  mark_header(log_buf, 2)
  hl.apply(log_buf, 2)
  for i, line in ipairs(lines) do
    if i > 3 and line:find('^%S+  error') then
      hl.mark(log_buf, i - 1, 0, #line, 'CtxfsError', 110)
    end
  end
end

log.on_change(function()
  if log_buf and vim.api.nvim_buf_is_valid(log_buf) and #vim.fn.win_findbuf(log_buf) > 0 then
    vim.schedule(fill_log)
  end
end)

--- `:Ctxfs log`.
---@return integer buf
function M.log()
  log_buf = scratch('ctxfs://log', {}, nil, 'log')
  fill_log()
  common_maps(log_buf, fill_log)
  show(log_buf)
  return log_buf
end

return M
