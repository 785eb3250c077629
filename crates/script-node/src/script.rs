//! A scenario file read into its nodes and steps (no I/O but the read).
//!
//! The format is described in tests/client-behaviour/README.md: one step a
//! line, `#` comments, a verb first, then `name=value` options, then the
//! step's words (a request line pattern, an outcome, a target).

use std::path::Path;

use crate::parse_step::{check_name, number, split_word, step};

/// Longest a scenario may run in all, so a broken script cannot hang CI.
pub const SCENARIO_LIMIT_MS: u64 = 120_000;
/// How long a waiting step waits unless it says `within=`: generous, for a
/// loaded two-core machine.
pub const DEFAULT_WITHIN_MS: u64 = 10_000;

/// A scenario file that does not follow the format.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {why}")]
pub struct ScriptError {
    pub file: String,
    pub line: usize,
    pub why: String,
}

/// One scripted node the scenario starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeDecl {
    pub name: String,
    /// At most this many connections open at once; more are closed at once.
    pub limit: Option<usize>,
    /// `user:secret` pairs; when set, `U` is checked and required first.
    pub users: Vec<(String, String)>,
    /// Speaks TLS with a certificate for 127.0.0.1 signed by `$ca`.
    pub tls: bool,
    /// Answers nothing from the start (every line goes to the script).
    pub stalled: bool,
}

/// When a waiting step must be satisfied, in ms from its base: the mark
/// `since` names, else the step's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timing {
    pub within_ms: u64,
    /// Not checked when absent; `after=0` checks it came after the base.
    pub after_ms: Option<u64>,
    pub since: Option<String>,
}

/// Which connections a line may come from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Where {
    pub at: Option<String>,
    pub on: Option<String>,
    /// Connections the line may not come from (`not-on=x,y`).
    pub not_on: Vec<String>,
}

/// One step of a scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Do {
        id: String,
        action: String,
    },
    Cancel {
        id: String,
    },
    Outcome {
        timing: Timing,
        id: String,
        expected: String,
    },
    Expect {
        timing: Timing,
        from: Where,
        bind: Option<String>,
        pattern: String,
    },
    ExpectConnect {
        timing: Timing,
        at: Option<String>,
        bind: Option<String>,
    },
    ExpectClose {
        timing: Timing,
        conn: String,
    },
    Absent {
        within_ms: u64,
        from: Where,
        pattern: String,
    },
    Reply {
        line: String,
    },
    Send {
        conn: String,
        line: String,
    },
    Close {
        target: String,
    },
    Stall {
        target: String,
    },
    Resume {
        target: String,
    },
    Refuse {
        node: String,
    },
    Accept {
        node: String,
    },
    Down {
        node: String,
    },
    Up {
        node: String,
    },
    Sleep {
        ms: u64,
    },
    Mark {
        name: String,
    },
    /// The counter is within `lo..=hi` (`n` alone: exactly n).
    Check {
        node: String,
        counter: String,
        lo: usize,
        hi: usize,
    },
    Always {
        rule: Rule,
    },
}

/// A standing answer: every line matching `pattern` (from where allowed),
/// on a connection that is not stalled, is answered `reply` at once (or
/// the connection closed) instead of waiting for a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub from: Where,
    pub pattern: String,
    /// `None`: close the connection.
    pub reply: Option<String>,
}

/// A whole scenario: what it checks, its nodes, its steps with line numbers.
#[derive(Debug, Clone, Default)]
pub struct Scenario {
    pub name: String,
    pub checks: String,
    pub nodes: Vec<NodeDecl>,
    pub steps: Vec<ScriptLine>,
}

/// A step with where it stands in the file, for the transcript and failures.
#[derive(Debug, Clone)]
pub struct ScriptLine {
    /// 1-based line number in the file.
    pub line: usize,
    /// The step as written.
    pub text: String,
    pub step: Step,
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScriptError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ScriptError {
            file: file.clone(),
            line: 0,
            why: format!("cannot read: {e}"),
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Scenario::parse(&name, &text).map_err(|(line, why)| ScriptError { file, line, why })
    }

    /// Parses a scenario's text; the error names the line (1-based).
    pub fn parse(name: &str, text: &str) -> Result<Scenario, (usize, String)> {
        let mut scenario = Scenario {
            name: name.to_owned(),
            ..Scenario::default()
        };
        for (index, raw) in text.lines().enumerate() {
            let number = index + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            scenario
                .add_line(number, line)
                .map_err(|why| (number, why))?;
            if let Some(last) = scenario.steps.last() {
                scenario
                    .check_names(&last.step)
                    .map_err(|why| (number, why))?;
            }
        }
        if scenario.nodes.is_empty() {
            return Err((0, "no `node` line".into()));
        }
        Ok(scenario)
    }

