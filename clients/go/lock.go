// A held lock: its token, renewal, keep-alive, and the Lost signal.

package baton

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// keepAliveDivisor: the keep-alive renews every third of the lease,
// leaving two more tries before the grant could lapse.
const keepAliveDivisor = 3

// lostMargin is how long before the lease's end (as the client counts
// it, from when the acquire or renewal was sent, so before the node's)
// Lost is closed when no renewal came: a tenth of the lease, at most 1 s.
func lostMargin(lease time.Duration) time.Duration {
	return min(lease/10, time.Second)
}

// Lock is a granted lock. Hand Token to the protected resource with every
// write. End it with Release (or Client.Close, which releases every lock
// still held). Lost is closed once the lock can no longer be relied on.
type Lock struct {
	client *Client
	key    string
	token  uint64

	mu      sync.Mutex
	lease   time.Duration
	until   time.Time   // the lease's end as the client counts it
	expiry  *time.Timer // closes lost at until minus the margin
	lost    chan struct{}
	err     error
	stopKA  chan struct{} // closed to stop the keep-alive
	running bool          // the keep-alive was started

	settled atomic.Bool // Release, Detach or Close took the grant in hand
}

func newLock(c *Client, key string, token uint64, lease time.Duration, sent time.Time) *Lock {
	l := &Lock{client: c, key: key, token: token, lease: lease, until: sent.Add(lease),
		lost: make(chan struct{}), stopKA: make(chan struct{})}
	l.mu.Lock()
	l.expiry = time.AfterFunc(time.Until(l.until.Add(-lostMargin(lease))), func() { l.markLost(ErrLeaseExpired) })
	l.mu.Unlock()
	return l
}

// Key is the lock's key.
func (l *Lock) Key() string { return l.key }

// Token is the grant's fencing token: greater than every token granted
// before, on any key. Pass it to the protected resource.
func (l *Lock) Token() uint64 { return l.token }

// Lost is closed once the lock can no longer be relied on: a renewal was
// answered that the grant is gone, the lease came within its last tenth
// (at most 1 s) of its end without a renewal (the keep-alive could not
// renew in time, or none runs), the lock was released, or the client
// closed. Err then says which. Stop touching the protected resource.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Err is nil while the lock holds; once Lost is closed, why:
// ErrNotHeld, ErrLeaseExpired, ErrReleased or ErrClosed.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *Lock) markLost(why error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = why
	l.expiry.Stop()
	close(l.lost)
}

// renewed moves the lease's end after a renewal sent at sent.
func (l *Lock) renewed(lease time.Duration, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.lease, l.until = lease, sent.Add(lease)
	l.expiry.Reset(time.Until(l.until.Add(-lostMargin(lease))))
}

func (l *Lock) terms() (time.Duration, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease, l.until
}

// Renew extends the grant to end lease from now. ErrNotHeld means the
// grant is gone (Lost is then closed); a lock already lost is not renewed.
func (l *Lock) Renew(ctx context.Context, lease time.Duration) error {
	return l.renew(ctx, lease, l.client.cfg.requestTimeout)
}

func (l *Lock) renew(ctx context.Context, lease, window time.Duration) error {
	if err := l.Err(); err != nil {
		return &Error{Op: "renew", Key: l.key, Err: err}
	}
	sent := time.Now()
	err := l.client.renewWithin(ctx, l.key, l.token, lease, window)
	switch {
	case err == nil:
		l.renewed(lease, sent)
	case errors.Is(err, ErrNotHeld):
		l.markLost(ErrNotHeld)
	}
	return err
}

// KeepAlive renews the lease in the background every third of it until
// the lock is released or lost; when it cannot renew before the lease
// ends, Lost is closed first. Calling it again does nothing.
func (l *Lock) KeepAlive() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running || l.err != nil {
		return
	}
	l.running = true
	go l.keepAlive()
}

func (l *Lock) keepAlive() {
	for {
		lease, _ := l.terms()
		if !l.pause(max(lease/keepAliveDivisor, time.Millisecond)) {
			return
		}
		for {
			// Retrying past the lease's end would only hide that it is lost.
			_, until := l.terms()
			window := max(time.Until(until), retryInterval)
			err := l.renew(context.Background(), lease, window)
			if err == nil {
				break
			}
			if errors.Is(err, ErrNotHeld) || errors.Is(err, ErrClosed) || l.Err() != nil {
				return
			}
			l.client.cfg.logger.Debug("baton: renewal failed; retrying", "key", l.key, "err", err)
			if !l.pause(retryInterval) {
				return
			}
		}
	}
}

// pause waits d; false when the keep-alive must stop.
func (l *Lock) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.stopKA:
	case <-l.lost:
	}
	return false
}

// settle claims the right to end the grant: true for the first caller
// only (Release, Detach, Close).
func (l *Lock) settle() bool {
	if !l.settled.CompareAndSwap(false, true) {
		return false
	}
	close(l.stopKA)
	l.client.forget(l)
	return true
}

// Release releases the lock now (retried every 200 ms for 5 s across
// connections) and closes Lost. ErrNotHeld: it had already expired or
// been released; ErrClosed: Client.Close released it already.
func (l *Lock) Release(ctx context.Context) error {
	if !l.settle() {
		err := l.Err()
		if err == nil || errors.Is(err, ErrReleased) {
			err = ErrClosed
		}
		return &Error{Op: "release", Key: l.key, Err: err}
	}
	err := l.client.Release(ctx, l.key, l.token)
	l.markLost(ErrReleased)
	return err
}

// end releases the lock for Close; a lock already gone is not an error.
func (l *Lock) end(ctx context.Context, why error) error {
	if !l.settle() {
		return nil
	}
	err := l.client.Release(ctx, l.key, l.token)
	l.markLost(why)
	if errors.Is(err, ErrNotHeld) {
		return nil
	}
	return err
}

// Detach gives the Lock up without releasing the grant: it stays held
// until someone releases it with the returned token (Client.Release) or
// its lease runs out, and Close leaves it alone. The keep-alive stops.
func (l *Lock) Detach() uint64 {
	l.settle()
	return l.token
}
