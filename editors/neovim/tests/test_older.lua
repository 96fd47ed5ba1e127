-- ctxfs for Neovim, tests: against a ctxfs from before ctxfs/resultText and the chain's `file`
-- (the real server behind tests/older_ctxfs.py, which hides just those two), opening a result
-- falls back to ctxfs/recall (a result of its own, flagged `viewed`) and <CR> on a chain entry
-- opens the file derived from its path.
local H = dofile(vim.env.CTXFS_PLUGIN .. '/tests/helpers.lua')

local root = H.project('proj', {
  ['AGENTS.md'] = 'Root rules.\n',
  ['sub/AGENTS.md'] = 'Rules for sub.\n',
  ['sub/code.txt'] = 'alpha\nbeta\n',
})

H.setup({ mode = 'trust', binary = vim.env.CTXFS_PLUGIN .. '/tests/older_ctxfs.py', start = root .. '/sub' })
local code = H.edit(root .. '/sub/code.txt')

--- A request in the session of `code`: `params` get `session` (`resume` for ctxfs/openSession).
local function request(method, params)
  local e, result = H.await(function(cb)
    local client_mod = require('ctxfs.client')
    client_mod.with_session(code, function(se, client, session)
      if se then
        return cb(se)
      end
      local p = vim.tbl_extend('force', {}, params or {})
      if method == 'ctxfs/openSession' then
        p.resume = session
      else
        p.session = session
      end
      client_mod.request(client, method, p, function(re, r)
        cb(re, r)
      end)
    end)
  end)
  return e, result
end

local function results_now()
  local e, r = request('ctxfs/results')
  H.ok(e == nil, tostring(e))
  return vim.tbl_map(function(x)
    return x.id
  end, r.results)
end

H.test('the stand-in hides ctxfs/resultText and nothing else', function()
  local e = request('ctxfs/resultText', { id = '#0001' })
  H.match(e or '', 'Method not found', 'MethodNotFound: ' .. tostring(e))
  H.eq({}, results_now(), 'the real server answers ctxfs/results')
end)

H.test('opening a result recalls it (a new result, flagged viewed)', function()
  local read = H.call('read', { file_path = root .. '/sub/code.txt' })
  local before = results_now()
  H.eq({ read.id }, before)
  local e, buf = H.await(require('ctxfs').recall, read.id, code)
  H.ok(e == nil, tostring(e))
  H.match(H.lines(buf)[1], 'recall ' .. read.id, 'recall’s bracket: ' .. H.text(buf))
  H.match(H.text(buf), 'alpha')
  local after = results_now()
  H.eq(#before + 1, #after, 'the recall is a result: ' .. vim.inspect(after))
  vim.cmd('Ctxfs results')
  H.wait(function()
    local b = H.view_buf('results')
    return b and H.text(b):find('2 results', 1, true)
  end, 'the results list')
  local line = vim.iter(H.lines(H.view_buf('results'))):find(function(l)
    return l:find('^' .. after[1])
  end)
  H.match(line or '', 'viewed', 'the user’s own recall is flagged: ' .. H.text(H.view_buf('results')))
end)

H.test('instructions: without `file`, <CR> opens the file derived from the path', function()
  local e, opened = request('ctxfs/openSession', {})
  H.ok(e == nil, tostring(e))
  for _, f in ipairs(opened.chain.files) do
    H.eq(nil, f.file, 'no file from this server: ' .. vim.inspect(f))
  end
  vim.cmd('Ctxfs instructions')
  H.wait(function()
    return H.view_buf('instructions')
  end, 'the instructions buffer')
  local lines = H.lines(H.view_buf('instructions'))
  H.match(lines[5], '^2%s+chain%s+sub/AGENTS%.md$', table.concat(lines, '\n'))
  vim.api.nvim_set_current_win(vim.fn.win_findbuf(H.view_buf('instructions'))[1])
  vim.api.nvim_win_set_cursor(0, { 5, 0 })
  vim.api.nvim_feedkeys(vim.keycode('<CR>'), 'x', false)
  H.eq(root .. '/sub/AGENTS.md', vim.api.nvim_buf_get_name(0))
end)

H.finish()
