-- ctxfs for Neovim: the language-server config `vim.lsp.enable('ctxfs')` picks up from the
-- runtimepath. It starts `ctxfs lsp` for every file buffer inside a project; the options come
-- from require('ctxfs').setup{} (or vim.lsp.config('ctxfs', {...}) overrides). The logic is in
-- lua/ctxfs/client.lua.
return require('ctxfs.client').lsp_config()
