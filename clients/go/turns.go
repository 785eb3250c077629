// At most one acquire and one watch of a key in flight on a connection.
// A node answers a later acquire's T (its shorter wait ran out) or E
// (refused at once), and a later watch whose seen tag differs, before an
// older request of the same key that still waits: matched by (op, key),
// oldest first, that answer would go to the older caller. So a further
// request of the key waits in the client, first come first served, until
// the one in flight here is answered (one given up counts until its
// answer comes), or goes on another connection.

package baton

import (
	"errors"
	"slices"
	"time"
)

// errTurnTimedOut: the caller's wait ran out before its turn came; its
// request was never sent.
var errTurnTimedOut = errors.New("the wait ran out before the turn came")

// oneInFlight reports whether requests of op are sent one per key at a
// time on a connection.
func oneInFlight(op byte) bool { return op == opAcquire || op == opWatch }

// inFlight reports whether a request of k is in flight here, or waits
// for its turn.
func (c *conn) inFlight(k matchKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, busy := c.turns[k]
	return busy
}

// takeTurn waits until none of k is in flight here and every earlier
// caller of k had its turn; with nil the caller holds the turn and must
// pass cl to do. errTurnTimedOut when until (if not zero) passes first,
// errBroken when the connection ends, errStopped on a stop.
func (c *conn) takeTurn(k matchKey, until time.Time, stop, stop2 <-chan struct{}) error {
	c.mu.Lock()
	line, busy := c.turns[k]
	if !busy {
		c.turns[k] = nil
		c.mu.Unlock()
		return nil
	}
	mine := make(chan struct{})
	c.turns[k] = append(line, mine)
	c.mu.Unlock()
	var expired <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		expired = t.C
	}
	var why error
	select {
	case <-mine:
		return nil
	case <-c.done:
		return errBroken
	case <-expired:
		why = errTurnTimedOut
	case <-stop:
		why = errStopped
	case <-stop2:
		why = errStopped
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-mine: // given the turn meanwhile: the next caller has it
		c.passTurnLocked(k)
	default:
		c.turns[k] = slices.DeleteFunc(c.turns[k], func(ch chan struct{}) bool { return ch == mine })
	}
	return why
}

// passTurn hands k's turn to the oldest caller waiting for it, if any.
func (c *conn) passTurn(k matchKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.passTurnLocked(k)
}

func (c *conn) passTurnLocked(k matchKey) {
	line, busy := c.turns[k]
	switch {
	case !busy:
	case len(line) == 0:
		delete(c.turns, k)
	default:
		close(line[0])
		c.turns[k] = line[1:]
	}
}
