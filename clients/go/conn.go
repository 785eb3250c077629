// One connection to a node: a writer goroutine writes the requests
// callers hand it, in batches; a reader goroutine matches each answer to
// the oldest pending request of the same (op, key), as docs/protocol.md
// says; a watchdog gives the connection up when its node falls silent
// with requests in flight. The connection is usable once its node
// answered a first line (the S probe sent on connect).

package baton

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Why a connection ended.
type endKind int

const (
	endBroken       endKind = iota + 1 // the socket failed or closed, or a line did not parse
	endUnresponsive                    // requests in flight and the probe went unanswered
	endTLS                             // TLS failed, or the node wants TLS: a redial will not help
	endAuthRequired                    // the node wants U and the client has no credentials
	endShutdown                        // the client closed
)

// Where a call stands; the reader and the caller race to settle it.
const (
	callWaiting int32 = iota
	callDelivered
	callAbandoned
)

// call is one request on its way to a node and back.
type call struct {
	op    byte
	key   string
	line  []byte
	reply chan response // buffered 1; nil for the connection's own probes
	state atomic.Int32
}

func newCall(op byte, key string, line []byte) *call {
	return &call{op: op, key: key, line: line, reply: make(chan response, 1)}
}

// abandon gives the call up; if the answer was delivered meanwhile it
// returns it (the caller must act on it: a grant must not be dropped).
func (c *call) abandon() (response, bool) {
	if c.state.CompareAndSwap(callWaiting, callAbandoned) {
		return response{}, false
	}
	return <-c.reply, true
}

type matchKey struct {
	op  byte
	key string
}

// conn is one live socket to a node.
type conn struct {
	slot  *slot
	nc    net.Conn
	rd    *bufio.Reader
	calls chan *call    // from callers
	own   chan *call    // probes, written before the callers' requests
	done  chan struct{} // closed when the connection ended

	mu      sync.Mutex
	pending map[matchKey][]*call
	// turns holds each (op, key) of an acquire or a watch in flight here
	// (see oneInFlight), with the callers waiting to send theirs, oldest
	// first; each is given the turn by closing its channel.
	turns   map[matchKey][]chan struct{}
	silence silence
	alive   bool
	end     endKind
	endWhy  string
}

func newConn(s *slot, nc net.Conn, rd *bufio.Reader) *conn {
	return &conn{
		slot:    s,
		nc:      nc,
		rd:      rd,
		calls:   make(chan *call, 1024),
		own:     make(chan *call, 16),
		done:    make(chan struct{}),
		pending: make(map[matchKey][]*call),
		turns:   make(map[matchKey][]chan struct{}),
		silence: silence{since: time.Now()},
	}
}

// run serves the connection until it ends; the S probe goes out first.
func (c *conn) run() (endKind, string) {
	c.probe()
	go c.writeLoop()
	go c.watch()
	c.readLoop()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.end, c.endWhy
}

// finish ends the connection once; the first reason stands.
func (c *conn) finish(kind endKind, why string) {
	c.mu.Lock()
	if c.end != 0 {
		c.mu.Unlock()
		return
	}
	c.end, c.endWhy = kind, why
	c.mu.Unlock()
	close(c.done)
	c.nc.Close()
}

func (c *conn) probe() {
	select {
	case c.own <- &call{op: opStatus, line: statusLine}:
	default: // a probe is already queued
	}
}

func (c *conn) writeLoop() {
	w := bufio.NewWriterSize(c.nc, 16<<10)
	for {
		var first *call
		select {
		case first = <-c.own:
		case first = <-c.calls:
		case <-c.done:
			return
		}
		for n, next := 0, first; next != nil; n++ {
			c.register(next)
			w.Write(next.line) // an error sticks; Flush reports it
			next = nil
			if n+1 < writeBatch {
				select {
				case next = <-c.own:
				case next = <-c.calls:
				default:
				}
			}
		}
		if err := w.Flush(); err != nil {
			c.finish(endBroken, err.Error())
			return
		}
	}
}

// register queues a call's match key before it is written, so its
// answer always finds it.
func (c *conn) register(cl *call) {
	k := matchKey{cl.op, cl.key}
	c.mu.Lock()
	c.pending[k] = append(c.pending[k], cl)
	c.silence.sent(time.Now())
	c.mu.Unlock()
}

