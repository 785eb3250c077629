// Acquiring: failover across connections with what is left of the wait,
// redirects, and what to report when no node gave a verdict.

package baton

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// noVerdict is why a request has no verdict yet: what it ends with when
// its time runs out. Only a node's own answer is a verdict.
type noVerdict int

const (
	noConnection noVerdict = iota // no usable connection, or it broke or froze
	notServing                    // the nodes answered M ... -
	unanswered                    // a node that answers probes did not answer this
)

func (c *Client) noVerdictError(v noVerdict, op, key string) error {
	switch v {
	case notServing:
		return &Error{Op: op, Key: key, Err: ErrNotServing}
	case unanswered:
		return &Error{Op: op, Key: key, Err: ErrUnanswered}
	}
	return c.pool.noServer(op, key)
}

// attempt is one acquire's progress across its tries.
type attempt struct {
	key       string
	leaseMs   uint64
	options   string    // protocol 1.2's acquire options, as sent
	deadline  time.Time // when the wait runs out; zero: the node's maximum
	failures  int       // tries that found no connection or whose connection broke
	hops      int       // redirects followed
	lateHops  int       // redirects followed after the wait ran out
	sent      bool      // whether an A went out yet: the first always does
	redirect  *target   // where the last M pointed
	noVerdict noVerdict
	// ctxWait: the wait is ctx's deadline, the caller having asked for
	// the node's maximum (Wait 0); nodeMax: a node refused it as above
	// its --max-wait, so the node's maximum is asked for and ctx ends
	// the acquire on the client's side.
	ctxWait, nodeMax bool
}

// waitLeftMs is the wait to ask the next node for (0: its maximum), or
// false when the wait ran out without a verdict. Once it ran out a try
// still goes out with the shortest wait (1 ms) if it is the first, or
// follows a redirect: a node still decides.
func (a *attempt) waitLeftMs(followingRedirect bool) (uint64, bool) {
	if a.deadline.IsZero() || a.nodeMax {
		return 0, true
	}
	if left := time.Until(a.deadline); left > 0 {
		return ceilMs(left), true
	}
	if !a.sent {
		return 1, true
	}
	if followingRedirect && a.lateHops < hopsPastTheWait {
		a.lateHops++
		return 1, true
	}
	return 0, false
}

// Acquire waits for the lock on key and holds it for opts.Lease. The wait
// is opts.Wait, shortened by ctx's deadline; ctx cancelled gives the
// acquire up (a grant that comes later is released at once). If a
// connection breaks, or its node stops answering, while the acquire is
// pending, it is sent again on the next usable connection with what is
// left of its wait. Errors: ErrTimedOut (the node said the wait ran out),
// ErrNoServer (no usable connection left after as many tries as there
// are connections, or the wait ran out with none), ErrNotServing,
// ErrRejected, ErrPermission, ErrAuth, ErrInvalid, ErrClosed.
func (c *Client) Acquire(ctx context.Context, key string, opts AcquireOptions) (*Lock, error) {
	if c.isClosing() {
		return nil, &Error{Op: "acquire", Key: key, Err: ErrClosed}
	}
	lease := opts.Lease
	if lease == 0 {
		lease = DefaultLease
	}
	options, err := opts.wireOptions()
	if err == nil {
		err = checkRequest(key, opts.Wait, lease, options)
	}
	if err != nil {
		return nil, &Error{Op: "acquire", Key: key, Err: err}
	}
	wait := opts.Wait
	a := &attempt{key: key, leaseMs: ceilMs(lease), options: options}
	if d, ok := ctx.Deadline(); ok && (wait == 0 || time.Until(d) < wait) {
		a.ctxWait = wait == 0
		wait = max(time.Until(d), time.Millisecond)
		refused := c.waitRefusedMs.Load()
		a.nodeMax = a.ctxWait && refused != 0 && ceilMs(wait) >= refused
	}
	if wait > 0 {
		a.deadline = time.Now().Add(wait)
	}
	for {
		if c.isClosing() {
			return nil, &Error{Op: "acquire", Key: key, Err: ErrClosed}
		}
		following := a.redirect != nil
		cn, err := c.nextAcquireConn(ctx, a)
		if err != nil {
			return nil, err
		}
		if cn == nil {
			continue
		}
		if retry, err := c.awaitTurn(ctx, cn, a); err != nil {
			return nil, err
		} else if retry {
			continue
		}
		waitMs, ok := a.waitLeftMs(following)
		if !ok {
			return nil, c.noVerdictError(a.noVerdict, "acquire", key)
		}
		a.sent = true
		lock, err := c.tryAcquire(ctx, cn, a, waitMs, opts.KeepAlive)
		if lock != nil || err != nil {
			return lock, err
		}
	}
}

