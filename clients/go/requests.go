// Release, renew and query: sent until a node gives a verdict, across
// connections, every 200 ms within a window.

package baton

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Release releases the grant of key with token. It is retried every
// 200 ms for 5 s across connections until a node answers, so a
// connection breaking at the wrong moment does not leave the lock held
// until its lease runs out. ErrNotHeld: the grant was already released
// or expired.
func (c *Client) Release(ctx context.Context, key string, token uint64) error {
	if c.pool.isShut() {
		return &Error{Op: "release", Key: key, Err: ErrClosed}
	}
	line, err := encodeRelease(key, token)
	if err == nil {
		err = checkField("key", key)
	}
	if err == nil && token == 0 {
		err = fmt.Errorf("%w: token 0 (tokens start at 1)", ErrInvalid)
	}
	if err != nil {
		return &Error{Op: "release", Key: key, Err: err}
	}
	r, err := c.callRetrying(ctx, "release", opRelease, key, line, releaseWindow, c.cfg.requestTimeout, nil)
	if err != nil {
		return err
	}
	return outcome("release", key, r, 'R')
}

// Renew extends the grant of key with token to end lease from now.
// ErrNotHeld means the grant is gone: stop touching the resource.
func (c *Client) Renew(ctx context.Context, key string, token uint64, lease time.Duration) error {
	return c.renewWithin(ctx, key, token, lease, c.cfg.requestTimeout)
}

// renewWithin is Renew, retrying across connections for at most window.
func (c *Client) renewWithin(ctx context.Context, key string, token uint64, lease, window time.Duration) error {
	if c.isClosing() {
		return &Error{Op: "renew", Key: key, Err: ErrClosed}
	}
	if err := checkRequest(key, 0, lease, ""); err != nil {
		return &Error{Op: "renew", Key: key, Err: err}
	}
	line, err := encodeRenew(key, token, ceilMs(lease))
	if err != nil {
		return &Error{Op: "renew", Key: key, Err: err}
	}
	// A renewal may be sent twice, so half the window goes to one node:
	// one that does not answer leaves time to renew elsewhere before the
	// lease runs out, even before it is found frozen.
	perNode := min(window/2, c.cfg.requestTimeout)
	r, err := c.callRetrying(ctx, "renew", opRenew, key, line, window, perNode, c.closing)
	if err != nil {
		return err
	}
	return outcome("renew", key, r, 'K')
}

// outcome maps a release's or renewal's answer to its error.
func outcome(op, key string, r response, ok byte) error {
	switch r.kind {
	case ok:
		return nil
	case 'N':
		return &Error{Op: op, Key: key, Err: ErrNotHeld}
	}
	return &Error{Op: op, Key: key, Err: ErrUnexpected}
}

// Query reports the key's live grant (token, lease left) and its
// waiters, as the serving node sees them; in a Raft cluster a
// linearizable read. Redirects are followed within the request timeout.
func (c *Client) Query(ctx context.Context, key string) (KeyState, error) {
	if c.isClosing() {
		return KeyState{}, &Error{Op: "query", Key: key, Err: ErrClosed}
	}
	line, err := encodeQuery(key)
	if err == nil {
		err = checkField("key", key)
	}
	if err != nil {
		return KeyState{}, &Error{Op: "query", Key: key, Err: err}
	}
	return c.keyState(ctx, "query", opQuery, key, line, c.cfg.requestTimeout)
}

// keyState sends a Q or a W (retried within window) and reads the key's
// state from the answer.
func (c *Client) keyState(ctx context.Context, opName string, op byte, key string, line []byte, window time.Duration) (KeyState, error) {
	r, err := c.callRetrying(ctx, opName, op, key, line, window, window, c.closing)
	if err != nil {
		return KeyState{}, err
	}
	state, err := parseKeyState(r.fields)
	if r.kind != op || err != nil {
		return KeyState{}, &Error{Op: opName, Key: key, Err: ErrUnexpected}
	}
	return state, nil
}

// callRetrying sends a request until a node answers other than with a
// redirect, trying the connections in turn every retryInterval for
// window, waiting at most perNode for each answer. A release passes no
// stop channel for Close: Close's own releases must go through.
func (c *Client) callRetrying(ctx context.Context, opName string, op byte, key string, line []byte,
	window, perNode time.Duration, closing <-chan struct{}) (response, error) {
	end := time.Now().Add(window)
	hops := 0
	var redirect *target
	why := noConnection
	for {
		cn := c.pool.pickFor(matchKey{op, key})
		if redirect != nil {
			until := time.Now().Add(c.cfg.connectTimeout)
			if end.Before(until) {
				until = end
			}
			cn = c.pool.reach(redirect, until, ctx.Done(), closing)
			redirect = nil
		}
		if cn != nil && oneInFlight(op) {
			// A watch of the key in flight here goes first.
			if err := cn.takeTurn(matchKey{op, key}, end, ctx.Done(), closing); err != nil {
				if errors.Is(err, errStopped) {
					return response{}, c.stopped(opName, key, ctx)
				}
				cn = nil
			}
		}
		if cn != nil {
			limit := min(time.Until(end), perNode)
			r, err := cn.do(newCall(op, key, line), max(limit, time.Millisecond), ctx.Done(), closing)
			switch {
			case errors.Is(err, errStopped):
				return response{}, c.stopped(opName, key, ctx)
			case errors.Is(err, errUnanswered):
				why = unanswered
			case err != nil:
				why = noConnection
			case r.kind == 'M':
				if r.addr == "" {
					why = notServing
				}
				if redirect = c.follow(ctx, r.addr, &hops, end); redirect != nil {
					continue
				}
			case r.kind == 'E':
				return response{}, rejection(opName, key, r.reason)
			default:
				return r, nil
			}
		}
		if time.Now().Add(retryInterval).After(end) || c.pool.tlsFailure() != "" {
			return response{}, c.noVerdictError(why, opName, key)
		}
		if err := sleep(ctx, retryInterval, closing); err != nil {
			return response{}, c.stopped(opName, key, ctx)
		}
	}
}

// sleep waits d unless ctx ends or stop closes first.
func sleep(ctx context.Context, d time.Duration, stop <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return ErrClosed
	}
}
