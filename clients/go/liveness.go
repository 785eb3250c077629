// Telling a node that stopped answering (a frozen process: SIGSTOP, a
// long pause, a stuck disk) from one that is only slow to grant. A frozen
// node keeps its sockets open: nothing breaks, it never answers. The
// protocol bounds the answer time (every request within 3 s, an acquire
// within its wait plus 3 s), so a connection with requests in flight that
// has heard nothing for a quarter of the allowed silence asks its node
// for its status (S), which a live node answers at once; a connection
// that still hears nothing is given up like a cut one. This is the pure
// part: what the silence calls for.

package baton

import "time"

type verdict int

const (
	waitUntil    verdict = iota // nothing to do before the time given
	probeNow                    // send the S probe, then look again at the time given
	unresponsive                // give the connection up
)

// silence is what a connection owes and when it last heard its node.
type silence struct {
	inFlight int       // requests written and not answered
	since    time.Time // since when nothing was heard while requests were in flight
	probed   bool      // whether this silence's probe went out
}

// sent: a request is about to be written. The first after a quiet spell
// starts the silence: a connection idle for an hour owes nothing.
func (s *silence) sent(now time.Time) {
	if s.inFlight == 0 {
		s.since, s.probed = now, false
	}
	s.inFlight++
}

// heard: a line came from the node (answered: it matched a request).
// Any line shows the node alive.
func (s *silence) heard(now time.Time, answered bool) {
	s.since, s.probed = now, false
	if answered && s.inFlight > 0 {
		s.inFlight--
	}
}

// judge says what to do at now, given the silence allowed.
func (s *silence) judge(now time.Time, allowed time.Duration) (verdict, time.Time) {
	probeAfter := allowed / 4
	if s.inFlight == 0 {
		return waitUntil, now.Add(probeAfter)
	}
	giveUp := s.since.Add(allowed)
	if !now.Before(giveUp) {
		return unresponsive, giveUp
	}
	probeAt := s.since.Add(probeAfter)
	switch {
	case s.probed:
		return waitUntil, giveUp
	case !now.Before(probeAt):
		s.probed = true
		return probeNow, giveUp
	default:
		return waitUntil, probeAt
	}
}
