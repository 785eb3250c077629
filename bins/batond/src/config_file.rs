//! `batond --config FILE`: a TOML file whose keys are the flags' long
//! names (`max-wait = "30"`, `peers = ["a:7411", "b:7411"]`). Its entries
//! become flags placed before the real command line, so that a value from
//! the file is checked by exactly the parser of its flag; a flag given on
//! the command line replaces the file's entry for it.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::ExitCode;

use clap::{Arg, ArgAction, Command, CommandFactory, Parser};

/// A config file larger than this is refused: it is a handful of settings.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The long names that are not settings.
const NOT_SETTINGS: [&str; 3] = ["config", "help", "version"];

/// `argv` with the entries of the `--config` file (if it names one) put in
/// front as flags. The error is one line naming the file and the key.
pub fn merged_argv(cmd: &Command, argv: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let given = given_longs(&argv);
    if given.contains("help") || given.contains("version") {
        return Ok(argv);
    }
    let Some(path) = config_path(&argv) else {
        return Ok(argv);
    };
    let table = read(&path)?;
    let shown = path.display();
    let mut from_file = Vec::new();
    for (key, value) in &table {
        let arg = cmd
            .get_arguments()
            .find(|arg| arg.get_long() == Some(key.as_str()))
            .filter(|_| !NOT_SETTINGS.contains(&key.as_str()))
            .ok_or_else(|| {
                format!(
                    "{shown}: unknown key `{key}` (the keys are batond's flags without the dashes, e.g. max-wait; see batond --help)"
                )
            })?;
        let flags =
            flags_of(arg, key, value).map_err(|why| format!("{shown}: key `{key}`: {why}"))?;
        check(arg, &flags).map_err(|why| format!("{shown}: key `{key}`: {why}"))?;
        // The command line wins: the file's entry is checked, then left out.
        if !given.contains(key.as_str()) {
            from_file.extend(flags.into_iter().map(OsString::from));
        }
    }
    let mut merged = Vec::with_capacity(argv.len() + from_file.len());
    let mut rest = argv.into_iter();
    merged.extend(rest.next());
    merged.extend(from_file);
    merged.extend(rest);
    Ok(merged)
}

/// The flags of `F`, with the --config file's settings under them; the
/// error is the exit code, its line already printed.
pub fn parse<F: Parser + CommandFactory>() -> Result<F, ExitCode> {
    let argv: Vec<_> = std::env::args_os().collect();
    let file = config_path(&argv);
    let argv = merged_argv(&F::command(), argv).map_err(|message| {
        crate::say(&message);
        ExitCode::from(2)
    })?;
    F::try_parse_from(argv).map_err(|error| match (file, error.kind()) {
        // What the file set is in the error: say where it came from.
        (Some(file), kind)
            if kind != clap::error::ErrorKind::DisplayHelp
                && kind != clap::error::ErrorKind::DisplayVersion =>
        {
            let text = error.to_string();
            let why = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(2)
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ");
            crate::say(&format!(
                "{} (settings read from {})",
                why.trim_start_matches("error: "),
                Path::new(&file).display()
            ));
            ExitCode::from(2)
        }
        _ => error.exit(),
    })
}

/// Runs `flags` (one setting) through its argument's own parser, alone:
/// what it requires of other flags is checked once everything is merged.
fn check(arg: &Arg, flags: &[String]) -> Result<(), String> {
    let alone = Command::new("batond").arg(
        arg.clone()
            .requires(clap::builder::Resettable::<clap::Id>::Reset),
    );
    alone
        .try_get_matches_from(std::iter::once("batond".to_string()).chain(flags.iter().cloned()))
        .map(drop)
        .map_err(|e| first_line(&e.to_string()).to_string())
}

/// The long flags on the command line (every batond flag is a long one,
/// and none takes a value that starts with `--` unless written `--x=v`).
fn given_longs(argv: &[OsString]) -> HashSet<String> {
    let mut given = HashSet::new();
    for arg in argv.iter().skip(1) {
        let Some(text) = arg.to_str() else { continue };
        if text == "-h" {
            given.insert("help".to_string());
        } else if text == "-V" {
            given.insert("version".to_string());
        } else if let Some(long) = text.strip_prefix("--") {
            let name = long.split_once('=').map_or(long, |(name, _)| name);
            given.insert(name.to_string());
        }
    }
    given
}

/// The value of `--config PATH` or `--config=PATH`; the last one wins.
pub fn config_path(argv: &[OsString]) -> Option<OsString> {
    let mut found = None;
    let mut args = argv.iter().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--config" {
            found = args.next().cloned();
        } else if let Some(path) = arg.to_str().and_then(|a| a.strip_prefix("--config=")) {
            found = Some(OsString::from(path));
        }
    }
    found
}

