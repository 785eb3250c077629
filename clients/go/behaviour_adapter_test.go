// The adapter's side of the suite's protocol (tests/client-behaviour/README.md):
// each order of the scripted node becomes a call of the client in its own
// goroutine, under its own context (cancelled for `cancel`), and each
// call's end one report: its outcome, or the error kind docs/clients.md
// maps the client's error to.

package baton_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	baton "example.invalid/baton/clients/go"
)

// adapter plays one scenario: one client, the locks its acquires took.
type adapter struct {
	reportMu sync.Mutex
	reports  io.Writer

	ctx  context.Context // ends with the scenario
	stop context.CancelFunc

	mu        sync.Mutex
	client    *baton.Client
	discarded bool
	locks     map[string]*baton.Lock // by the id of the acquire that took it
	running   map[string]*running
}

// running is an action still under way, for `cancel`.
type running struct {
	cancel    context.CancelFunc
	cancelled atomic.Bool
}

// orderError is an order the adapter cannot carry out (a missing
// argument, a lock never granted): reported as unexpected.
type orderError string

func (e orderError) Error() string { return "adapter: " + string(e) }

func newAdapter(reports io.Writer) *adapter {
	ctx, stop := context.WithCancel(context.Background())
	return &adapter{reports: reports, ctx: ctx, stop: stop,
		locks: map[string]*baton.Lock{}, running: map[string]*running{}}
}

// start carries out `do <id> <order>` in its own goroutine.
func (a *adapter) start(id, order string) {
	ctx, cancel := context.WithCancel(a.ctx)
	run := &running{cancel: cancel}
	a.mu.Lock()
	a.running[id] = run
	a.mu.Unlock()
	action, rest, _ := strings.Cut(order, " ")
	args := parseArgs(rest)
	go func() {
		defer cancel()
		outcome, err := a.perform(ctx, id, action, args)
		a.mu.Lock()
		delete(a.running, id)
		a.mu.Unlock()
		switch {
		case err == nil:
		case run.cancelled.Load() && errors.Is(err, context.Canceled):
			outcome = "cancelled"
		default:
			outcome = errorKind(err, action)
		}
		a.report(id, outcome)
	}()
}

// cancel gives up a running action by cancelling its context; the call
// returns and its goroutine reports it. An action already ended is left.
func (a *adapter) cancel(id string) {
	a.mu.Lock()
	run := a.running[id]
	a.mu.Unlock()
	if run != nil {
		run.cancelled.Store(true)
		run.cancel()
	}
}

// report writes one report in one write; after the verdict the node is
// gone and the write fails, which no longer matters.
func (a *adapter) report(id, outcome string) {
	a.reportMu.Lock()
	defer a.reportMu.Unlock()
	a.reports.Write([]byte("done " + id + " " + outcome + "\n"))
}

// discard drops the client and whatever still runs, without waiting on
// nodes that are gone: Close with a context already done.
func (a *adapter) discard() {
	a.stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.discarded = true
	if a.client != nil {
		go closeNow(a.client)
	}
}

func closeNow(c *baton.Client) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	c.Close(done)
}

func (a *adapter) setClient(c *baton.Client) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.discarded {
		go closeNow(c)
		return
	}
	a.client = c
}

func (a *adapter) perform(ctx context.Context, id, action string, args args) (string, error) {
	if action == "connect" {
		return a.connect(ctx, args)
	}
	a.mu.Lock()
	c := a.client
	a.mu.Unlock()
	if c == nil {
		return "", orderError("no client: " + action + " before connect")
	}
	switch action {
	case "acquire", "try-acquire":
		return a.acquire(ctx, c, id, action, args)
	case "release":
		return a.release(ctx, c, args)
	case "renew":
		return a.renew(ctx, c, args)
	case "keep-alive", "lost":
		return a.watchLock(ctx, action, args)
	case "query":
		return query(ctx, c, args)
	case "status":
		return status(ctx, c), nil
	case "close":
		if err := c.Close(ctx); err != nil {
			return "", err
		}
		return "ok", nil
	}
	return "unsupported " + action, nil
}

func (a *adapter) connect(ctx context.Context, args args) (string, error) {
	servers, err := args.word("servers")
	if err != nil {
		return "", err
	}
	var opts []baton.Option
	if user, ok := args["user"]; ok {
		opts = append(opts, baton.WithCredentials(user, args["secret"]))
	}
	if caFile, ok := args["tls-ca"]; ok {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return "", orderError(err.Error())
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return "", orderError("no certificate in " + caFile)
		}
		opts = append(opts, baton.WithTLS(&tls.Config{RootCAs: roots}))
	}
	if ms, ok := args["unresponsive-after"]; ok {
		n, err := strconv.ParseUint(ms, 10, 32)
		if err != nil {
			return "", orderError("unresponsive-after=" + ms)
		}
		opts = append(opts, baton.WithUnresponsiveAfter(time.Duration(n)*time.Millisecond))
	}
	c, err := baton.Dial(ctx, strings.Split(servers, ","), opts...)
	if err != nil {
		return "", err
	}
	a.setClient(c)
	return "connected", nil
}

func (a *adapter) acquire(ctx context.Context, c *baton.Client, id, action string, args args) (string, error) {
	key, err := args.word("key")
	if err != nil {
		return "", err
	}
	var opts baton.AcquireOptions
	if opts.Lease, err = args.seconds("lease"); err != nil {
		return "", err
	}
	var lock *baton.Lock
	if action == "try-acquire" {
		lock, err = c.TryAcquire(ctx, key, opts)
	} else if opts.Wait, err = args.seconds("wait"); err == nil {
		lock, err = c.Acquire(ctx, key, opts)
	}
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	a.locks[id] = lock
	a.mu.Unlock()
	return fmt.Sprintf("granted %d", lock.Token()), nil
}

