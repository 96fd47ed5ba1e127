-- ctxfs for Neovim, tests: `:checkhealth ctxfs` output, captured from its buffer, with a
-- running server, with no server (the protocol asked of a short-lived one), and without a binary.
local H = dofile(vim.env.CTXFS_PLUGIN .. '/tests/helpers.lua')

local root = H.project('proj', { ['a.txt'] = 'a\n' })

local function checkhealth()
  vim.cmd('checkhealth ctxfs')
  local buf = vim.api.nvim_get_current_buf()
  local text = H.text(buf)
  if #vim.api.nvim_list_tabpages() > 1 then
    vim.cmd('tabclose')
  else
    vim.cmd('bwipeout ' .. buf)
  end
  return text
end

H.test('with no server running: the binary, its protocol (asked directly), the data directory', function()
  H.setup({})
  local text = checkhealth()
  io.stderr:write(text .. '\n')
  H.match(text, 'ctxfs: binary')
  H.match(text, 'OK ' .. vim.pesc(H.bin) .. ' %(ctxfs %d+%.%d+%.%d+%)', 'binary and version')
  H.match(text, 'WARNING no ctxfs server is running')
  H.match(text, 'OK ' .. vim.pesc(H.bin) .. ' speaks protocol %d+', 'protocol from a short-lived server')
  H.match(text, 'OK ' .. vim.pesc(vim.env.XDG_DATA_HOME) .. '/ctxfs is writable')
  H.match(text, "OK the 'ctxfs' language server config is enabled")
  H.eq({}, H.server_pids(), 'the short-lived server has ended')
end)

H.test('with a server: attached, protocol, posture and mode, session', function()
  H.edit(root .. '/a.txt')
  H.call('read', { file_path = root .. '/a.txt' })
  local text = checkhealth()
  io.stderr:write(text .. '\n')
  local r = vim.pesc(vim.fn.fnamemodify(root, ':~'))
  H.match(text, 'OK ' .. r .. ': ctxfs %d+%.%d+%.%d+, protocol %d+ %(this plugin needs 2 or newer%)')
  H.match(text, 'OK ' .. r .. ': client %d+ attached to 1 buffer')
  H.match(text, 'OK ' .. r .. ': posture: .*' .. vim.pesc(root) .. '.*; mode ask; session %S+')
  H.match(text, 'embedder')
  H.no_match(text, 'ERROR', 'no errors')
end)

H.test('the embedder section says where the model files are, or where it looked', function()
  local text = checkhealth()
  local ok = text:find('OK embedder static: model files in ') or text:find('WARNING embedder static: no model files')
  H.ok(ok, 'an embedder line')
  require('ctxfs.config').options.embedder = 'none'
  text = checkhealth()
  H.match(text, 'OK embedder none: search ranks by words only')
  require('ctxfs.config').options.embedder = nil
end)

H.test('without the binary: an error that says what to do', function()
  H.stop_all()
  require('ctxfs').setup({ binary = '/nonexistent/ctxfs' })
  local text = checkhealth()
  H.match(text, 'ERROR cannot start: the binary "/nonexistent/ctxfs" is not an executable file')
  H.match(text, 'ADVICE')
  require('ctxfs').setup({ binary = H.bin })
end)

H.test('a data directory that cannot be written is an error', function()
  local ro = H.tmp .. '/ro'
  vim.fn.mkdir(ro, 'p')
  vim.uv.fs_chmod(ro, tonumber('500', 8))
  require('ctxfs').setup({ binary = H.bin, data = ro .. '/data' })
  local text = checkhealth()
  vim.uv.fs_chmod(ro, tonumber('700', 8))
  if vim.uv.getuid and vim.uv.getuid() == 0 then
    -- root writes anywhere: the check is then only that it says writable.
    H.match(text, 'is writable')
  else
    H.match(text, 'ERROR ' .. vim.pesc(ro) .. '/data is not writable')
  end
  require('ctxfs').setup({ binary = H.bin })
end)

H.finish()
