"""Side-by-side comparison of mcp-yieldshell's profiles with the published packages.

The same cases (the packages' own test cases, re-expressed as MCP tool calls) run against the
published `mcp-shell-server` 1.1.14 and `mcp-background-job` 0.1.2 and against the four profiles
`mcp-shell-server`, `shell`, `mcp-background-job` and `jobs` of the built `mcp-yieldshell`, each
through the official Python MCP client over stdio. Every answer is normalized (the fixture
directory, job ids and start times replaced by placeholders) and compared.

A difference fails the run unless `deliberate.json` lists it, by case id or by one of the case's
tags, with a reason. A case listed under "fixed" names a difference this project removed: it must
now be identical (it is counted as fixed). Listed entries that no longer differ are reported, so
the list does not rot.

Usage: compare.py --shim PATH --yieldctl PATH --shell-server PATH --job-server PATH [--only PROFILE]
"""

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
CALL_TIMEOUT = 60.0
POLL_TIMEOUT = 15.0

# ---------------------------------------------------------------------------------------------
# Shell server cases: (id, arguments, group, tags, file to read afterwards)
# ---------------------------------------------------------------------------------------------

ALLOWED = (
    "echo,cat,ls,pwd,tr,wc,sort,grep,head,tail,printenv,sleep,false,true,find,awk,sh,env,"
    "xargs,python3,sed,yes,seq,touch,mkdir,printf,git,kill,uniq,rev,nosuchprog,./run.sh,"
    "bash,time,tee,cut,basename,dirname,id,date,stat,test"
)

GROUPS = {
    "basic": {"ALLOW_COMMANDS": ALLOWED},
    "spaces": {"ALLOW_COMMANDS": " echo , ls ,cat  "},
    "none": {},
    "alias": {"ALLOWED_COMMANDS": "echo,wc"},
    "both": {"ALLOW_COMMANDS": "echo", "ALLOWED_COMMANDS": "wc"},
    "patterns": {"ALLOW_COMMANDS": "cat", "ALLOW_PATTERNS": "ec.*,w[c]"},
    "limits": {
        "ALLOW_COMMANDS": "echo,yes,sleep,seq,head,cat,sh",
        "MCP_SHELL_OUTPUT_LIMIT_BYTES": "100",
        "MCP_SHELL_DEFAULT_TIMEOUT_SECONDS": "1",
        "MCP_SHELL_MAX_TIMEOUT_SECONDS": "2",
    },
    "env": {
        "ALLOW_COMMANDS": "printenv,echo",
        "MCP_SHELL_CHILD_ENV_ALLOWLIST": "COMPARE_VISIBLE, bad-key",
        "COMPARE_VISIBLE": "shown",
        "COMPARE_SECRET_TOKEN": "hidden-value-123",
    },
    "safepath": {"ALLOW_COMMANDS": "echo,ls", "MCP_SHELL_SAFE_PATH": "/bin"},
}


