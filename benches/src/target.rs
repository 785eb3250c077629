//! The systems the driver can measure: Baton in its three modes, the echo
//! ceiling, and the peers people compare it with (Redis, etcd single and
//! as a 3-node cluster, ZooKeeper).
//! Each says which wire it speaks, what its grants promise and which
//! scenarios make sense for it.

use crate::scenario::Scenario;

/// A system under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// A single Baton node (`batond`).
    Baton,
    /// Three `batond --mode priority` nodes on loopback; clients use the active.
    BatonPriority,
    /// Three `batond --mode raft` nodes on loopback; clients use the leader.
    BatonRaft,
    /// The loopback ceiling: a line echo server answering each request with
    /// a response of the same shape and no work at all.
    Echo,
    /// Redis without persistence: SET NX PX, release by compare-and-delete.
    Redis,
    /// Redis with `appendfsync always`, the durable counterpart of Raft.
    RedisAof,
    /// etcd's v3 Lock API, a lease per client connection.
    Etcd,
    /// The same on three etcd members ("etcd x3"); clients use the leader.
    EtcdCluster,
    /// ZooKeeper's ephemeral sequential znode lock recipe.
    Zookeeper,
}

/// The request/response language a target speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Baton,
    Redis,
    Etcd,
    Zookeeper,
}

/// How a Baton cluster is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterMode {
    Priority,
    Raft,
}

impl ClusterMode {
    pub fn flag(self) -> &'static str {
        match self {
            ClusterMode::Priority => "priority",
            ClusterMode::Raft => "raft",
        }
    }

    /// The `S` role of the node that serves clients.
    pub fn serving_role(self) -> &'static str {
        match self {
            ClusterMode::Priority => "active",
            ClusterMode::Raft => "leader",
        }
    }
}

impl Target {
    pub const ALL: [Target; 9] = [
        Target::Baton,
        Target::BatonPriority,
        Target::BatonRaft,
        Target::Echo,
        Target::Redis,
        Target::RedisAof,
        Target::Etcd,
        Target::EtcdCluster,
        Target::Zookeeper,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Target::Baton => "baton",
            Target::BatonPriority => "baton-priority",
            Target::BatonRaft => "baton-raft",
            Target::Echo => "echo",
            Target::Redis => "redis",
            Target::RedisAof => "redis-aof",
            Target::Etcd => "etcd",
            Target::EtcdCluster => "etcd-cluster",
            Target::Zookeeper => "zookeeper",
        }
    }

    pub fn dialect(self) -> Dialect {
        match self {
            Target::Baton | Target::BatonPriority | Target::BatonRaft | Target::Echo => {
                Dialect::Baton
            }
            Target::Redis | Target::RedisAof => Dialect::Redis,
            Target::Etcd | Target::EtcdCluster => Dialect::Etcd,
            Target::Zookeeper => Dialect::Zookeeper,
        }
    }

    pub fn cluster(self) -> Option<ClusterMode> {
        match self {
            Target::BatonPriority => Some(ClusterMode::Priority),
            Target::BatonRaft => Some(ClusterMode::Raft),
            _ => None,
        }
    }

    /// Whether grants must be exclusive. The echo server grants every
    /// acquire at once, so the contended checks do not apply to it.
    pub fn checks_locks(self) -> bool {
        self != Target::Echo
    }

    /// Whether each grant carries a token above every earlier grant's.
    /// Redis has none: its "token" is the random value the driver chose.
    pub fn fences(self) -> bool {
        !matches!(self, Target::Redis | Target::RedisAof)
    }

    /// Whether `scenario` means anything for this target.
    pub fn supports(self, scenario: Scenario) -> bool {
        match scenario {
            Scenario::Uncontended | Scenario::Contended | Scenario::Pipelined => true,
            // Needs the server's PID and a cheap way to hold a million locks.
            Scenario::Memory => {
                matches!(self.dialect(), Dialect::Baton | Dialect::Redis) && self != Target::Echo
            }
            // Needs server-side FIFO waiters; Redis clients only spin.
            Scenario::Storm => self.dialect() == Dialect::Baton && self != Target::Echo,
            Scenario::Failover => self.cluster().is_some(),
            // The lock count and the role come from Baton's `S`.
            Scenario::ExpiryFlood | Scenario::ReleaseFlood => {
                self.dialect() == Dialect::Baton && self != Target::Echo
            }
            // Protocol 1.2's semaphores and shared locks: no peer has both
            // with fencing tokens and server-side queues.
            Scenario::Semaphore | Scenario::Shared => {
                self.dialect() == Dialect::Baton && self != Target::Echo
            }
            // Baton's W, and etcd's watch where its election's observe maps.
            Scenario::WatchFanout => match self.dialect() {
                Dialect::Baton => self != Target::Echo,
                Dialect::Etcd => true,
                Dialect::Redis | Dialect::Zookeeper => false,
            },
        }
    }

    /// Whether this build can drive the target (peer clients sit behind
    /// cargo features).
    pub fn compiled(self) -> bool {
        match self.dialect() {
            Dialect::Etcd => cfg!(feature = "etcd"),
            Dialect::Zookeeper => cfg!(feature = "zookeeper"),
            Dialect::Baton | Dialect::Redis => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn names_match_the_command_line_spelling() {
        for target in Target::ALL {
            let parsed = Target::from_str(target.name(), false);
            assert_eq!(parsed, Ok(target), "{}", target.name());
        }
    }

    #[test]
    fn scenarios_only_where_they_mean_something() {
        assert!(Target::Baton.supports(Scenario::Storm));
        assert!(!Target::Echo.supports(Scenario::Storm));
        assert!(!Target::Echo.supports(Scenario::Memory));
        assert!(Target::Redis.supports(Scenario::Memory));
        assert!(!Target::Etcd.supports(Scenario::Memory));
        assert!(!Target::Baton.supports(Scenario::Failover));
        assert!(Target::BatonRaft.supports(Scenario::Failover));
        assert!(Target::Zookeeper.supports(Scenario::Contended));
        // etcd x3 is not a Baton cluster: no failover figure of its own.
        assert!(Target::EtcdCluster.supports(Scenario::Contended));
        assert!(!Target::EtcdCluster.supports(Scenario::Failover));
        assert!(!Target::EtcdCluster.supports(Scenario::Memory));
        // Protocol 1.2: Baton's three modes; etcd only where its election maps.
        for target in [Target::Baton, Target::BatonPriority, Target::BatonRaft] {
            assert!(target.supports(Scenario::Semaphore), "{target:?}");
            assert!(target.supports(Scenario::Shared), "{target:?}");
            assert!(target.supports(Scenario::WatchFanout), "{target:?}");
        }
        assert!(!Target::Echo.supports(Scenario::Semaphore));
        assert!(!Target::Echo.supports(Scenario::WatchFanout));
        assert!(!Target::Etcd.supports(Scenario::Semaphore));
        assert!(!Target::Etcd.supports(Scenario::Shared));
        assert!(Target::Etcd.supports(Scenario::WatchFanout));
        assert!(!Target::Redis.supports(Scenario::WatchFanout));
        assert!(!Target::Zookeeper.supports(Scenario::WatchFanout));
    }

    #[test]
    fn only_redis_lacks_fencing_tokens() {
        let unfenced: Vec<_> = Target::ALL.into_iter().filter(|t| !t.fences()).collect();
        assert_eq!(unfenced, [Target::Redis, Target::RedisAof]);
    }
}
