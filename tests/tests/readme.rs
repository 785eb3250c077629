//! The README as a newcomer follows it: its `nc` session is what a real
//! node answers (tokens and leases aside), its table of `batond` flags and
//! its list of `baton` commands are the binaries' own (`--help`), no more
//! and no fewer.

use std::collections::{BTreeSet, HashMap};
use std::process::Command;

use baton_tests::{baton_bin, batond_bin, Batond};

const README: &str = include_str!("../../README.md");
const CLUSTER_DOC: &str = include_str!("../../docs/cluster.md");

/// The text of the README after `start` up to the end of its code block.
fn block_after(start: &str) -> &'static str {
    let at = README
        .find(start)
        .unwrap_or_else(|| panic!("the README has no {start:?}"));
    let rest = &README[at + start.len()..];
    &rest[..rest.find("```").expect("the block's end")]
}

/// The flags (`--name`) a text names.
fn flags_in(text: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for (at, _) in text.match_indices("--") {
        let name: String = text[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '-')
            .collect();
        let before = text[..at].chars().last();
        if name.len() > 1 && before.is_none_or(|c| !c.is_alphanumeric() && c != '-') {
            flags.insert(format!("--{}", name.trim_end_matches('-')));
        }
    }
    flags
}

fn help(bin: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .arg("--help")
        .output()
        .expect("run --help");
    assert!(out.status.success(), "{args:?} --help: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

/// The flags a `--help` lists as options: the first flag of each line that
/// starts with one (the rest of such a line is its description).
fn listed_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .map(|l| {
            l.trim_start()
                .trim_start_matches("-h, ")
                .trim_start_matches("-V, ")
        })
        .filter(|l| l.starts_with("--"))
        .filter_map(|l| flags_in(l.split_whitespace().next().unwrap_or_default()).pop_first())
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

#[test]
fn the_batond_flag_table_is_batond_s_flags() {
    let table: String = block_lines_from("`batond` flags (all optional):");
    let mut documented = flags_in(&table);
    documented.retain(|f| f != "--help" && f != "--version");
    let listed = listed_flags(&help(&batond_bin(), &[]));
    let extra: Vec<_> = documented.difference(&listed).collect();
    assert!(
        extra.is_empty(),
        "the README's table names {extra:?}, which batond lacks"
    );
    let missing: Vec<_> = listed
        .iter()
        .filter(|f| !documented.contains(*f) && !CLUSTER_DOC.contains(&format!("`{f}")))
        .collect();
    assert!(
        missing.is_empty(),
        "batond has {missing:?}, in neither the README nor docs/cluster.md"
    );
}

/// The table rows (lines starting `|`) that follow `heading`.
fn block_lines_from(heading: &str) -> String {
    let at = README.find(heading).expect("the heading");
    README[at..]
        .lines()
        .skip(1)
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.starts_with('|'))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_cli_list_is_baton_s_commands_and_flags() {
    let block = block_after("## The CLI\n\n```sh\n");
    let top = help(&baton_bin(), &[]);
    let global = listed_flags(&top);
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A command's line; a longer indent continues the one above.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 10, "{top}");
    let mut known = global.clone();
    known.insert("--version".to_owned());
    for command in &commands {
        assert!(
            block.contains(&format!(" {command} ")) || block.contains(&format!(" {command}\n")),
            "the README's CLI list lacks `baton {command}`"
        );
        let mut helps = vec![help(&baton_bin(), &[command])];
        if *command == "member" {
            for sub in ["list", "add", "remove"] {
                helps.push(help(&baton_bin(), &[command, sub]));
            }
        }
        for own in helps.iter().flat_map(|h| listed_flags(h)) {
            assert!(
                global.contains(&own) || block.contains(&own),
                "the README's CLI list lacks `baton {command} {own}`"
            );
            known.insert(own);
        }
    }
    let extra: Vec<_> = flags_in(block)
        .into_iter()
        .filter(|f| !known.contains(f))
        .collect();
    assert!(
        extra.is_empty(),
        "the README's CLI list names {extra:?}, which baton lacks"
    );
}

/// A token in the README's transcript: a number of more than 12 digits.
fn is_token(word: &str) -> bool {
    word.len() > 12 && word.bytes().all(|b| b.is_ascii_digit())
}

/// `line` with the README's tokens put as `tokens` maps them, each
/// `lease=<seconds>` as `lease=L`, and the README's node address as `addr`.
fn normalized(line: &str, tokens: &HashMap<String, String>, addr: &str) -> String {
    line.replace("127.0.0.1:7411", addr)
        .split(' ')
        .map(|word| {
            let (name, value) = word.split_once('=').unwrap_or(("", word));
            let value = match tokens.get(value) {
                Some(real) => real.as_str(),
                None if name == "lease" => "L",
                None => value,
            };
            if name.is_empty() {
                value.to_owned()
            } else {
                format!("{name}={value}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test]
async fn the_nc_session_is_what_a_node_answers() {
    let lines: Vec<&str> = block_after("$ nc 127.0.0.1 7411\n")
        .lines()
        .map(|l| l.split("  <-").next().unwrap_or(l).trim_end())
        .collect();
    assert!(
        lines.len() >= 16 && lines.len().is_multiple_of(2),
        "{lines:?}"
    );
    let node = Batond::start(&[]);
    let addr = node.addr().to_string();
    let mut client = node.connect().await;
    let mut tokens: HashMap<String, String> = HashMap::new();
    for pair in lines.chunks(2) {
        let answer = client.request(&normalized(pair[0], &tokens, &addr)).await;
        // A token first seen in an answer stands for the one the node gave.
        for (shown, real) in pair[1].split([' ', '=']).zip(answer.split([' ', '='])) {
            if is_token(shown) && is_token(real) {
                tokens
                    .entry(shown.to_owned())
                    .or_insert_with(|| real.to_owned());
            }
        }
        assert_eq!(
            normalized(&answer, &HashMap::new(), &addr),
            normalized(pair[1], &tokens, &addr),
            "after {:?}",
            pair[0]
        );
    }
}
