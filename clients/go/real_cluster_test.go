// The client against real batond processes: restarts, kill -9, SIGSTOP,
// graceful stops and failovers in priority and Raft clusters.

package baton

import (
	"errors"
	"testing"
	"time"
)

func TestRealSingleKill9ThenRestartIsRedialled(t *testing.T) {
	n := startNode(t, "")
	c := dialTest(t, []string{n.addr})
	ctx := bg(t, 60*time.Second)
	l, err := c.Acquire(ctx, "k", AcquireOptions{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	n.kill()
	if _, err := c.Acquire(ctx, "other", AcquireOptions{Wait: time.Second}); !errors.Is(err, ErrNoServer) {
		t.Fatalf("acquire with the node dead: %v", err)
	}
	n.launch() // same address
	// Redialled in the background within a 3 s round.
	l2, err := c.Acquire(ctx, "k", AcquireOptions{Wait: 10 * time.Second, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d: tokens must rise across a restart", l2.Token(), l.Token())
	}
}

func TestRealSingleFrozenNodeIsFoundOutAndComesBack(t *testing.T) {
	n := startNode(t, "")
	c := dialTest(t, []string{n.addr}, WithUnresponsiveAfter(time.Second))
	ctx := bg(t, 60*time.Second)
	if _, err := c.Acquire(ctx, "k", AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	n.pause()
	start := time.Now()
	_, err := c.Acquire(ctx, "other", AcquireOptions{Wait: 2 * time.Second})
	if !errors.Is(err, ErrNoServer) || time.Since(start) > 8*time.Second {
		t.Fatalf("acquire on a frozen node, after %v: %v", time.Since(start), err)
	}
	n.resume()
	// (not "other": the node, thawed, may grant the acquire it read from
	// the connection the client gave up, to a socket already closed)
	if _, err := c.Acquire(ctx, "third", AcquireOptions{Wait: 10 * time.Second}); err != nil {
		t.Fatalf("after SIGCONT: %v", err)
	}
}

func TestRealPriorityActiveKilledFailsOver(t *testing.T) {
	nodes := startCluster(t, "priority", 2)
	c := dialTest(t, addrsOf(nodes))
	ctx := bg(t, 60*time.Second)
	active := serving(t, nodes, 15*time.Second)
	l, err := c.Acquire(ctx, "k", AcquireOptions{Wait: 5 * time.Second, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	nodes[active].kill()
	l2, err := c.Acquire(ctx, "k2", AcquireOptions{Wait: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d across a failover", l2.Token(), l.Token())
	}
	for _, st := range c.Status(ctx) {
		dead := st.Addr == nodes[active].addr
		if dead != errors.Is(st.Err, ErrNoServer) || !dead && st.Status.Role != "active" {
			t.Fatalf("status of %s (dead: %v): %+v", st.Addr, dead, st)
		}
	}
}

func TestRealPriorityFrozenActiveAcquireFailsOver(t *testing.T) {
	nodes := startCluster(t, "priority", 2)
	c := dialTest(t, addrsOf(nodes))
	ctx := bg(t, 60*time.Second)
	active := serving(t, nodes, 15*time.Second)
	// Replicated to the standby, where it lasts its lease.
	held, err := c.Acquire(ctx, "k", AcquireOptions{Lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// A waiter queued on the active node, which then freezes: the client
	// finds the node out (4 s of silence) and sends the acquire on to the
	// standby, promoted meanwhile, with what is left of its wait.
	done := make(chan error, 1)
	var l *Lock
	go func() {
		var err error
		l, err = c.Acquire(ctx, "k", AcquireOptions{Wait: 30 * time.Second})
		done <- err
	}()
	eventually(t, 5*time.Second, "the waiter queued", func() bool {
		st, err := c.Query(ctx, "k")
		return err == nil && st.Waiters == 1
	})
	nodes[active].pause()
	start := time.Now()
	select {
	case err := <-done:
		// The promoted standby may hold k from replication: a grant after
		// the lease, or sooner if it lost it. Either way a grant, above.
		if err != nil {
			t.Fatalf("after %v: %v", time.Since(start), err)
		}
		if l.Token() <= held.Token() {
			t.Fatalf("token %d after %d", l.Token(), held.Token())
		}
	case <-time.After(75 * time.Second):
		t.Fatal("the acquire did not fail over")
	}
	nodes[active].resume()
}

func TestRealPriorityGracefulStopHandsOver(t *testing.T) {
	nodes := startCluster(t, "priority", 3)
	c := dialTest(t, addrsOf(nodes))
	ctx := bg(t, 60*time.Second)
	active := serving(t, nodes, 15*time.Second)
	l, err := c.Acquire(ctx, "k", AcquireOptions{Lease: time.Minute, KeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	nodes[active].stop()
	l2, err := c.Acquire(ctx, "k2", AcquireOptions{Wait: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d", l2.Token(), l.Token())
	}
	if err := l.Renew(ctx, time.Minute); err != nil {
		t.Fatalf("the handed-over grant: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRealRaftLeaderKilledKeepsTheLockAlive(t *testing.T) {
	nodes := startCluster(t, "raft", 3)
	c := dialTest(t, addrsOf(nodes))
	ctx := bg(t, 90*time.Second)
	leader := serving(t, nodes, 20*time.Second)
	l, err := c.Acquire(ctx, "k", AcquireOptions{Wait: 10 * time.Second, Lease: 6 * time.Second, KeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	nodes[leader].kill()
	l2, err := c.Acquire(ctx, "k2", AcquireOptions{Wait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d", l2.Token(), l.Token())
	}
	// Two more lease periods: the keep-alive renews on the new leader.
	time.Sleep(12 * time.Second)
	select {
	case <-l.Lost():
		t.Fatalf("lost across the leader's death: %v", l.Err())
	default:
	}
	st, err := c.Query(ctx, "k")
	if err != nil || st.Token != l.Token() {
		t.Fatalf("query on the new leader: %+v %v", st, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
