-- ctxfs for Neovim, tests: setup with empty options, vim.lsp.enable, the options that become
-- initializationOptions, root detection and buffers without a filetype.
local H = dofile(vim.env.CTXFS_PLUGIN .. '/tests/helpers.lua')
local config = require('ctxfs.config')

local root = H.project('proj', {
  ['notes.md'] = '# notes\n',
  ['data.unknownext'] = 'no filetype here\n',
  ['sub/deep.txt'] = 'deep\n',
})

H.test('setup{} with empty options starts ctxfs for a file in a project', function()
  require('ctxfs').setup({ binary = H.bin })
  H.eq({}, H.messages_matching('setup'), 'no setup warnings')
  local buf, client = H.edit(root .. '/notes.md')
  H.eq(root, client.root_dir, 'root from .git')
  local st = require('ctxfs.client').state[client.id]
  H.ok(st.ready, 'accepted')
  H.ok(tonumber(st.info.protocol) >= 2, 'protocol 2 or newer')
  H.match(st.version, '^%d+%.%d+%.%d+', 'version reported')
  H.eq(true, vim.lsp.buf_is_attached(buf, client.id), 'buffer attached')
end)

H.test('empty options are sent as a JSON object, never []', function()
  H.eq('{}', vim.json.encode(config.init_options(root, nil, nil)))
  H.eq('{}', vim.json.encode(config.init_options(root, nil, {})))
  local with = config.init_options(root, nil, { mode = 'trust' })
  H.eq('trust', with.mode)
end)

H.test('the server answers with the options it got (mode, from setup)', function()
  -- The initialized log message names the mode the sessions start in.
  local client = vim.lsp.get_clients({ name = 'ctxfs' })[1]
  local st = require('ctxfs.client').state[client.id]
  H.wait(function()
    return st.server_mode ~= nil
  end, 'the server to report its mode')
  H.eq('ask', st.server_mode, 'default mode')
  H.has(st.describe or '', root, 'posture names the root')
end)

H.test('a buffer without a filetype attaches too', function()
  local buf = H.edit(root .. '/data.unknownext')
  H.eq('', vim.bo[buf].filetype)
  H.eq(1, #vim.lsp.get_clients({ name = 'ctxfs' }), 'one server for the project')
end)

H.test('a file deeper in the project uses the same server', function()
  local _, client = H.edit(root .. '/sub/deep.txt')
  H.eq(root, client.root_dir)
  H.eq(1, #vim.lsp.get_clients({ name = 'ctxfs' }))
end)

H.test('bad options are reported once and ignored, not raised', function()
  H.clear_messages()
  local ok = pcall(require('ctxfs').setup, { binary = H.bin, mode = 'yolo', bogus = 1, approval_timeout = -3 })
  H.ok(ok, 'setup did not raise')
  local m = H.messages_matching('^ctxfs: setup:')
  H.eq(1, #m, 'one message')
  H.match(m[1].msg, 'mode = "yolo" must be one of read%-only, ask, accept%-edits, trust')
  H.match(m[1].msg, 'unknown option "bogus"')
  H.match(m[1].msg, 'approval_timeout')
  H.eq(nil, config.options.mode, 'bad mode not kept')
end)

H.test('options become initializationOptions with the server names', function()
  config.set({
    binary = H.bin,
    mode = 'accept-edits',
    embedder = 'none',
    host = 'fresh',
    approval_timeout = 30,
    embedder_model = 'm',
    start = function(r)
      return r .. '/sub'
    end,
  })
  local o = config.init_options(root, 0, { editTimeoutMs = 500 })
  H.eq({
    mode = 'accept-edits',
    embedder = 'none',
    host = 'fresh',
    approvalTimeout = 30,
    embedderModel = 'm',
    start = root .. '/sub',
    editTimeoutMs = 500,
  }, o)
  config.set({ binary = H.bin })
end)

H.test('vim.lsp.config overrides reach the server (init_options = {} included)', function()
  H.stop_all()
  vim.lsp.config('ctxfs', { init_options = {} })
  require('ctxfs').setup({ binary = H.bin, mode = 'read-only' })
  vim.cmd('bufdo bwipeout!')
  local _, client = H.edit(root .. '/notes.md')
  local st = require('ctxfs.client').state[client.id]
  H.wait(function()
    return st.server_mode ~= nil
  end, 'the mode report')
  H.eq('read-only', st.server_mode, 'mode from setup with an empty vim.lsp.config init_options')
  vim.lsp.config('ctxfs', { init_options = { mode = 'trust' } })
  H.stop_all()
  vim.cmd('bufdo bwipeout!')
  _, client = H.edit(root .. '/notes.md')
  st = require('ctxfs.client').state[client.id]
  H.wait(function()
    return st.server_mode ~= nil
  end, 'the mode report')
  H.eq('trust', st.server_mode, 'vim.lsp.config init_options win over setup')
  vim.lsp.config('ctxfs', { init_options = vim.empty_dict() })
end)

H.test('the help file has valid, unique tags (:helptags) and :help finds them', function()
  local copy = H.tmp .. '/helpcopy'
  vim.fn.mkdir(copy .. '/doc', 'p')
  vim.uv.fs_copyfile(H.plugin .. '/doc/ctxfs.txt', copy .. '/doc/ctxfs.txt')
  vim.v.errmsg = ''
  vim.cmd('helptags ' .. vim.fn.fnameescape(copy .. '/doc'))
  H.eq('', vim.v.errmsg, 'no helptags error (a duplicate tag would be E154)')
  vim.opt.rtp:append(copy)
  for _, tag in ipairs({ 'ctxfs', ':Ctxfs-results', 'ctxfs.call()', 'ctxfs-highlights', 'ctxfs-options' }) do
    vim.cmd('help ' .. tag)
    H.eq('help', vim.bo.buftype, tag)
    vim.cmd('helpclose')
  end
end)

H.finish()
