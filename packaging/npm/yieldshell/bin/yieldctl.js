#!/usr/bin/env node
// Runs the native `yieldctl` of this platform's @yieldshell/<os>-<cpu> package (see launch.js).
require("../launch.js").run("yieldctl");
