//! `yieldctl completions SHELL` and `yieldctl man [--dir DIR]`: shell completion scripts
//! (clap_complete) and man pages (clap_mangen), generated from the same clap definition that
//! parses the command line, so they can never disagree with it.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, CommandFactory};

use crate::{Cli, Ctx, exit, render};

/// Arguments of `completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Arguments of `man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write yieldctl.1 and one page per subcommand (yieldctl-ps.1, yieldctl-daemon-status.1, …)
    /// into this directory instead of printing yieldctl.1.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Prints the completion script for a shell: it registers `yieldctl` itself as the completer
/// (clap_complete's dynamic completion), so subcommands and options come from the same clap
/// definition and process ids and names come from the daemon at Tab time
/// ([`crate::process_names::complete`]). The script calls `yieldctl` from `PATH` (no path of
/// this machine is written into it).
pub fn completions(a: CompletionsArgs) -> anyhow::Result<u8> {
    let name = match a.shell {
        clap_complete::Shell::Bash => "bash",
        clap_complete::Shell::Zsh => "zsh",
        clap_complete::Shell::Fish => "fish",
        clap_complete::Shell::Elvish => "elvish",
        clap_complete::Shell::PowerShell => "powershell",
        other => anyhow::bail!("no completion script for {other}"),
    };
    let shells = clap_complete::env::Shells::builtins();
    let shell = shells
        .completer(name)
        .ok_or_else(|| anyhow::anyhow!("no completion script for {name}"))?;
    let mut script = Vec::new();
    shell.write_registration("COMPLETE", "yieldctl", "yieldctl", "yieldctl", &mut script)?;
    render::stdout_bytes(&script)?;
    Ok(exit::OK)
}

/// Prints the main man page, or writes every page into `--dir`.
pub fn man(ctx: &Ctx, a: ManArgs) -> anyhow::Result<u8> {
    let Some(dir) = a.dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(Cli::command()).render(&mut page)?;
        render::stdout_bytes(&page)?;
        return Ok(exit::OK);
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // `help` is clap's built-in subcommand, not ours: no page for it.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    write_pages(&cmd, &dir, &mut written)?;
    if ctx.json {
        render::json(&serde_json::json!({ "dir": dir, "pages": written }))?;
    } else {
        eprintln!("wrote {} man pages to {}", written.len(), dir.display());
    }
    Ok(exit::OK)
}

/// Writes the page of `cmd` and of each of its subcommands, recursively.
fn write_pages(cmd: &clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, written)?;
    }
    let path = clap_mangen::Man::new(cmd.clone())
        .generate_to(dir)
        .with_context(|| format!("writing a man page into {}", dir.display()))?;
    written.push(path);
    Ok(())
}
