// Protocol 1.2's requests, client side: acquire options (semaphores,
// shared locks, a holder's value), V (set a holder's value), W (watch a
// key), and an election built on them. A 1.1 node answers each with E
// (ErrRejected).

package baton

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

const (
	maxPermits = 10000
	maxValue   = 128
	// watchWait is the wait of one W: a watch is re-sent after it, so a
	// node that forgot it (a failover) is asked again. A node whose
	// --max-wait is shorter refuses it; the watch then asks for the
	// node's maximum (0).
	watchWait = 30 * time.Second
)

// wireOptions is the acquire's protocol 1.2 options as sent, "" for none.
func (o AcquireOptions) wireOptions() (string, error) {
	var b strings.Builder
	switch {
	case o.Permits < 0 || o.Permits > maxPermits:
		return "", fmt.Errorf("%w: permits %d, outside 1 to %d", ErrInvalid, o.Permits, maxPermits)
	case o.Permits > 1 && o.Shared:
		return "", fmt.Errorf("%w: shared locks take no permits", ErrInvalid)
	case o.Permits > 1:
		b.WriteString(" permits=" + strconv.Itoa(o.Permits))
	}
	if o.Shared {
		b.WriteString(" mode=shared")
	}
	if o.Value != "" {
		if err := checkValue(o.Value); err != nil {
			return "", err
		}
		b.WriteString(" value=" + o.Value)
	}
	return b.String(), nil
}

// checkValue: 1 to 128 bytes, no space or control byte, not "-".
func checkValue(v string) error {
	if v == "" || v == "-" || len(v) > maxValue ||
		strings.ContainsFunc(v, func(r rune) bool { return r == ' ' || r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%w: a value has 1 to %d bytes, no space or control byte, and is not \"-\"", ErrInvalid, maxValue)
	}
	return nil
}

// SetValue sets the value attached to this grant ("" clears it), for
// Query, Watch and elections (protocol 1.2). ErrNotHeld: the grant is gone.
func (l *Lock) SetValue(ctx context.Context, value string) error {
	wire := "-"
	if value != "" {
		if err := checkValue(value); err != nil {
			return &Error{Op: "value", Key: l.key, Err: err}
		}
		wire = value
	}
	line, err := finish([]byte("V " + l.key + " " + strconv.FormatUint(l.token, 10) + " " + wire))
	if err != nil {
		return &Error{Op: "value", Key: l.key, Err: err}
	}
	c := l.client
	if c.isClosing() {
		return &Error{Op: "value", Key: l.key, Err: ErrClosed}
	}
	window := c.cfg.requestTimeout
	r, err := c.callRetrying(ctx, "value", opValue, l.key, line, window, window, c.closing)
	if err != nil {
		return err
	}
	return outcome("value", l.key, r, 'V')
}

// Watch reports the state of key on the returned channel: its state now,
// then each change of its holders or their values (not of its waiters),
// until ctx ends or the client closes; the channel is then closed. A
// reader that falls behind gets the latest state, not every one. Lost
// connections, failovers and redirects are retried behind the channel.
func (c *Client) Watch(ctx context.Context, key string) (<-chan KeyState, error) {
	if c.isClosing() {
		return nil, &Error{Op: "watch", Key: key, Err: ErrClosed}
	}
	if err := checkField("key", key); err != nil {
		return nil, &Error{Op: "watch", Key: key, Err: err}
	}
	states := make(chan KeyState, 1)
	go c.watch(ctx, key, states)
	return states, nil
}

