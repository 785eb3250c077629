//! `deploy/batond.service`: every flag its `ExecStart` gives batond is one
//! `batond --help` lists, the binary it names is batond, and the paths the
//! hardening leaves writable are the ones batond writes.

use std::process::Command;

use baton_tests::batond_bin;

const UNIT: &str = include_str!("../../deploy/batond.service");

/// The unit's `Key=value` lines, continuation lines joined.
fn settings() -> Vec<(String, String)> {
    let mut joined: Vec<String> = Vec::new();
    let mut open = false;
    for line in UNIT.lines() {
        let line = line.trim();
        if open {
            let last = joined.last_mut().expect("a line to continue");
            last.push(' ');
            last.push_str(line.trim_end_matches('\\').trim());
        } else if !(line.is_empty() || line.starts_with('#') || line.starts_with('[')) {
            joined.push(line.trim_end_matches('\\').trim().to_owned());
        }
        open = line.ends_with('\\');
    }
    joined
        .iter()
        .map(|line| {
            let (key, value) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("not Key=value: {line:?}"));
            (key.to_owned(), value.to_owned())
        })
        .collect()
}

fn setting(name: &str) -> String {
    settings()
        .into_iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value)
        .unwrap_or_else(|| panic!("the unit has no {name}="))
}

fn help() -> String {
    let out = Command::new(batond_bin())
        .arg("--help")
        .output()
        .expect("run batond --help");
    assert!(out.status.success());
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

#[test]
fn every_flag_of_exec_start_is_one_batond_has() {
    let exec = setting("ExecStart");
    let words: Vec<&str> = exec.split_whitespace().collect();
    assert!(words[0].ends_with("/batond"), "{exec}");
    let help = help();
    let flags: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| w.starts_with("--"))
        .collect();
    assert!(flags.len() >= 5, "{exec}");
    for flag in &flags {
        let name = flag.split('=').next().unwrap_or(flag);
        assert!(
            help.contains(&format!("{name} ")),
            "batond --help does not list {name}:\n{help}"
        );
    }
    // Each flag has its value after it (none of these is a switch).
    for pair in words[1..].chunks(2) {
        assert!(pair[0].starts_with("--") && pair.len() == 2, "{exec}");
        assert!(!pair[1].starts_with("--"), "{exec}");
    }
}

#[test]
fn the_data_dir_is_the_one_writable_path_and_the_layout_matches() {
    let exec = setting("ExecStart");
    let words: Vec<&str> = exec.split_whitespace().collect();
    let value = |flag: &str| {
        let at = words.iter().position(|w| *w == flag);
        at.and_then(|i| words.get(i + 1)).copied()
    };
    assert_eq!(value("--data-dir"), Some("/var/lib/baton"));
    assert_eq!(value("--cluster-key-file"), Some("/etc/baton/cluster.key"));
    assert_eq!(value("--auth-file"), Some("/etc/baton/users.toml"));
    assert_eq!(setting("ReadWritePaths"), "/var/lib/baton");
    assert_eq!(setting("ProtectSystem"), "strict");
    assert_eq!(setting("NoNewPrivileges"), "yes");
    assert_eq!(setting("User"), "baton");
    let files: u64 = setting("LimitNOFILE").parse().expect("a number");
    assert!(files > 10_000, "room for --max-connections' default");
}

#[test]
fn the_flags_parse_as_batond_reads_them() {
    // batond reads its flags before anything else: with --help after them
    // it prints the help, so a flag it does not take or a value it cannot
    // parse fails here without starting a node.
    let exec = setting("ExecStart");
    let mut args: Vec<&str> = exec.split_whitespace().skip(1).collect();
    args.push("--help");
    let out = Command::new(batond_bin())
        .args(&args)
        .output()
        .expect("run batond");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
