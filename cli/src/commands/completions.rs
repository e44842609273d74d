//! `hearth completions SHELL` prints a completion script for the shell; `hearth man DIR`
//! (hidden: packaging runs it) writes man pages for `hearth` and each of its commands. Both
//! come from the command tree itself, so they never fall out of step with it.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap_complete::Shell;

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    shell: Shell,
}

#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// Folder to write hearth.1 and hearth-COMMAND.1 into (created if missing).
    dir: PathBuf,
}

pub fn completions(args: &CompletionsArgs) -> Result<()> {
    let mut command = crate::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "hearth", &mut script);
    match std::io::stdout().write_all(&script) {
        // The reader stopped early (`| head`): nothing to report.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => result.context("writing the completion script"),
    }
}

pub fn man(args: &ManArgs) -> Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let command = crate::command();
    let write = |name: &str, page: clap::Command| -> Result<()> {
        let path = args.dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(page).render(&mut out)?;
        std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))
    };
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("hearth-{}", sub.get_name());
        write(&name, sub.clone().name(name.clone()))?;
    }
    write("hearth", command)
}