def shell_cases():
    c = []

    def add(case_id, args, group="basic", tags=(), after=None):
        c.append((case_id, args, group, tuple(tags), after))

    # Basic execution, stdin, stripping, exit statuses (test_server.py, test_shell_executor.py)
    add("echo", {"command": ["echo", "hello world"]})
    add("echo-args", {"command": ["echo", "a", "b", "c"]})
    add("echo-strip", {"command": ["printf", "  padded  \n\n"]}, tags=["operators"])
    add("echo-empty-output", {"command": ["true"]})
    add("echo-backslash", {"command": ["echo", "a\\nb"]}, tags=["builtins"])
    add("printf-format", {"command": ["printf", "%s-%s\n", "x", "y"]}, tags=["operators"])
    add("stdin-cat", {"command": ["cat"], "stdin": "from stdin\n"})
    add("stdin-wc", {"command": ["wc", "-l"], "stdin": "a\nb\nc\n"})
    add("stdin-empty", {"command": ["cat"], "stdin": ""})
    add("stdin-none-cat", {"command": ["cat"]})
    add("stderr-only", {"command": ["ls", "/nonexistent-compare-path"]}, tags=["exit-status"])
    add("stdout-and-stderr", {"command": ["ls", "file.txt", "/nonexistent-compare-path"]}, tags=["exit-status"])
    add("false", {"command": ["false"]}, tags=["exit-status"])
    add("exit-3", {"command": ["sh", "-c", "echo out; echo err >&2; exit 3"]}, tags=["wrappers", "operators"])
    add("signal-kill", {"command": ["python3", "-c", "import os; os.kill(os.getpid(), 9)"]}, tags=["wrappers", "operators"])
    add("pwd", {"command": ["pwd"]})
    add("ls", {"command": ["ls"]})
    add("ls-file", {"command": ["ls", "file.txt"]})
    add("cat-file", {"command": ["cat", "file.txt"]})
    add("unicode", {"command": ["echo", "héllo ✓"]})
    add("invalid-utf8", {"command": ["printf", "\\377\\376ok\n"]}, tags=["operators"])
    add("many-lines", {"command": ["seq", "1", "200"]})
    add("empty-elements", {"command": ["", "echo", "", "x"]}, tags=["empty-elements"])
    add("only-empty-elements", {"command": ["", ""]}, tags=["empty-elements"])
    add("space-element", {"command": ["echo", " "]})
    add("quotes-kept", {"command": ["echo", "it's \"quoted\""]})
    add("dollar-literal", {"command": ["echo", "$HOME", "$(id)"]})
    add("glob-literal", {"command": ["echo", "*"]})
    add("tilde-literal", {"command": ["echo", "~"]})
    add("newline-arg", {"command": ["echo", "a\nb"]}, tags=["operators"])
    add("backquote-arg", {"command": ["echo", "`id`"]}, tags=["operators"])
    add("semicolon-in-arg", {"command": ["echo", "a;b"]}, tags=["operators"])
    add("amp-in-arg", {"command": ["echo", "a&&b"]}, tags=["operators"])
    add("pipe-in-arg", {"command": ["echo", "a|b"]})
    add("greater-in-arg", {"command": ["echo", "a>b"]})
    # Argument validation (test_server_validation.py)
    add("missing-command", {}, tags=["validation"])
    add("command-string", {"command": "ls -l"}, tags=["validation"])
    add("command-empty", {"command": []}, tags=["validation"])
    add("command-number-item", {"command": ["echo", 1]}, tags=["validation"])
    add("command-null", {"command": None}, tags=["validation"])
    add("stdin-not-string", {"command": ["cat"], "stdin": 5}, tags=["validation"])
    add("timeout-zero", {"command": ["echo", "x"], "timeout": 0}, tags=["validation"])
    add("timeout-negative", {"command": ["echo", "x"], "timeout": -1}, tags=["validation"])
    add("timeout-string", {"command": ["echo", "x"], "timeout": "5"}, tags=["validation"])
    add("timeout-float", {"command": ["echo", "x"], "timeout": 1.5}, tags=["validation"])
    add("timeout-ok", {"command": ["echo", "x"], "timeout": 5})
    add("timeout-clamped", {"command": ["echo", "x"], "timeout": 100000})
    add("extra-argument", {"command": ["echo", "x"], "unknown": 1})
    # Allowlist (test_command_validator.py)
    add("not-allowed", {"command": ["rm", "-rf", "x"]}, group="spaces")
    add("not-allowed-path", {"command": ["/bin/echo", "x"]}, tags=["allowlist"])
    add("allowed-with-spaces", {"command": ["ls", "file.txt"]}, group="spaces")
    add("unsafe-name", {"command": ["echo x"]}, tags=["allowlist"])
    add("unsafe-name-semicolon", {"command": ["echo;ls"]}, tags=["operators"])
    add("no-allowlist", {"command": ["echo", "x"]}, group="none")
    add("alias-variable", {"command": ["wc", "-c"], "stdin": "abc"}, group="alias")
    add("alias-variable-refused", {"command": ["cat"]}, group="alias")
    add("both-variables-echo", {"command": ["echo", "x"]}, group="both")
    add("both-variables-wc", {"command": ["wc", "-c"], "stdin": "ab"}, group="both")
    add("pattern-allowed", {"command": ["echo", "by pattern"]}, group="patterns", tags=["patterns"])
    add("pattern-whole-name", {"command": ["wcx"]}, group="patterns", tags=["patterns"])
    add("pattern-plain-still", {"command": ["cat", "file.txt"]}, group="patterns")
    add("pattern-refused", {"command": ["ls"]}, group="patterns", tags=["patterns"])
    # Default security policy (test_trusted_execution_contract.py)
    add("policy-sh", {"command": ["sh", "-c", "echo x"]}, tags=["wrappers"])
    add("policy-bash", {"command": ["bash", "-c", "echo x"]}, tags=["wrappers"])
    add("policy-env", {"command": ["env"]}, tags=["wrappers"])
    add("policy-xargs", {"command": ["xargs", "echo"], "stdin": "a"}, tags=["wrappers"])
    add("policy-python", {"command": ["python3", "-c", "print(1)"]}, tags=["wrappers"])
    add("policy-sed", {"command": ["sed", "s/a/b/"], "stdin": "a"}, tags=["wrappers"])
    add("policy-time", {"command": ["time", "echo", "x"]}, tags=["wrappers"])
    add("policy-find-exec", {"command": ["find", ".", "-name", "file.txt", "-exec", "cat", "{}", "+"]}, tags=["wrappers"])
    add("policy-find-fprint", {"command": ["find", ".", "-fprint", "out.txt"]}, tags=["wrappers"])
    add("policy-find-ok", {"command": ["find", "sub", "-name", "*.txt"]})
    add("policy-awk-system", {"command": ["awk", "BEGIN{system(\"id\")}"]}, tags=["wrappers"])
    add("policy-awk-ok", {"command": ["awk", "{print $2}"], "stdin": "a b\n"})
    add("policy-git-config", {"command": ["git", "config", "--list"]}, tags=["wrappers"])
    # Shell operators (test_shell_executor.py: test_shell_operators_not_allowed, …)
    add("op-semicolon", {"command": ["echo", "a", ";", "echo", "b"]}, tags=["operators"])
    add("op-and", {"command": ["echo", "a", "&&", "echo", "b"]}, tags=["operators"])
    add("op-or", {"command": ["false", "||", "echo", "b"]}, tags=["operators"])
    add("op-and-refused-second", {"command": ["echo", "a", "&&", "rm", "x"]}, tags=["operators"])
    # Pipelines (test_shell_executor_pipeline.py)
    add("pipe-simple", {"command": ["echo", "hello", "|", "tr", "a-z", "A-Z"]}, tags=["pipelines"])
    add("pipe-three", {"command": ["seq", "1", "5", "|", "sort", "-r", "|", "head", "-n", "2"]}, tags=["pipelines"])
    add("pipe-refused-stage", {"command": ["echo", "x", "|", "rm", "y"]})
    add("pipe-leading", {"command": ["|", "echo", "x"]}, tags=["pipelines"])
    add("pipe-trailing", {"command": ["echo", "x", "|"]}, tags=["pipelines"])
    add("pipe-double", {"command": ["echo", "x", "|", "|", "wc"]}, tags=["pipelines"])
    add("pipe-with-semicolon", {"command": ["echo", "x", "|", "wc", ";", "ls"]}, tags=["pipelines"])
    add("pipe-failing-stage", {"command": ["ls", "/nonexistent-compare-path", "|", "wc", "-l"]}, tags=["pipelines"])
    add("pipe-failing-silent", {"command": ["false", "|", "wc", "-l"]}, tags=["pipelines"])
    add("pipe-stdin-ignored", {"command": ["cat", "|", "wc", "-c"], "stdin": "abc"}, tags=["pipelines"])
    add("pipe-policy-stage", {"command": ["echo", "x", "|", "sh"]}, tags=["wrappers"])
    add("pipe-missing-program", {"command": ["echo", "x", "|", "nosuchprog"]}, tags=["missing-program"])
    add("pipe-stderr", {"command": ["ls", "file.txt", "|", "cat"]}, tags=["pipelines"])
    # Redirections (test_shell_executor_redirections.py)
    add("redirect-out", {"command": ["echo", "to file", ">", "out.txt"]}, tags=["redirections"], after="out.txt")
    add("redirect-append", {"command": ["echo", "appended", ">>", "file.txt"]}, tags=["redirections"], after="file.txt")
    add("redirect-in", {"command": ["cat", "<", "input.txt"]}, tags=["redirections"])
    add("redirect-in-out", {"command": ["tr", "a-z", "A-Z", "<", "input.txt", ">", "upper.txt"]}, tags=["redirections"], after="upper.txt")
    add("redirect-in-overrides-stdin", {"command": ["cat", "<", "input.txt"], "stdin": "ignored"}, tags=["redirections"])
    add("redirect-missing-target", {"command": ["echo", "x", ">"]}, tags=["redirections"])
    add("redirect-missing-source", {"command": ["cat", "<"]}, tags=["redirections"])
    add("redirect-operator-target", {"command": ["echo", "x", ">", ">", "y"]}, tags=["redirections"])
    add("redirect-consecutive-in", {"command": ["cat", "<", ">"]}, tags=["redirections"])
    add("redirect-absolute", {"command": ["echo", "x", ">", "/tmp/compare-abs.txt"]}, tags=["redirections"])
    add("redirect-traversal", {"command": ["cat", "<", "../outside.txt"]}, tags=["redirections"])
    add("redirect-symlink-escape", {"command": ["cat", "<", "escape/hostname"]}, tags=["redirections"])
    add("redirect-missing-input", {"command": ["cat", "<", "nosuch.txt"]}, tags=["redirections"])
    add("redirect-into-directory", {"command": ["echo", "x", ">", "sub"]}, tags=["redirections"])
    add("redirect-pipeline-out", {"command": ["echo", "b\na", "|", "sort", ">", "sorted.txt"]}, tags=["redirections", "pipelines"], after="sorted.txt")
    add("redirect-pipeline-in", {"command": ["sort", "<", "input.txt", "|", "head", "-n", "1"]}, tags=["redirections", "pipelines"])
    # Directories (test_directory_manager.py, test_server.py)
    add("dir-relative", {"command": ["ls"], "directory": "sub"})
    add("dir-nested", {"command": ["pwd"], "directory": "sub/nested"})
    add("dir-absolute", {"command": ["ls"], "directory": "<dir>/sub"})
    add("dir-missing", {"command": ["ls"], "directory": "<dir>/missing"})
    add("dir-file", {"command": ["ls"], "directory": "<dir>/file.txt"})
    add("dir-empty", {"command": ["ls"], "directory": ""})
    add("dir-blank", {"command": ["ls"], "directory": "  "})
    add("dir-not-string", {"command": ["ls"], "directory": 5}, tags=["validation"])
    add("dir-redirect", {"command": ["echo", "in sub", ">", "made.txt"], "directory": "sub"}, tags=["redirections"], after="sub/made.txt")
    # Missing programs, PATH and environment (test_process_manager*.py)
    add("missing-program", {"command": ["nosuchprog"]}, tags=["missing-program"])
    add("relative-program", {"command": ["./run.sh"]})
    add("env-minimal", {"command": ["printenv"]}, group="env", tags=["environment"])
    add("env-secret-hidden", {"command": ["printenv", "COMPARE_SECRET_TOKEN"]}, group="env", tags=["environment"])
    add("env-allowlisted", {"command": ["printenv", "COMPARE_VISIBLE"]}, group="env", tags=["environment"])
    add("env-path", {"command": ["printenv", "PATH"]}, group="env", tags=["environment"])
    add("safe-path-custom", {"command": ["ls", "file.txt"]}, group="safepath")
    add("safe-path-echo", {"command": ["echo", "x"]}, group="safepath")
    # Timeouts and output limits
    add("timeout-default", {"command": ["sleep", "5"]}, group="limits", tags=["timeouts"])
    add("timeout-explicit", {"command": ["sleep", "5"], "timeout": 1}, group="limits", tags=["timeouts"])
    add("timeout-max-clamp", {"command": ["sleep", "1"], "timeout": 100}, group="limits")
    add("limit-stdout", {"command": ["seq", "1", "1000"]}, group="limits", tags=["limits"])
    add("limit-infinite", {"command": ["yes"]}, group="limits", tags=["limits"])
    add("limit-under", {"command": ["seq", "1", "5"]}, group="limits")
    add("limit-pipeline", {"command": ["yes", "|", "head", "-n", "3"]}, group="limits", tags=["limits", "pipelines"])
    add("unknown-tool", {"__tool": "no_such_tool"}, tags=["unknown-tool"])
    return c


