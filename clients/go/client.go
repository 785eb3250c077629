package baton

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Client is a handle to a Baton node or cluster, safe for concurrent use
// by any number of goroutines. End it with Close, which releases every
// lock still held.
type Client struct {
	cfg  config
	pool *pool

	closing   chan struct{} // closed when Close starts
	closeOnce sync.Once

	locksMu sync.Mutex
	locks   map[*Lock]struct{} // live locks, for Close

	background tracker // releases of grants whose caller gave up

	// waitRefusedMs is the shortest wait a node refused as above its
	// --max-wait (0: none yet). An acquire that asks for the node's
	// maximum under a longer context deadline then asks for the maximum
	// at once: each refusal is an E that the (op, key) matching gives to
	// the oldest pending acquire of the key on its connection.
	waitRefusedMs atomic.Uint64
}

// noteWaitRefused records that a node refused a wait of ms as too long.
func (c *Client) noteWaitRefused(ms uint64) {
	for {
		old := c.waitRefusedMs.Load()
		if (old != 0 && old <= ms) || c.waitRefusedMs.CompareAndSwap(old, ms) {
			return
		}
	}
}

// tracker counts work running in the background, for Close to wait on.
// Unlike a sync.WaitGroup it may gain work while Close waits (a grant
// that comes as the client closes).
type tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n falls to 0
}

func (t *tracker) add() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
}

func (t *tracker) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n--; t.n == 0 {
		close(t.idle)
	}
}

// wait is closed once nothing runs.
func (t *tracker) wait() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		idle := make(chan struct{})
		close(idle)
		return idle
	}
	return t.idle
}

// Dial registers the nodes' client addresses (host:port, as in the
// cluster's peer list; an entry may be a comma-separated list) and waits
// until each connection made its first attempt: a connection is used
// once its node answered. With a single address the client keeps two
// connections to it. It fails with ErrInvalid before dialling when an
// address is not host:port; with ErrNoServer when no node answered
// within the connect timeout; ErrAuth when nodes were reached but none
// took the credentials, or they require credentials and none were given
// (Error.Reason has the node's words); ErrTLS when every node failed for a TLS reason.
// Once dialled, broken connections are redialled in the background every
// 3 s for as long as the client is open.
func Dial(ctx context.Context, servers []string, opts ...Option) (*Client, error) {
	cfg := newConfig(opts)
	addrs, err := serverList(servers)
	if err != nil {
		return nil, err
	}
	if cfg.hasCredentials {
		if err := checkField("user name", cfg.user); err != nil {
			return nil, &Error{Op: "dial", Err: err}
		}
		if err := checkSecret(cfg.secret); err != nil {
			return nil, &Error{Op: "dial", Err: err}
		}
	}
	c := &Client{cfg: cfg, closing: make(chan struct{}), locks: map[*Lock]struct{}{}}
	c.pool = newPool(c, cfg, addrs)
	settled := make(chan struct{})
	go func() { c.pool.settle(); close(settled) }()
	select {
	case <-settled:
	case <-ctx.Done():
		c.pool.shutdown()
		return nil, &Error{Op: "dial", Err: ctx.Err()}
	}
	if c.pool.pickNow() == nil {
		c.pool.shutdown()
		if refusal := c.pool.refusal(); refusal != nil {
			return nil, refusal
		}
		return nil, c.pool.noServer("dial", "")
	}
	return c, nil
}

// serverList splits comma-separated entries and checks each is host:port.
func serverList(given []string) ([]string, error) {
	var addrs []string
	for _, entry := range given {
		for _, addr := range strings.Split(entry, ",") {
			addr = strings.TrimSpace(addr)
			if addr == "" {
				continue
			}
			host, port, err := net.SplitHostPort(addr)
			if n, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || n == 0 {
				return nil, &Error{Op: "dial", Addr: addr, Err: fmt.Errorf("%w: address is not host:port", ErrInvalid)}
			}
			addrs = append(addrs, addr)
		}
	}
	if len(addrs) == 0 {
		return nil, &Error{Op: "dial", Err: fmt.Errorf("%w: no server address given", ErrInvalid)}
	}
	return addrs, nil
}

