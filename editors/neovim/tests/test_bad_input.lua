-- ctxfs for Neovim, tests: bad input gives one clear message and never a Lua error — no binary,
-- a binary that is too old (or not ctxfs), a server that exits (restart offered, the session
-- resumed), a buffer with no project root, a server that cannot serve, unknown subcommands.
local H = dofile(vim.env.CTXFS_PLUGIN .. '/tests/helpers.lua')

local root = H.project('proj', { ['a.txt'] = 'alpha\n', ['b.txt'] = 'beta\n' })
local loose = H.tmp .. '/loose/file.txt'
vim.fn.mkdir(H.tmp .. '/loose', 'p')
io.open(loose, 'w'):write('no project here\n')

local function no_lua_errors()
  H.eq('', vim.v.errmsg, 'no error message from Neovim')
  for _, m in ipairs(H.messages) do
    H.no_match(m.msg, 'stack traceback', 'no traceback in: ' .. m.msg)
    H.no_match(m.msg, '%.lua:%d+:', 'no Lua error position in: ' .. m.msg)
  end
end

local function reset()
  H.stop_all()
  vim.cmd('silent! %bwipeout!')
  H.clear_messages()
  vim.v.errmsg = ''
end

H.test('no binary: one clear message on open, and from :Ctxfs', function()
  reset()
  require('ctxfs').setup({ binary = H.tmp .. '/nowhere/ctxfs', restart = 'never' })
  vim.cmd.edit(root .. '/a.txt')
  vim.cmd.edit(root .. '/b.txt')
  vim.wait(300)
  local m = H.messages_matching('cannot start: the binary')
  H.eq(1, #m, 'said once')
  H.match(m[1].msg, 'is not an executable file')
  H.match(m[1].msg, 'setup{ binary = ')
  H.eq(vim.log.levels.ERROR, m[1].level)
  H.eq(0, #vim.lsp.get_clients({ name = 'ctxfs' }))
  H.clear_messages()
  vim.cmd('Ctxfs results')
  H.wait(function()
    return #H.messages > 0
  end, 'a message')
  H.match(H.messages[1].msg, 'cannot start: the binary')
  local tools, err = require('ctxfs').tools()
  H.eq(nil, tools)
  H.match(err, 'cannot start')
  no_lua_errors()
end)

H.test('a binary on PATH that is missing says "not on PATH"', function()
  reset()
  require('ctxfs').setup({ binary = 'ctxfs-not-installed-anywhere', restart = 'never' })
  vim.cmd.edit(root .. '/a.txt')
  H.wait(function()
    return #H.messages_matching('not on PATH') == 1
  end, 'the message')
  no_lua_errors()
end)

H.test('a binary that is too old: refused with a clear way out, and stopped', function()
  reset()
  require('ctxfs').setup({ binary = vim.env.CTXFS_PLUGIN .. '/tests/old_server.py', restart = 'ask' })
  local asked = H.with_select(function()
    return nil
  end, function()
    vim.cmd.edit(root .. '/a.txt')
    H.wait(function()
      return #H.messages_matching('too old') == 1
    end, 'the too-old message')
    H.wait(function()
      return #vim.lsp.get_clients({ name = 'ctxfs' }) == 0
    end, 'the old server to be stopped')
  end)
  local m = H.messages_matching('too old')[1].msg
  H.match(m, 'ctxfs 0%.0%.9 at .*old_server%.py speaks protocol 1')
  H.match(m, 'needs protocol 2 or newer')
  H.match(m, 'Update ctxfs')
  H.eq(0, #asked, 'no restart offered for a refused server')
  vim.cmd('Ctxfs results')
  H.wait(function()
    return #H.messages_matching('too old') >= 2 or #H.messages_matching('cannot') > 0
  end, 'a message for :Ctxfs results')
  no_lua_errors()
end)

H.test('a server that is not ctxfs at all is refused', function()
  reset()
  require('ctxfs').setup({ binary = vim.env.CTXFS_PLUGIN .. '/tests/old_server.py', args = { '--not-ctxfs' } })
  vim.cmd.edit(root .. '/a.txt')
  H.wait(function()
    return #H.messages_matching('did not answer as ctxfs') == 1
  end, 'the message')
  no_lua_errors()
end)

H.test('a server that exits at once is reported', function()
  reset()
  require('ctxfs').setup({ binary = '/bin/false', args = {} })
  vim.cmd.edit(root .. '/a.txt')
  H.wait(function()
    return #H.messages_matching('exited before it was ready %(exit code 1%)') == 1
  end, 'the message')
  no_lua_errors()
end)

H.test('a buffer with no project root: a clear message, no server', function()
  reset()
  require('ctxfs').setup({ binary = H.bin, args = {} })
  vim.cmd.edit(loose)
  vim.wait(200)
  H.eq(0, #vim.lsp.get_clients({ name = 'ctxfs' }), 'no server started')
  vim.cmd('Ctxfs results')
  H.wait(function()
    return #H.messages > 0
  end, 'a message')
  H.match(H.messages[1].msg, 'no ctxfs here: no project root above .*loose/file%.txt')
  H.match(H.messages[1].msg, 'looked for %.git')
  H.clear_messages()
  local err = H.await(function(cb)
    require('ctxfs').call('read', { file_path = loose }, cb)
  end)
  H.match(err, 'no project root')
  vim.cmd('Ctxfs status')
  H.match(H.messages[#H.messages].msg, 'not running for this buffer')
  no_lua_errors()
end)

H.test('a server that exits: said, restart offered, the session resumed', function()
  reset()
  require('ctxfs').setup({ binary = H.bin, restart = 'ask' })
  local buf, client = H.edit(root .. '/a.txt')
  local first = H.call('read', { file_path = root .. '/a.txt' })
  local session = require('ctxfs').status(buf).session
  H.ok(session)
  local pids = H.server_pids()
  H.eq(1, #pids, 'one server')
  local seen = H.with_select(function(items)
    return items[1]
  end, function()
    vim.uv.kill(pids[1], 'sigkill')
    H.wait(function()
      return #H.messages_matching('stopped unexpectedly') == 1
    end, 'the exit message')
    H.wait(function()
      local c = vim.lsp.get_clients({ bufnr = buf, name = 'ctxfs' })[1]
      return c and c.id ~= client.id and require('ctxfs.client').state[c.id] and require('ctxfs.client').state[c.id].ready
    end, 'a new server after the restart')
  end)
  local m = H.messages_matching('stopped unexpectedly')[1].msg
  H.match(m, 'signal 9')
  H.match(m, 'session ' .. vim.pesc(session) .. ' is kept')
  H.eq(1, #seen, 'restart offered once')
  H.match(seen[1].items[1], 'Restart')
  -- The session resumes: same id, earlier results recallable, ids go on.
  local second = H.call('read', { file_path = root .. '/b.txt' })
  H.eq(session, require('ctxfs').status(buf).session, 'the same session')
  H.ok(tonumber(second.id:sub(2), 16) > tonumber(first.id:sub(2), 16), 'ids go on: ' .. first.id .. ' then ' .. second.id)
  H.ok(#H.messages_matching('session ' .. vim.pesc(session) .. ' resumed') == 1, 'resume said')
  local _, rbuf = H.await(function(cb)
    require('ctxfs').recall(first.id, buf, cb)
  end)
  H.match(H.text(rbuf), 'alpha', 'a result from before the crash')
  no_lua_errors()
end)

H.test('a server that exits with restart = "never": said, with the command to restart', function()
  reset()
  require('ctxfs').setup({ binary = H.bin, restart = 'never' })
  local buf = H.edit(root .. '/a.txt')
  H.call('read', { file_path = root .. '/a.txt' })
  vim.uv.kill(H.server_pids()[1], 'sigkill')
  H.wait(function()
    return #H.messages_matching(':Ctxfs restart starts it again') == 1
  end, 'the message')
  H.clear_messages()
  vim.cmd('Ctxfs restart')
  H.wait(function()
    local c = vim.lsp.get_clients({ bufnr = buf, name = 'ctxfs' })[1]
    return c and require('ctxfs.client').state[c.id] and require('ctxfs.client').state[c.id].ready
  end, 'the restarted server')
  no_lua_errors()
end)

H.test('a server that exits with restart = "always": restarted without a question', function()
  reset()
  require('ctxfs').setup({ binary = H.bin, restart = 'always' })
  local buf, client = H.edit(root .. '/a.txt')
  H.call('read', { file_path = root .. '/a.txt' })
  local asked = H.with_select(function()
    error('no question with restart = always')
  end, function()
    vim.uv.kill(H.server_pids()[1], 'sigkill')
    H.wait(function()
      local c = vim.lsp.get_clients({ bufnr = buf, name = 'ctxfs' })[1]
      return c and c.id ~= client.id and require('ctxfs.client').state[c.id] and require('ctxfs.client').state[c.id].ready
    end, 'the new server')
  end)
  H.eq(0, #asked)
  H.eq(1, #H.messages_matching('restarting'))
  no_lua_errors()
end)

H.test('a server that cannot serve (the project itself as its data directory) says why', function()
  reset()
  require('ctxfs').setup({ binary = H.bin, data = root })
  vim.cmd.edit(root .. '/a.txt')
  H.wait(function()
    return #H.messages_matching('cannot serve') >= 1
  end, 'the message')
  H.clear_messages()
  local err = H.await(function(cb)
    require('ctxfs').call('read', { file_path = root .. '/a.txt' }, cb)
  end)
  H.match(err, 'could not start')
  no_lua_errors()
end)

H.test('unknown subcommands and bad arguments are messages', function()
  reset()
  require('ctxfs').setup({ binary = H.bin, data = nil })
  vim.cmd('Ctxfs bogus')
  H.match(H.messages[#H.messages].msg, 'unknown subcommand "bogus"')
  vim.cmd('Ctxfs recall zz')
  H.match(H.messages[#H.messages].msg, '"zz" is not a result id')
  vim.cmd('Ctxfs grants revoke')
  H.match(H.messages[#H.messages].msg, 'which grant')
  vim.cmd('Ctxfs recall')
  H.match(H.messages[#H.messages].msg, 'no result id')
  no_lua_errors()
end)

H.finish()
