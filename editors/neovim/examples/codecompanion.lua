-- ctxfs for Neovim, example: ctxfs's tools as CodeCompanion function tools, built from
-- require('ctxfs').tools() and run with require('ctxfs').call(), so a CodeCompanion chat reads
-- Neovim's unsaved buffers, edits them as undoable changes and gets ctxfs's ids, stubs and diffs.
-- It is written against CodeCompanion's documented tool interface (a tool table with `schema`,
-- `cmds` and `output`); CodeCompanion could not be installed where this was written, so the
-- plugin's tests drive it the way CodeCompanion calls function tools, not CodeCompanion itself.
--
-- Use (lazy.nvim), with ctxfs set up first:
--
--   require('codecompanion').setup({
--     interactions = {
--       chat = {
--         tools = vim.tbl_extend('force', require('ctxfs_codecompanion').tools(), {
--           groups = { ctxfs = { description = 'ctxfs file tools', tools = require('ctxfs_codecompanion').names() } },
--         }),
--       },
--     },
--   })
--
-- (copy this file to lua/ctxfs_codecompanion.lua in your config). tools() asks the ctxfs
-- server of the current buffer's project for the list, starting it if needed; outside a
-- project it returns no tools and says why.
local M = {}

local PREFIX = 'ctxfs_'

--- CodeCompanion tool configs for every ctxfs tool, keyed by their prefixed names.
---@return table<string, table>
function M.tools()
  local ctxfs = require('ctxfs')
  local specs, err = ctxfs.tools({ prefix = PREFIX })
  if not specs then
    vim.notify('ctxfs: no tools for CodeCompanion: ' .. tostring(err), vim.log.levels.WARN)
    return {}
  end
  local out = {}
  for _, spec in ipairs(specs) do
    local name = spec['function'].name
    local tool = name:sub(#PREFIX + 1)
    out[name] = {
      description = spec['function'].description,
      callback = {
        name = name,
        schema = spec,
        cmds = {
          -- Asynchronous: CodeCompanion passes an output handler as the fourth argument.
          function(_, args, _, output_handler)
            ctxfs.call(tool, args, function(call_err, result)
              if call_err then
                return output_handler({ status = 'error', data = call_err })
              end
              -- A refusal is an error the model must read, so its text goes back either way.
              output_handler({ status = result.isError and 'error' or 'success', data = result.text })
            end)
          end,
        },
        output = {
          success = function(self, tools, _, stdout)
            local text = vim.iter(stdout):flatten():join('\n')
            tools.chat:add_tool_output(self, text, text:match('^[^\n]*'))
          end,
          error = function(self, tools, _, stderr)
            local text = vim.iter(stderr):flatten():join('\n')
            tools.chat:add_tool_output(self, text, text:match('^[^\n]*'))
          end,
        },
      },
    }
  end
  return out
end

--- The prefixed names, for a tool group.
---@return string[]
function M.names()
  local names = vim.tbl_keys(M.tools())
  table.sort(names)
  return names
end

return M
