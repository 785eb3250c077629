// The behaviour contract, continued: authentication, the line limit,
// the errors of each outcome, keep-alive and the Lost signal.

package baton

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestEveryConnectionAndReconnectionAuthenticates(t *testing.T) {
	f := newFakeNode(t, func(fc *fakeConn, line string) {
		fc.mu.Lock()
		authed := fc.authed
		fc.mu.Unlock()
		switch {
		case line == "U billing s3cr3t":
			fc.mu.Lock()
			fc.authed = true
			fc.mu.Unlock()
			fc.send("U billing")
		case !authed:
			fc.send("E " + line[:1] + " ? authentication required")
		default:
			answerStatus(fc, line)
		}
	})
	dialTest(t, []string{f.addr}, WithCredentials("billing", "s3cr3t"))
	eventually(t, 5*time.Second, "two authenticated connections", func() bool { return len(f.received("U ")) == 2 })
	f.closeAll()
	eventually(t, 10*time.Second, "both reconnections authenticated", func() bool { return len(f.received("U ")) == 4 })
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fc := range f.conns {
		if !fc.authed {
			t.Fatalf("connection %d did not authenticate", fc.id)
		}
	}
}

func TestRefusedCredentialsAreErrAuth(t *testing.T) {
	f := newFakeNode(t, func(fc *fakeConn, line string) {
		if strings.HasPrefix(line, "U ") {
			fc.send("E U billing authentication failed")
		}
	})
	_, err := Dial(bg(t, 10*time.Second), []string{f.addr}, WithCredentials("billing", "wrong"))
	if !errors.Is(err, ErrAuth) {
		t.Fatal(err)
	}
	_, err = Dial(bg(t, 10*time.Second), []string{f.addr}, WithCredentials("bad user", "x"))
	if !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
}

func TestANodeRequiringCredentialsIsErrAuthWithoutThem(t *testing.T) {
	f := newFakeNode(t, func(fc *fakeConn, line string) {
		fc.send("E " + strings.Fields(line)[0] + " ? authentication required")
	})
	_, err := Dial(bg(t, 10*time.Second), []string{f.addr})
	var e *Error
	if !errors.Is(err, ErrAuth) || !errors.As(err, &e) || e.Reason != "authentication required" {
		t.Fatalf("dial without credentials: %v", err)
	}
}

func TestAnAnswerThatDoesNotFitIsErrUnexpected(t *testing.T) {
	f := opNode(t, map[string]func(*fakeConn, []string){
		"Q": func(fc *fakeConn, fields []string) { fc.send("Q " + fields[1] + " waiters=0") },
	})
	c := dialTest(t, []string{f.addr})
	if _, err := c.Query(bg(t, 10*time.Second), "k"); !errors.Is(err, ErrUnexpected) {
		t.Fatalf("query: %v", err)
	}
}

func TestALineOverTheLimitIsRefusedBeforeSending(t *testing.T) {
	f := grantingNode(t)
	c := dialTest(t, []string{f.addr})
	ctx := bg(t, 5*time.Second)
	long := strings.Repeat("k", 1100)
	if _, err := c.Acquire(ctx, long, AcquireOptions{}); !errors.Is(err, ErrLineTooLong) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("acquire: %v", err)
	}
	if err := c.Release(ctx, long, 1); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("release: %v", err)
	}
	if _, err := c.Query(ctx, long); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("query: %v", err)
	}
	for _, bad := range []string{"", "a b", "a\x01", strings.Repeat("k", 251)} {
		if _, err := c.Acquire(ctx, bad, AcquireOptions{}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("key %q: %v", bad, err)
		}
	}
	if got := f.received("A"); len(got) != 0 {
		t.Fatalf("sent: %v", got)
	}
}

func TestNodeRefusalsMapToTheirErrors(t *testing.T) {
	f := newFakeNode(t, func(fc *fakeConn, line string) {
		fields := strings.Fields(line)
		switch {
		case line == "S":
			answerStatus(fc, line)
		case fields[1] == "denied":
			fc.send("E " + fields[0] + " denied permission denied")
		case fields[1] == "big":
			fc.send("E A big wait exceeds the maximum of 86400 seconds")
		case fields[1] == "gone":
			fc.send("N " + fields[0] + " gone")
		case fields[1] == "busy":
			fc.send("T busy")
		}
	})
	c := dialTest(t, []string{f.addr})
	ctx := bg(t, 10*time.Second)
	var e *Error
	if _, err := c.Acquire(ctx, "denied", AcquireOptions{}); !errors.Is(err, ErrPermission) {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "big", AcquireOptions{}); !errors.Is(err, ErrRejected) || !errors.As(err, &e) || !strings.Contains(e.Reason, "maximum") {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "busy", AcquireOptions{Wait: time.Second}); !errors.Is(err, ErrTimedOut) {
		t.Fatal(err)
	}
	if err := c.Release(ctx, "gone", 5); !errors.Is(err, ErrNotHeld) {
		t.Fatal(err)
	}
	if err := c.Renew(ctx, "gone", 5, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Fatal(err)
	}
}

