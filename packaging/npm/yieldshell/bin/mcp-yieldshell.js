#!/usr/bin/env node
// Runs the native `mcp-yieldshell` of this platform's @yieldshell/<os>-<cpu> package (see launch.js).
require("../launch.js").run("mcp-yieldshell");