# ---------------------------------------------------------------------------------------------
# Job server scenarios: (id, env, steps, tags). Steps: ["call", tool, args] with "$N" for the
# N-th job id; ["done", N] polls get_job_status until the job is not running; ["seen", N, text]
# polls get_job_output until stdout contains text.
# ---------------------------------------------------------------------------------------------


def job_scenarios():
    s = []

    def add(sid, steps, env=None, tags=()):
        s.append((sid, env or {}, steps, tuple(tags)))

    run = lambda cmd: ["call", "execute_command", {"command": cmd}]  # noqa: E731
    st = lambda n: ["call", "get_job_status", {"job_id": f"${n}"}]  # noqa: E731
    out = lambda n: ["call", "get_job_output", {"job_id": f"${n}"}]  # noqa: E731
    tail = lambda n, k=None: ["call", "tail_job_output", {"job_id": f"${n}", **({} if k is None else {"lines": k})}]  # noqa: E731
    kill = lambda n: ["call", "kill_job", {"job_id": f"${n}"}]  # noqa: E731
    done = lambda n: ["done", n]  # noqa: E731
    seen = lambda n, t: ["seen", n, t]  # noqa: E731
    inter = lambda n, text: ["call", "interact_with_job", {"job_id": f"${n}", "input": text}]  # noqa: E731
    lst = ["call", "list_jobs", {}]

    # test_server_integration.py, test_service.py, test_process.py
    add("echo-completes", [run("echo hello world"), done(0), st(0), out(0)])
    add("output-multiline", [run("printf 'a\\nb\\nc\\n'"), done(0), out(0)])
    add("output-no-final-newline", [run("printf abc"), done(0), out(0)])
    add("output-stderr", [run("ls /nonexistent-compare-path"), done(0), st(0), out(0)])
    add("output-crlf", [run("printf 'a\\r\\nb\\r\\n'"), done(0), out(0)])
    add("exit-nonzero", [run("false"), done(0), st(0)])
    add("exit-code-3", [run("sh -c 'exit 3'"), done(0), st(0)])
    add("tail-default", [run("seq 1 100"), done(0), tail(0)])
    add("tail-3", [run("seq 1 10"), done(0), tail(0, 3)])
    add("tail-1000", [run("seq 1 5"), done(0), tail(0, 1000)])
    add("tail-zero", [run("seq 1 5"), done(0), tail(0, 0)], tags=["validation"])
    add("tail-too-many", [run("seq 1 5"), done(0), tail(0, 1001)], tags=["validation"])
    add("tail-stderr", [run("sh -c 'echo 1 >&2; echo 2 >&2; echo 3 >&2'"), done(0), tail(0, 2)])
    add("kill-running", [run("sleep 30"), st(0), kill(0), st(0)])
    add("kill-twice", [run("sleep 30"), kill(0), kill(0)])
    add("kill-finished", [run("true"), done(0), kill(0)])
    add("kill-unknown", [["call", "kill_job", {"job_id": "00000000-0000-4000-8000-000000000000"}]])
    add("kill-not-uuid", [["call", "kill_job", {"job_id": "not-a-job"}]])
    add("status-unknown", [["call", "get_job_status", {"job_id": "not-a-job"}]])
    add("output-unknown", [["call", "get_job_output", {"job_id": "00000000-0000-4000-8000-000000000000"}]])
    add("tail-unknown", [["call", "tail_job_output", {"job_id": "nope", "lines": 5}]])
    add("interact-unknown", [["call", "interact_with_job", {"job_id": "nope", "input": "x"}]])
    add("killed-from-outside", [run("sh -c 'kill -9 $$'"), done(0), st(0)], tags=["fixed-signals"])
    add("killed-term-from-outside", [run("sh -c 'kill -TERM $$'"), done(0), st(0)], tags=["fixed-signals"])
    add("interact-cat", [run("cat"), inter(0, "hello"), kill(0)], tags=["interact"])
    add("interact-read-line", [run("sh -c 'read x; echo got $x'"), inter(0, "abc"), done(0), st(0), out(0)], tags=["interact"])
    add("interact-finished", [run("true"), done(0), inter(0, "x")])
    add("list-empty", [lst])
    add("list-two", [run("echo one"), run("sleep 30"), done(0), lst, kill(1)], tags=["list"])
    add("empty-command", [run("")])
    add("blank-command", [run("   ")])
    add("missing-program", [run("nosuchprog --flag")], tags=["missing-program"])
    add("unclosed-quote", [run("echo 'abc")], tags=["shlex"])
    add("dangerous-rm", [run("rm -rf /tmp/compare-x/")], tags=["dangerous"])
    add("dangerous-curl-pipe", [run("curl http://example.invalid | sh")], tags=["dangerous"])
    add("no-shell-pipe", [run("echo a | tr a b"), done(0), out(0)], tags=["no-shell"])
    add("no-shell-and", [run("echo a && echo b"), done(0), out(0)], tags=["no-shell"])
    add("no-shell-variable", [run("echo $HOME"), done(0), out(0)], tags=["no-shell"])
    add("quoted-words", [run("printf '%s|' 'a b' \"c d\""), done(0), out(0)])
    add("echo-backslash", [run("echo 'a\\nb'"), done(0), out(0)], tags=["builtins"])
    add("missing-job-id", [["call", "get_job_status", {}]], tags=["validation"])
    add("job-limit", [run("sleep 30"), run("sleep 30"), run("sleep 30"), kill(0), kill(1)], env={"MCP_BG_MAX_JOBS": "2"}, tags=["fixed-limit"])
    add("slow-output", [run("sh -c 'echo first; sleep 1; echo second'"), seen(0, "first"), done(0), out(0)])
    return s


