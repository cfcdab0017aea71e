//! `--agent-cost`: seven everyday jobs (issues 11 and 25) scripted as an agent would do them, against
//! YieldShell and the original server in one run. Per job: the tool calls made, the bytes of
//! text content the model reads (tool results' text blocks, plus the instructions where the job
//! relies on them) and the wall time. Byte counts do not depend on the build, so this mode runs
//! against debug binaries too.
//!
//! Each agent uses what its server offers: YieldShell's `until` ready-waits, line counts and the
//! running processes named in its instructions; the original's `read`/`wait` polling. When an
//! answer is not in a result, the agent makes the next call it would make.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::Opts;
use crate::servers::{Bench, Client, Kind, body_of};

/// What one job cost an agent.
#[derive(Debug, Clone, Default)]
pub struct JobCost {
    /// Tool calls made.
    pub calls: usize,
    /// Bytes of text the model read.
    pub bytes: usize,
    /// Wall time.
    pub elapsed: Duration,
    /// Whether the agent got the answer; `None` when it did, else why not.
    pub failure: Option<String>,
}

/// The jobs, their targets (calls, bytes) for YieldShell, and a label.
const JOBS: [(&str, usize, usize); 7] = [
    ("test run", 2, 1_000),
    ("dev server URL + stop", 2, 500),
    ("REPL: 2+2, 6*7, exit", 5, 500),
    ("find a job after a restart", 2, 700),
    ("last line + line count, 200k-line log", 1, 1_200),
    ("wc -l with stdin", 1, 160),
    ("the error in a 200k-line build log", 2, 900),
];

/// A 200,000-line build log (about 6.5 MB) with one error, at line 123,456.
const BUILD_LOG: &str = "seq 1 200000 | awk '$1 == 123456 { print \"error[E0308]: mismatched types at src/lib.rs:\" $1; next } { print \"   Compiling crate_\" $1 \" v0.1.0\" }'";

/// The error line [`BUILD_LOG`] prints.
const BUILD_ERROR: &str = "error[E0308]: mismatched types at src/lib.rs:123456";

/// An agent's session with one server: counts calls and the text it reads.
struct Agent {
    client: Client,
    kind: Kind,
    cost: JobCost,
}

impl Agent {
    async fn start(bench: &Bench, kind: Kind) -> anyhow::Result<Agent> {
        Ok(Agent {
            client: Client::start(bench.command(kind)).await?,
            kind,
            cost: JobCost::default(),
        })
    }

