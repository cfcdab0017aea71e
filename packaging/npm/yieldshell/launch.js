// The launcher of the `yieldshell` npm package (the esbuild/biome pattern): npm installs only the
// optional dependency whose `os` and `cpu` match this machine, `@yieldshell/<os>-<cpu>`, which
// holds the three native binaries side by side in its `bin/` (`.exe` files on Windows). Each of
// this package's commands runs the matching binary there with the same arguments and stdio, so
// `npx -y yieldshell` speaks MCP on stdin/stdout, and the shim finds `yieldshelld` beside its own
// executable.
"use strict";

const { spawn } = require("node:child_process");
const path = require("node:path");

const PLATFORMS = {
  "linux x64": "@yieldshell/linux-x64",
  "linux arm64": "@yieldshell/linux-arm64",
  "darwin x64": "@yieldshell/darwin-x64",
  "darwin arm64": "@yieldshell/darwin-arm64",
  "win32 x64": "@yieldshell/win32-x64",
};

function binaryPath(name) {
  const key = `${process.platform} ${process.arch}`;
  const pkg = PLATFORMS[key];
  if (!pkg) {
    throw new Error(
      `yieldshell has no binaries for ${key}; supported: ${Object.keys(PLATFORMS).join(", ")}. ` +
        "Build from source instead: https://github.com/yieldshell/yieldshell#install",
    );
  }
  let manifest;
  try {
    manifest = require.resolve(`${pkg}/package.json`);
  } catch {
    throw new Error(
      `yieldshell: the package ${pkg} that holds the binaries for ${key} is not installed. ` +
        "It is an optional dependency: reinstall without --no-optional / --omit=optional.",
    );
  }
  const file = process.platform === "win32" ? `${name}.exe` : name;
  return path.join(path.dirname(manifest), "bin", file);
}

function run(name) {
  let bin;
  try {
    bin = binaryPath(name);
  } catch (e) {
    process.stderr.write(`${e.message}\n`);
    process.exit(1);
  }
  const child = spawn(bin, process.argv.slice(2), { stdio: "inherit" });
  // The client stops the server with a signal as often as by closing stdin: pass it on, so the
  // native process shuts down as it would if started directly.
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
    process.on(signal, () => child.kill(signal));
  }
  child.on("error", (e) => {
    process.stderr.write(`yieldshell: running ${bin}: ${e.message}\n`);
    process.exit(1);
  });
  child.on("exit", (code, signal) => {
    if (signal) {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    } else {
      process.exit(code ?? 1);
    }
  });
}

module.exports = { run, binaryPath };
