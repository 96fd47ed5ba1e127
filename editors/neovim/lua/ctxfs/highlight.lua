-- ctxfs for Neovim: highlight groups (default links a colour scheme can override) and the
-- marking of result ids, stubs and elisions in ctxfs's buffers with extmarks. It marks only
-- buffers it is given; it never touches the user's files.
local M = {}

M.ns = vim.api.nvim_create_namespace('ctxfs')

--- Group → the group it links to by default.
M.groups = {
  CtxfsId = 'Identifier', -- a result id: #000c
  CtxfsStub = 'Comment', -- an unchanged re-read or a repeated listing, answered by a stub
  CtxfsElision = 'Folded', -- "[700 lines elided, full output #0020]"
  CtxfsCapped = 'WarningMsg', -- the "capped" flag in :Ctxfs results
  CtxfsError = 'ErrorMsg', -- a result that is an error
  CtxfsTool = 'Function', -- a tool's name
  CtxfsPath = 'Directory', -- a path
  CtxfsHeader = 'Title', -- a view's first line
  CtxfsOrigin = 'Type', -- an instruction file's origin (global, chain, …)
  CtxfsDim = 'Comment', -- secondary text: sizes, hints
}

--- Defines the groups with `default = true`, so a colour scheme's or the user's own win.
function M.define()
  for group, link in pairs(M.groups) do
    vim.api.nvim_set_hl(0, group, { link = link, default = true })
  end
end

--- Marks one span.
---@param buf integer
---@param row integer 0-based
---@param col integer 0-based byte
---@param end_col integer
---@param group string
---@param priority integer?
function M.mark(buf, row, col, end_col, group, priority)
  pcall(vim.api.nvim_buf_set_extmark, buf, M.ns, row, col, {
    end_col = end_col,
    hl_group = group,
    priority = priority or 150,
  })
end

--- The result ids in a line: list of {start (1-based), end (inclusive), id}.
---@param line string
---@return {[1]: integer, [2]: integer, [3]: string}[]
function M.ids_in(line)
  local out = {}
  local init = 1
  while true do
    local s, e, hex = line:find('%f[%w#]#(%x%x%x%x+)%f[^%w_]', init)
    if not s then
      break
    end
    table.insert(out, { s, e, '#' .. hex:lower() })
    init = e + 1
  end
  return out
end

--- The id under a column (1-based byte) of a line, or nil.
---@param line string
---@param col integer
---@return string?
function M.id_at(line, col)
  for _, hit in ipairs(M.ids_in(line)) do
    if col >= hit[1] and col <= hit[2] then
      return hit[3]
    end
  end
  return nil
end

--- Marks ids, stubs and elisions over a whole buffer (or lines first..last, 0-based).
---@param buf integer
---@param first integer?
---@param last integer?
function M.apply(buf, first, last)
  if not vim.api.nvim_buf_is_valid(buf) then
    return
  end
  first = first or 0
  local lines = vim.api.nvim_buf_get_lines(buf, first, last or -1, false)
  if not last then
    vim.api.nvim_buf_clear_namespace(buf, M.ns, first, -1)
  end
  for i, line in ipairs(lines) do
    local row = first + i - 1
    if line:find('Unchanged since #%x') or line:find('Same result as #%x') then
      M.mark(buf, row, 0, #line, 'CtxfsStub', 120)
    end
    local s, e = line:find('%[%d+ lines? elided, full output #%x+%]')
    if s then
      M.mark(buf, row, s - 1, e, 'CtxfsElision', 120)
    end
    for _, hit in ipairs(M.ids_in(line)) do
      M.mark(buf, row, hit[1] - 1, hit[2], 'CtxfsId', 200)
    end
  end
end

return M
