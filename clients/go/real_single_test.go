package baton

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRealSingleAcquireReleaseQueryStatus(t *testing.T) {
	n := startNode(t, "")
	c := dialTest(t, []string{n.addr})
	ctx := bg(t, 20*time.Second)
	l, err := c.Acquire(ctx, "orders/42", AcquireOptions{Wait: 5 * time.Second, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() == 0 {
		t.Fatal("token 0")
	}
	st, err := c.Query(ctx, "orders/42")
	if err != nil || st.Token != l.Token() || st.LeaseLeft <= 25*time.Second {
		t.Fatalf("query: %+v %v", st, err)
	}
	_, err = c.TryAcquire(ctx, "orders/42", AcquireOptions{Lease: time.Second})
	if !errors.Is(err, ErrTimedOut) {
		t.Fatalf("try on a held key: %v", err)
	}
	statuses := c.Status(ctx)
	if len(statuses) != 1 || statuses[0].Err != nil || statuses[0].Status.Role != "single" || statuses[0].Status.Locks != 1 {
		t.Fatalf("status: %+v", statuses)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost not closed after Release")
	}
	if err := c.Release(ctx, "orders/42", l.Token()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second release: %v", err)
	}
	l2, err := c.Acquire(ctx, "orders/42", AcquireOptions{Lease: time.Minute})
	if err != nil || l2.Token() <= l.Token() {
		t.Fatalf("second grant %v after %d: %v", l2, l.Token(), err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l2.Err(), ErrClosed) {
		t.Fatalf("lock after close: %v", l2.Err())
	}
	// Close released it: the key is free.
	c2 := dialTest(t, []string{n.addr})
	st, err = c2.Query(ctx, "orders/42")
	if err != nil || st.Held() {
		t.Fatalf("after close: %+v %v", st, err)
	}
}

func TestRealAGivenUpAcquireIsGivenBackWhenGranted(t *testing.T) {
	n := startNode(t, "")
	c := dialTest(t, []string{n.addr})
	ctx := bg(t, 30*time.Second)
	holder, err := c.Acquire(ctx, "k", AcquireOptions{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waiting, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(waiting, "k", AcquireOptions{Wait: 30 * time.Second, Lease: time.Minute})
		done <- err
	}()
	eventually(t, 5*time.Second, "the acquire queued", func() bool {
		st, err := c.Query(ctx, "k")
		return err == nil && st.Waiters == 1
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// Still queued on the node: the release hands it the key, and the
	// client gives it back at once instead of holding it a minute.
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the late grant given back", func() bool {
		st, err := c.Query(ctx, "k")
		return err == nil && !st.Held() && st.Waiters == 0
	})
}
