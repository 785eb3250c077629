// Protocol 1.2 against real batond processes: semaphores, shared locks,
// values, watches and elections on a single node, and a watch and an
// election through a kill -9 of the serving node of a Raft cluster and of
// a priority cluster while a candidate waits: the client redials, the
// observers see the next leader, and tokens keep rising.

package baton

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// recv is the next value of ch within d.
func recv[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the channel closed", what)
		}
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing within %v", what, d)
	}
	var zero T
	return zero
}

// result is what a call run in a goroutine returned.
type result[T any] struct {
	v   T
	err error
}

// async runs call in a goroutine; its result comes on the channel.
func async[T any](call func() (T, error)) <-chan result[T] {
	out := make(chan result[T], 1)
	go func() {
		v, err := call()
		out <- result[T]{v, err}
	}()
	return out
}

func valuesOf(s KeyState) []string {
	var out []string
	for _, h := range s.Holders {
		out = append(out, h.Value)
	}
	return out
}

// untilWaiters waits until key has n waiters, as the serving node reports.
func untilWaiters(t *testing.T, c *Client, key string, n uint64) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("%d waiters on %s", n, key), func() bool {
		s, err := c.Query(context.Background(), key)
		return err == nil && s.Waiters == n
	})
}

// nextLeader is the next leader observed, past the vacant office a
// hand-over may show between two leaders.
func nextLeader(t *testing.T, leaders <-chan LeaderState) LeaderState {
	t.Helper()
	l := recv(t, leaders, 30*time.Second, "the next leader")
	if l.Token == 0 {
		l = recv(t, leaders, 30*time.Second, "the next leader after a vacancy")
	}
	return l
}

// mustLock fails the test on an acquire's error: mustLock(t)(c.Acquire(...)).
// handOver resigns lead and checks that the rival campaigning as
// "node-b" leads next, with a token above above, and that the observer
// sees it; the rival's lock.
func handOver(t *testing.T, lead *Lock, rival <-chan result[*Lock], leaders <-chan LeaderState, above uint64) *Lock {
	t.Helper()
	if err := lead.Release(context.Background()); err != nil { // resign
		t.Fatal(err)
	}
	next := recv(t, rival, 30*time.Second, "the rival's campaign")
	if next.err != nil || next.v.Token() <= above {
		t.Fatalf("the next leader, above %d: %+v", above, next)
	}
	if l := nextLeader(t, leaders); l != (LeaderState{"node-b", next.v.Token()}) {
		t.Fatalf("observed %+v", l)
	}
	return next.v
}

