// The registered connections and the round-robin over the usable ones.

package baton

import (
	"sync"
	"sync/atomic"
	"time"
)

type pool struct {
	client *Client
	cfg    config

	mu    sync.RWMutex
	slots []*slot
	next  atomic.Uint64

	changedMu sync.Mutex
	changed   chan struct{} // closed and replaced whenever a connection comes or goes

	shut     chan struct{} // closed once, by Close: every connection ends
	shutOnce sync.Once
}

// newPool registers one connection per address, two when there is only
// one address, so that a single broken socket never stops the service.
func newPool(client *Client, cfg config, addrs []string) *pool {
	p := &pool{client: client, cfg: cfg, changed: make(chan struct{}), shut: make(chan struct{})}
	copies := 1
	if len(addrs) == 1 {
		copies = 2
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, addr := range addrs {
		for range copies {
			p.slots = append(p.slots, newSlot(p, addr))
		}
	}
	return p
}

func (p *pool) publish() {
	p.changedMu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.changedMu.Unlock()
}

// changes is closed at the next change.
func (p *pool) changes() <-chan struct{} {
	p.changedMu.Lock()
	defer p.changedMu.Unlock()
	return p.changed
}

func (p *pool) all() []*slot {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.slots
}

func (p *pool) size() int { return len(p.all()) }

// pickNow is the next usable connection in round-robin order, or nil.
func (p *pool) pickNow() *conn { return p.pickFor(matchKey{}) }

// pickFor is pickNow preferring, for an acquire or a watch k, a
// connection where none of k is in flight, so that it need not wait for
// its turn (see takeTurn).
func (p *pool) pickFor(k matchKey) *conn {
	slots := p.all()
	start := p.next.Add(1)
	var busy *conn
	for i := range slots {
		c := slots[(start+uint64(i))%uint64(len(slots))].cur.Load()
		switch {
		case c == nil:
		case !oneInFlight(k.op) || !c.inFlight(k):
			return c
		case busy == nil:
			busy = c
		}
	}
	return busy
}

// pick is pickFor, waiting for a connection to come back: at most one
// redial round, never past until (when not zero), nor past a stop.
func (p *pool) pick(k matchKey, until time.Time, stop, stop2 <-chan struct{}) *conn {
	if c := p.pickFor(k); c != nil {
		return c
	}
	round := time.Now().Add(redialInterval + p.cfg.connectTimeout)
	if until.IsZero() || round.Before(until) {
		until = round
	}
	return p.waitFor(func() (*conn, bool) { c := p.pickFor(k); return c, c != nil }, until, stop, stop2)
}

// waitFor polls get at every change until it is done (with a connection
// or without), until passes, a stop closes, or every connection failed
// for a TLS reason.
func (p *pool) waitFor(get func() (*conn, bool), until time.Time, stop, stop2 <-chan struct{}) *conn {
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	for {
		changed := p.changes()
		if c, done := get(); done {
			return c
		}
		if p.tlsFailure() != "" {
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil
		case <-stop:
			return nil
		case <-stop2:
			return nil
		case <-p.shut:
			return nil
		}
	}
}

// target is where a redirect points: the connection, and its failed
// dials when the redirect came (one more: the node is down).
type target struct {
	slot        *slot
	failedDials uint64
}

// slotFor is the connection a redirect points at, registered if the
// address is new; one that is down is asked to dial now.
func (p *pool) slotFor(addr string) *target {
	p.mu.Lock()
	defer p.mu.Unlock()
	var known *slot
	for _, s := range p.slots {
		if s.addr == addr {
			if s.cur.Load() != nil {
				return &target{slot: s}
			}
			known = s
		}
	}
	if known != nil {
		t := &target{slot: known, failedDials: known.failedDials.Load()}
		known.requestDial()
		return t
	}
	p.cfg.logger.Info("baton: redirected to a new address; connecting to it", "addr", addr)
	s := newSlot(p, addr)
	// A new slice: readers of the old one keep a consistent view.
	p.slots = append(append([]*slot(nil), p.slots...), s)
	return &target{slot: s}
}

// reach waits for the redirect's connection: nil once its dial failed,
// or at until.
func (p *pool) reach(t *target, until time.Time, stop, stop2 <-chan struct{}) *conn {
	return p.waitFor(func() (*conn, bool) {
		c := t.slot.cur.Load()
		return c, c != nil || t.slot.failedDials.Load() > t.failedDials
	}, until, stop, stop2)
}

// usableTo is a usable connection to addr, or nil.
func (p *pool) usableTo(addr string) *conn {
	for _, s := range p.all() {
		if c := s.cur.Load(); s.addr == addr && c != nil {
			return c
		}
	}
	return nil
}

// addresses lists every distinct address, in registration order.
func (p *pool) addresses() []string {
	var addrs []string
	seen := map[string]bool{}
	for _, s := range p.all() {
		if !seen[s.addr] {
			seen[s.addr] = true
			addrs = append(addrs, s.addr)
		}
	}
	return addrs
}

// tlsFailure is the reason when every connection's last attempt failed
// for a TLS reason, else "".
func (p *pool) tlsFailure() string {
	first := ""
	for _, s := range p.all() {
		_, _, why := s.state()
		if why == "" {
			return ""
		}
		if first == "" {
			first = s.addr + ": " + why
		}
	}
	return first
}

// noServer is the error for "no usable connection": ErrTLS when every
// connection failed for a TLS reason, else ErrNoServer.
func (p *pool) noServer(op, key string) error {
	if why := p.tlsFailure(); why != "" {
		return &Error{Op: op, Key: key, Reason: why, Err: ErrTLS}
	}
	return &Error{Op: op, Key: key, Err: ErrNoServer}
}

// refusal is a node's refusal of the credentials, if one refused them.
func (p *pool) refusal() error {
	for _, s := range p.all() {
		if _, refusal, _ := s.state(); refusal != nil {
			return refusal
		}
	}
	return nil
}

// settle waits until every connection made its first attempt, at most
// the connect timeout (and a little slack for scheduling).
func (p *pool) settle() {
	until := time.Now().Add(p.cfg.connectTimeout + 200*time.Millisecond)
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	for {
		changed := p.changes()
		done := true
		for _, s := range p.all() {
			if attempted, _, _ := s.state(); !attempted {
				done = false
			}
		}
		if done {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		}
	}
}

func (p *pool) isShut() bool {
	select {
	case <-p.shut:
		return true
	default:
		return false
	}
}

// shutdown ends every connection for good.
func (p *pool) shutdown() {
	p.shutOnce.Do(func() {
		close(p.shut)
		for _, s := range p.all() {
			s.shutdown()
		}
	})
}
