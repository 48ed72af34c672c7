//! `jadpo completions SHELL`: prints a completion script for bash, zsh,
//! fish, elvish or PowerShell on stdout.
//!
//! ```text
//! jadpo completions bash > ~/.local/share/bash-completion/completions/jadpo
//! jadpo completions zsh > ~/.zfunc/_jadpo
//! jadpo completions fish > ~/.config/fish/completions/jadpo.fish
//! ```

use clap_complete::Shell;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

pub(crate) fn run(args: Args, mut command: clap::Command) -> ExitCode {
    let name = command.get_name().to_owned();
    clap_complete::generate(args.shell, &mut command, name, &mut std::io::stdout());
    ExitCode::SUCCESS
}