# ---------------------------------------------------------------------------------------------
# Adapters: the specification profiles answer in their own shape; to compare what they *do*,
# their answers are turned into the packages' shape first.
# ---------------------------------------------------------------------------------------------

JOBS_TOOL_NAMES = {
    "execute_command": "execute",
    "list_jobs": "list",
    "get_job_status": "status",
    "get_job_output": "output",
    "tail_job_output": "tail",
    "kill_job": "kill",
    "interact_with_job": "interact",
}


def lines_form(text):
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text[:-1] if text.endswith("\n") else text


def adapt_jobs(result):
    """The jobs profile's raw output as the package's lines; everything else as it is."""
    body = result.get("structured")
    if isinstance(body, dict) and set(body) == {"stdout", "stderr"}:
        body = {k: lines_form(v) for k, v in body.items()}
        return {**result, "structured": body, "text": body}
    return result


def adapt_shell(result):
    """The shell profile's JSON object in the package's text form."""
    body = result.get("structured")
    if not isinstance(body, dict):
        return result
    stdout = body.get("stdout", "").strip()
    stderr = body.get("stderr", "").strip()
    if body.get("error"):
        return {"isError": True, "texts": [f"Error executing command: {body['error']}"]}
    status = body.get("status", 0)
    if status:
        m = f"Command terminated by signal {-status}" if status < 0 else f"Command failed with exit status {status}"
        if stdout:
            m += f"\nstdout:\n{stdout}"
        if stderr:
            m += f"\nstderr:\n{stderr}"
        return {"isError": True, "texts": [f"Error executing command: {m}"]}
    return {"isError": False, "texts": [t for t in (stdout, stderr) if t]}


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------


