// Package baton is the Go client of Baton, a distributed lock service
// with fencing tokens.
//
// A Client keeps one persistent connection per node address (two when
// given a single address) and sends requests round-robin over the usable
// ones, pipelined: any number of requests may be in flight on one
// connection, each answer matched to the oldest pending request of the
// same (op, key), except that at most one acquire and one watch of a key
// are in flight on a connection (a further one waits in the client, first
// come first served, with what is left of its wait). A broken connection leaves the rotation at once and is
// redialled in the background every 3 s; a dial counts once the node
// answered. An acquire whose connection breaks is sent again on the next
// usable connection with what is left of its wait; a release is retried
// every 200 ms for 5 s; redirects (M) are followed, to nodes the client
// was not given too. A node that stops answering (SIGSTOP, a long pause)
// is found out: a connection with requests in flight that heard nothing
// for 1 s is probed with S, and given up like a cut one when the probe
// goes unanswered for the protocol's 3 s (WithUnresponsiveAfter). An
// acquire the program gave up on (its context ended, Close) whose grant
// comes later is released at once.
//
// Every grant carries a token above every earlier one: hand it to the
// protected resource, which refuses lower ones (Fence, FencedUpdate).
// The protocol is docs/protocol.md in the repository.
package baton
