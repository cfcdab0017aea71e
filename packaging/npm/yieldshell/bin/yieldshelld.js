#!/usr/bin/env node
// Runs the native `yieldshelld` of this platform's @yieldshell/<os>-<cpu> package (see launch.js).
require("../launch.js").run("yieldshelld");