def make_fixture(root):
    root.mkdir(parents=True)
    (root / "file.txt").write_text("content\n")
    (root / "input.txt").write_text("line2\nline1\n")
    (root / "sub" / "nested").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("a\n")
    (root / "run.sh").write_text("#!/bin/sh\necho ran script\n")
    (root / "run.sh").chmod(0o755)
    (root / "escape").symlink_to("/etc")
    (root.parent / "outside.txt").write_text("outside\n")
    return root


class Server:
    """One MCP server over stdio with the official client."""

    def __init__(self, command, args, env, cwd):
        self.params = StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd))

    async def __aenter__(self):
        self._client = stdio_client(self.params, errlog=open(os.devnull, "w"))
        read, write = await self._client.__aenter__()
        self._session = ClientSession(read, write)
        await self._session.__aenter__()
        await asyncio.wait_for(self._session.initialize(), CALL_TIMEOUT)
        return self

    async def __aexit__(self, *exc):
        await self._session.__aexit__(*exc)
        await self._client.__aexit__(*exc)

    async def call(self, tool, args):
        r = await asyncio.wait_for(self._session.call_tool(tool, args), CALL_TIMEOUT)
        texts = [c.text for c in r.content if getattr(c, "type", "") == "text"]
        parsed = None
        if len(texts) == 1:
            try:
                parsed = json.loads(texts[0])
            except ValueError:
                parsed = None
        return {
            "isError": bool(r.isError),
            "texts": texts,
            "structured": r.structuredContent,
            "text": parsed,
        }