func (c *Client) watch(ctx context.Context, key string, states chan KeyState) {
	defer close(states)
	seen := "" // the tag last reported; "" before the first
	wait := watchWait
	for ctx.Err() == nil && !c.isClosing() {
		state, err := c.watchOnce(ctx, key, seen, wait)
		var refused *Error
		if wait != 0 && errors.As(err, &refused) && strings.HasPrefix(refused.Reason, waitTooLong) {
			wait = 0
			continue
		}
		if err != nil {
			if errors.Is(err, ErrRejected) || errors.Is(err, ErrPermission) || errors.Is(err, ErrAuth) {
				c.cfg.logger.Warn("baton: watch refused", "key", key, "err", err)
				return
			}
			if sleep(ctx, retryInterval, c.closing) != nil {
				return
			}
			continue
		}
		if state.Tag != seen {
			seen = state.Tag
			select { // the latest state replaces one not yet read
			case <-states:
			default:
			}
			states <- state
		}
	}
}

// watchOnce is the key's state now (Q) when nothing was reported yet,
// else its state once it differs from seen (W), or after wait (0: the
// node's maximum, shorter than watchWait).
func (c *Client) watchOnce(ctx context.Context, key, seen string, wait time.Duration) (KeyState, error) {
	if seen == "" {
		return c.Query(ctx, key)
	}
	line, err := finish([]byte("W " + key + " " + strconv.Itoa(int(wait/time.Second)) + " " + seen))
	if err != nil {
		return KeyState{}, &Error{Op: "watch", Key: key, Err: err}
	}
	return c.keyState(ctx, "watch", opWatch, key, line, watchWait+c.cfg.requestTimeout)
}

// Election is a leader election on one key, in the manner of etcd's
// concurrency package: the leader is the holder of the key's lock, its
// value is what the leader proclaims, and the lock's token fences the
// leader's writes (protocol 1.2's values).
type Election struct {
	client *Client
	key    string
}

// Election is the election on key.
func (c *Client) Election(key string) *Election { return &Election{client: c, key: key} }

// ErrNoLeader: the election has no leader now.
var ErrNoLeader = errors.New("baton: the election has no leader")

// Campaign waits until this caller leads (as long as ctx allows) and
// returns its lock, kept alive; value is proclaimed as the leader's.
// Resign with the lock's Release; watch its Lost to learn that the lead
// was lost; Proclaim with its SetValue. Each acquire waits at most the
// node's --max-wait: one it answers T sooner than ctx's deadline is sent
// again. At ctx's deadline: ErrTimedOut, or ctx's error if it came
// first.
func (e *Election) Campaign(ctx context.Context, value string, lease time.Duration) (*Lock, error) {
	for {
		l, err := e.client.Acquire(ctx, e.key, AcquireOptions{Lease: lease, Value: value, KeepAlive: true})
		if !errors.Is(err, ErrTimedOut) || ctx.Err() != nil {
			return l, err
		}
		// A T at ctx's deadline, give or take the trip, is the caller's.
		if d, ok := ctx.Deadline(); ok && time.Until(d) < retryInterval {
			return l, err
		}
	}
}

// Leader is the current leader's value and token, or ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (string, uint64, error) {
	state, err := e.client.Query(ctx, e.key)
	if err != nil {
		return "", 0, err
	}
	return leaderOf(e.key, state)
}

func leaderOf(key string, state KeyState) (string, uint64, error) {
	if !state.Held() {
		return "", 0, &Error{Op: "leader", Key: key, Err: ErrNoLeader}
	}
	for _, h := range state.Holders {
		if h.Token == state.Token {
			return h.Value, h.Token, nil
		}
	}
	return "", state.Token, nil
}

// LeaderState is one observation of an election: the leader's value and
// token, or no leader (Token 0).
type LeaderState struct {
	Value string
	Token uint64
}

// Observe reports each change of leader (or of its value) until ctx ends.
func (e *Election) Observe(ctx context.Context) (<-chan LeaderState, error) {
	states, err := e.client.Watch(ctx, e.key)
	if err != nil {
		return nil, err
	}
	leaders := make(chan LeaderState, 1)
	go func() {
		defer close(leaders)
		for state := range states {
			value, token, _ := leaderOf(e.key, state)
			select {
			case <-leaders:
			default:
			}
			leaders <- LeaderState{Value: value, Token: token}
		}
	}()
	return leaders, nil
}
