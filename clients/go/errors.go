// The errors a caller branches on with errors.Is.

package baton

import (
	"errors"
	"fmt"
	"strings"
)

// Errors every call may return, wrapped in an *Error that names the
// request; test them with errors.Is. A call cut short by its context
// returns an error that wraps the context's error instead
// (context.Canceled or context.DeadlineExceeded).
var (
	// ErrTimedOut: the node said the wait ran out (T); nothing was
	// granted. For TryAcquire: the key is held. Only a node's T gives it:
	// a wait that runs out while no node answers is ErrNoServer,
	// ErrNotServing or ErrUnanswered.
	ErrTimedOut = errors.New("baton: the wait ran out")
	// ErrNoServer: no node could be reached on any connection, or every
	// node reached stopped answering (a frozen node is treated as a cut
	// connection).
	ErrNoServer = errors.New("baton: no server reachable")
	// ErrNotServing: the nodes reached answered that none of them serves
	// now (M <op> <key> -: a Raft cluster without a majority, a priority
	// cluster between two active nodes) for as long as the call could
	// wait. Nothing changed; retry later.
	ErrNotServing = errors.New("baton: no node is serving")
	// ErrUnanswered: a node that still answers probes did not answer this
	// request in time.
	ErrUnanswered = errors.New("baton: the node did not answer in time")
	// ErrNotHeld: the node has no live grant of the key with this token
	// (N R, N K): it was released, or its lease ran out. From a renewal it
	// means the lock is lost: stop touching the protected resource.
	ErrNotHeld = errors.New("baton: the lock is not held with this token")
	// ErrRejected: the node answered E (the request is malformed or beyond
	// one of the node's limits); the *Error's Reason has its words.
	ErrRejected = errors.New("baton: rejected by the node")
	// ErrAuth: the node refused the credentials, has no users while
	// credentials were given, or requires credentials none were given for.
	ErrAuth = errors.New("baton: authentication")
	// ErrPermission: the user may not use this key; nothing changed.
	ErrPermission = errors.New("baton: permission denied")
	// ErrClosed: the client was closed; nothing was sent, or a grant that
	// came as it closed was given back. From Lock.Release: Close already
	// released the lock.
	ErrClosed = errors.New("baton: the client is closed")
	// ErrTLS: the TLS side failed: one end speaks TLS and the other does
	// not, or a certificate does not verify. Retrying will not help.
	ErrTLS = errors.New("baton: TLS")
	// ErrInvalid: an argument the protocol cannot carry (a key with a
	// space, a zero lease, a bad address); nothing was sent.
	ErrInvalid = errors.New("baton: invalid argument")
	// ErrLineTooLong: the request line would be over the protocol's 1024
	// bytes; nothing was sent. It is also an ErrInvalid.
	ErrLineTooLong = fmt.Errorf("%w: request line over %d bytes", ErrInvalid, maxRequestLine)
	// ErrUnexpected: the node's answer does not fit the request (a
	// field missing or out of range); nothing can be concluded from it.
	ErrUnexpected = errors.New("baton: an answer that does not fit the request")
	// ErrLeaseExpired: the lease came to its end without a renewal the
	// client could confirm (Lock.Err after Lost is closed).
	ErrLeaseExpired = errors.New("baton: the lease ran out before it was renewed")
	// ErrReleased: the program released the lock (Lock.Err after Release).
	ErrReleased = errors.New("baton: the lock was released")
)

// Error is what a call returns: the request, the node when one is
// concerned, and the cause (one of the Err values above, or a
// context's error), which errors.Is and errors.As see through Unwrap.
type Error struct {
	Op     string // "acquire", "release", "renew", "query", "status", "dial", "auth"
	Key    string // the key, when the request names one
	Addr   string // the node, when one is concerned
	Reason string // the node's own words, for E answers and TLS failures
	Err    error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("baton: ")
	b.WriteString(e.Op)
	if e.Key != "" {
		fmt.Fprintf(&b, " %q", e.Key)
	}
	if e.Addr != "" {
		b.WriteString(" at " + e.Addr)
	}
	b.WriteString(": ")
	b.WriteString(strings.TrimPrefix(e.Err.Error(), "baton: "))
	if e.Reason != "" {
		b.WriteString(": " + e.Reason)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// The node's words for the refusals that have their own error.
const (
	reasonAuthFailed       = "authentication failed"
	reasonAuthNotEnabled   = "authentication is not enabled"
	reasonAuthRequired     = "authentication required"
	reasonPermissionDenied = "permission denied"
	tlsRequiredPrefix      = "TLS required"
)

// rejection is the error for an E answer.
func rejection(op, key, reason string) error {
	cause := ErrRejected
	switch reason {
	case reasonPermissionDenied:
		cause = ErrPermission
	case reasonAuthRequired, reasonAuthFailed, reasonAuthNotEnabled:
		cause = ErrAuth
	}
	return &Error{Op: op, Key: key, Reason: reason, Err: cause}
}