/// The file, parsed; unreadable, too large or not TOML is an error.
fn read(path: &OsStr) -> Result<toml::Table, String> {
    let path = Path::new(path);
    let shown = path.display();
    let cannot = |e: std::io::Error| format!("cannot read the config file {shown}: {e}");
    let size = std::fs::metadata(path).map_err(cannot)?.len();
    if size > MAX_FILE_BYTES {
        return Err(format!(
            "the config file {shown} is {size} bytes; at most {MAX_FILE_BYTES} are read"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(cannot)?;
    text.parse::<toml::Table>().map_err(|e| {
        let why = e.to_string().replace('\n', " ");
        let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
        format!("{shown}: not valid TOML: {why}")
    })
}

/// A TOML value as the flags it stands for: a switch (`join = true`) is
/// the bare flag, or nothing when false; any other flag, `--key=value`
/// per value.
fn flags_of(arg: &Arg, key: &str, value: &toml::Value) -> Result<Vec<String>, String> {
    if matches!(arg.get_action(), ArgAction::SetTrue) {
        return match value {
            toml::Value::Boolean(true) => Ok(vec![format!("--{key}")]),
            toml::Value::Boolean(false) => Ok(Vec::new()),
            other => Err(format!(
                "expected true or false, found {}",
                other.type_str()
            )),
        };
    }
    let many = matches!(arg.get_action(), ArgAction::Append);
    let texts = texts(value, many)?;
    Ok(texts.iter().map(|t| format!("--{key}={t}")).collect())
}

/// A TOML value as the text(s) its flag would be given.
fn texts(value: &toml::Value, many: bool) -> Result<Vec<String>, String> {
    match value {
        toml::Value::Array(items) if many => items.iter().map(scalar).collect(),
        toml::Value::Array(_) => Err("takes one value, not a list".into()),
        other => Ok(vec![scalar(other)?]),
    }
}

fn scalar(value: &toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(text) => Ok(text.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(x) if x.is_finite() => Ok(x.to_string()),
        other => Err(format!(
            "expected a string or a number, found {}",
            other.type_str()
        )),
    }
}

/// clap's errors end with a hint on more lines; one line is enough here.
fn first_line(text: &str) -> &str {
    let line = text.lines().next().unwrap_or(text);
    line.strip_prefix("error: ").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn argv(args: &[&str]) -> Vec<OsString> {
        std::iter::once("batond")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect()
    }

    fn with_file(toml: &str, args: &[&str]) -> Result<Vec<String>, String> {
        let dir = std::env::temp_dir().join(format!(
            "batond-config-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("batond.toml");
        std::fs::write(&path, toml).expect("write");
        let path = path.to_str().expect("utf-8").to_string();
        let mut all = vec!["--config", path.as_str()];
        all.extend_from_slice(args);
        let merged = merged_argv(&crate::Flags::command(), argv(&all));
        let _ = std::fs::remove_dir_all(&dir);
        merged.map(|v| {
            v.into_iter()
                .map(|a| a.into_string().expect("utf-8"))
                .collect()
        })
    }

    fn rand_suffix() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    #[test]
    fn file_entries_come_before_the_command_line() {
        let merged = with_file(
            "max-wait = \"30\"\nmax-lease = 5\nheartbeat-interval = 0.1\npeers = [\"a:1\", \"b:2\"]\n",
            &["--max-lease", "7"],
        )
        .expect("merged");
        assert!(merged.contains(&"--max-wait=30".to_string()), "{merged:?}");
        assert!(merged.contains(&"--heartbeat-interval=0.1".to_string()));
        assert!(merged.contains(&"--peers=a:1".to_string()));
        assert!(merged.contains(&"--peers=b:2".to_string()));
        // The command line's --max-lease replaces the file's.
        assert!(!merged.iter().any(|a| a.starts_with("--max-lease=")));
        assert_eq!(&merged[merged.len() - 2..], ["--max-lease", "7"]);
    }

    #[test]
    fn a_switch_is_true_or_false() {
        let on = with_file("join = true\nmode = \"raft\"\n", &[]).expect("merged");
        assert!(on.contains(&"--join".to_string()), "{on:?}");
        let off = with_file("join = false\n", &[]).expect("merged");
        assert!(!off.iter().any(|a| a == "--join"), "{off:?}");
        let bad = with_file("join = \"yes\"\n", &[]).expect_err("refused");
        assert!(
            bad.contains("key `join`") && bad.contains("true or false"),
            "{bad}"
        );
    }

    #[test]
    fn bad_entries_name_the_file_and_the_key() {
        let cases = [
            ("max-wiat = \"3\"", "unknown key `max-wiat`"),
            ("config = \"x.toml\"", "unknown key `config`"),
            ("max-wait = \"soon\"", "key `max-wait`"),
            (
                "max-wait = true",
                "key `max-wait`: expected a string or a number",
            ),
            ("max-wait = [\"1\"]", "key `max-wait`: takes one value"),
            ("mode = \"paxos\"", "key `mode`"),
            ("max-locks = 0", "key `max-locks`"),
            ("max-wait = ", "not valid TOML"),
        ];
        for (toml, expected) in cases {
            let error = with_file(toml, &[]).expect_err(toml);
            assert!(error.contains(expected), "{toml}: {error}");
            assert!(error.contains("batond.toml"), "{toml}: {error}");
            assert!(!error.contains('\n'), "{toml}: one line: {error}");
        }
    }

    #[test]
    fn an_unreadable_file_is_named() {
        let error = merged_argv(
            &crate::Flags::command(),
            argv(&["--config=/nonexistent/batond.toml"]),
        )
        .expect_err("missing file");
        assert!(error.contains("/nonexistent/batond.toml"), "{error}");
    }

    #[test]
    fn the_example_file_parses() {
        let example = include_str!("../../../docs/batond.example.toml");
        let merged = with_file(example, &[]).expect("the example file's keys all parse");
        let flags = <crate::Flags as clap::Parser>::try_parse_from(&merged).expect("flags");
        assert_eq!(flags.max_wait_ms, 300_000, "{merged:?}");
        // Every key of the example is a setting, not a comment's typo.
        let keys = example.parse::<toml::Table>().expect("toml").len();
        assert_eq!(merged.len() - 3, keys + count_extra_list_items(example));
    }

    /// Lists add one flag per item past their first.
    fn count_extra_list_items(example: &str) -> usize {
        let table = example.parse::<toml::Table>().expect("toml");
        table
            .values()
            .filter_map(toml::Value::as_array)
            .map(|items| items.len().saturating_sub(1))
            .sum()
    }
}