// checkRequest refuses what the protocol cannot carry, before sending.
func checkRequest(key string, wait, lease time.Duration, options string) error {
	if _, err := encodeAcquire(key, ceilMs(wait), ceilMs(lease), options); err != nil {
		return err
	}
	if err := checkField("key", key); err != nil {
		return err
	}
	if wait < 0 {
		return fmt.Errorf("%w: negative wait", ErrInvalid)
	}
	if lease <= 0 {
		return fmt.Errorf("%w: lease must be greater than 0", ErrInvalid)
	}
	return nil
}

// nextAcquireConn is the connection for the next try: the redirect's
// target, else the next usable one. nil, nil: nothing usable this time,
// but the acquire may try again.
func (c *Client) nextAcquireConn(ctx context.Context, a *attempt) (*conn, error) {
	redirected := a.redirect != nil
	if t := a.redirect; t != nil {
		a.redirect = nil
		until := time.Now().Add(c.cfg.connectTimeout)
		if !a.deadline.IsZero() && a.deadline.Before(until) {
			until = a.deadline
		}
		if cn := c.pool.reach(t, until, ctx.Done(), c.closing); cn != nil {
			return cn, nil
		}
	} else if cn := c.pool.pick(matchKey{opAcquire, a.key}, a.deadline, ctx.Done(), c.closing); cn != nil {
		return cn, nil
	}
	if ctx.Err() != nil || c.isClosing() {
		return nil, c.stopped("acquire", a.key, ctx)
	}
	a.noVerdict = noConnection
	if !a.deadline.IsZero() && !time.Now().Before(a.deadline) {
		return nil, c.pool.noServer("acquire", a.key)
	}
	a.failures++
	// A redirect to a node that is down is no verdict on the others: the
	// acquire ends only when none of them is usable either.
	if a.failures >= c.pool.size() && (!redirected || c.pool.pick(matchKey{opAcquire, a.key}, a.deadline, ctx.Done(), c.closing) == nil) {
		return nil, c.pool.noServer("acquire", a.key)
	}
	return nil, nil
}

// tryAcquire sends one A on cn and says what its answer means: the
// lock, an error that ends the acquire, or neither to try again.
func (c *Client) tryAcquire(ctx context.Context, cn *conn, a *attempt, waitMs uint64, keepAlive bool) (*Lock, error) {
	line, err := encodeAcquire(a.key, waitMs, a.leaseMs, a.options)
	if err != nil {
		return nil, &Error{Op: "acquire", Key: a.key, Err: err}
	}
	// The node answers T when the wait runs out; the grace covers the
	// trip, so a silent node cannot hold the caller forever.
	var limit time.Duration
	if waitMs > 0 {
		limit = time.Duration(waitMs)*time.Millisecond + c.cfg.requestTimeout
	}
	sent := time.Now()
	r, err := cn.do(newCall(opAcquire, a.key, line), limit, ctx.Done(), c.closing)
	switch {
	case errors.Is(err, errStopped):
		return nil, c.stopped("acquire", a.key, ctx)
	case errors.Is(err, errUnanswered):
		return nil, &Error{Op: "acquire", Key: a.key, Addr: cn.slot.addr, Err: ErrUnanswered}
	case err != nil:
		return nil, c.brokeDuringAcquire(ctx, cn, a)
	}
	switch r.kind {
	case 'A':
		return c.granted(a.key, r.token, time.Duration(a.leaseMs)*time.Millisecond, sent, keepAlive)
	case 'T':
		return nil, &Error{Op: "acquire", Key: a.key, Err: ErrTimedOut}
	case 'M':
		if r.addr == "" {
			a.noVerdict = notServing
		}
		a.redirect = c.follow(ctx, r.addr, &a.hops, a.deadline)
		return nil, nil
	case 'E':
		if a.ctxWait && !a.nodeMax && strings.HasPrefix(r.reason, waitTooLong) {
			c.noteWaitRefused(waitMs)
			a.nodeMax = true
			return nil, nil
		}
		return nil, rejection("acquire", a.key, r.reason)
	}
	return nil, &Error{Op: "acquire", Key: a.key, Addr: cn.slot.addr, Err: ErrUnexpected}
}

