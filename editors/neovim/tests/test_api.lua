-- ctxfs for Neovim, tests: the Lua API for agent plugins — tools() in the shapes chat plugins
-- take, call() in the buffer's session (also from a chat buffer outside every project),
-- new_request/compact, mcp_cmd — and the CodeCompanion example driven the way CodeCompanion
-- calls a function tool (CodeCompanion itself cannot be installed here).
local H = dofile(vim.env.CTXFS_PLUGIN .. '/tests/helpers.lua')
local ctxfs = require('ctxfs')

local root = H.project('proj', { ['src/main.rs'] = 'fn main() {}\n' })
H.setup({ mode = 'trust' })
local buf = H.edit(root .. '/src/main.rs')

H.test('tools(): the OpenAI function shape by default', function()
  local tools, err = ctxfs.tools()
  H.eq(nil, err)
  H.ok(#tools >= 10, 'many tools: ' .. #tools)
  local names = {}
  for _, t in ipairs(tools) do
    H.eq('function', t.type)
    H.eq('string', type(t['function'].description))
    H.eq('object', t['function'].parameters.type)
    names[t['function'].name] = true
  end
  for _, want in ipairs({ 'read', 'write', 'edit', 'grep', 'search', 'recall', 'apply_patch' }) do
    H.ok(names[want], 'has ' .. want)
  end
  -- Schemas survive a JSON round trip as objects (no {} turned into []).
  local read = vim.iter(tools):find(function(t)
    return t['function'].name == 'read'
  end)
  local json = vim.json.encode(read)
  H.match(json, '"properties":{')
  H.no_match(json, '"properties":%[')
end)

H.test('tools(): mcp and anthropic shapes, a name prefix, and the callback form', function()
  local mcp = ctxfs.tools({ format = 'mcp', prefix = 'ctxfs_' })
  H.ok(mcp[1].name:find('^ctxfs_'), mcp[1].name)
  H.eq('table', type(mcp[1].inputSchema))
  local anth = ctxfs.tools({ format = 'anthropic' })
  H.eq('table', type(anth[1].input_schema))
  local err, tools = H.await(function(cb)
    ctxfs.tools({ prefix = 'x_' }, cb)
  end)
  H.eq(nil, err)
  H.ok(tools[1]['function'].name:find('^x_'))
end)

H.test("call(): runs in the buffer's session, the same one :Ctxfs results shows", function()
  local r = H.call('read', { file_path = root .. '/src/main.rs' })
  H.eq(false, r.isError)
  H.match(r.text, 'fn main')
  H.eq(root .. '/src/main.rs', r.facts.path)
  local st = ctxfs.status(buf)
  H.ok(st.session, 'a session')
  local r2 = H.call('stat', { path = root .. '/src/main.rs' })
  H.ok(tonumber(r2.id:sub(2), 16) > tonumber(r.id:sub(2), 16), 'ids go on in one session')
end)

H.test('call(): a tool error is a result the model reads; misuse is an error message', function()
  local r = H.call('read', { file_path = root .. '/missing.rs' })
  H.eq(true, r.isError)
  local err = H.await(function(cb)
    ctxfs.call('no_such_tool', {}, cb)
  end)
  local r3 = select(2, H.await(function(cb)
    ctxfs.call('no_such_tool', {}, cb)
  end))
  H.ok(err ~= nil or (r3 and r3.isError), 'an unknown tool is refused')
  local e2 = H.await(function(cb)
    ctxfs.call(42, {}, cb)
  end)
  H.match(e2, 'the tool must be a name')
  local e3 = H.await(function(cb)
    ctxfs.call('read', 'not a table', cb)
  end)
  H.match(e3, 'arguments must be a table')
end)

H.test('call() with no arguments sends {} (not [])', function()
  local r = H.call('list', nil)
  H.eq(false, r.isError, r.text)
  r = H.call('skills_list', {})
  H.eq(false, r.isError, r.text)
end)

H.test('call() from a chat buffer outside every project uses the running server', function()
  local chat = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_set_current_buf(chat)
  local r = H.call('read', { file_path = root .. '/src/main.rs' }, chat)
  H.eq(false, r.isError)
  vim.api.nvim_set_current_buf(buf)
end)

H.test('new_request() and compact()', function()
  local err = H.await(function(cb)
    ctxfs.new_request(true, cb)
  end)
  H.eq(nil, err)
  local e2, text = H.await(function(cb)
    ctxfs.compact(cb)
  end)
  H.eq(nil, e2)
  H.match(text, 'main%.rs')
end)

H.test('mcp_cmd(): the same project over MCP', function()
  H.eq({ H.bin, 'mcp', '--root', root, '--mode', 'trust' }, ctxfs.mcp_cmd({ bufnr = buf }))
  H.eq({ H.bin, 'mcp', '--root', '/x', '--mode', 'ask' }, ctxfs.mcp_cmd({ root = '/x', mode = 'ask' }))
end)

H.test('the CodeCompanion example: its function tool answers through the output handler', function()
  local example = dofile(vim.env.CTXFS_PLUGIN .. '/examples/codecompanion.lua')
  local tools = example.tools()
  local read = tools.ctxfs_read
  H.ok(read, 'a ctxfs_read tool: ' .. vim.inspect(vim.tbl_keys(tools)))
  H.eq('function', read.callback.schema.type)
  H.eq('ctxfs_read', read.callback.schema['function'].name)
  -- CodeCompanion calls cmds[i](self, args, input, output_handler) and then output.success(self, tools, cmd, stdout).
  local got
  read.callback.cmds[1]({ tool = { opts = {} } }, { file_path = root .. '/src/main.rs' }, nil, function(out)
    got = out
  end)
  H.wait(function()
    return got
  end, 'the output handler')
  H.eq('success', got.status)
  H.match(got.data, 'fn main')
  local added
  local fake_tools = {
    chat = {
      add_tool_output = function(_, _, llm, user)
        added = { llm = llm, user = user }
      end,
    },
  }
  read.callback.output.success({ args = { file_path = 'src/main.rs' } }, fake_tools, {}, { got.data })
  H.match(added.llm, 'fn main')
end)

H.finish()
