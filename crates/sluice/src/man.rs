//! `sluice completions` and `sluice man`: shell completions and manual
//! pages, generated from the command definitions in cli.rs, so they never
//! drift from what the binary accepts.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;

use crate::Failure;
use crate::cli::{Cli, ManArgs};

pub fn completions(shell: clap_complete::Shell) -> Result<(), Failure> {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "sluice", &mut out);
    std::io::stdout().write_all(&out).context("writing to stdout").map_err(Failure::bad_input)
}

pub fn man(args: ManArgs) -> Result<(), Failure> {
    let command = Cli::command();
    let Some(dir) = args.out_dir else {
        let mut out = Vec::new();
        clap_mangen::Man::new(command)
            .render(&mut out)
            .context("rendering the manual page")
            .map_err(Failure::bad_input)?;
        return std::io::stdout().write_all(&out).context("writing to stdout").map_err(Failure::bad_input);
    };
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))
        .map_err(Failure::bad_input)?;
    for sub in command.get_subcommands() {
        // A page per command, named as `man sluice-run` finds it.
        let name = format!("sluice-{}", sub.get_name());
        let page = sub.clone().display_name(name.clone()).bin_name(format!("sluice {}", sub.get_name()));
        write_page(&dir, &name, page)?;
    }
    write_page(&dir, "sluice", command)
}

fn write_page(dir: &Path, name: &str, command: clap::Command) -> Result<(), Failure> {
    let path = dir.join(format!("{name}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(command).render(&mut out).context("rendering a manual page").map_err(Failure::bad_input)?;
    std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display())).map_err(Failure::bad_input)
}
