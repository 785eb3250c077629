// Protocol 1.2's client side against a fake node speaking its wire
// format (docs/protocol.md).

package baton

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAcquireOptionsOnTheWire(t *testing.T) {
	f := grantingNode(t)
	c := dialTest(t, []string{f.addr})
	ctx := bg(t, 10*time.Second)
	for _, opts := range []AcquireOptions{
		{Wait: time.Second, Lease: 2 * time.Second, Permits: 3},
		{Wait: time.Second, Lease: 2 * time.Second, Shared: true},
		{Wait: time.Second, Lease: 2 * time.Second, Value: "node-a:8080"},
		{Wait: time.Second, Lease: 2 * time.Second, Permits: 1},
	} {
		if _, err := c.Acquire(ctx, "k", opts); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"A k 1 2 permits=3", "A k 1 2 mode=shared", "A k 1 2 value=node-a:8080", "A k 1 2"}
	if got := f.received("A "); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("sent %q, want %q", got, want)
	}
	for _, bad := range []AcquireOptions{
		{Permits: 10001}, {Permits: -1}, {Permits: 2, Shared: true},
		{Value: "-"}, {Value: "a b"}, {Value: strings.Repeat("v", 129)},
	} {
		if _, err := c.Acquire(ctx, "k", bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
	if n := len(f.received("A ")); n != 4 {
		t.Fatalf("refused options were sent: %d acquires", n)
	}
}

func TestSetValue(t *testing.T) {
	f := opNode(t, map[string]func(*fakeConn, []string){
		"A": grantWith("77"),
		"R": echo,
		"V": func(fc *fakeConn, fields []string) {
			if fields[1] == "gone" {
				fc.send("N V gone")
			} else {
				echo(fc, fields)
			}
		},
	})
	c := dialTest(t, []string{f.addr})
	ctx := bg(t, 10*time.Second)
	l, _ := c.Acquire(ctx, "k", AcquireOptions{})
	if err := l.SetValue(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetValue(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if got := f.received("V "); strings.Join(got, "|") != "V k 77 v2|V k 77 -" {
		t.Fatalf("sent %q", got)
	}
	gone, _ := c.Acquire(ctx, "gone", AcquireOptions{})
	if err := gone.SetValue(ctx, "x"); !errors.Is(err, ErrNotHeld) {
		t.Fatal(err)
	}
}

func TestExtendedKeyStateParses(t *testing.T) {
	s, err := parseKeyState("token=9 lease=2.500 waiters=1 permits=3 mode=exclusive holders=2 " +
		"holder=8,1.000,- holder=9,2.500,a,b=c state=9.2.00ff00ff00ff00ff")
	if err != nil {
		t.Fatal(err)
	}
	if s.Token != 9 || s.Permits != 3 || s.HolderCount != 2 || len(s.Holders) != 2 ||
		s.Holders[1].Value != "a,b=c" || s.Holders[0].Value != "" || s.Tag != "9.2.00ff00ff00ff00ff" ||
		s.Holders[1].LeaseLeft != 2500*time.Millisecond {
		t.Fatalf("%+v", s)
	}
	plain, _ := parseKeyState("token=5 lease=1 waiters=0")
	free, _ := parseKeyState("token=- lease=- waiters=3")
	if plain.Tag != "5" || free.Tag != "-" || plain.Permits != 1 {
		t.Fatalf("plain %+v free %+v", plain, free)
	}
}

// watchedNode serves Q and W on one key whose state the test sets, and
// R; an A goes to onAcquire, if set.
type watchedNode struct {
	*fakeNode
	mu        sync.Mutex
	state     string // the fields after the key, with state=<tag> last
	tag       string
	waiting   []*fakeConn
	onAcquire func(fc *fakeConn, fields []string)
}

func newWatchedNode(t *testing.T) *watchedNode {
	w := &watchedNode{state: "token=- lease=- waiters=0 state=-", tag: "-"}
	w.fakeNode = opNode(t, map[string]func(*fakeConn, []string){
		"R": echo,
		"A": func(fc *fakeConn, fields []string) {
			if w.onAcquire != nil {
				w.onAcquire(fc, fields)
			}
		},
		"Q": func(fc *fakeConn, fields []string) {
			w.mu.Lock()
			defer w.mu.Unlock()
			fc.send("Q " + fields[1] + " " + w.state)
		},
		"W": func(fc *fakeConn, fields []string) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if fields[3] != w.tag {
				fc.send("W " + fields[1] + " " + w.state)
			} else {
				w.waiting = append(w.waiting, fc)
			}
		},
	})
	return w
}

// set changes the key's state and answers the pending watches.
func (w *watchedNode) set(state, tag string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.state, w.tag = state+" state="+tag, tag
	for _, fc := range w.waiting {
		fc.send("W k " + w.state)
	}
	w.waiting = nil
}

func TestWatchReportsTheStateThenEachChange(t *testing.T) {
	w := newWatchedNode(t)
	c := dialTest(t, []string{w.addr})
	ctx, cancel := context.WithCancel(context.Background())
	states, err := c.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	next := func() KeyState {
		select {
		case s := <-states:
			return s
		case <-time.After(5 * time.Second):
			t.Fatal("no state")
		}
		return KeyState{}
	}
	if s := next(); s.Held() {
		t.Fatalf("first: %+v", s)
	}
	eventually(t, 5*time.Second, "a W sent with the tag seen", func() bool { return len(w.received("W k 30 -")) == 1 })
	w.set("token=12 lease=9.000 waiters=0 permits=1 mode=exclusive holders=1 holder=12,9.000,leader-a", "12.1.0123456789abcdef")
	if s := next(); s.Token != 12 || s.Holders[0].Value != "leader-a" {
		t.Fatalf("second: %+v", s)
	}
	eventually(t, 5*time.Second, "the next W carries the new tag", func() bool {
		return len(w.received("W k 30 12.1.0123456789abcdef")) == 1
	})
	cancel()
	select {
	case _, open := <-states:
		if open {
			_, open = <-states
		}
		if open {
			t.Fatal("channel not closed after cancel")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("channel not closed after cancel")
	}
}

func TestElectionCampaignLeaderObserve(t *testing.T) {
	w := newWatchedNode(t)
	w.onAcquire = func(fc *fakeConn, fields []string) {
		fc.send("A k 12")
		w.set("token=12 lease=9.000 waiters=0 permits=1 mode=exclusive holders=1 holder=12,9.000,"+
			strings.TrimPrefix(fields[4], "value="), "12.1.0000000000000001")
	}
	c := dialTest(t, []string{w.addr})
	ctx := bg(t, 20*time.Second)
	e := c.Election("k")
	if _, _, err := e.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatal(err)
	}
	leaders, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first := <-leaders; first.Token != 0 {
		t.Fatalf("first: %+v", first)
	}
	lock, err := e.Campaign(ctx, "node-a:8080", 9*time.Second)
	if err != nil || lock.Token() != 12 {
		t.Fatal(lock, err)
	}
	if got := w.received("A k "); len(got) != 1 || !strings.HasSuffix(got[0], " value=node-a:8080") {
		t.Fatalf("campaign sent %q", got)
	}
	select {
	case l := <-leaders:
		if l.Value != "node-a:8080" || l.Token != 12 {
			t.Fatalf("observed %+v", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no leader observed")
	}
	value, token, err := e.Leader(ctx)
	if err != nil || value != "node-a:8080" || token != 12 {
		t.Fatal(value, token, err)
	}
}

// An acquire of the node's maximum (Wait 0) under a context deadline
// sends the deadline as its wait; a node whose --max-wait is shorter
// refuses it, and the client then asks for the node's maximum, at once
// for later acquires. A wait the caller gave is refused as it is.
func TestAcquireOfTheNodesMaximumUnderALongerDeadline(t *testing.T) {
	f := opNode(t, map[string]func(*fakeConn, []string){
		"A": func(fc *fakeConn, fields []string) {
			if fields[2] != "0" && fields[2] != "1" {
				fc.send("E A " + fields[1] + " wait exceeds the maximum of 2 seconds")
			} else {
				fc.send("T " + fields[1])
			}
		},
	})
	c := dialTest(t, []string{f.addr})
	ctx := bg(t, 30*time.Second)
	for range 2 {
		if _, err := c.Acquire(ctx, "k", AcquireOptions{Lease: time.Second}); !errors.Is(err, ErrTimedOut) {
			t.Fatal(err)
		}
	}
	if _, err := c.Acquire(ctx, "k", AcquireOptions{Wait: 5 * time.Second, Lease: time.Second}); !errors.Is(err, ErrRejected) {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := c.Acquire(short, "k", AcquireOptions{Lease: time.Second}); !errors.Is(err, ErrTimedOut) {
		t.Fatal(err)
	}
	got := f.received("A ")
	first := len(got) > 0 && (got[0] == "A k 30 1" || strings.HasPrefix(got[0], "A k 29."))
	if len(got) != 5 || !first || got[1] != "A k 0 1" || got[2] != "A k 0 1" || got[3] != "A k 5 1" || got[4] != "A k 1 1" {
		t.Fatalf("sent %q", got)
	}
}