class Normalizer:
    UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
    TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")

    def __init__(self, fixture):
        self.fixture = str(fixture)
        self.ids = {}

    def job(self, job_id):
        return self.ids.setdefault(job_id, f"<job {len(self.ids)}>")

    def __call__(self, value):
        if isinstance(value, str):
            v = value.replace(self.fixture, "<dir>")
            v = self.UUID.sub(lambda m: self.job(m.group(0)), v)
            return self.TIME.sub("<time>", v)
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        return value


def shell_record(result):
    return {"isError": result["isError"], "texts": result["texts"]}


async def run_shell_cases(cmd, args, base_env, fixture_root, adapter=None, profile=None):
    results = {}
    cases = shell_cases()
    for group, group_env in GROUPS.items():
        group_cases = [c for c in cases if c[2] == group]
        fixture = make_fixture(fixture_root / group / "work")
        norm = Normalizer(fixture)
        env = {**base_env, **group_env}
        server = await Server(cmd, args, env, fixture).__aenter__()
        try:
            for case_id, case_args, _, _, after in group_cases:
                tool = case_args.get("__tool", "shell_execute")
                call_args = {k: (v.replace("<dir>", str(fixture)) if isinstance(v, str) else v) for k, v in case_args.items() if k != "__tool"}
                try:
                    r = await server.call(tool, call_args)
                except Exception as e:  # a protocol error is an answer too; start afresh
                    r = {"isError": True, "texts": [f"protocol error: {type(e).__name__}"], "structured": None, "text": None}
                    try:
                        await server.__aexit__(None, None, None)
                    except Exception:
                        pass
                    server = await Server(cmd, args, env, fixture).__aenter__()
                if adapter and r.get("structured") is not None:
                    r = adapter(r)
                rec = norm(shell_record(r))
                if after:
                    p = fixture / after
                    rec["file"] = p.read_text() if p.exists() else None
                results[case_id] = rec
        finally:
            try:
                await server.__aexit__(None, None, None)
            except Exception:
                pass
    return results


