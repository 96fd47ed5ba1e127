-- ctxfs for Neovim, tests: the mode decides what a write does (:Ctxfs mode, with and without a
-- name), approvals answered through a stubbed vim.ui.select with the diff float beside the
-- choice, and grants listed and revoked.
local H = dofile(vim.env.CTXFS_PLUGIN .. '/tests/helpers.lua')

local root = H.project('proj', {
  ['notes/todo.md'] = 'first\n',
  ['notes/other.md'] = 'other\n',
})

H.setup({}) -- the default mode: ask
local todo = root .. '/notes/todo.md'
local buf = H.edit(todo)

local function floats()
  local out = {}
  for _, w in ipairs(vim.api.nvim_list_wins()) do
    if vim.api.nvim_win_get_config(w).relative ~= '' then
      table.insert(out, w)
    end
  end
  return out
end

H.test('read-only: a write is refused and nothing changes', function()
  vim.cmd('Ctxfs mode read-only')
  H.wait(function()
    return #H.messages_matching('mode read%-only') > 0
  end, 'the mode message')
  H.call('read', { file_path = todo })
  local r = H.call('edit', { file_path = todo, old_string = 'first', new_string = 'changed' })
  H.eq(true, r.isError, 'refused')
  H.match(r.text, 'read%-only')
  H.eq({ 'first' }, H.lines(buf))
end)

H.test('accept-edits (picked with vim.ui.select): the same write runs without asking', function()
  local seen = H.with_select(function(items)
    return 'accept-edits'
  end, function()
    vim.cmd('Ctxfs mode')
    H.wait(function()
      return #H.messages_matching('mode accept%-edits') > 0
    end, 'the mode message')
  end)
  H.eq({ 'read-only', 'ask', 'accept-edits', 'trust' }, seen[1].items)
  H.match(seen[1].opts.prompt, 'now read%-only')
  local asked = H.with_select(function()
    error('nothing should ask in accept-edits')
  end, function()
    local r = H.call('edit', { file_path = todo, old_string = 'first', new_string = 'second' })
    H.eq(false, r.isError, r.text)
  end)
  H.eq(0, #asked)
  H.eq({ 'second' }, H.lines(buf))
end)

H.test('ask: the approval shows the diff in a float beside the choice; Allow once applies it', function()
  vim.cmd('Ctxfs mode ask')
  H.wait(function()
    return #H.messages_matching('mode ask') > 0
  end, 'the mode message')
  local float_text, float_ft, float_count
  local seen = H.with_select(function(items, opts)
    local f = floats()
    float_count = #f
    local fb = f[1] and vim.api.nvim_win_get_buf(f[1])
    float_text = fb and H.text(fb)
    float_ft = fb and vim.bo[fb].filetype
    for _, it in ipairs(items) do
      if it.title == 'Allow once' then
        return it
      end
    end
  end, function()
    local r = H.call('edit', { file_path = todo, old_string = 'second', new_string = 'third' })
    H.eq(false, r.isError, r.text)
  end)
  H.eq(1, #seen, 'asked once')
  H.eq('ctxfs_approval', seen[1].opts.kind)
  H.match(seen[1].opts.prompt, 'replace 1 occurrence in notes/todo%.md')
  local titles = vim.tbl_map(function(a)
    return seen[1].opts.format_item(a)
  end, seen[1].items)
  H.eq({ 'Allow once', 'Allow notes/todo.md for this session', 'Always allow notes/todo.md', 'Always allow notes/*', 'Deny' }, titles)
  H.eq(1, float_count, 'one float while asking')
  H.eq('diff', float_ft)
  H.match(float_text, '%-second')
  H.match(float_text, '%+third')
  H.eq(0, #floats(), 'the float is closed after the answer')
  H.eq({ 'third' }, H.lines(buf))
end)

H.test('ask: Deny refuses and leaves the buffer as it was', function()
  H.with_select(function(items)
    return items[#items]
  end, function()
    local r = H.call('edit', { file_path = todo, old_string = 'third', new_string = 'fourth' })
    H.eq(true, r.isError)
    H.match(r.text, 'declined')
  end)
  H.eq({ 'third' }, H.lines(buf))
  H.eq(0, #floats())
end)

H.test('ask: closing the prompt without an answer refuses', function()
  H.with_select(function()
    return nil
  end, function()
    local r = H.call('edit', { file_path = todo, old_string = 'third', new_string = 'fourth' })
    H.eq(true, r.isError)
    H.match(r.text, 'no answer')
  end)
  H.eq(0, #floats())
end)

H.test('ask: Always allow notes/* is remembered; the next change runs without asking', function()
  H.with_select(function(items)
    for _, it in ipairs(items) do
      if it.title == 'Always allow notes/*' then
        return it
      end
    end
  end, function()
    local r = H.call('edit', { file_path = todo, old_string = 'third', new_string = 'fourth' })
    H.eq(false, r.isError, r.text)
  end)
  local asked = H.with_select(function()
    error('covered by the grant')
  end, function()
    H.call('read', { file_path = root .. '/notes/other.md' })
    local r = H.call('write', { file_path = root .. '/notes/other.md', content = 'other, changed\n' })
    H.eq(false, r.isError, r.text)
  end)
  H.eq(0, #asked)
end)

H.test('grants: listed, and x revokes the one under the cursor (after a confirmation)', function()
  vim.cmd('Ctxfs grants')
  H.wait(function()
    return H.view_buf('grants')
  end, 'the grants buffer')
  local gbuf = H.view_buf('grants')
  local lines = H.lines(gbuf)
  local row = vim.iter(ipairs(lines)):find(function(_, l)
    return l:find('^notes/%*')
  end)
  H.ok(row, 'notes/* listed: ' .. vim.inspect(lines))
  H.match(lines[row], 'always')
  vim.api.nvim_set_current_win(vim.fn.win_findbuf(gbuf)[1])
  vim.api.nvim_win_set_cursor(0, { row, 0 })
  local seen = H.with_select(function(items)
    return items[1]
  end, function()
    vim.api.nvim_feedkeys('x', 'x', false)
    H.wait(function()
      return #H.messages_matching('revoked 1 grant of notes/%*') > 0
    end, 'the revoke')
  end)
  H.match(seen[1].opts.prompt, 'revoke the grant notes/%*')
  H.wait(function()
    return not H.text(gbuf):find('notes/%*')
  end, 'the list to refresh')
  H.match(H.text(gbuf), 'no grants')
end)

H.test('after the revoke, a change asks again', function()
  vim.cmd('wincmd p')
  local seen = H.with_select(function(items)
    return items[1]
  end, function()
    H.call('read', { file_path = root .. '/notes/other.md' })
    local r = H.call('write', { file_path = root .. '/notes/other.md', content = 'again\n' })
    H.eq(false, r.isError, r.text)
  end)
  H.eq(1, #seen, 'asked')
end)

H.test('a bad mode name is a message, not an error', function()
  H.clear_messages()
  vim.cmd('Ctxfs mode sloppy')
  H.eq(1, #H.messages_matching('"sloppy" is not a mode'))
end)

H.finish()
