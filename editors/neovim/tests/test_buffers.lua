-- ctxfs for Neovim, tests: ctxfs reads the unsaved text of open buffers, and its edits land in
-- the buffer (not on disk) as one undo step of their own.
local H = dofile(vim.env.CTXFS_PLUGIN .. '/tests/helpers.lua')

local root = H.project('proj', {
  ['todo.md'] = 'one\ntwo\nthree\n',
  ['closed.txt'] = 'on disk\n',
  ['utf.txt'] = 'café ☕ naïve\n日本語 line\n',
})

H.setup({ mode = 'trust' })
local buf = H.edit(root .. '/todo.md')

H.test('an unsaved change is what ctxfs reads', function()
  vim.api.nvim_buf_set_lines(buf, 1, 2, false, { 'two (typed, not saved)' })
  H.ok(vim.bo[buf].modified, 'buffer modified')
  local r = H.call('read', { file_path = root .. '/todo.md' })
  H.eq(false, r.isError, r.text)
  H.match(r.text, '^%[#%x%x%x%x+ ', 'result starts with its id')
  H.match(r.text, 'two %(typed, not saved%)', 'the unsaved line')
  H.eq('one\ntwo\nthree\n', H.read(root .. '/todo.md'), 'disk untouched')
end)

H.test("an agent's edit lands in the buffer, not on disk", function()
  local r = H.call('edit', { file_path = root .. '/todo.md', old_string = 'three', new_string = 'THREE (agent)' })
  H.eq(false, r.isError, r.text)
  H.eq({ 'one', 'two (typed, not saved)', 'THREE (agent)' }, H.lines(buf))
  H.eq('one\ntwo\nthree\n', H.read(root .. '/todo.md'), 'disk untouched: the user saves')
  H.ok(vim.bo[buf].modified, 'buffer modified')
  H.ok(r.facts.diff and r.facts.diff:find('+THREE %(agent%)'), 'the call reports its diff')
end)

H.test("u undoes the agent's edit and only it", function()
  vim.api.nvim_set_current_buf(buf)
  vim.cmd('silent normal! u')
  H.eq({ 'one', 'two (typed, not saved)', 'three' }, H.lines(buf), 'the user’s own change stays')
  vim.cmd('silent normal! \18') -- <C-r>
  H.eq({ 'one', 'two (typed, not saved)', 'THREE (agent)' }, H.lines(buf), 'redo brings it back')
end)

H.test('after the user saves, ctxfs sees the saved text and a new edit works', function()
  vim.cmd('silent write')
  H.eq('one\ntwo (typed, not saved)\nTHREE (agent)\n', H.read(root .. '/todo.md'))
  local r = H.call('read', { file_path = root .. '/todo.md' })
  H.match(r.text, 'THREE %(agent%)')
  r = H.call('edit', { file_path = root .. '/todo.md', old_string = 'one', new_string = 'ONE' })
  H.eq(false, r.isError, r.text)
  H.eq('ONE', H.lines(buf)[1])
end)

H.test('a file that is not open is changed on disk', function()
  local r = H.call('read', { file_path = root .. '/closed.txt' })
  H.eq(false, r.isError, r.text)
  r = H.call('write', { file_path = root .. '/closed.txt', content = 'written by the agent\n' })
  H.eq(false, r.isError, r.text)
  H.eq('written by the agent\n', H.read(root .. '/closed.txt'))
end)

H.test('typing after a read makes the next edit ask for a new read (stale guard on the buffer)', function()
  H.call('read', { file_path = root .. '/todo.md' })
  vim.api.nvim_buf_set_lines(buf, 0, 1, false, { 'ONE (typed again)' })
  local r = H.call('edit', { file_path = root .. '/todo.md', old_string = 'ONE', new_string = 'x' })
  H.eq(true, r.isError, 'refused')
  H.match(r.text, '[Rr]ead')
  H.eq('ONE (typed again)', H.lines(buf)[1], 'buffer not overwritten')
end)

H.test('multi-byte text: typed changes and agent edits keep their columns', function()
  local ubuf = H.edit(root .. '/utf.txt')
  -- Typing in the middle of a line of wide characters (sent as incremental changes).
  vim.api.nvim_buf_set_text(ubuf, 0, #'café ☕ ', 0, #'café ☕ ', { '→ ' })
  vim.api.nvim_buf_set_text(ubuf, 1, 0, 1, #'日本語', { '中文' })
  local r = H.call('read', { file_path = root .. '/utf.txt' })
  H.has(r.text, 'café ☕ → naïve')
  H.has(r.text, '中文 line')
  r = H.call('edit', { file_path = root .. '/utf.txt', old_string = 'naïve', new_string = 'naïve 🎉 done' })
  H.eq(false, r.isError, r.text)
  H.eq({ 'café ☕ → naïve 🎉 done', '中文 line' }, H.lines(ubuf))
  r = H.call('edit', { file_path = root .. '/utf.txt', old_string = '中文', new_string = 'zh' })
  H.eq(false, r.isError, r.text)
  H.eq({ 'café ☕ → naïve 🎉 done', 'zh line' }, H.lines(ubuf))
end)

H.finish()