async def poll(server, tool, args, done, timeout=POLL_TIMEOUT):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        r = await server.call(tool, args)
        if done(r) or loop.time() > deadline:
            return r
        await asyncio.sleep(0.05)


async def run_steps(server, steps, norm, tool):
    ids = []
    record = []

    def subst(a):
        return {k: (ids[int(v[1:])] if isinstance(v, str) and v.startswith("$") and int(v[1:]) < len(ids) else v) for k, v in a.items()}

    def status(r):
        return (r["structured"] or {}).get("status")

    def stdout(r):
        return str((r["structured"] or {}).get("stdout", ""))

    for step in steps:
        if step[0] == "call":
            r = await server.call(tool(step[1]), subst(step[2]))
            if step[1] == "execute_command" and not r["isError"]:
                body = r["structured"] or r["text"] or {}
                ids.append(body.get("job_id"))
        elif step[0] == "done":
            r = await poll(server, tool("get_job_status"), {"job_id": ids[step[1]]}, lambda r: r["isError"] or status(r) != "running")
        else:  # "seen"
            r = await poll(server, tool("get_job_output"), {"job_id": ids[step[1]]}, lambda r: step[2] in stdout(r))
            r = {"isError": r["isError"], "texts": [], "structured": {"seen": step[2] in stdout(r)}, "text": None}
        r = server.adapter(r)
        body = r["structured"] if r["structured"] is not None else (r["texts"][0] if r["texts"] else None)
        record.append(norm({"step": step[0] + (":" + step[1] if step[0] == "call" else ""), "isError": r["isError"], "body": body}))
    # Leave nothing running.
    for job_id in ids:
        if job_id:
            await server.call(tool("kill_job"), {"job_id": job_id})
    return record


async def run_job_scenarios(cmd, args, base_env, fixture_root, names=None, adapter=None):
    """Scenarios that list jobs or set variables get a server of their own (the package lists
    every job of its process); the others share one."""
    results = {}

    def tool(name):
        return names.get(name, name) if names else name

    scenarios = job_scenarios()
    own = [sc for sc in scenarios if sc[1] or "list" in sc[3]]
    shared = [sc for sc in scenarios if sc not in own]
    for batch in [[sc] for sc in own] + [shared]:
        fixture = make_fixture(fixture_root / batch[0][0] / "work")
        async with Server(cmd, args, {**base_env, **batch[0][1]}, fixture) as server:
            server.adapter = adapter or (lambda r: r)
            for sid, _, steps, _ in batch:
                results[sid] = await run_steps(server, steps, Normalizer(fixture), tool)
    return results