    fn add_line(&mut self, number: usize, line: &str) -> Result<(), String> {
        let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
        match verb {
            "checks" => self.checks = rest.to_owned(),
            "node" => {
                if !self.steps.is_empty() {
                    return Err("`node` lines come before the steps".into());
                }
                let node = node_decl(rest)?;
                if self.nodes.iter().any(|n| n.name == node.name) {
                    return Err(format!("node {} declared twice", node.name));
                }
                self.nodes.push(node);
            }
            _ => self.steps.push(ScriptLine {
                line: number,
                text: line.to_owned(),
                step: step(verb, rest)?,
            }),
        }
        Ok(())
    }

    /// Node names a step refers to must be declared.
    fn check_names(&self, step: &Step) -> Result<(), String> {
        let node = |name: &String| {
            if self.nodes.iter().any(|n| &n.name == name) {
                Ok(())
            } else {
                Err(format!("no node named {name}"))
            }
        };
        match step {
            Step::Refuse { node: n }
            | Step::Accept { node: n }
            | Step::Down { node: n }
            | Step::Up { node: n }
            | Step::Check { node: n, .. } => node(n),
            Step::ExpectConnect { at: Some(n), .. } => node(n),
            Step::Expect { from, .. } | Step::Absent { from, .. } => {
                from.at.as_ref().map_or(Ok(()), node)
            }
            _ => Ok(()),
        }
    }
}

fn node_decl(rest: &str) -> Result<NodeDecl, String> {
    let (name, opts) = split_word(rest).ok_or("node needs a name")?;
    check_name(name)?;
    let mut node = NodeDecl {
        name: name.to_owned(),
        ..NodeDecl::default()
    };
    for word in opts.split(' ').filter(|w| !w.is_empty()) {
        match word.split_once('=') {
            Some(("limit", n)) => node.limit = Some(number(n)? as usize),
            Some(("users", list)) => {
                for pair in list.split(',') {
                    let (user, secret) = pair.split_once(':').ok_or("users=user:secret,...")?;
                    node.users.push((user.to_owned(), secret.to_owned()));
                }
            }
            None if word == "tls" => node.tls = true,
            None if word == "stalled" => node.stalled = true,
            _ => return Err(format!("unknown node option {word}")),
        }
    }
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_reads_into_nodes_and_steps() {
        let text = "# c\nchecks two connections\nnode a limit=1 users=u:s\nnode b tls stalled\n\
                    do 0 connect servers=$a\nexpect on=c not-on=d at=a as=x within=500 after=100 A k * 30\n\
                    outcome since=m 0 connected\ncheck a accepted 2\n";
        let s = Scenario::parse("x", text).expect("parses");
        assert_eq!(s.checks, "two connections");
        assert_eq!(s.nodes[0].limit, Some(1));
        assert_eq!(s.nodes[0].users, vec![("u".into(), "s".into())]);
        assert!(s.nodes[1].tls && s.nodes[1].stalled);
        assert_eq!(
            s.steps[1].step,
            Step::Expect {
                timing: Timing {
                    within_ms: 500,
                    after_ms: Some(100),
                    since: None
                },
                from: Where {
                    at: Some("a".into()),
                    on: Some("c".into()),
                    not_on: vec!["d".into()]
                },
                bind: Some("x".into()),
                pattern: "A k * 30".into(),
            }
        );
        assert!(
            matches!(&s.steps[2].step, Step::Outcome { timing, id, expected }
            if timing.since.as_deref() == Some("m") && id == "0" && expected == "connected")
        );
    }

    #[test]
    fn a_standing_answer_reads_its_pattern_and_reply() {
        let text = "node a\nalways at=a A k * 30 => M A k -\nalways R k 5 => close\n";
        let s = Scenario::parse("x", text).expect("parses");
        let rules: Vec<&Rule> = s
            .steps
            .iter()
            .filter_map(|line| match &line.step {
                Step::Always { rule } => Some(rule),
                _ => None,
            })
            .collect();
        assert_eq!(rules[0].from.at.as_deref(), Some("a"));
        assert_eq!(rules[0].pattern, "A k * 30");
        assert_eq!(rules[0].reply.as_deref(), Some("M A k -"));
        assert_eq!(rules[1].reply, None);
        assert!(Scenario::parse("x", "node a\nalways A k\n").is_err());
    }

    #[test]
    fn mistakes_name_their_line() {
        for (text, line) in [
            ("node a\nfly away\n", 2),
            ("node a\nexpect bogus=1 A k\n", 2),
            ("node a\ncheck b open 1\n", 2),
            ("node a\nsleep soon\n", 2),
            ("node a\nexpect within=1 after=2 A k\n", 2),
            ("do 0 x\nnode a\n", 2),
        ] {
            match Scenario::parse("x", text) {
                Err((at, _)) => assert_eq!(at, line, "{text}"),
                Ok(_) => panic!("accepted {text:?}"),
            }
        }
        assert!(Scenario::parse("x", "sleep 1\n").is_err(), "no node");
    }
}
