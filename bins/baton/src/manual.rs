//! `baton completions SHELL` and `baton man`: a completion script and a
//! man page generated from the same clap definitions that parse the
//! command line, so they can never disagree with it. Nothing here talks
//! to a node.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit::Exit;

/// Prints the completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> ExitCode {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "baton", &mut out);
    print(&out)
}

/// Prints the man page (roff) on stdout.
pub fn man() -> ExitCode {
    let mut out = Vec::new();
    match clap_mangen::Man::new(Cli::command()).render(&mut out) {
        Ok(()) => print(&out),
        Err(err) => {
            eprintln!("baton: man: {err}");
            Exit::Failure.code()
        }
    }
}

fn print(bytes: &[u8]) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Exit::Ok.code(),
        Err(err) => {
            eprintln!("baton: cannot write: {err}");
            Exit::Failure.code()
        }
    }
}