// lockOf is the lock an order names with lock=<id of the acquire>, or nil
// when it names key= and token= instead.
func (a *adapter) lockOf(args args) (*baton.Lock, error) {
	id, ok := args["lock"]
	if !ok {
		return nil, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if lock := a.locks[id]; lock != nil {
		return lock, nil
	}
	return nil, orderError("no lock was granted to action " + id)
}

func (a *adapter) release(ctx context.Context, c *baton.Client, args args) (string, error) {
	lock, err := a.lockOf(args)
	switch {
	case err != nil:
	case lock != nil:
		err = lock.Release(ctx)
	default:
		var key string
		var token uint64
		if key, token, err = args.grant(); err == nil {
			err = c.Release(ctx, key, token)
		}
	}
	if err != nil {
		return "", err
	}
	return "ok", nil
}

func (a *adapter) renew(ctx context.Context, c *baton.Client, args args) (string, error) {
	lease, err := args.seconds("lease")
	if err != nil {
		return "", err
	}
	lock, err := a.lockOf(args)
	switch {
	case err != nil:
	case lock != nil:
		err = lock.Renew(ctx, lease)
	default:
		var key string
		var token uint64
		if key, token, err = args.grant(); err == nil {
			err = c.Renew(ctx, key, token, lease)
		}
	}
	if err != nil {
		return "", err
	}
	return "ok", nil
}

// watchLock starts a lock's keep-alive, or waits for its Lost signal.
func (a *adapter) watchLock(ctx context.Context, action string, args args) (string, error) {
	lock, err := a.lockOf(args)
	if err == nil && lock == nil {
		err = orderError(action + " without lock=")
	}
	if err != nil {
		return "", err
	}
	if action == "keep-alive" {
		lock.KeepAlive()
		return "ok", nil
	}
	select {
	case <-lock.Lost():
		return "lost", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func query(ctx context.Context, c *baton.Client, args args) (string, error) {
	key, err := args.word("key")
	if err != nil {
		return "", err
	}
	state, err := c.Query(ctx, key)
	if err != nil {
		return "", err
	}
	if state.Token == 0 {
		return fmt.Sprintf("free waiters=%d", state.Waiters), nil
	}
	return fmt.Sprintf("held token=%d waiters=%d", state.Token, state.Waiters), nil
}

// status is one word per registered node, in the client's order.
func status(ctx context.Context, c *baton.Client) string {
	words := []string{"status"}
	for _, node := range c.Status(ctx) {
		if node.Err != nil {
			words = append(words, errorKind(node.Err, "status"))
		} else {
			words = append(words, "up")
		}
	}
	return strings.Join(words, " ")
}

// errorKinds maps the client's errors to the suite's kinds (the table
// in docs/clients.md, "Errors"); ErrNotHeld and ErrAuth are refined in
// errorKind.
var errorKinds = []struct {
	err  error
	kind string
}{
	{baton.ErrTimedOut, "timed-out"},
	{baton.ErrNoServer, "no-server"},
	{baton.ErrUnanswered, "unanswered"},
	{baton.ErrNotServing, "not-serving"},
	{baton.ErrNotHeld, "not-held"},
	{baton.ErrRejected, "rejected"},
	{baton.ErrPermission, "permission-denied"},
	{baton.ErrTLS, "tls"},
	{baton.ErrInvalid, "invalid"},
	{baton.ErrClosed, "closed"},
	{baton.ErrUnexpected, "unexpected"},
}

// authKinds: ErrAuth says which refusal in the node's words (Error.Reason).
var authKinds = map[string]string{
	"authentication failed":         "auth-failed",
	"authentication is not enabled": "auth-not-enabled",
	"authentication required":       "auth-required",
}

func errorKind(err error, action string) string {
	var order orderError
	if errors.As(err, &order) {
		return "unexpected " + oneLine(err.Error())
	}
	if errors.Is(err, baton.ErrNotHeld) && action == "renew" {
		return "lease-lost" // the renewal found the grant gone: the lock is lost
	}
	var e *baton.Error
	if errors.Is(err, baton.ErrAuth) && errors.As(err, &e) && authKinds[e.Reason] != "" {
		return authKinds[e.Reason]
	}
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return "unexpected " + oneLine(err.Error())
}

// oneLine keeps a report on its line (a joined error spans several).
func oneLine(text string) string { return strings.Join(strings.Fields(text), " ") }

// args are an order's name=value words, each split at its first "=".
type args map[string]string

func parseArgs(text string) args {
	out := args{}
	for _, word := range strings.Fields(text) {
		name, value, _ := strings.Cut(word, "=")
		out[name] = value
	}
	return out
}

func (a args) word(name string) (string, error) {
	value, ok := a[name]
	if !ok {
		return "", orderError("no " + name + "=")
	}
	return value, nil
}

// seconds reads decimal seconds ("5", "0.5", "0.0005") keeping
// sub-millisecond values, for the client rounds them.
func (a args) seconds(name string) (time.Duration, error) {
	value, err := a.word(name)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(value + "s")
	if err != nil {
		return 0, orderError(name + "=" + value)
	}
	return d, nil
}

// grant is the key= and token= of an order that names no lock.
func (a args) grant() (string, uint64, error) {
	key, err := a.word("key")
	if err != nil {
		return "", 0, err
	}
	text, err := a.word("token")
	if err != nil {
		return "", 0, err
	}
	token, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return "", 0, orderError("token=" + text)
	}
	return key, token, nil
}
