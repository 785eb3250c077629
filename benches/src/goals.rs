//! Issue 6's goals for Baton, checked against the rows of one run: each
//! goal gets the figures it compares and a verdict (met, missed, or not
//! measured when a row it needs is absent).

use crate::report::Row;
use crate::scenario::Scenario;
use crate::Target;

/// One goal and how this run fared.
#[derive(Clone, Debug, PartialEq)]
pub struct Goal {
    pub goal: &'static str,
    pub figures: String,
    pub verdict: Verdict,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Met,
    Missed,
    NotMeasured,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "**missed**",
            Verdict::NotMeasured => "not measured",
        }
    }

    fn of(checks: &[bool]) -> Self {
        match checks {
            [] => Verdict::NotMeasured,
            _ if checks.iter().all(|&ok| ok) => Verdict::Met,
            _ => Verdict::Missed,
        }
    }
}

fn find(rows: &[Row], target: Target, scenario: Scenario, clients: usize) -> Option<&Row> {
    rows.iter().find(|row| {
        row.target == target && row.case.scenario == scenario && row.case.clients == clients
    })
}

/// Every goal of issue 6, judged on `rows`.
pub fn judge(rows: &[Row]) -> Vec<Goal> {
    let mut goals = Vec::new();

    let uncontended: Vec<&Row> = rows
        .iter()
        .filter(|r| r.target == Target::Baton && r.case.scenario == Scenario::Uncontended)
        .collect();
    let mut checks = Vec::new();
    let mut figures = Vec::new();
    for row in &uncontended {
        if let (Some(echo), Some(redis)) = (row.vs_echo, row.vs_redis) {
            checks.push(echo >= 0.9 && redis >= 1.0);
            figures.push(format!(
                "C={}: {echo:.2}x echo, {redis:.2}x redis",
                row.case.clients
            ));
        }
    }
    goals.push(Goal {
        goal: "uncontended: at least Redis and at least 0.9x the echo ceiling at every C",
        figures: figures.join("; "),
        verdict: Verdict::of(&checks),
    });

    let contended = find(rows, Target::Baton, Scenario::Contended, 16);
    let mut checks = Vec::new();
    let mut figures = Vec::new();
    for (peer, factor) in [
        (Target::Redis, 2.0),
        (Target::Etcd, 100.0),
        (Target::Zookeeper, 10.0),
    ] {
        if let (Some(baton), Some(other)) = (contended, find(rows, peer, Scenario::Contended, 16)) {
            if other.rate > 0.0 {
                let ratio = baton.rate / other.rate;
                checks.push(ratio >= factor);
                figures.push(format!("{ratio:.1}x {} (goal {factor}x)", peer.name()));
            }
        }
    }
    goals.push(Goal {
        goal: "contended, 16 on one key: at least 2x Redis, 100x etcd, 10x ZooKeeper",
        figures: figures.join("; "),
        verdict: Verdict::of(&checks),
    });

    let best = rows
        .iter()
        .filter(|r| r.target == Target::Baton && r.case.scenario == Scenario::Pipelined)
        .map(|r| r.rate)
        .fold(None, |best: Option<f64>, rate| {
            Some(best.map_or(rate, |b| b.max(rate)))
        });
    goals.push(Goal {
        goal: "pipelined: at least 1.5M requests/s",
        figures: best.map_or(String::new(), |rate| format!("best {rate:.0} req/s")),
        verdict: Verdict::of(
            &best
                .map(|rate| rate >= 1.5e6)
                .into_iter()
                .collect::<Vec<_>>(),
        ),
    });

    let raft = find(rows, Target::BatonRaft, Scenario::Uncontended, 64);
    let etcd = find(rows, Target::Etcd, Scenario::Uncontended, 64);
    let (figures, checks) = match (raft, etcd) {
        (Some(raft), Some(etcd)) if etcd.rate > 0.0 => {
            let ratio = raft.rate / etcd.rate;
            (
                format!("{:.0} vs {:.0} cycles/s: {ratio:.1}x", raft.rate, etcd.rate),
                vec![ratio >= 10.0],
            )
        }
        _ => (String::new(), vec![]),
    };
    goals.push(Goal {
        goal: "Raft 3-node, durable: at least 10x etcd's cycles/s at C=64",
        figures,
        verdict: Verdict::of(&checks),
    });

    let memory = rows
        .iter()
        .find(|r| r.target == Target::Baton && r.case.scenario == Scenario::Memory);
    goals.push(Goal {
        goal: "memory: at most 200 bytes per held lock",
        figures: memory.map_or(String::new(), |r| {
            format!("{:.0} B/lock with {} locks held", r.rate, r.case.clients)
        }),
        verdict: Verdict::of(
            &memory
                .map(|r| r.rate <= 200.0)
                .into_iter()
                .collect::<Vec<_>>(),
        ),
    });
    goals
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::add_ratios;
    use crate::scenario::{Case, Measured};

    fn row(target: Target, scenario: Scenario, clients: usize, rate: f64) -> Row {
        let case = Case {
            scenario,
            clients,
            depth: 1,
        };
        let run = Measured {
            rate,
            p50: None,
            p99: None,
        };
        Row::summarize(target, case, &[run])
    }

    #[test]
    fn judges_each_goal() {
        use Scenario::*;
        let mut rows = vec![
            row(Target::Baton, Uncontended, 1, 95.0),
            row(Target::Echo, Uncontended, 1, 100.0),
            row(Target::Redis, Uncontended, 1, 90.0),
            row(Target::Baton, Uncontended, 64, 50.0),
            row(Target::Echo, Uncontended, 64, 100.0),
            row(Target::Redis, Uncontended, 64, 90.0),
            row(Target::Baton, Contended, 16, 1000.0),
            row(Target::Redis, Contended, 16, 400.0),
            row(Target::Etcd, Contended, 16, 5.0),
            row(Target::Baton, Pipelined, 16, 2e6),
            row(Target::Baton, Memory, 1000, 250.0),
        ];
        add_ratios(&mut rows);
        let goals = judge(&rows);
        let verdicts: Vec<Verdict> = goals.iter().map(|g| g.verdict).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Missed, // C=64 is at 0.5x echo
                Verdict::Met,    // 2.5x redis, 200x etcd, no zookeeper row
                Verdict::Met,
                Verdict::NotMeasured, // no raft row
                Verdict::Missed,
            ]
        );
        assert!(goals[0].figures.contains("C=64: 0.50x echo"), "{goals:?}");
        assert!(goals[1].figures.contains("200.0x etcd"), "{goals:?}");
    }
}
