"""Tools from MCP servers: settings (config), one connection per server (connection), the registry provider (tools).

Only `connection` imports the `mcp` SDK (the `mcp` extra), and only when MCP_SERVERS is set.
"""
