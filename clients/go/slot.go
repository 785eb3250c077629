// A registered connection: one node address and the goroutine that keeps
// a socket to it open, redialling every 3 s after a break, and at once
// (at most once a second) when a redirect names its node.

package baton

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type slot struct {
	addr    string
	pool    *pool
	cur     atomic.Pointer[conn] // the usable connection: up, and its node answered
	dialNow chan struct{}        // buffered 1: a redirect asks for a dial now
	// failedDials counts dials that gave no connection, so a redirect
	// waiting for this node learns at once that it is down.
	failedDials atomic.Uint64

	mu        sync.Mutex
	live      *conn     // the connection being served, usable or not yet
	lastDial  time.Time // when the last dial started
	attempted bool      // the first dial finished, either way
	refusal   error     // the last attempt's node refused the credentials
	tlsFail   string    // the last attempt failed for a TLS reason
}

func newSlot(p *pool, addr string) *slot {
	s := &slot{addr: addr, pool: p, dialNow: make(chan struct{}, 1)}
	go s.supervise()
	return s
}

// up: the connection's node answered its first line; it joins the rotation.
func (s *slot) up(c *conn) {
	s.mu.Lock()
	s.attempted, s.refusal, s.tlsFail = true, nil, ""
	s.mu.Unlock()
	s.cur.Store(c)
	s.pool.publish()
	s.pool.cfg.logger.Debug("baton: connected", "addr", s.addr)
}

// requestDial asks for a dial now if the connection is down.
func (s *slot) requestDial() {
	select {
	case s.dialNow <- struct{}{}:
	default:
	}
}

func (s *slot) state() (attempted bool, refusal error, tlsFail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempted, s.refusal, s.tlsFail
}

// supervise dials, serves, and redials until the client closes.
func (s *slot) supervise() {
	p := s.pool
	for !p.isShut() {
		s.mu.Lock()
		s.lastDial = time.Now()
		s.mu.Unlock()
		select { // this dial answers any request for one made so far
		case <-s.dialNow:
		default:
		}
		c, err := s.connect()
		if err == nil {
			s.serve(c)
		} else {
			s.failed(err)
			s.failedDials.Add(1)
			p.publish()
		}
		s.mu.Lock()
		first := !s.attempted
		s.attempted = true
		s.mu.Unlock()
		if first {
			p.publish()
		}
		if !s.pause() {
			return
		}
	}
}

// serve runs c until it ends, then takes it out of the rotation.
func (s *slot) serve(c *conn) {
	s.mu.Lock()
	s.live = c
	s.mu.Unlock()
	if s.pool.isShut() { // closed while dialling
		c.finish(endShutdown, "")
	}
	kind, why := c.run()
	s.cur.CompareAndSwap(c, nil)
	s.mu.Lock()
	s.live = nil
	switch kind {
	case endTLS:
		s.tlsFail = why
	case endAuthRequired:
		s.refusal = &Error{Op: "auth", Addr: s.addr, Reason: why, Err: ErrAuth}
	}
	s.mu.Unlock()
	s.pool.publish()
	log := s.pool.cfg.logger
	switch kind {
	case endBroken:
		log.Info("baton: connection lost; redialling in the background", "addr", s.addr, "why", why)
	case endUnresponsive:
		log.Warn("baton: the node stopped answering; dropped the connection, redialling in the background", "addr", s.addr)
	case endTLS:
		log.Warn("baton: TLS failure", "addr", s.addr, "why", why)
	case endAuthRequired:
		log.Warn("baton: the node requires credentials and none were given", "addr", s.addr)
	}
}

// shutdown ends the connection being served, if any.
func (s *slot) shutdown() {
	s.mu.Lock()
	c := s.live
	s.mu.Unlock()
	if c != nil {
		c.finish(endShutdown, "")
	}
}

// failed records why a dial did not give a connection.
func (s *slot) failed(err error) {
	var tlsErr *tlsFailure
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refusal, s.tlsFail = nil, ""
	switch {
	case errors.As(err, &tlsErr):
		s.tlsFail = tlsErr.why
		s.pool.cfg.logger.Warn("baton: TLS failure", "addr", s.addr, "why", tlsErr.why)
	case errors.Is(err, ErrAuth):
		s.refusal = err
		s.pool.cfg.logger.Warn("baton: the node did not accept the credentials", "addr", s.addr, "err", err)
	default:
		s.pool.cfg.logger.Debug("baton: dial failed", "addr", s.addr, "err", err)
	}
}

// pause waits before the next dial: redialInterval, or less when a
// redirect asks for a dial (at most one dial per redirectDialGap).
// False once the client is closed.
func (s *slot) pause() bool {
	timer := time.NewTimer(redialInterval)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-s.pool.shut:
		return false
	case <-s.dialNow:
	}
	s.mu.Lock()
	gap := time.Until(s.lastDial.Add(redirectDialGap))
	s.mu.Unlock()
	if gap > 0 {
		wait := time.NewTimer(gap)
		defer wait.Stop()
		select {
		case <-wait.C:
		case <-s.pool.shut:
			return false
		}
	}
	return true
}

// tlsFailure: a dial failed for a TLS reason; a redial will not help.
type tlsFailure struct{ why string }

func (t *tlsFailure) Error() string { return "TLS: " + t.why }

// connect dials the node, shakes hands (TLS) and authenticates (U),
// all within the connect timeout.
func (s *slot) connect() (*conn, error) {
	cfg := s.pool.cfg
	ctx, cancel := context.WithTimeout(context.Background(), cfg.connectTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return nil, err
	}
	if cfg.tls != nil {
		tc := tls.Client(nc, serverConfig(cfg.tls, s.addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, &tlsFailure{why: err.Error()}
		}
		nc = tc
	}
	rd := bufio.NewReaderSize(nc, maxResponseLine)
	if cfg.hasCredentials {
		if err := authenticate(nc, rd, cfg, s.addr); err != nil {
			nc.Close()
			return nil, err
		}
	}
	return newConn(s, nc, rd), nil
}

// serverConfig verifies the node against the host part of its address
// unless the caller named the server.
func serverConfig(base *tls.Config, addr string) *tls.Config {
	cfg := base.Clone()
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	return cfg
}

// authenticate sends U and reads its one answer (nothing else was asked,
// so nothing else comes before it).
func authenticate(nc net.Conn, rd *bufio.Reader, cfg config, addr string) error {
	line, err := encodeAuth(cfg.user, cfg.secret)
	if err != nil {
		return err
	}
	nc.SetDeadline(time.Now().Add(cfg.connectTimeout))
	defer nc.SetDeadline(time.Time{})
	if _, err := nc.Write(line); err != nil {
		return err
	}
	answer, err := rd.ReadSlice('\n')
	if err != nil {
		return err
	}
	r, err := parseResponse([]byte(strings.TrimRight(string(answer), "\r\n")))
	switch {
	case err != nil:
		return err
	case r.kind == 'U' && r.key == cfg.user:
		return nil
	case r.kind == 'E' && strings.HasPrefix(r.reason, tlsRequiredPrefix):
		return &tlsFailure{why: r.reason}
	case r.kind == 'E' && (r.reason == reasonAuthFailed || r.reason == reasonAuthNotEnabled):
		return &Error{Op: "auth", Key: cfg.user, Addr: addr, Reason: r.reason, Err: ErrAuth}
	default:
		return errors.New("unexpected answer to U")
	}
}