func mustLock(t *testing.T) func(*Lock, error) *Lock {
	return func(l *Lock, err error) *Lock {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

func TestRealProto12SemaphoreSharedLocksAndValues(t *testing.T) {
	n := startNode(t, "")
	c := dialTest(t, []string{n.addr})
	ctx := bg(t, 60*time.Second)
	sem := AcquireOptions{Wait: 5 * time.Second, Lease: time.Minute, Permits: 2}
	a := mustLock(t)(c.Acquire(ctx, "sem", AcquireOptions{Wait: 5 * time.Second, Lease: time.Minute, Permits: 2, Value: "a"}))
	b := mustLock(t)(c.Acquire(ctx, "sem", sem))
	if _, err := c.TryAcquire(ctx, "sem", sem); !errors.Is(err, ErrTimedOut) {
		t.Fatalf("a third permit of two: %v", err)
	}
	var refused *Error
	_, err := c.Acquire(ctx, "sem", AcquireOptions{Wait: time.Second, Permits: 3})
	if !errors.As(err, &refused) || !errors.Is(err, ErrRejected) || refused.Reason != "the key has 2 permits" {
		t.Fatalf("another number of permits: %v", err)
	}
	if err := b.SetValue(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	s, err := c.Query(ctx, "sem")
	if err != nil || s.Permits != 2 || s.HolderCount != 2 || !slices.Equal(valuesOf(s), []string{"a", "b"}) || s.Token != b.Token() {
		t.Fatalf("query: %+v %v", s, err)
	}
	third := async(func() (*Lock, error) {
		return c.Acquire(ctx, "sem", AcquireOptions{Wait: 20 * time.Second, Permits: 2})
	})
	untilWaiters(t, c, "sem", 1)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, third, 20*time.Second, "the freed permit"); r.err != nil || r.v.Token() <= b.Token() {
		t.Fatalf("the waiter: %+v", r)
	}

	// A reader holds; a writer waits; a reader behind the writer waits too.
	reader := mustLock(t)(c.Acquire(ctx, "rw", AcquireOptions{Wait: 5 * time.Second, Shared: true}))
	writing := async(func() (*Lock, error) { return c.Acquire(ctx, "rw", AcquireOptions{Wait: 20 * time.Second}) })
	untilWaiters(t, c, "rw", 1)
	reading := async(func() (*Lock, error) {
		return c.Acquire(ctx, "rw", AcquireOptions{Wait: 20 * time.Second, Shared: true})
	})
	untilWaiters(t, c, "rw", 2)
	if err := reader.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := recv(t, writing, 20*time.Second, "the writer")
	if w.err != nil || w.v.Token() <= reader.Token() {
		t.Fatalf("the writer: %+v", w)
	}
	if s, err := c.Query(ctx, "rw"); err != nil || s.Token != w.v.Token() || s.Waiters != 1 {
		t.Fatalf("the writer alone holds: %+v %v", s, err)
	}
	if err := w.v.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, reading, 20*time.Second, "the late reader"); r.err != nil || r.v.Token() <= w.v.Token() {
		t.Fatalf("the late reader: %+v", r)
	}
	if err := reader.SetValue(ctx, "x"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("a value on a released grant: %v", err)
	}
}

func TestRealProto12WatchAndElection(t *testing.T) {
	n := startNode(t, "")
	c, other := dialTest(t, []string{n.addr}), dialTest(t, []string{n.addr})
	ctx := bg(t, 60*time.Second)
	states, err := c.Watch(ctx, "wk")
	if err != nil {
		t.Fatal(err)
	}
	if s := recv(t, states, 10*time.Second, "the free key"); s.Held() || s.Tag != "-" {
		t.Fatalf("first: %+v", s)
	}
	l := mustLock(t)(c.Acquire(ctx, "wk", AcquireOptions{Wait: time.Second, Value: "v1"}))
	if s := recv(t, states, 10*time.Second, "the grant"); s.Token != l.Token() || !slices.Equal(valuesOf(s), []string{"v1"}) {
		t.Fatalf("held: %+v", s)
	}
	if err := l.SetValue(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	if s := recv(t, states, 10*time.Second, "the value"); !slices.Equal(valuesOf(s), []string{"v2"}) {
		t.Fatalf("value: %+v", s)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if s := recv(t, states, 10*time.Second, "the release"); s.Held() {
		t.Fatalf("released: %+v", s)
	}

	e := c.Election("el")
	if _, _, err := e.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("no leader yet: %v", err)
	}
	leaders, err := other.Election("el").Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l := recv(t, leaders, 10*time.Second, "no leader"); l.Token != 0 {
		t.Fatalf("first: %+v", l)
	}
	lead := mustLock(t)(e.Campaign(ctx, "node-a", 10*time.Second))
	if l := recv(t, leaders, 10*time.Second, "the leader"); l != (LeaderState{"node-a", lead.Token()}) {
		t.Fatalf("observed %+v", l)
	}
	rival := async(func() (*Lock, error) { return other.Election("el").Campaign(ctx, "node-b", 10*time.Second) })
	untilWaiters(t, c, "el", 1)
	if err := lead.SetValue(ctx, "node-a2"); err != nil { // proclaim
		t.Fatal(err)
	}
	if l := recv(t, leaders, 10*time.Second, "the proclamation"); l != (LeaderState{"node-a2", lead.Token()}) {
		t.Fatalf("observed %+v", l)
	}
	next := handOver(t, lead, rival, leaders, lead.Token())
	if value, token, err := e.Leader(ctx); err != nil || value != "node-b" || token != next.Token() {
		t.Fatalf("leader: %q %d %v", value, token, err)
	}
}

// electionThroughAKill campaigns on a cluster, queues a rival candidate,
// watches the election and a semaphore, then kills the serving node
// (kill, given the last token granted, returns the nodes still up) and checks that the leader,
// the candidate's acquire, the observer and the watch carry on there.
func electionThroughAKill(t *testing.T, nodes []*node, kill func(serving int, last uint64) []*node) {
	addrs := addrsOf(nodes)
	first, second, watcher := dialTest(t, addrs), dialTest(t, addrs), dialTest(t, addrs)
	ctx := bg(t, 120*time.Second)
	active := serving(t, nodes, 20*time.Second)
	e := first.Election("elect")
	lead := mustLock(t)(e.Campaign(ctx, "node-a", 15*time.Second))
	rival := async(func() (*Lock, error) { return second.Election("elect").Campaign(ctx, "node-b", 15*time.Second) })
	untilWaiters(t, first, "elect", 1)
	permit := mustLock(t)(first.Acquire(ctx, "pool", AcquireOptions{Wait: 5 * time.Second, Lease: time.Minute, Permits: 2, Value: "p"}))
	shared := mustLock(t)(first.Acquire(ctx, "rw", AcquireOptions{Wait: 5 * time.Second, Lease: time.Minute, Shared: true}))
	leaders, err := watcher.Election("elect").Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l := recv(t, leaders, 10*time.Second, "the leader"); l != (LeaderState{"node-a", lead.Token()}) {
		t.Fatalf("observed %+v", l)
	}
	states, err := watcher.Watch(ctx, "pool")
	if err != nil {
		t.Fatal(err)
	}
	if s := recv(t, states, 10*time.Second, "the pool"); !slices.Equal(valuesOf(s), []string{"p"}) {
		t.Fatalf("pool: %+v", s)
	}

	up := kill(active, shared.Token())
	serving(t, up, 30*time.Second)
	// The grants survived: the same leader, kept alive through the new
	// serving node; the semaphore and the shared grant are there too.
	if value, token, err := e.Leader(ctx); err != nil || value != "node-a" || token != lead.Token() {
		t.Fatalf("leader after the kill: %q %d %v", value, token, err)
	}
	if s, err := first.Query(ctx, "pool"); err != nil || s.Permits != 2 || !slices.Equal(valuesOf(s), []string{"p"}) {
		t.Fatalf("pool after the kill: %+v %v", s, err)
	}
	if s, err := first.Query(ctx, "rw"); err != nil || s.Mode != "shared" || s.Token != shared.Token() {
		t.Fatalf("rw after the kill: %+v %v", s, err)
	}
	select {
	case l := <-leaders:
		t.Fatalf("the leader did not change, yet observed %+v", l)
	case s := <-states:
		t.Fatalf("the pool did not change, yet watched %+v", s)
	default:
	}
	if err := lead.SetValue(ctx, "node-a2"); err != nil {
		t.Fatal(err)
	}
	if l := recv(t, leaders, 30*time.Second, "the proclamation after the kill"); l != (LeaderState{"node-a2", lead.Token()}) {
		t.Fatalf("observed %+v", l)
	}
	if err := permit.SetValue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if s := recv(t, states, 30*time.Second, "the value after the kill"); !slices.Equal(valuesOf(s), []string{"q"}) {
		t.Fatalf("pool: %+v", s)
	}
	select {
	case <-lead.Lost():
		t.Fatalf("the leader's lock was lost: %v", lead.Err())
	default:
	}

	// The rival's acquire, lost with the killed node, was sent again: it
	// leads after the resignation, with a later token than any before.
	untilWaiters(t, first, "elect", 1)
	next := handOver(t, lead, rival, leaders, max(lead.Token(), permit.Token(), shared.Token()))
	for _, l := range []*Lock{next, permit, shared} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRealProto12RaftElectionAndWatchRideALeaderKill(t *testing.T) {
	nodes := startCluster(t, "raft", 3)
	electionThroughAKill(t, nodes, func(leader int, _ uint64) []*node {
		nodes[leader].kill()
		return slices.Delete(slices.Clone(nodes), leader, leader+1)
	})
}

func TestRealProto12PriorityElectionAndWatchRideAFailover(t *testing.T) {
	nodes := startCluster(t, "priority", 2)
	electionThroughAKill(t, nodes, func(active int, last uint64) []*node {
		// Replication keeps the order: the last grant on the standby, all are.
		standby := nodes[1-active]
		probe := dialTest(t, []string{standby.addr})
		eventually(t, 10*time.Second, "the grants replicated", func() bool {
			for _, st := range probe.Status(context.Background()) {
				if st.Err == nil && st.Status.Token >= last {
					return true
				}
			}
			return false
		})
		nodes[active].kill()
		return []*node{standby}
	})
}

// A node's --max-wait below the client's own waits: a campaign, the watch
// and the observer go on with the node's maximum instead of ending.
func TestRealProto12WatchOnANodeWithAShortMaxWait(t *testing.T) {
	n := startNode(t, "", "--max-wait", "2")
	c := dialTest(t, []string{n.addr})
	ctx := bg(t, 60*time.Second)
	states, err := c.Watch(ctx, "wk")
	if err != nil {
		t.Fatal(err)
	}
	leaders, err := c.Election("wk").Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s := recv(t, states, 10*time.Second, "the free key"); s.Held() {
		t.Fatalf("first: %+v", s)
	}
	if l := recv(t, leaders, 10*time.Second, "no leader"); l.Token != 0 {
		t.Fatalf("first: %+v", l)
	}
	lead := mustLock(t)(c.Election("wk").Campaign(ctx, "node-a", 10*time.Second))
	if s := recv(t, states, 10*time.Second, "the grant"); s.Token != lead.Token() {
		t.Fatalf("held: %+v", s)
	}
	if l := recv(t, leaders, 10*time.Second, "the leader"); l != (LeaderState{"node-a", lead.Token()}) {
		t.Fatalf("observed %+v", l)
	}
	// A rival campaigns as long as ctx allows: the node's T after its
	// maximum only makes it ask again, as the watches' waits that ran out
	// meanwhile are sent again.
	start := time.Now()
	rival := async(func() (*Lock, error) { return c.Election("wk").Campaign(ctx, "node-b", 10*time.Second) })
	untilWaiters(t, c, "wk", 1)
	eventually(t, 10*time.Second, "the node's 2 s maximum wait ran out", func() bool {
		return time.Since(start) > 2500*time.Millisecond
	})
	untilWaiters(t, c, "wk", 1)
	select {
	case r := <-rival:
		t.Fatalf("the rival's campaign ended while ctx allowed more: %v", r.err)
	default:
	}
	if err := lead.SetValue(ctx, "node-a2"); err != nil {
		t.Fatal(err)
	}
	if l := recv(t, leaders, 10*time.Second, "the proclamation"); l != (LeaderState{"node-a2", lead.Token()}) {
		t.Fatalf("observed %+v", l)
	}
	if s := recv(t, states, 10*time.Second, "the value"); !slices.Equal(valuesOf(s), []string{"node-a2"}) {
		t.Fatalf("value: %+v", s)
	}
	// One whose ctx ends first times out then, past the node's maximum.
	// (Another client: two acquires of one key pending on one connection
	// may have their answers swapped, as the matching of answers to
	// requests by (op, key) gives an early T or E to the older one.)
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start = time.Now()
	_, err = dialTest(t, []string{n.addr}).Election("wk").Campaign(short, "node-c", 10*time.Second)
	if !errors.Is(err, ErrTimedOut) && !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 2900*time.Millisecond {
		t.Fatalf("a campaign with a 3 s deadline, after %v: %v", time.Since(start), err)
	}
	handOver(t, lead, rival, leaders, lead.Token())
}
