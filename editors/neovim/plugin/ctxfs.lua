-- ctxfs for Neovim: loaded at start-up. Defines `:Ctxfs`, the highlight groups, the
-- `<Plug>(ctxfs-recall)` mapping, and attaches buffers that have no filetype (vim.lsp.enable
-- only looks at buffers with one). It starts no server by itself.
if vim.g.loaded_ctxfs then
  return
end
vim.g.loaded_ctxfs = true

if vim.fn.has('nvim-0.11') ~= 1 then
  vim.api.nvim_create_user_command('Ctxfs', function()
    vim.notify('ctxfs: this plugin needs Neovim 0.11 or newer (this is ' .. tostring(vim.version()) .. ')', vim.log.levels.ERROR)
  end, { nargs = '*' })
  return
end

require('ctxfs.highlight').define()

vim.api.nvim_create_user_command('Ctxfs', function(opts)
  require('ctxfs.commands').run(opts.args)
end, {
  nargs = '*',
  desc = 'ctxfs: results, recall, changes, instructions, mode, grants, log, restart, status',
  complete = function(arglead, cmdline)
    return require('ctxfs.commands').complete(arglead, cmdline)
  end,
})

vim.keymap.set('n', '<Plug>(ctxfs-recall)', function()
  require('ctxfs').recall_under_cursor()
end, { desc = 'ctxfs: open the result whose id is under the cursor' })

local group = vim.api.nvim_create_augroup('ctxfs.plugin', { clear = true })

vim.api.nvim_create_autocmd('ColorScheme', {
  group = group,
  callback = function()
    require('ctxfs.highlight').define()
  end,
})

-- vim.lsp.enable() starts servers on FileType; a file with no filetype gets ctxfs here.
vim.api.nvim_create_autocmd({ 'BufReadPost', 'BufNewFile' }, {
  group = group,
  callback = function(args)
    vim.schedule(function()
      local buf = args.buf
      if not vim.api.nvim_buf_is_valid(buf) or vim.bo[buf].filetype ~= '' or vim.bo[buf].buftype ~= '' then
        return
      end
      if not (vim.lsp.is_enabled and vim.lsp.is_enabled('ctxfs')) then
        return
      end
      if #vim.lsp.get_clients({ bufnr = buf, name = 'ctxfs' }) > 0 then
        return
      end
      require('ctxfs.client').start(buf)
    end)
  end,
})