func (c *Client) isClosing() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// Close releases every lock still held through this client (each
// release retried for at most 5 s, all at once), waits for those answers
// and for the releases of grants that came after their caller gave up,
// then closes the connections. Afterwards, and while it runs, every call
// fails with ErrClosed; an acquire still waiting is given up. ctx bounds
// the wait. The error joins the releases that got no verdict (that lock
// stays held until its lease ends); a lock found already gone is not an
// error here. Calling it again does nothing.
func (c *Client) Close(ctx context.Context) error {
	first := false
	c.closeOnce.Do(func() { first = true; close(c.closing) })
	if !first {
		return nil
	}
	c.locksMu.Lock()
	live := make([]*Lock, 0, len(c.locks))
	for l := range c.locks {
		live = append(live, l)
	}
	c.locksMu.Unlock()
	// The releases may still run when ctx ends first: errs is shared.
	var errsMu sync.Mutex
	var errs []error
	addErr := func(err error) {
		errsMu.Lock()
		defer errsMu.Unlock()
		if err != nil {
			errs = append(errs, err)
		}
	}
	var wg sync.WaitGroup
	for _, l := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addErr(l.end(ctx, ErrClosed))
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); <-c.background.wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		addErr(&Error{Op: "close", Err: ctx.Err()})
	}
	c.pool.shutdown()
	errsMu.Lock()
	defer errsMu.Unlock()
	return errors.Join(errs...)
}

// releaseOrphan gives back a grant whose caller gave up, in the
// background (Close waits for it).
func (c *Client) releaseOrphan(key string, token uint64) {
	c.background.add()
	go func() {
		defer c.background.done()
		err := c.Release(context.Background(), key, token)
		if err != nil && !errors.Is(err, ErrNotHeld) {
			c.cfg.logger.Warn("baton: could not give back a grant nobody waited for", "key", key, "err", err)
		}
	}()
}

func (c *Client) track(l *Lock) {
	c.locksMu.Lock()
	c.locks[l] = struct{}{}
	c.locksMu.Unlock()
}

func (c *Client) forget(l *Lock) {
	c.locksMu.Lock()
	delete(c.locks, l)
	c.locksMu.Unlock()
}

// NodeStatus is one node's answer to S, or why it could not be asked.
type NodeStatus struct {
	Addr   string
	Status Status
	Err    error
}

// Status is a node's S answer. Fields holds every field as sent (a later
// protocol adds some); the others are the ones every node sends.
type Status struct {
	Role    string // single, active, standby, leader, follower, candidate
	Mode    string // single, priority, raft
	Self    string // the node's address
	Active  string // the node that serves now, or "-"
	Token   uint64 // the last token issued or seen
	Locks   uint64
	Waiters uint64
	Version string
	Fields  map[string]string
}

func parseStatus(fields string) Status {
	s := Status{Fields: map[string]string{}}
	for _, f := range strings.Fields(fields) {
		name, value, _ := strings.Cut(f, "=")
		s.Fields[name] = value
	}
	s.Role, s.Mode, s.Self = s.Fields["role"], s.Fields["mode"], s.Fields["self"]
	s.Active, s.Version = s.Fields["active"], s.Fields["version"]
	s.Token, _ = strconv.ParseUint(s.Fields["token"], 10, 64)
	s.Locks, _ = strconv.ParseUint(s.Fields["locks"], 10, 64)
	s.Waiters, _ = strconv.ParseUint(s.Fields["waiters"], 10, 64)
	return s
}

// Status asks every registered node for its status (S), concurrently. A
// node without a usable connection is reported with ErrNoServer.
func (c *Client) Status(ctx context.Context) []NodeStatus {
	addrs := c.pool.addresses()
	out := make([]NodeStatus, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = NodeStatus{Addr: addr}
			out[i].Status, out[i].Err = c.statusOf(ctx, addr)
		}()
	}
	wg.Wait()
	return out
}

func (c *Client) statusOf(ctx context.Context, addr string) (Status, error) {
	if c.isClosing() {
		return Status{}, &Error{Op: "status", Addr: addr, Err: ErrClosed}
	}
	cn := c.pool.usableTo(addr)
	if cn == nil {
		err := c.pool.noServer("status", "")
		err.(*Error).Addr = addr
		return Status{}, err
	}
	r, err := cn.do(newCall(opStatus, "", statusLine), c.cfg.requestTimeout, ctx.Done(), c.closing)
	switch {
	case errors.Is(err, errStopped):
		return Status{}, c.stopped("status", "", ctx)
	case errors.Is(err, errUnanswered):
		return Status{}, &Error{Op: "status", Addr: addr, Err: ErrUnanswered}
	case err != nil:
		return Status{}, &Error{Op: "status", Addr: addr, Err: ErrNoServer}
	case r.kind == 'S':
		return parseStatus(r.fields), nil
	case r.kind == 'E':
		e := rejection("status", "", r.reason).(*Error)
		e.Addr = addr
		return Status{}, e
	}
	return Status{}, &Error{Op: "status", Addr: addr, Err: ErrUnexpected}
}

// stopped is the error of a call cut short by its context or by Close.
func (c *Client) stopped(op, key string, ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return &Error{Op: op, Key: key, Err: err}
	}
	return &Error{Op: op, Key: key, Err: ErrClosed}
}
