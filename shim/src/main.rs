//! `mcp-yieldshell`: the stdio MCP server (work in progress; see issue 3).

fn main() {
    eprintln!("mcp-yieldshell: not built yet");
    std::process::exit(1);
}
