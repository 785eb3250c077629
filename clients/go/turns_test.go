package baton

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// overtakingNode serves one usable connection (it closes the others). It
// holds every key elsewhere: an acquire with a wait of at most 1 s is
// answered T at once, and a refusal (permits=3) E at once, ahead of the
// acquires of the key that wait; grant answers the oldest waiting one. A
// W answers at once when its seen tag is not the key's, else waits for
// change.
// It counts the requests sent while one of the same op and key was
// pending on the connection.
type overtakingNode struct {
	*fakeNode
	mu       sync.Mutex
	conn     *fakeConn
	waiting  map[string][]string // pending A and W lines by "op key"
	overlaps int
	token    int
	held     bool // the watched key's state: held with token 5, or free
}

func newOvertakingNode(t *testing.T) *overtakingNode {
	o := &overtakingNode{waiting: map[string][]string{}, token: 100, held: true}
	o.fakeNode = newFakeNode(t, o.handle)
	return o
}

func (o *overtakingNode) handle(fc *fakeConn, line string) {
	if fc.id > 0 { // one usable connection: every request goes to it
		fc.close()
		return
	}
	f := strings.Fields(line)
	if f[0] != "A" && f[0] != "W" {
		answerStatus(fc, line)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.conn = fc
	k := f[0] + " " + f[1]
	if len(o.waiting[k]) > 0 {
		o.overlaps++
	}
	switch {
	case f[0] == "A" && strings.Contains(line, "permits=3"):
		fc.send("E A " + f[1] + " the key has 1 permits")
	case f[0] == "A" && (f[2] == "1" || strings.HasPrefix(f[2], "0.")):
		fc.send("T " + f[1])
	case f[0] == "W" && f[3] != o.tag():
		fc.send("W " + f[1] + " " + o.state())
	default:
		o.waiting[k] = append(o.waiting[k], line)
	}
}

func (o *overtakingNode) tag() string {
	if o.held {
		return "5"
	}
	return "-"
}

func (o *overtakingNode) state() string {
	if o.held {
		return "token=5 lease=9.000 waiters=0 state=5"
	}
	return "token=- lease=- waiters=0 state=-"
}

// release frees the watched key and answers the oldest watch of k.
func (o *overtakingNode) release(k string) {
	o.mu.Lock()
	o.held = false
	line := "W " + strings.Fields(k)[1] + " " + o.state()
	o.mu.Unlock()
	o.answer(k, line)
}

// answer answers the oldest waiting request of "op key" with line, once
// there is one (a line is logged before the handler sees it).
func (o *overtakingNode) answer(k, line string) {
	eventually(o.t, 5*time.Second, "a waiting "+k, func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		if len(o.waiting[k]) == 0 {
			return false
		}
		o.waiting[k] = o.waiting[k][1:]
		o.conn.send(line)
		return true
	})
}

func (o *overtakingNode) nextToken() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.token++
	return itoa(uint64(o.token))
}

func (o *overtakingNode) counts() (waiting, overlaps int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, q := range o.waiting {
		waiting += len(q)
	}
	return waiting, o.overlaps
}

type acquired struct {
	lock *Lock
	err  error
}

func acquireAsync(ctx context.Context, c *Client, key string, opts AcquireOptions) <-chan acquired {
	out := make(chan acquired, 1)
	go func() {
		l, err := c.Acquire(ctx, key, opts)
		out <- acquired{l, err}
	}()
	return out
}

func TestAcquiresOfOneKeyOnOneConnectionKeepTheirOwnAnswers(t *testing.T) {
	o := newOvertakingNode(t)
	c := dialTest(t, []string{o.addr})
	ctx := bg(t, 30*time.Second)
	reader := AcquireOptions{Wait: 20 * time.Second, Lease: 30 * time.Second, Shared: true}
	r1 := acquireAsync(ctx, c, "rw", reader)
	eventually(t, 5*time.Second, "the first reader sent", func() bool { return len(o.received("A rw")) == 1 })
	r2 := acquireAsync(ctx, c, "rw", reader)
	time.Sleep(50 * time.Millisecond) // the second reader is ahead of the writer
	w := acquireAsync(ctx, c, "rw", AcquireOptions{Wait: time.Second, Lease: 30 * time.Second})
	// The writer's wait runs out while a reader of the key waits on the
	// connection: it times out in the client, never sent.
	if got := <-w; !errors.Is(got.err, ErrTimedOut) {
		t.Fatalf("the writer: %v %v", got.lock, got.err)
	}
	o.answer("A rw", "A rw "+o.nextToken())
	first := <-r1
	if first.err != nil || first.lock.Token() != 101 {
		t.Fatalf("the first reader: %v %v", first.lock, first.err)
	}
	// Then the second reader's turn: sent with what is left of its wait.
	eventually(t, 5*time.Second, "the second reader sent", func() bool { return len(o.received("A rw")) == 2 })
	if sent := o.received("A rw")[1]; !strings.Contains(sent, "mode=shared") || strings.HasPrefix(sent, "A rw 20 ") {
		t.Fatalf("the second reader's request: %q", sent)
	}
	o.answer("A rw", "A rw "+o.nextToken())
	if second := <-r2; second.err != nil || second.lock.Token() != 102 {
		t.Fatalf("the second reader: %v %v", second.lock, second.err)
	}
	if _, overlaps := o.counts(); overlaps != 0 || len(o.received("A rw")) != 2 {
		t.Fatalf("%d acquires of the key sent while one was pending; %d sent", overlaps, len(o.received("A rw")))
	}
}

