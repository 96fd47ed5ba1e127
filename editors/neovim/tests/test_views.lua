-- ctxfs for Neovim, tests: the :Ctxfs views — results (and opening one by <CR>/gd on an id,
-- which adds nothing to the session), changes (diff float, side by side), the instruction chain
-- in order (<CR> opens the file ctxfs names), and the log.
local H = dofile(vim.env.CTXFS_PLUGIN .. '/tests/helpers.lua')

local big = {}
for i = 1, 3000 do
  big[i] = 'line ' .. i
end
local root = H.project('proj', {
  ['AGENTS.md'] = 'Root rules: be brief.\n',
  ['a/AGENTS.md'] = 'Rules for a.\n',
  ['a/b/CLAUDE.md'] = 'Rules for a/b.\n',
  ['a/b/code.txt'] = 'alpha\nbeta\n',
  ['big.txt'] = table.concat(big, '\n') .. '\n',
  ['notes/todo.md'] = 'first\n',
})
vim.fn.mkdir(vim.env.XDG_CONFIG_HOME .. '/ctxfs', 'p')
local g = io.open(vim.env.XDG_CONFIG_HOME .. '/ctxfs/AGENTS.md', 'w')
g:write('Global rules.\n')
g:close()

H.setup({ mode = 'trust', config = vim.env.XDG_CONFIG_HOME .. '/ctxfs', start = root .. '/a/b' })
local code = H.edit(root .. '/a/b/code.txt')

local function press(keys)
  vim.api.nvim_feedkeys(vim.keycode(keys), 'x', false)
end

local ids = {}
local stub_text

--- The session's results as ctxfs lists them (ctxfs/results), newest first.
local function results_now()
  local e, list = H.await(function(cb)
    local client_mod = require('ctxfs.client')
    client_mod.with_session(code, function(se, client, session)
      if se then
        return cb(se)
      end
      client_mod.request(client, 'ctxfs/results', { session = session }, function(re, result)
        cb(re, result and result.results)
      end)
    end)
  end)
  H.ok(e == nil, 'ctxfs/results: ' .. tostring(e))
  return vim.tbl_map(function(r)
    return r.id
  end, list)
end

H.test('results: the buffer lists the ids, tools, paths and stub/capped flags', function()
  ids.read1 = H.call('read', { file_path = root .. '/a/b/code.txt' }).id
  local stub = H.call('read', { file_path = root .. '/a/b/code.txt' }) -- unchanged: a stub
  ids.read2, stub_text = stub.id, stub.text
  ids.big = H.call('grep', { pattern = 'line', path = root .. '/big.txt' }).id
  ids.edit = H.call('edit', { file_path = root .. '/a/b/code.txt', old_string = 'beta', new_string = 'BETA' }).id
  vim.cmd('Ctxfs results')
  H.wait(function()
    return H.view_buf('results')
  end, 'the results buffer')
  local buf = H.view_buf('results')
  local text = H.text(buf)
  H.match(text, '^ctxfs results', 'header')
  for name, id in pairs(ids) do
    H.match(text, '\n' .. id .. '%s', 'lists ' .. name .. ' ' .. id)
  end
  local stub_line = vim.iter(H.lines(buf)):find(function(l)
    return l:find('^' .. ids.read2)
  end)
  H.match(stub_line, 'stub', 'the re-read is flagged stub')
  H.match(stub_line, 'a/b/code%.txt', 'path shown relative to the root')
  local big_line = vim.iter(H.lines(buf)):find(function(l)
    return l:find('^' .. ids.big)
  end)
  H.match(big_line, 'capped', 'the long grep is flagged capped')
  local groups = {}
  for _, m in ipairs(H.marks(buf)) do
    groups[m[4]] = true
  end
  H.ok(groups.CtxfsId and groups.CtxfsTool and groups.CtxfsPath and groups.CtxfsStub and groups.CtxfsCapped, 'highlighted: ' .. vim.inspect(groups))
end)

