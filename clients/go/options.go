// The client's options: TLS, credentials and the timeouts of the
// behaviour contract.

package baton

import (
	"crypto/tls"
	"io"
	"log/slog"
	"time"
)

// The contract's timings, each with its reason.
const (
	// DefaultConnectTimeout bounds one dial (TCP, TLS, U) and how long
	// Dial waits for every node's first answer.
	DefaultConnectTimeout = 3 * time.Second
	// DefaultRequestTimeout is how long a release, renewal, query or
	// status waits for an answer on one connection, and the grace an
	// acquire gets beyond its wait (the protocol's 3 s answer time and
	// the trip).
	DefaultRequestTimeout = 5 * time.Second
	// DefaultUnresponsiveAfter is the silence after which a connection
	// with requests in flight is given up: an S probe after a quarter of
	// it (1 s), then the protocol's 3 s answer time.
	DefaultUnresponsiveAfter = 4 * time.Second
	// MinUnresponsiveAfter is the floor of WithUnresponsiveAfter: below
	// it a node busy for a moment would be dropped.
	MinUnresponsiveAfter = 100 * time.Millisecond
	// DefaultLease is the lease of an acquire whose options give none.
	DefaultLease = 30 * time.Second

	// redialInterval: a broken connection is redialled this often.
	redialInterval = 3 * time.Second
	// redirectDialGap: a redirect to a node whose connection is down
	// dials it at once, but at most this often.
	redirectDialGap = time.Second
	// releaseWindow and retryInterval: a release is retried this long,
	// this often, across connections, so a connection cut as the lock is
	// released does not leave the key held until its lease ends.
	releaseWindow = 5 * time.Second
	retryInterval = 200 * time.Millisecond
	// noActivePause: how long to wait before asking again after M ... -
	// (no active node known yet, typically during a failover).
	noActivePause = 100 * time.Millisecond
	// freeHops: redirects followed at once; later ones pause first, so
	// two nodes pointing at each other cannot spin the client.
	freeHops = 4
	// hopsPastTheWait: redirects still followed once the wait has run out
	// (with the shortest wait), so the node named still gives the verdict.
	hopsPastTheWait = 4
	// waitTooLong starts a node's E for a wait above its --max-wait.
	waitTooLong = "wait exceeds the maximum"
	// writeBatch: requests written before a flush, so a steady stream of
	// calls cannot delay the first ones indefinitely.
	writeBatch = 256
)

// Option configures a Client; give them to Dial.
type Option func(*config)

type config struct {
	tls               *tls.Config
	user, secret      string
	hasCredentials    bool
	connectTimeout    time.Duration
	requestTimeout    time.Duration
	unresponsiveAfter time.Duration
	logger            *slog.Logger
}

func newConfig(opts []Option) config {
	c := config{
		connectTimeout:    DefaultConnectTimeout,
		requestTimeout:    DefaultRequestTimeout,
		unresponsiveAfter: DefaultUnresponsiveAfter,
		logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, opt := range opts {
		opt(&c)
	}
	c.unresponsiveAfter = max(c.unresponsiveAfter, MinUnresponsiveAfter)
	return c
}

// WithTLS speaks TLS to every node with cfg (its RootCAs trusting the
// nodes' CA, and Certificates when the nodes ask for a client
// certificate). When cfg.ServerName is empty each node is verified
// against the host part of its address, as the protocol says.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) { c.tls = cfg }
}

// WithCredentials authenticates every connection, and every
// reconnection, as user with secret (U <user> <secret>) before using it,
// for nodes run with --auth-file.
func WithCredentials(user, secret string) Option {
	return func(c *config) { c.user, c.secret, c.hasCredentials = user, secret, true }
}

// WithConnectTimeout bounds one connection attempt (default 3 s).
func WithConnectTimeout(d time.Duration) Option {
	return func(c *config) { c.connectTimeout = d }
}

// WithRequestTimeout sets how long a release, renewal, query or status
// waits for one node's answer, and the grace an acquire gets beyond its
// wait (default 5 s).
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) { c.requestTimeout = d }
}

// WithUnresponsiveAfter sets how long a connection with requests in
// flight may hear nothing before it is treated as cut (default 4 s, at
// least 100 ms): after a quarter of it the node is asked its status (S),
// which a live node answers at once; if nothing comes by the end the
// connection is closed and redialled, its acquires go to another
// connection with what is left of their wait, and its releases and
// renewals are retried elsewhere.
func WithUnresponsiveAfter(d time.Duration) Option {
	return func(c *config) { c.unresponsiveAfter = d }
}

// WithLogger logs connection events (lost, frozen, redialled, TLS
// failures) to l; the default logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// AcquireOptions are the terms of one acquire.
type AcquireOptions struct {
	// Wait is how long to wait for the lock. 0 waits as long as the
	// context allows, at most the node's maximum (--max-wait, one day by
	// default); a context deadline shortens any wait.
	Wait time.Duration
	// Lease is how long the grant lasts unless renewed (DefaultLease
	// when 0). Rounded up to the millisecond.
	Lease time.Duration
	// KeepAlive renews the lease in the background every third of it
	// until the lock is released; Lock.Lost is closed if it cannot.
	KeepAlive bool

	// Protocol 1.2 (a 1.1 node refuses these with ErrRejected):

	// Permits makes the key a semaphore of that many permits (1 to
	// 10000; 0 or 1: an ordinary lock). Every acquire of a key held or
	// awaited must name the same number.
	Permits int
	// Shared takes a shared (reader) grant: shared grants coexist, an
	// exclusive one excludes every other.
	Shared bool
	// Value is attached to the grant, for Query, Watch and elections
	// (1 to 128 bytes, no space or control byte, not "-").
	Value string
}
