//! Issue 6's goals for Baton, and issue 14's for its Raft cluster (against
//! the floor measured in the run and against etcd as a 3-node cluster),
//! checked against the rows of one run: each goal gets the figures it
//! compares and a verdict (met, missed, or not measured when a row it
//! needs is absent).

use crate::floor::Floor;
use crate::report::{latency, Row};
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

    pub(crate) fn of(checks: &[bool]) -> Self {
        match checks {
            [] => Verdict::NotMeasured,
            _ if checks.iter().all(|&ok| ok) => Verdict::Met,
            _ => Verdict::Missed,
        }
    }
}

fn find(rows: &[Row], target: Target, scenario: Scenario, clients: usize) -> Option<&Row> {
    find_case(rows, target, (scenario, clients, 1))
}

/// The row of `target` in one case: (scenario, clients, depth); the depth
/// is 1 in every scenario but the pipelined one.
pub(crate) fn find_case(
    rows: &[Row],
    target: Target,
    (scenario, clients, depth): (Scenario, usize, usize),
) -> Option<&Row> {
    rows.iter().find(|row| {
        row.target == target
            && row.case.scenario == scenario
            && row.case.clients == clients
            && row.case.depth == depth
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

/// Uncontended C=1 against this share of the floor's cycles/s.
const FLOOR_SHARE: f64 = 0.7;
/// Contended hand-over (release sent to next grant received) at most
/// this many of the floor's commit times.
const HANDOVER_COMMITS: f64 = 1.5;
/// Raft against etcd x3: at least this many times its cycles/s.
const ETCD_CLUSTER_FACTOR: f64 = 10.0;

/// Issue 14's goals for the Raft cluster, judged on `rows` and the floor,
/// then the priority cluster's (see [`crate::priority_goal`]).
pub fn judge_clusters(rows: &[Row], floor: Option<&Floor>) -> Vec<Goal> {
    use Scenario::{Contended, Uncontended};
    let mut goals = Vec::new();

    let (figures, checks) = match (find(rows, Target::BatonRaft, Uncontended, 1), floor) {
        (Some(raft), Some(floor)) if floor.cycles_per_sec() > 0.0 => {
            let share = raft.rate / floor.cycles_per_sec();
            let cycle =
                (raft.rate > 0.0).then(|| std::time::Duration::from_secs_f64(1.0 / raft.rate));
            (
                format!(
                    "{:.0} vs {:.0} cycles/s: {share:.2}x (cycle {} vs {})",
                    raft.rate,
                    floor.cycles_per_sec(),
                    latency(cycle),
                    latency(Some(floor.cycle())),
                ),
                vec![share >= FLOOR_SHARE],
            )
        }
        _ => (String::new(), vec![]),
    };
    goals.push(Goal {
        goal: "Raft uncontended C=1: at least 0.7x the floor's cycles/s",
        figures,
        verdict: Verdict::of(&checks),
    });

    for (goal, scenario, counts) in [
        (
            "Raft uncontended C=16, 64, 256: at least 10x etcd x3",
            Uncontended,
            &[16, 64, 256][..],
        ),
        (
            "Raft contended, 16 and 64 on one key: at least 10x etcd x3",
            Contended,
            &[16, 64][..],
        ),
    ] {
        let (figures, checks) = versus(rows, scenario, counts, Target::EtcdCluster);
        goals.push(Goal {
            goal,
            figures,
            verdict: Verdict::of(&checks),
        });
    }

    let (figures, checks) = handover(rows, floor);
    goals.push(Goal {
        goal: "Raft contended hand-over (p50, release sent to next grant): within 1.5 commit times of the floor",
        figures,
        verdict: Verdict::of(&checks),
    });
    goals.push(crate::priority_goal::judge(rows));
    goals
}

/// Raft's rate over `peer`'s at each of `counts` where both ran.
fn versus(rows: &[Row], scenario: Scenario, counts: &[usize], peer: Target) -> (String, Vec<bool>) {
    let mut checks = Vec::new();
    let mut figures = Vec::new();
    for &clients in counts {
        let raft = find(rows, Target::BatonRaft, scenario, clients);
        if let (Some(raft), Some(other)) = (raft, find(rows, peer, scenario, clients)) {
            if other.rate > 0.0 {
                let ratio = raft.rate / other.rate;
                checks.push(ratio >= ETCD_CLUSTER_FACTOR);
                figures.push(format!(
                    "C={clients}: {:.0} vs {:.0}, {ratio:.1}x",
                    raft.rate, other.rate
                ));
            }
        }
    }
    (figures.join("; "), checks)
}

/// Raft's contended p50 hand-over at C=16 and 64 in the floor's commits.
fn handover(rows: &[Row], floor: Option<&Floor>) -> (String, Vec<bool>) {
    let Some(commit) = floor.map(Floor::commit).filter(|c| !c.is_zero()) else {
        return (String::new(), vec![]);
    };
    let mut checks = Vec::new();
    let mut figures = Vec::new();
    for clients in [16, 64] {
        let raft = find(rows, Target::BatonRaft, Scenario::Contended, clients);
        if let Some(p50) = raft.and_then(|row| row.p50) {
            let commits = p50.as_secs_f64() / commit.as_secs_f64();
            checks.push(commits <= HANDOVER_COMMITS);
            figures.push(format!(
                "C={clients}: {} = {commits:.1} commits",
                latency(Some(p50))
            ));
        }
    }
    if !figures.is_empty() {
        figures.push(format!("floor commit {}", latency(Some(commit))));
    }
    (figures.join("; "), checks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::add_ratios;
    use crate::scenario::{Case, Measured};

    fn row(target: Target, scenario: Scenario, clients: usize, rate: f64) -> Row {
        timed(target, scenario, clients, rate, None)
    }

    fn timed(
        target: Target,
        scenario: Scenario,
        clients: usize,
        rate: f64,
        p50_us: Option<u64>,
    ) -> Row {
        let case = Case {
            scenario,
            clients,
            depth: 1,
        };
        let run = Measured {
            rate,
            p50: p50_us.map(std::time::Duration::from_micros),
            p99: None,
        };
        Row::summarize(target, case, &[run])
    }

    /// fsync 130 us, RTT 20 us: commit 150 us, cycle 340 us, 2941/s.
    fn floor() -> Floor {
        let us = |v: u64| crate::floor::Samples::new(vec![std::time::Duration::from_micros(v)]);
        Floor {
            fsync: us(130),
            rtt: us(20),
        }
    }

    #[test]
    fn judges_the_cluster_goals_against_floor_and_etcd_x3() {
        use Scenario::*;
        use Target::{BatonRaft, Etcd, EtcdCluster};
        let rows = vec![
            row(BatonRaft, Uncontended, 1, 2100.0),
            row(BatonRaft, Uncontended, 16, 9000.0),
            row(EtcdCluster, Uncontended, 16, 1000.0),
            row(BatonRaft, Uncontended, 64, 20000.0),
            row(EtcdCluster, Uncontended, 64, 1500.0),
            // The single-node etcd is not the yardstick here.
            row(Etcd, Uncontended, 16, 10.0),
            timed(BatonRaft, Contended, 16, 1500.0, Some(200)),
            row(EtcdCluster, Contended, 16, 150.0),
            timed(BatonRaft, Contended, 64, 1500.0, Some(240)),
        ];
        let goals = judge_clusters(&rows, Some(&floor()));
        let verdicts: Vec<Verdict> = goals.iter().map(|g| g.verdict).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Met,         // 2100 / 2941 = 0.71x
                Verdict::Missed,      // C=16 is 9x
                Verdict::Met,         // C=16 10x, no etcd x3 row at 64
                Verdict::Missed,      // C=64: 240 us = 1.6 commits
                Verdict::NotMeasured, // no priority rows
            ]
        );
        assert_eq!(
            goals[0].figures,
            "2100 vs 2941 cycles/s: 0.71x (cycle 476.2us vs 340.0us)"
        );
        assert_eq!(
            goals[1].figures,
            "C=16: 9000 vs 1000, 9.0x; C=64: 20000 vs 1500, 13.3x"
        );
        assert_eq!(goals[2].figures, "C=16: 1500 vs 150, 10.0x");
        assert_eq!(
            goals[3].figures,
            "C=16: 200.0us = 1.3 commits; C=64: 240.0us = 1.6 commits; floor commit 150.0us"
        );
    }

    #[test]
    fn cluster_goals_without_floor_or_peers_are_not_measured() {
        let rows = vec![row(Target::BatonRaft, Scenario::Uncontended, 1, 900.0)];
        let goals = judge_clusters(&rows, None);
        assert_eq!(goals.len(), 5);
        assert!(goals.iter().all(|g| g.verdict == Verdict::NotMeasured));
        assert!(goals.iter().all(|g| g.figures.is_empty()), "{goals:?}");
        let goals = judge_clusters(&rows, Some(&floor()));
        assert_eq!(goals[0].verdict, Verdict::Missed);
        assert_eq!(goals[3].verdict, Verdict::NotMeasured);
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
