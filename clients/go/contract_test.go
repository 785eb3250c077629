// The behaviour contract (docs/protocol.md, "What a client does"),
// checked against fake nodes.

package baton

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestOneAddressGetsTwoConnectionsSeveralGetOneEach(t *testing.T) {
	one := newFakeNode(t, nil)
	dialTest(t, []string{one.addr})
	eventually(t, 5*time.Second, "two connections to the one node", func() bool { return one.connCount() == 2 })

	a, b, c := newFakeNode(t, nil), newFakeNode(t, nil), newFakeNode(t, nil)
	dialTest(t, []string{a.addr + "," + b.addr, c.addr})
	eventually(t, 5*time.Second, "one connection each", func() bool {
		return a.connCount() == 1 && b.connCount() == 1 && c.connCount() == 1
	})
	time.Sleep(100 * time.Millisecond)
	if a.connCount()+b.connCount()+c.connCount() != 3 {
		t.Fatal("more than one connection to a node")
	}
}

func TestRequestsGoRoundRobin(t *testing.T) {
	a, b := grantingNode(t), grantingNode(t)
	c := dialTest(t, []string{a.addr, b.addr})
	ctx := bg(t, 10*time.Second)
	for i := range 10 {
		if _, err := c.Query(ctx, "k"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if na, nb := len(a.received("Q ")), len(b.received("Q ")); na != 5 || nb != 5 {
		t.Fatalf("queries per node: %d and %d, want 5 and 5", na, nb)
	}
}

func TestAnswersOutOfOrderReachTheirRequests(t *testing.T) {
	// The node holds A one back until A two came, then answers two first.
	var mu sync.Mutex
	var held *fakeConn
	f := newFakeNode(t, func(fc *fakeConn, line string) {
		if fc.id > 0 { // one usable connection: both requests go to it
			fc.close()
			return
		}
		switch {
		case line == "S":
			answerStatus(fc, line)
		case strings.HasPrefix(line, "A one "):
			mu.Lock()
			held = fc
			mu.Unlock()
		case strings.HasPrefix(line, "A two "):
			mu.Lock()
			defer mu.Unlock()
			fc.send("A two 22")
			if held == fc {
				fc.send("A one 11")
			}
		}
	})
	c := dialTest(t, []string{f.addr})
	ctx := bg(t, 10*time.Second)
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Acquire(ctx, "one", AcquireOptions{Wait: 5 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, 5*time.Second, "A one sent", func() bool { return len(f.received("A one")) == 1 })
	two, err := c.Acquire(ctx, "two", AcquireOptions{Wait: 5 * time.Second})
	if err != nil || two.Token() != 22 {
		t.Fatalf("two: %v %v", two, err)
	}
	if one := <-got; one == nil || one.Token() != 11 {
		t.Fatalf("one: %v", one)
	}
}

func TestPendingRequestsOfOneOpAndKeyAreMatchedInSendOrder(t *testing.T) {
	c := &conn{pending: map[matchKey][]*call{}, slot: &slot{pool: &pool{}}}
	c.alive = true
	first, second := newCall(opQuery, "k", nil), newCall(opQuery, "k", nil)
	other := newCall(opAcquire, "k", nil)
	for _, cl := range []*call{first, other, second} {
		c.register(cl)
	}
	c.deliver(response{kind: 'Q', op: opQuery, key: "k", fields: "token=1 lease=1 waiters=0"})
	c.deliver(response{kind: 'Q', op: opQuery, key: "k", fields: "token=2 lease=1 waiters=0"})
	c.deliver(response{kind: 'T', op: opAcquire, key: "k"})
	if r := <-first.reply; r.fields[:7] != "token=1" {
		t.Fatalf("first got %q", r.fields)
	}
	if r := <-second.reply; r.fields[:7] != "token=2" {
		t.Fatalf("second got %q", r.fields)
	}
	if r := <-other.reply; r.kind != 'T' {
		t.Fatalf("the acquire got %q", r.kind)
	}
}

func TestABrokenConnectionIsRedialledEveryThreeSeconds(t *testing.T) {
	f := newFakeNode(t, nil)
	dialTest(t, []string{f.addr})
	eventually(t, 5*time.Second, "two connections", func() bool { return f.connCount() == 2 })
	f.setHandler(func(fc *fakeConn, line string) { fc.close() }) // every redial is cut at its S
	f.closeAll()
	eventually(t, 12*time.Second, "two redials of each", func() bool { return f.connCount() >= 6 })
	times := f.acceptTimes()
	// The redials of one connection come 3 s apart (2 connections, so
	// every other accept is the same one's).
	for i := 4; i < len(times); i++ {
		gap := times[i].Sub(times[i-2])
		if gap < 2500*time.Millisecond || gap > 5*time.Second {
			t.Fatalf("redial gap %v, want about 3 s (accepts %v)", gap, times)
		}
	}
}

func TestADialCountsOnlyOnceTheNodeAnswered(t *testing.T) {
	silent := newFakeNode(t, func(*fakeConn, string) {})
	ctx := bg(t, 10*time.Second)
	start := time.Now()
	_, err := Dial(ctx, []string{silent.addr}, WithConnectTimeout(500*time.Millisecond))
	if !errors.Is(err, ErrNoServer) {
		t.Fatalf("dial to a node that accepts and never answers: %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("dial took %v", time.Since(start))
	}
	// With a live node beside it, requests never go to the silent one.
	live := grantingNode(t)
	c := dialTest(t, []string{silent.addr, live.addr}, WithConnectTimeout(500*time.Millisecond))
	for i := range 6 {
		if _, err := c.Query(ctx, "k"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := silent.received("Q"); len(got) != 0 {
		t.Fatalf("the silent node got %v", got)
	}
}

func TestAnAcquireFailsOverWithTheWaitLeft(t *testing.T) {
	cutter := newFakeNode(t, func(fc *fakeConn, line string) {
		if line == "S" {
			answerStatus(fc, line)
		} else if strings.HasPrefix(line, "A ") {
			time.Sleep(time.Second) // a second of the wait goes by, then the cut
			fc.close()
		}
	})
	granter := grantingNode(t)
	c := dialTest(t, []string{cutter.addr, granter.addr})
	// The next pick is the cutter's turn whatever the counter says: try
	// until the cutter took one, then check the wait sent on.
	ctx := bg(t, 30*time.Second)
	for len(cutter.received("A ")) == 0 {
		l, err := c.Acquire(ctx, "k", AcquireOptions{Wait: 10 * time.Second, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
	}
	sent := granter.received("A k ")
	last := strings.Fields(sent[len(sent)-1])
	wait, _ := strconv.ParseFloat(last[2], 64)
	if wait >= 9.5 || wait < 5 {
		t.Fatalf("the failed-over acquire asked to wait %v s of 10, after a second lost", wait)
	}
}

func TestAsManyTriesAsConnectionsThenNoServer(t *testing.T) {
	// Each node dies at the acquire: its connection cut, nothing listening.
	var a, b *fakeNode
	cut := func(fc *fakeConn, line string) {
		if line == "S" {
			answerStatus(fc, line)
		} else {
			fc.node.shutdown()
		}
	}
	a, b = newFakeNode(t, cut), newFakeNode(t, cut)
	c := dialTest(t, []string{a.addr, b.addr})
	_, err := c.Acquire(bg(t, 20*time.Second), "k", AcquireOptions{Wait: 10 * time.Second})
	if !errors.Is(err, ErrNoServer) {
		t.Fatalf("every connection cut at the acquire: %v", err)
	}
	if n := len(a.received("A ")) + len(b.received("A ")); n != 2 {
		t.Fatalf("%d tries for 2 connections", n)
	}
}

func TestAReleaseIsRetriedAcrossConnections(t *testing.T) {
	var mu sync.Mutex
	cuts := 0
	f := newFakeNode(t, func(fc *fakeConn, line string) {
		switch {
		case line == "S":
			answerStatus(fc, line)
		case strings.HasPrefix(line, "R "):
			mu.Lock()
			cuts++
			cut := cuts <= 3
			mu.Unlock()
			if cut {
				fc.close()
			} else {
				fc.send("R k")
			}
		}
	})
	c := dialTest(t, []string{f.addr})
	start := time.Now()
	if err := c.Release(bg(t, 10*time.Second), "k", 7); err != nil {
		t.Fatal(err)
	}
	if n := len(f.received("R k 7")); n != 4 {
		t.Fatalf("%d releases sent, want 4 (3 cut)", n)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestAReleaseIsRetriedEvery200msForFiveSeconds(t *testing.T) {
	f := newFakeNode(t, func(fc *fakeConn, line string) {
		if line == "S" {
			answerStatus(fc, line)
		} else {
			fc.send("M R k -") // no active node known, for the whole window
		}
	})
	c := dialTest(t, []string{f.addr})
	start := time.Now()
	err := c.Release(bg(t, 20*time.Second), "k", 7)
	took := time.Since(start)
	if !errors.Is(err, ErrNotServing) || took < 4500*time.Millisecond || took > 6*time.Second {
		t.Fatalf("after %v: %v", took, err)
	}
	// One try per 200 ms pause (plus the 100 ms pause after M ... -).
	if n := len(f.received("R k 7")); n < 12 || n > 26 {
		t.Fatalf("%d tries in 5 s", n)
	}
}

func TestRedirectsAreFollowedToStrangersAndDashIsRetried(t *testing.T) {
	stranger := grantingNode(t)
	var mu sync.Mutex
	dashes := 0
	pointer := newFakeNode(t, func(fc *fakeConn, line string) {
		switch {
		case line == "S":
			answerStatus(fc, line)
		case strings.HasPrefix(line, "A "):
			mu.Lock()
			dashes++
			first := dashes == 1
			mu.Unlock()
			if first {
				fc.send("M A k -")
			} else {
				fc.send("M A k " + stranger.addr)
			}
		}
	})
	c := dialTest(t, []string{pointer.addr})
	l, err := c.Acquire(bg(t, 10*time.Second), "k", AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= 1000 || len(stranger.received("A k ")) != 1 || len(pointer.received("A k ")) != 2 {
		t.Fatalf("token %d, stranger %v, pointer %v", l.Token(), stranger.received("A"), pointer.received("A"))
	}
	// The release is redirected too.
	pointer.setHandler(func(fc *fakeConn, line string) {
		if line == "S" {
			answerStatus(fc, line)
		} else if strings.HasPrefix(line, "R ") {
			fc.send("M R k " + stranger.addr)
		}
	})
	if err := l.Release(bg(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestNoNodeServingIsErrNotServing(t *testing.T) {
	f := newFakeNode(t, func(fc *fakeConn, line string) {
		if line == "S" {
			answerStatus(fc, line)
		} else if strings.HasPrefix(line, "A ") {
			fc.send("M A k -")
		}
	})
	c := dialTest(t, []string{f.addr})
	_, err := c.Acquire(bg(t, 10*time.Second), "k", AcquireOptions{Wait: time.Second})
	if !errors.Is(err, ErrNotServing) {
		t.Fatal(err)
	}
}

// frozenAfterProbe answers the first S of each connection, then nothing:
// a node frozen after the client connected.
func frozenAfterProbe(fc *fakeConn, line string) {
	fc.mu.Lock()
	first := !fc.authed
	fc.authed = true
	fc.mu.Unlock()
	if line == "S" && first {
		answerStatus(fc, line)
	}
}

func TestAFrozenNodeIsProbedThenCutAndTheAcquireFailsOver(t *testing.T) {
	frozen := newFakeNode(t, frozenAfterProbe)
	granter := grantingNode(t)
	c := dialTest(t, []string{frozen.addr, granter.addr}, WithUnresponsiveAfter(time.Second))
	ctx := bg(t, 30*time.Second)
	for len(frozen.received("A ")) == 0 {
		start := time.Now()
		l, err := c.Acquire(ctx, "k", AcquireOptions{Wait: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); len(frozen.received("A ")) > 0 && (took < 900*time.Millisecond || took > 3*time.Second) {
			t.Fatalf("the acquire sent to the frozen node took %v (silence allowed: 1 s)", took)
		}
		l.Release(ctx)
	}
	// S, A, then the probe.
	if got := frozen.received("S"); len(got) < 2 {
		t.Fatalf("no probe: %v", frozen.received(""))
	}
}

func TestAnIdleConnectionIsNotProbed(t *testing.T) {
	f := newFakeNode(t, nil)
	dialTest(t, []string{f.addr}, WithUnresponsiveAfter(200*time.Millisecond))
	eventually(t, 5*time.Second, "two connections", func() bool { return len(f.received("S")) == 2 })
	time.Sleep(time.Second)
	if n := len(f.received("S")); n != 2 {
		t.Fatalf("%d S on two idle connections", n)
	}
}

func TestAGivenUpAcquireIsReleasedWhenItsGrantComes(t *testing.T) {
	var mu sync.Mutex
	var waiting *fakeConn
	f := newFakeNode(t, func(fc *fakeConn, line string) {
		switch {
		case line == "S":
			answerStatus(fc, line)
		case strings.HasPrefix(line, "A "):
			mu.Lock()
			waiting = fc
			mu.Unlock()
		case strings.HasPrefix(line, "R "):
			fc.send("R k")
		}
	})
	c := dialTest(t, []string{f.addr})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "k", AcquireOptions{Wait: 30 * time.Second})
		done <- err
	}()
	eventually(t, 5*time.Second, "A sent", func() bool { return len(f.received("A k ")) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire: %v", err)
	}
	mu.Lock()
	waiting.send("A k 4242")
	mu.Unlock()
	eventually(t, 5*time.Second, "the late grant released", func() bool { return len(f.received("R k 4242")) == 1 })
}

func TestCloseGivesUpAWaitingAcquireAndReleasesHeldLocks(t *testing.T) {
	var mu sync.Mutex
	token := uint64(10)
	f := newFakeNode(t, func(fc *fakeConn, line string) {
		switch {
		case line == "S":
			answerStatus(fc, line)
		case strings.HasPrefix(line, "A held "):
			mu.Lock()
			token++
			fc.send("A held " + itoa(token))
			mu.Unlock()
		case strings.HasPrefix(line, "R "):
			fc.send("R " + strings.Fields(line)[1])
		}
	})
	c, err := Dial(bg(t, 5*time.Second), []string{f.addr})
	if err != nil {
		t.Fatal(err)
	}
	ctx := bg(t, 10*time.Second)
	l, err := c.Acquire(ctx, "held", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "waits", AcquireOptions{})
		done <- err
	}()
	eventually(t, 5*time.Second, "A waits sent", func() bool { return len(f.received("A waits")) == 1 })
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting acquire: %v", err)
	}
	if got := f.received("R held "); len(got) != 1 || got[0] != "R held "+itoa(l.Token()) {
		t.Fatalf("releases: %v", got)
	}
	if _, err := c.Acquire(ctx, "x", AcquireOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after close: %v", err)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("release after close: %v", err)
	}
}

func TestARedirectToADeadNodeDoesNotEndTheAcquire(t *testing.T) {
	// A standby that has not yet noticed the active's death points at it
	// a few times, then is promoted and grants.
	dead := freeAddrs(t, 1)[0]
	var mu sync.Mutex
	tries := 0
	standby := opNode(t, map[string]func(*fakeConn, []string){
		"R": echo,
		"A": func(fc *fakeConn, fields []string) {
			mu.Lock()
			tries++
			promoted := tries > 4
			mu.Unlock()
			if promoted {
				fc.send("A " + fields[1] + " 500")
			} else {
				fc.send("M A " + fields[1] + " " + dead)
			}
		},
	})
	c := dialTest(t, []string{standby.addr})
	start := time.Now()
	l, err := c.Acquire(bg(t, 30*time.Second), "k", AcquireOptions{Wait: 20 * time.Second})
	if err != nil || l.Token() != 500 {
		t.Fatalf("after %v: %v %v", time.Since(start), l, err)
	}
	// Each redirect learns the dead node is down from its failed dial
	// (at most one a second), not from a whole connect timeout.
	if took := time.Since(start); took > 8*time.Second {
		t.Fatalf("took %v", took)
	}
}

func TestCloseWithAnEndedContextWhileReleasesRun(t *testing.T) {
	// The node grants and never answers a release: Close's context ends
	// while its releases still run.
	f := opNode(t, map[string]func(*fakeConn, []string){
		"A": func(fc *fakeConn, fields []string) { fc.send("A " + fields[1] + " 7") },
	})
	c := dialTest(t, []string{f.addr})
	for _, key := range []string{"a", "b", "c", "d"} {
		if _, err := c.Acquire(bg(t, 10*time.Second), key, AcquireOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Close(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("close: %v", err)
	}
}