    /// The tool name and id field of this server (the original says `execute`/`execution_id`).
    fn exec_tool(&self) -> &'static str {
        match self.kind {
            Kind::Original => "execute",
            _ => "exec",
        }
    }

    fn id_field(&self) -> &'static str {
        match self.kind {
            Kind::Original => "execution_id",
            _ => "process_id",
        }
    }

    /// Reads the instructions (what the model is given at the start of the session).
    fn read_instructions(&mut self) -> String {
        let text = self
            .client
            .service
            .peer_info()
            .and_then(|i| i.instructions.clone())
            .unwrap_or_default();
        self.cost.bytes += text.len();
        text
    }

    /// One tool call: counted, its text blocks' bytes added; the JSON body.
    async fn call(&mut self, tool: &str, args: Value) -> anyhow::Result<Value> {
        let Value::Object(map) = args else {
            bail!("arguments must be an object");
        };
        let r = self
            .client
            .service
            .peer()
            .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(map))
            .await?;
        self.cost.calls += 1;
        self.cost.bytes += r
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.len()))
            .sum::<usize>();
        Ok(body_of(&r))
    }

    async fn exec(&mut self, args: Value) -> anyhow::Result<Value> {
        let mut args = args;
        args["side_effects"] = json!(["NONE"]);
        self.call(self.exec_tool(), args).await
    }

    fn id_arg(&self, id: &Value, rest: Value) -> Value {
        let mut args = rest;
        args[self.id_field()] = id.clone();
        args
    }

    fn id_of(&self, body: &Value) -> Value {
        body[self.id_field()].clone()
    }

    /// Waits (55 s slices) until the process exits; the last body.
    async fn wait_exit(&mut self, id: &Value) -> anyhow::Result<Value> {
        loop {
            let b = self
                .call("wait", self.id_arg(id, json!({"timeout_ms": 55_000})))
                .await?;
            if b["wait_result"] != "deadline_reached" {
                return Ok(b);
            }
        }
    }

    /// Reads until `found` holds for the body (the agent polls, at most `tries` times).
    async fn poll_read(
        &mut self,
        id: &Value,
        tries: usize,
        found: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<bool> {
        for _ in 0..tries {
            let b = self
                .call("wait", self.id_arg(id, json!({"timeout_ms": 1_000})))
                .await?;
            if found(&b) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn close(self) -> JobCost {
        self.client.close().await;
        self.cost
    }
}

fn text_has(b: &Value, needle: &str) -> bool {
    ["stdout", "stderr"]
        .iter()
        .any(|s| b[s].as_str().is_some_and(|t| t.contains(needle)))
}

/// Job 1: a test run of about 20 s; the agent wants the summary and the exit code.
async fn test_run(a: &mut Agent, seconds: u32) -> anyhow::Result<()> {
    let command = format!(
        "for i in $(seq 1 {seconds}); do echo \"test_$i ... ok\"; sleep 1; done; echo \"{seconds} passed\""
    );
    let b = a.exec(json!({"command": command})).await?;
    let done = if b["status"] == "completed" {
        b
    } else {
        let id = a.id_of(&b);
        a.wait_exit(&id).await?
    };
    if !text_has(&done, &format!("{seconds} passed")) || done["exit_code"] != 0 {
        bail!("no summary or exit code: {done}");
    }
    Ok(())
}

/// Job 2: start a dev server, learn its URL, stop it.
async fn dev_server(a: &mut Agent) -> anyhow::Result<()> {
    let command = "echo booting; sleep 3; echo 'Local: http://127.0.0.1:5173/'; exec sleep 600";
    let b = match a.kind {
        Kind::Ours => {
            a.exec(json!({"command": command, "until": "http://"}))
                .await?
        }
        _ => a.exec(json!({"command": command})).await?,
    };
    let id = a.id_of(&b);
    if !text_has(&b, "http://") && !a.poll_read(&id, 30, |b| text_has(b, "http://")).await? {
        bail!("never saw the URL");
    }
    a.call("stop", a.id_arg(&id, json!({}))).await?;
    Ok(())
}

/// Job 3: three REPL exchanges.
async fn repl(a: &mut Agent) -> anyhow::Result<()> {
    let command = "python3 -u -q -i";
    let b = match a.kind {
        Kind::Ours => a.exec(json!({"command": command, "until": ">>> "})).await?,
        _ => {
            a.exec(json!({"command": command, "close_stdin": false, "yield_ms": 1_000}))
                .await?
        }
    };
    let id = a.id_of(&b);
    for (input, answer) in [("2+2", "4"), ("6*7", "42")] {
        match a.kind {
            Kind::Ours => {
                let b = a
                    .call(
                        "write",
                        a.id_arg(
                            &id,
                            json!({"input": input, "newline": true, "until": format!("^{answer}$")}),
                        ),
                    )
                    .await?;
                if b["wait_result"] != "matched" {
                    bail!("{input}: {b}");
                }
            }
            _ => {
                a.call(
                    "write",
                    a.id_arg(&id, json!({"input": input, "newline": true})),
                )
                .await?;
                let line = format!("{answer}\n");
                if !a.poll_read(&id, 10, |b| text_has(b, &line)).await? {
                    bail!("{input}: no answer");
                }
            }
        }
    }
    match a.kind {
        Kind::Ours => {
            let b = a
                .call(
                    "write",
                    a.id_arg(
                        &id,
                        json!({"input": "exit()", "newline": true, "until": "^$never"}),
                    ),
                )
                .await?;
            if b["wait_result"] != "exited" {
                bail!("exit: {b}");
            }
        }
        _ => {
            a.call(
                "write",
                a.id_arg(&id, json!({"input": "exit()", "newline": true})),
            )
            .await?;
            a.wait_exit(&id).await?;
        }
    }
    Ok(())
}

/// Job 4, part one (not counted): a job started in an earlier session, still running.
async fn start_job(bench: &Bench, kind: Kind) -> anyhow::Result<()> {
    let mut a = Agent::start(bench, kind).await?;
    a.exec(json!({
        "command": "echo building; sleep 6; echo 'build ok'",
        "name": "build",
        "yield_ms": 0
    }))
    .await?;
    a.close().await;
    Ok(())
}

/// Job 4: a new session finds the job started before the restart and gets its result.
async fn find_after_restart(a: &mut Agent) -> anyhow::Result<()> {
    let instructions = a.read_instructions();
    // The id, when the instructions name the job; else the agent lists the processes.
    let named = instructions
        .lines()
        .find(|l| l.contains("echo building"))
        .and_then(|l| l.trim_start_matches("- ").split_whitespace().next())
        .map(|id| json!(id));
    let id = match named {
        Some(id) => id,
        None => {
            let b = a.call("ps", json!({"include_completed": false})).await?;
            let list = b["processes"]
                .as_array()
                .or_else(|| b["executions"].as_array())
                .cloned()
                .unwrap_or_default();
            let Some(entry) = list.iter().find(|p| {
                p["command"]
                    .as_str()
                    .is_some_and(|c| c.contains("echo building"))
            }) else {
                bail!("the job is not listed after the restart");
            };
            a.id_of(entry)
        }
    };
    let done = a.wait_exit(&id).await?;
    if !text_has(&done, "build ok") {
        bail!("no result: {done}");
    }
    Ok(())
}

/// Job 5: the last line and the line count of a 200k-line log.
async fn big_log(a: &mut Agent) -> anyhow::Result<()> {
    let b = a
        .exec(json!({"command": "seq 200000", "max_output_bytes": 200}))
        .await?;
    let last_line_seen = text_has(&b, "\n200000\n") || text_has(&b, "199999\n200000");
    let counted = b["stdout_lines"] == 200_000;
    if last_line_seen && counted {
        return Ok(());
    }
    // The agent asks for what is missing.
    if !last_line_seen {
        let id = a.id_of(&b);
        let r = a
            .call("read", a.id_arg(&id, json!({"tail_lines": 1})))
            .await?;
        if !text_has(&r, "200000") {
            bail!("no last line: {r}");
        }
    }
    if !counted {
        let c = a.exec(json!({"command": "seq 200000 | wc -l"})).await?;
        if !text_has(&c, "200000") {
            bail!("no count: {c}");
        }
    }
    Ok(())
}

/// Job 6: `wc -l` over stdin.
async fn wc_stdin(a: &mut Agent) -> anyhow::Result<()> {
    let b = a
        .exec(json!({"command": "wc -l", "stdin": "a\nb\nc\n", "close_stdin": true}))
        .await?;
    if b["stdout"].as_str().map(str::trim) != Some("3") {
        bail!("wrong answer: {b}");
    }
    Ok(())
}

/// Job 7: the error in a 200k-line build log, and the lines around it. With `read(grep)` the
/// agent searches the log it has; without it (the original, or a build before issue 25) it runs
/// the build again through `grep`, as an agent would.
async fn find_error(a: &mut Agent) -> anyhow::Result<()> {
    let mut b = a
        .exec(json!({"command": BUILD_LOG, "max_output_bytes": 200}))
        .await?;
    let id = a.id_of(&b);
    if b["status"] == "backgrounded" {
        b = a.wait_exit(&id).await?;
    }
    if b["exit_code"] != 0 {
        bail!("the build failed to run: {b}");
    }
    if a.kind == Kind::Ours {
        let r = a
            .call(
                "read",
                a.id_arg(&id, json!({"grep": "^error", "context": 1})),
            )
            .await?;
        let found = r["lines"].as_array().is_some_and(|lines| {
            lines
                .iter()
                .any(|l| l["text"].as_str() == Some(BUILD_ERROR))
        });
        if found {
            return Ok(());
        }
    }
    let c = a
        .exec(json!({"command": format!("{BUILD_LOG} | grep -n -C1 '^error'")}))
        .await?;
    if !text_has(&c, BUILD_ERROR) {
        bail!("no error line: {c}");
    }
    Ok(())
}

/// Runs job `index` against one server in a fresh session.
async fn run_job(bench: &Bench, kind: Kind, index: usize, opts: &Opts) -> JobCost {
    let started = Instant::now();
    let outcome = async {
        if index == 3 {
            start_job(bench, kind).await?;
        }
        let mut a = Agent::start(bench, kind).await?;
        let result = match index {
            0 => test_run(&mut a, opts.test_run_seconds).await,
            1 => dev_server(&mut a).await,
            2 => repl(&mut a).await,
            3 => find_after_restart(&mut a).await,
            4 => big_log(&mut a).await,
            5 => wc_stdin(&mut a).await,
            _ => find_error(&mut a).await,
        };
        let mut cost = a.close().await;
        cost.failure = result.err().map(|e| format!("{e:#}"));
        anyhow::Ok(cost)
    }
    .await;
    let mut cost = outcome.unwrap_or_else(|e| JobCost {
        failure: Some(format!("{e:#}")),
        ..Default::default()
    });
    cost.elapsed = started.elapsed();
    cost
}

fn cell(c: &JobCost) -> String {
    let mut s = format!(
        "{} calls, {} B, {:.1} s",
        c.calls,
        c.bytes,
        c.elapsed.as_secs_f64()
    );
    if c.failure.is_some() {
        s.push_str(" — **failed**");
    }
    s
}

/// Runs the jobs against both servers and prints the table (Markdown), then the search's own
/// cost (`search_cost`).
pub async fn run(opts: &Opts) -> anyhow::Result<()> {
    let bench = Bench::setup(&opts.venv, opts.no_original)
        .await
        .context("setting up")?;
    let mut kinds = vec![Kind::Ours];
    if bench.original.is_some() {
        kinds.push(Kind::Original);
    }
    let mut rows = Vec::new();
    for (i, (job, max_calls, max_bytes)) in JOBS.iter().enumerate() {
        let mut costs = Vec::new();
        for &kind in &kinds {
            eprintln!("{job}: {kind:?}…");
            costs.push(run_job(&bench, kind, i, opts).await);
        }
        rows.push((job, max_calls, max_bytes, costs));
    }
    println!(
        "| job | target (YieldShell) | YieldShell | original {} | met |",
        crate::servers::ORIGINAL_VERSION
    );
    println!("|---|---|---|---|---|");
    for (i, (job, max_calls, max_bytes, costs)) in rows.iter().enumerate() {
        let job = if i == 0 {
            format!("{job} ({} s)", opts.test_run_seconds)
        } else {
            job.to_string()
        };
        let ours = &costs[0];
        let met = ours.failure.is_none() && ours.calls <= **max_calls && ours.bytes <= **max_bytes;
        let original = costs.get(1).map(cell).unwrap_or_else(|| "—".into());
        println!(
            "| {job} | ≤ {max_calls} calls, ≤ {max_bytes} B | {} | {original} | {} |",
            cell(ours),
            if met { "yes" } else { "**no**" }
        );
    }
    for (job, _, _, costs) in &rows {
        for (kind, c) in kinds.iter().zip(costs) {
            if let Some(f) = &c.failure {
                println!("\n{job}, {kind:?}: {f}");
            }
        }
    }
    if let Err(e) = search_cost(&bench).await {
        println!("\nsearching output: {e:#}");
    }
    Ok(())
}

/// The cost of one `read(grep)` over [`BUILD_LOG`] through MCP, beside reading the log page by
/// page: calls, text bytes the model reads, wall time (median and spread of 10 searches).
async fn search_cost(bench: &Bench) -> anyhow::Result<()> {
    let mut a = Agent::start(bench, Kind::Ours).await?;
    let mut b = a
        .exec(json!({"command": BUILD_LOG, "max_output_bytes": 200}))
        .await?;
    let id = a.id_of(&b);
    if b["status"] == "backgrounded" {
        b = a.wait_exit(&id).await?;
    }
    let log_bytes = b["next_seq"].as_u64().unwrap_or(1) - 1;
    let mut times = Vec::new();
    let mut answer = 0;
    for _ in 0..10 {
        let before = a.cost.bytes;
        let started = Instant::now();
        let r = a
            .call(
                "read",
                a.id_arg(&id, json!({"grep": "^error", "context": 1})),
            )
            .await?;
        times.push(started.elapsed());
        answer = a.cost.bytes - before;
        if r["lines"].as_array().is_none_or(Vec::is_empty) {
            bail!("this build's read has no grep: {r}");
        }
    }
    times.sort();
    // The same log read by paging, as an agent without grep would have to.
    let (calls_before, bytes_before) = (a.cost.calls, a.cost.bytes);
    let started = Instant::now();
    let mut since = 1u64;
    loop {
        let r = a
            .call("read", a.id_arg(&id, json!({"since_seq": since})))
            .await?;
        since = r["next_seq"].as_u64().unwrap_or(since);
        if r["has_more"] != true {
            break;
        }
    }
    let paged = started.elapsed();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "\n| searching a 200,000-line log ({:.1} MB) through MCP | calls | text read | time |",
        log_bytes as f64 / 1e6
    );
    println!("|---|---|---|---|");
    println!(
        "| `read(grep=\"^error\", context=1)` | 1 | {answer} B | {:.0} ms (min {:.0}, max {:.0}, 10 runs) |",
        ms(times[times.len() / 2]),
        ms(times[0]),
        ms(times[times.len() - 1])
    );
    println!(
        "| paging it with `read(since_seq)` | {} | {} B | {:.1} s |",
        a.cost.calls - calls_before,
        a.cost.bytes - bytes_before,
        paged.as_secs_f64()
    );
    a.close().await;
    Ok(())
}