def compare(profile, published, ours, tags_of, listed):
    deliberate = listed.get("deliberate", {}).get(profile, {})
    fixed = listed.get("fixed", {}).get(profile, {})
    counts = {"identical": 0, "deliberate": 0, "fixed": 0}
    failures = []
    stale = []
    for case_id, expected in published.items():
        got = ours.get(case_id)
        keys = [case_id] + [f"tag:{t}" for t in tags_of[case_id]]
        reason = next((deliberate[k] for k in keys if k in deliberate), None)
        is_fixed = next((fixed[k] for k in keys if k in fixed), None)
        if got == expected:
            if is_fixed:
                counts["fixed"] += 1
            else:
                counts["identical"] += 1
                if case_id in deliberate:
                    stale.append(case_id)
        elif reason:
            counts["deliberate"] += 1
        else:
            failures.append((case_id, expected, got))
    return counts, failures, stale


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", required=True)
    ap.add_argument("--yieldctl", required=True)
    ap.add_argument("--shell-server", required=True)
    ap.add_argument("--job-server")
    ap.add_argument("--only")
    ap.add_argument("--verbose", action="store_true")
    opts = ap.parse_args()
    listed = json.loads((HERE / "deliberate.json").read_text())

    scratch = Path(tempfile.mkdtemp(prefix="yieldshell-compare-"))
    daemon_dir = scratch / "daemon"
    daemon_dir.mkdir(mode=0o700)
    base_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "YIELDSHELL_SOCKET": str(daemon_dir / "d.sock"),
        "YIELDSHELL_STATE_DIR": str(daemon_dir / "state"),
    }
    shim = opts.shim
    total_fail = 0
    total_pass = 0
    try:
        plans = []
        shell_tags = {c[0]: c[3] for c in shell_cases()}
        job_tags = {s[0]: s[3] for s in job_scenarios()}
        wanted = lambda p: not opts.only or opts.only == p  # noqa: E731
        published_shell = {}
        if wanted("mcp-shell-server") or wanted("shell"):
            published_shell = await run_shell_cases(opts.shell_server, [], base_env, scratch / "published-shell")
        plans.append(("mcp-shell-server", published_shell, shell_tags, lambda: run_shell_cases(shim, ["--profile", "mcp-shell-server"], base_env, scratch / "ours-mcp-shell-server")))
        plans.append(("shell", published_shell, shell_tags, lambda: run_shell_cases(shim, ["--profile", "shell"], base_env, scratch / "ours-shell", adapter=adapt_shell)))
        if opts.job_server and (wanted("mcp-background-job") or wanted("jobs")):
            published_jobs = await run_job_scenarios(opts.job_server, [], base_env, scratch / "published-jobs")
            plans.append(("mcp-background-job", published_jobs, job_tags, lambda: run_job_scenarios(shim, ["--profile", "mcp-background-job"], base_env, scratch / "ours-mcp-background-job")))
            plans.append(("jobs", published_jobs, job_tags, lambda: run_job_scenarios(shim, ["--profile", "jobs"], base_env, scratch / "ours-jobs", names=JOBS_TOOL_NAMES, adapter=adapt_jobs)))
        elif not opts.job_server:
            print("mcp-background-job and jobs: NOT COMPARED (no Python >= 3.12 to run the published job server)")
        for profile, published, tags_of, run in plans:
            if opts.only and profile != opts.only:
                continue
            got = await run()
            counts, failures, stale = compare(profile, published, got, tags_of, listed)
            print(f"{profile}: {len(published)} cases: {counts['identical']} identical, {counts['deliberate']} deliberate, {counts['fixed']} fixed, {len(failures)} unexplained")
            for case_id, expected, actual in failures:
                print(f"  DIFFERS {profile}/{case_id}")
                print(f"    published: {json.dumps(expected, ensure_ascii=False)[:1500]}")
                print(f"    ours:      {json.dumps(actual, ensure_ascii=False)[:1500]}")
            for case_id in stale:
                print(f"  note: {profile}/{case_id} is listed as deliberate but no longer differs")
            if opts.verbose:
                for case_id in published:
                    print(f"  {case_id}: {json.dumps(got.get(case_id), ensure_ascii=False)[:300]}")
            total_fail += len(failures)
            total_pass += len(published) - len(failures)
    finally:
        # The daemon our profiles auto-started in the scratch directory.
        subprocess.run(
            [opts.yieldctl, "daemon", "stop"],
            env={**os.environ, "YIELDSHELL_SOCKET": base_env["YIELDSHELL_SOCKET"], "YIELDSHELL_NO_AUTOSTART": "1"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"compare: {total_pass} passed, {total_fail} failed")
    return 1 if total_fail else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