H.test('results: <CR> on a line opens the stored result, and the session gets no new result', function()
  local before = results_now()
  local buf = H.view_buf('results')
  vim.api.nvim_set_current_win(vim.fn.win_findbuf(buf)[1])
  local row = vim.iter(ipairs(H.lines(buf))):find(function(_, l)
    return l:find('^' .. ids.read1)
  end)
  vim.api.nvim_win_set_cursor(0, { row, 20 })
  press('<CR>')
  H.wait(function()
    return H.view_buf('recall')
  end, 'the result buffer')
  local rbuf = H.view_buf('recall')
  H.eq('nofile', vim.bo[rbuf].buftype)
  local text = H.text(rbuf)
  H.match(H.lines(rbuf)[1], '^' .. ids.read1 .. ' · the stored result, in full', 'it is that id: ' .. text)
  H.no_match(text, 'recall', 'not a recall')
  H.match(text, 'alpha', 'with the stored text')
  H.match(text, 'beta', 'as it was read (before the edit)')
  H.match(vim.api.nvim_buf_get_name(rbuf), ids.read1, 'named by the id')
  -- Looking recorded nothing: ctxfs lists the same results, and the next call takes the next id.
  H.eq(before, results_now(), 'ctxfs/results before and after viewing')
  vim.cmd('Ctxfs results')
  H.wait(function()
    local b = H.view_buf('results')
    return b and H.text(b):find(string.format('%d results', #before), 1, true)
  end, 'the refreshed list')
  H.no_match(H.text(H.view_buf('results')), '%sviewed%s', 'nothing of the user’s own in the list')
  local next_id = H.call('read', { file_path = root .. '/AGENTS.md' }).id
  H.eq(tonumber(before[1]:sub(2), 16) + 1, tonumber(next_id:sub(2), 16), 'the next call ' .. next_id .. ' follows ' .. before[1])
  ids.agents = next_id
end)

H.test('gd on an id in the model\'s text (a stub naming an earlier result) opens that one', function()
  -- A chat plugin's buffer shows what the model read; the stub names the earlier result.
  local stub = { text = stub_text }
  H.match(stub.text, 'Unchanged since ' .. ids.read1, 'a stub: ' .. stub.text)
  local chat = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(chat, 0, -1, false, { 'assistant: reading again', stub.text })
  vim.cmd('tabnew')
  vim.api.nvim_win_set_buf(0, chat)
  vim.keymap.set('n', 'gd', '<Plug>(ctxfs-recall)', { buffer = chat })
  require('ctxfs').highlight(chat)
  H.ok(vim.iter(H.marks(chat)):any(function(m)
    return m[4] == 'CtxfsStub' and m[1] == 1
  end), 'stub line highlighted')
  local col = stub.text:find(ids.read1, stub.text:find('Unchanged', 1, true), true)
  vim.api.nvim_win_set_cursor(0, { 2, col })
  press('gd')
  H.wait(function()
    local b = H.view_buf('recall')
    return b and H.lines(b)[1]:find(ids.read1, 1, true)
  end, 'gd to open the earlier result')
  H.match(H.text(H.view_buf('recall')), 'alpha')
  vim.cmd('tabclose')
end)

H.test('a capped result opens in full', function()
  local before = results_now()
  vim.cmd('Ctxfs recall ' .. ids.big)
  H.wait(function()
    local b = H.view_buf('recall')
    return b and H.lines(b)[1]:find(ids.big, 1, true)
  end, 'the big result')
  local rbuf = H.view_buf('recall')
  H.match(H.text(rbuf), 'line 3000', 'all of it')
  H.match(H.text(rbuf), 'line 1500', 'the middle too')
  H.eq(before, results_now(), 'still nothing recorded')
end)

H.test('an unknown id says so and opens nothing', function()
  local e = H.await(require('ctxfs').recall, '#0fff', code)
  H.ok(e and e:find('ctxfs/resultText', 1, true), 'the error names the method: ' .. tostring(e))
end)

H.test('an elision line in any ctxfs buffer is marked', function()
  local hl = require('ctxfs.highlight')
  local b = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(b, 0, -1, false, { '[#0007 grep]', 'a', '[700 lines elided, full output #0007]', 'z' })
  hl.apply(b)
  local groups = vim.tbl_map(function(m)
    return m[4] .. '@' .. m[1]
  end, H.marks(b))
  H.ok(vim.tbl_contains(groups, 'CtxfsElision@2'), vim.inspect(groups))
  H.ok(vim.tbl_contains(groups, 'CtxfsId@0'), vim.inspect(groups))
  H.eq('#0007', hl.id_at('see #0007.', 6))
  H.eq(nil, hl.id_at('x#0007', 3), 'not inside a word')
  H.eq('#10000', hl.id_at('[#10000 read]', 3), 'five digits')
end)

H.test('changes: <CR> opens the diff in a float with filetype diff', function()
  vim.cmd('Ctxfs changes')
  H.wait(function()
    return H.view_buf('changes')
  end, 'the changes buffer')
  local buf = H.view_buf('changes')
  vim.api.nvim_set_current_win(vim.fn.win_findbuf(buf)[1])
  local row = vim.iter(ipairs(H.lines(buf))):find(function(_, l)
    return l:find('^' .. ids.edit)
  end)
  H.ok(row, 'the edit is listed: ' .. H.text(buf))
  H.match(H.lines(buf)[row], 'modified%s+a/b/code%.txt%s+%+1 %-1')
  vim.api.nvim_win_set_cursor(0, { row, 0 })
  press('<CR>')
  local win = vim.api.nvim_get_current_win()
  H.ok(vim.api.nvim_win_get_config(win).relative ~= '', 'a float')
  H.ok(vim.w[win].ctxfs_diff, 'the diff float')
  local fbuf = vim.api.nvim_win_get_buf(win)
  H.eq('diff', vim.bo[fbuf].filetype)
  H.match(H.text(fbuf), '%-beta')
  H.match(H.text(fbuf), '%+BETA')
end)

H.test('changes: s in the float opens before and after side by side in diff mode', function()
  press('s')
  H.wait(function()
    return vim.wo.diff and #vim.api.nvim_tabpage_list_wins(0) == 2
  end, 'two diff windows')
  local wins = vim.api.nvim_tabpage_list_wins(0)
  local before = vim.api.nvim_win_get_buf(wins[1])
  local after = vim.api.nvim_win_get_buf(wins[2])
  H.eq({ 'alpha', 'beta' }, H.lines(before))
  H.eq({ 'alpha', 'BETA' }, H.lines(after))
  H.ok(vim.wo[wins[1]].diff and vim.wo[wins[2]].diff, 'both in diff mode')
  H.match(vim.api.nvim_buf_get_name(before), 'before')
  vim.cmd('tabclose')
end)

H.test('changes: a created and a moved file; D on a created one shows an empty before side', function()
  H.call('write', { file_path = root .. '/notes/new.md', content = 'brand new\n' })
  H.call('mv', { source = root .. '/notes/todo.md', destination = root .. '/notes/done.md' })
  vim.cmd('Ctxfs changes')
  H.wait(function()
    local b = H.view_buf('changes')
    return b and H.text(b):find('created')
  end, 'the refreshed changes')
  local buf = H.view_buf('changes')
  local lines = H.lines(buf)
  local created = vim.iter(ipairs(lines)):find(function(_, l)
    return l:find('created%s+notes/new%.md')
  end)
  H.ok(created, 'created listed: ' .. table.concat(lines, '\n'))
  H.ok(vim.iter(lines):any(function(l)
    return l:find('moved%s+notes/done%.md') and l:find('from notes/todo%.md')
  end), 'moved listed with where it was: ' .. table.concat(lines, '\n'))
  H.match(lines[4], 'notes/', 'newest first')
  vim.api.nvim_set_current_win(vim.fn.win_findbuf(buf)[1])
  vim.api.nvim_win_set_cursor(0, { created, 0 })
  press('D')
  H.wait(function()
    return vim.wo.diff and #vim.api.nvim_tabpage_list_wins(0) == 2
  end, 'two diff windows')
  local wins = vim.api.nvim_tabpage_list_wins(0)
  H.eq({ '' }, H.lines(vim.api.nvim_win_get_buf(wins[1])), 'nothing before')
  H.match(vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(wins[1])), 'did not exist')
  H.eq({ 'brand new' }, H.lines(vim.api.nvim_win_get_buf(wins[2])))
  vim.cmd('tabclose')
end)

H.test('instructions: the chain in order, with origins', function()
  vim.cmd('Ctxfs instructions')
  H.wait(function()
    return H.view_buf('instructions')
  end, 'the instructions buffer')
  local lines = H.lines(H.view_buf('instructions'))
  H.match(lines[1], '4 files')
  H.match(lines[4], '^1%s+global%s+.*AGENTS%.md')
  H.match(lines[5], '^2%s+chain%s+AGENTS%.md$')
  H.match(lines[6], '^3%s+chain%s+a/AGENTS%.md$')
  H.match(lines[7], '^4%s+chain%s+a/b/CLAUDE%.md$')
  local text = table.concat(lines, '\n')
  local g1, r1, a1, b1 = text:find('Global rules', 1, true), text:find('Root rules', 1, true), text:find('Rules for a%.'), text:find('Rules for a/b', 1, true)
  H.ok(g1 and r1 and a1 and b1 and g1 < r1 and r1 < a1 and a1 < b1, 'texts in order')
  -- <CR> on a line opens the file ctxfs names in the chain's `file`.
  local e, opened = H.await(function(cb)
    local client_mod = require('ctxfs.client')
    client_mod.with_session(code, function(_, client, session)
      client_mod.request(client, 'ctxfs/openSession', { resume = session }, cb)
    end)
  end)
  H.ok(e == nil, tostring(e))
  local files = {}
  for _, f in ipairs(opened.chain.files) do
    files[f.order + 1] = f.file
  end
  H.eq({ vim.env.XDG_CONFIG_HOME .. '/ctxfs/AGENTS.md', root .. '/AGENTS.md', root .. '/a/AGENTS.md', root .. '/a/b/CLAUDE.md' }, files, 'ctxfs sends each file')
  vim.api.nvim_win_set_cursor(0, { 6, 0 })
  press('<CR>')
  H.eq(files[3], vim.api.nvim_buf_get_name(0))
  vim.cmd('close')
  vim.api.nvim_set_current_win(vim.fn.win_findbuf(H.view_buf('instructions'))[1])
  vim.api.nvim_win_set_cursor(0, { 4, 0 })
  press('<CR>')
  H.eq(files[1], vim.api.nvim_buf_get_name(0), 'the global file')
  vim.cmd('close')
end)

H.test('log: the plugin and the server are heard', function()
  vim.cmd('Ctxfs log')
  local buf = H.view_buf('log')
  local text = H.text(buf)
  H.match(text, 'started .*protocol')
  H.match(text, 'serving')
  H.match(text, 'opened session')
  H.match(text, 'edit applied to')
end)

H.test('q closes a view', function()
  local wins = #vim.api.nvim_list_wins()
  vim.api.nvim_set_current_win(vim.fn.win_findbuf(H.view_buf('log'))[1])
  press('q')
  H.eq(wins - 1, #vim.api.nvim_list_wins())
end)

H.finish()