func TestARefusedLaterAcquireAndACancelledOneLeaveTheOlderItsGrant(t *testing.T) {
	o := newOvertakingNode(t)
	c := dialTest(t, []string{o.addr})
	ctx := bg(t, 30*time.Second)
	opts := AcquireOptions{Wait: 20 * time.Second, Lease: 30 * time.Second}
	older := acquireAsync(ctx, c, "sem", opts)
	eventually(t, 5*time.Second, "the older acquire sent", func() bool { return len(o.received("A sem")) == 1 })
	cancelled, cancel := context.WithCancel(ctx)
	gone := acquireAsync(cancelled, c, "sem", opts)
	time.Sleep(50 * time.Millisecond)
	refused := acquireAsync(ctx, c, "sem", AcquireOptions{Wait: 20 * time.Second, Lease: 30 * time.Second, Permits: 3})
	time.Sleep(50 * time.Millisecond)
	cancel()
	if got := <-gone; !errors.Is(got.err, context.Canceled) {
		t.Fatalf("the cancelled acquire: %v", got.err)
	}
	o.answer("A sem", "A sem "+o.nextToken())
	if got := <-older; got.err != nil || got.lock.Token() != 101 {
		t.Fatalf("the older acquire: %v %v", got.lock, got.err)
	}
	if got := <-refused; !errors.Is(got.err, ErrRejected) {
		t.Fatalf("the refused acquire: %v %v", got.lock, got.err)
	}
	if waiting, overlaps := o.counts(); overlaps != 0 || waiting != 0 || len(o.received("A sem")) != 2 {
		t.Fatalf("overlaps %d, waiting %d, sent %q", overlaps, waiting, o.received("A sem"))
	}
}

func TestALaterWatchOfAKeyWaitsForTheOneInFlight(t *testing.T) {
	o := newOvertakingNode(t)
	o.setHandler(func(fc *fakeConn, line string) {
		if strings.HasPrefix(line, "Q ") {
			fc.send("Q k token=5 lease=9.000 waiters=0 state=5")
			return
		}
		o.handle(fc, line)
	})
	c := dialTest(t, []string{o.addr})
	ctx := bg(t, 30*time.Second)
	first, err := c.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	<-first // the state now
	eventually(t, 5*time.Second, "the first W sent", func() bool { return len(o.received("W k")) == 1 })
	second, err := c.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	<-second
	time.Sleep(200 * time.Millisecond)
	if n := len(o.received("W k")); n != 1 {
		t.Fatalf("%d W of the key sent while one waits", n)
	}
	o.release("W k")
	for i, states := range []<-chan KeyState{first, second} {
		select {
		case s := <-states:
			if s.Held() {
				t.Fatalf("watch %d: %+v", i, s)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("watch %d saw no change", i)
		}
	}
	if _, overlaps := o.counts(); overlaps != 0 {
		t.Fatalf("%d watches of the key sent while one was pending", overlaps)
	}
}

func TestRealReadersThenAWriterOfOneKeyKeepTheirOwnAnswers(t *testing.T) {
	n := startNode(t, "")
	holder := dialTest(t, []string{n.addr})
	c := dialTest(t, []string{n.addr}) // two connections: the writer shares one with a reader
	ctx := bg(t, 40*time.Second)
	held, err := holder.Acquire(ctx, "rw", AcquireOptions{Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waiters := func(want uint64) func() bool {
		return func() bool { st, err := holder.Query(ctx, "rw"); return err == nil && st.Waiters == want }
	}
	reader := AcquireOptions{Wait: 20 * time.Second, Lease: 30 * time.Second, Shared: true}
	r1 := acquireAsync(ctx, c, "rw", reader)
	eventually(t, 5*time.Second, "the first reader waits", waiters(1))
	r2 := acquireAsync(ctx, c, "rw", reader)
	eventually(t, 5*time.Second, "the second reader waits", waiters(2))
	w := acquireAsync(ctx, c, "rw", AcquireOptions{Wait: time.Second, Lease: 30 * time.Second})
	if got := <-w; !errors.Is(got.err, ErrTimedOut) {
		t.Fatalf("the writer: %v %v", got.lock, got.err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, r := range []<-chan acquired{r1, r2} {
		if got := <-r; got.err != nil || got.lock.Token() <= held.Token() {
			t.Fatalf("reader %d: %v %v", i+1, got.lock, got.err)
		}
	}
	st, err := holder.Query(ctx, "rw")
	if err != nil || st.Mode != "shared" || st.HolderCount != 2 {
		t.Fatalf("after the release: %+v %v", st, err)
	}
}