// awaitTurn waits until no other acquire of the key is in flight on cn
// (see takeTurn). false, nil: the acquire may be sent on cn now; true,
// nil: cn broke meanwhile, try again elsewhere. ErrTimedOut when the wait
// ran out first: it was never sent.
func (c *Client) awaitTurn(ctx context.Context, cn *conn, a *attempt) (bool, error) {
	err := cn.takeTurn(matchKey{opAcquire, a.key}, a.deadline, ctx.Done(), c.closing)
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, errTurnTimedOut):
		return true, &Error{Op: "acquire", Key: a.key, Err: ErrTimedOut}
	case errors.Is(err, errStopped):
		return true, c.stopped("acquire", a.key, ctx)
	}
	return true, c.brokeDuringAcquire(ctx, cn, a)
}

// brokeDuringAcquire counts a broken connection: nil to try again
// elsewhere, ErrNoServer once every connection failed and none came back.
func (c *Client) brokeDuringAcquire(ctx context.Context, cn *conn, a *attempt) error {
	if c.isClosing() {
		return &Error{Op: "acquire", Key: a.key, Err: ErrClosed}
	}
	c.cfg.logger.Debug("baton: connection broke during acquire; failing over", "key", a.key, "addr", cn.slot.addr)
	a.noVerdict = noConnection
	a.failures++
	if a.failures >= c.pool.size() && c.pool.pick(matchKey{opAcquire, a.key}, a.deadline, ctx.Done(), c.closing) == nil {
		return c.pool.noServer("acquire", a.key)
	}
	return nil
}

// follow handles M: the connection to resend to, or nil after a short
// pause when no active node is known yet.
func (c *Client) follow(ctx context.Context, addr string, hops *int, until time.Time) *target {
	*hops++
	pause := noActivePause
	if !until.IsZero() {
		pause = min(pause, time.Until(until))
	}
	if addr != "" && *hops <= freeHops {
		return c.pool.slotFor(addr)
	}
	if pause > 0 {
		t := time.NewTimer(pause)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-c.closing:
		}
	}
	if addr == "" {
		return nil
	}
	return c.pool.slotFor(addr)
}

// granted wraps a grant in its Lock, unless Close started meanwhile
// (the grant then goes back).
func (c *Client) granted(key string, token uint64, lease time.Duration, sent time.Time, keepAlive bool) (*Lock, error) {
	l := newLock(c, key, token, lease, sent)
	c.track(l)
	// Tracked first, checked second: Close either found this lock or is
	// seen here.
	if c.isClosing() {
		if l.settle() {
			c.releaseOrphan(key, token)
		}
		return nil, &Error{Op: "acquire", Key: key, Err: ErrClosed}
	}
	if keepAlive {
		l.KeepAlive()
	}
	return l, nil
}

// TryAcquire takes the lock only if it is free now (the shortest wait the
// protocol can express, 1 ms); ErrTimedOut means it is held. opts.Wait is
// ignored.
func (c *Client) TryAcquire(ctx context.Context, key string, opts AcquireOptions) (*Lock, error) {
	opts.Wait = time.Millisecond
	return c.Acquire(ctx, key, opts)
}