func TestKeepAliveRenewsAndLostClosesBeforeTheLeaseEnds(t *testing.T) {
	var mu sync.Mutex
	answerK := true
	f := opNode(t, map[string]func(*fakeConn, []string){
		"A": grantWith("77"),
		"R": echo,
		"K": func(fc *fakeConn, fields []string) {
			mu.Lock()
			ok := answerK
			mu.Unlock()
			if ok {
				echo(fc, fields)
			}
		},
	})
	// The probes keep the connections alive while K goes unanswered: a
	// live node that stopped renewing.
	c := dialTest(t, []string{f.addr}, WithRequestTimeout(300*time.Millisecond))
	ctx := bg(t, 20*time.Second)
	sent := time.Now()
	l, err := c.Acquire(ctx, "k", AcquireOptions{Lease: 1500 * time.Millisecond, KeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "three renewals", func() bool { return len(f.received("K k 77 1.5")) >= 3 })
	if time.Since(sent) < 1500*time.Millisecond {
		t.Fatal("renewed faster than a third of the lease")
	}
	select {
	case <-l.Lost():
		t.Fatalf("lost while renewed: %v", l.Err())
	default:
	}
	mu.Lock()
	answerK = false
	lastRenewal := time.Now()
	mu.Unlock()
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost not closed when renewals went unanswered")
	}
	// The last renewal answered was sent within a third of the lease
	// before lastRenewal, so the lease ends 1.5 s after that at the latest.
	if lost := time.Since(lastRenewal); lost >= 1500*time.Millisecond {
		t.Fatalf("Lost closed %v after the last answered renewal: past the lease", lost)
	}
	if !errors.Is(l.Err(), ErrLeaseExpired) {
		t.Fatal(l.Err())
	}
}

func TestARenewalAnsweredNotHeldClosesLost(t *testing.T) {
	f := opNode(t, map[string]func(*fakeConn, []string){
		"A": grantWith("9"),
		"R": echo,
		"K": func(fc *fakeConn, fields []string) { fc.send("N K " + fields[1]) },
	})
	c := dialTest(t, []string{f.addr})
	l, err := c.Acquire(bg(t, 10*time.Second), "k", AcquireOptions{Lease: 600 * time.Millisecond, KeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost not closed")
	}
	if !errors.Is(l.Err(), ErrNotHeld) {
		t.Fatal(l.Err())
	}
}

func TestWithoutKeepAliveLostClosesBeforeTheLeaseEnds(t *testing.T) {
	f := grantingNode(t)
	c := dialTest(t, []string{f.addr})
	sent := time.Now()
	l, err := c.Acquire(bg(t, 10*time.Second), "k", AcquireOptions{Lease: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	<-l.Lost()
	if took := time.Since(sent); took >= 500*time.Millisecond || !errors.Is(l.Err(), ErrLeaseExpired) {
		t.Fatalf("Lost after %v: %v", took, l.Err())
	}
}

func TestATLSNodeToAPlainClientIsErrTLS(t *testing.T) {
	f := newFakeNode(t, func(fc *fakeConn, line string) {
		fc.send("E ? ? TLS required: this node serves clients over TLS only")
		fc.close()
	})
	_, err := Dial(bg(t, 10*time.Second), []string{f.addr})
	if !errors.Is(err, ErrTLS) {
		t.Fatal(err)
	}
}

func TestAddressesAreChecked(t *testing.T) {
	for _, bad := range []string{"nohost", "h:0", "h:99999", ":7411", ""} {
		if _, err := Dial(context.Background(), []string{bad}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}

func TestTheBackgroundTrackerMayGainWorkWhileWaitedOn(t *testing.T) {
	var tr tracker
	select {
	case <-tr.wait():
	default:
		t.Fatal("an idle tracker is not waited on")
	}
	tr.add()
	idle := tr.wait()
	tr.add() // a late grant's release, while Close waits
	tr.done()
	select {
	case <-idle:
		t.Fatal("idle with work running")
	default:
	}
	tr.done()
	<-idle
	tr.add()
	tr.done()
	<-tr.wait()
}