func (c *conn) readLoop() {
	for {
		line, err := c.rd.ReadSlice('\n')
		if err != nil {
			kind, why := endBroken, "the node closed the connection"
			switch {
			case errors.Is(err, bufio.ErrBufferFull):
				why = "an answer line over the client's limit"
			case strings.Contains(err.Error(), "tls: "):
				// The node refused the handshake's outcome (a client
				// certificate, say): a redial will not help.
				kind, why = endTLS, err.Error()
			case !errors.Is(err, io.EOF):
				why = err.Error()
			}
			c.finish(kind, why)
			return
		}
		line = line[:len(line)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		r, err := parseResponse(line)
		if err != nil {
			c.finish(endBroken, err.Error())
			return
		}
		if r.kind == 'E' && r.op == '?' && strings.HasPrefix(r.reason, tlsRequiredPrefix) {
			c.finish(endTLS, r.reason)
			return
		}
		if r.kind == 'E' && r.op == opStatus && r.reason == reasonAuthRequired {
			// Nothing will be served here without credentials: not usable.
			c.finish(endAuthRequired, r.reason)
			return
		}
		c.deliver(r)
	}
}

// deliver hands r to the oldest pending request it matches.
func (c *conn) deliver(r response) {
	k := matchKey{r.op, r.key}
	c.mu.Lock()
	var cl *call
	if q := c.pending[k]; len(q) > 0 {
		cl = q[0]
		q[0] = nil
		if len(q) == 1 {
			delete(c.pending, k)
		} else {
			c.pending[k] = q[1:]
		}
	}
	if cl != nil && oneInFlight(cl.op) {
		c.passTurnLocked(k)
	}
	c.silence.heard(time.Now(), cl != nil)
	first := !c.alive
	c.alive = true
	c.mu.Unlock()
	if first {
		c.slot.up(c)
	}
	if cl == nil || cl.reply == nil {
		return
	}
	if cl.state.CompareAndSwap(callWaiting, callDelivered) {
		cl.reply <- r
	} else if r.kind == 'A' {
		// The caller gave the acquire up: the grant goes back at once.
		c.slot.pool.client.releaseOrphan(r.key, r.token)
	}
}

// watch gives the connection up when its node stays silent with
// requests in flight.
func (c *conn) watch() {
	allowed := c.slot.pool.cfg.unresponsiveAfter
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	judged := false
	for {
		c.mu.Lock()
		v, at := c.silence.judge(time.Now(), allowed)
		c.mu.Unlock()
		switch {
		case v == unresponsive && judged:
			c.finish(endUnresponsive, "the node stopped answering")
			return
		case v == unresponsive:
			// Once more after a pause: answers already read but not yet
			// handled (this goroutine held up, say) count first.
			judged = true
			at = time.Now().Add(time.Millisecond)
		case v == probeNow:
			c.probe()
			judged = false
		default:
			judged = false
		}
		timer.Reset(time.Until(at))
		select {
		case <-timer.C:
		case <-c.done:
			return
		}
	}
}

// Why a call on one connection got no answer.
var (
	errBroken     = errors.New("connection broken")
	errUnanswered = errors.New("unanswered")
)

// do sends cl and waits for its answer (an acquire or a watch once its
// caller has the turn: see takeTurn), at most limit when limit > 0, or
// until either stop channel is closed (the caller's context, the client's
// close). An acquire given up whose grant comes later is released by the
// reader.
func (c *conn) do(cl *call, limit time.Duration, stop, stop2 <-chan struct{}) (response, error) {
	var unsent error
	select {
	case c.calls <- cl:
	case <-c.done:
		unsent = errBroken
	case <-stop:
		unsent = errStopped
	case <-stop2:
		unsent = errStopped
	}
	if unsent != nil {
		if oneInFlight(cl.op) {
			c.passTurn(matchKey{cl.op, cl.key})
		}
		return response{}, unsent
	}
	var expired <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		expired = t.C
	}
	var why error
	select {
	case r := <-cl.reply:
		return r, nil
	case <-c.done:
		why = errBroken
	case <-expired:
		why = errUnanswered
	case <-stop:
		why = errStopped
	case <-stop2:
		why = errStopped
	}
	if r, ok := cl.abandon(); ok {
		return r, nil
	}
	return response{}, why
}

// errStopped: the caller's stop channel closed (its context, or Close).
var errStopped = errors.New("stopped")
