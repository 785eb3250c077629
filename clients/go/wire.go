// The protocol's lines (docs/protocol.md): encoding requests and parsing
// answers, with no I/O. Every request is checked here before it is sent:
// a key or a duration the protocol cannot carry, or a line over the
// node's 1024 bytes, never reaches the socket.

package baton

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

const (
	// maxRequestLine is the node's limit on a request line, LF included;
	// a longer one would be answered E and is refused before sending.
	maxRequestLine = 1024
	// maxResponseLine bounds what the client buffers for one answer
	// line: the node keeps its lines under 4096 bytes.
	maxResponseLine = 8192
	// maxKey is the protocol's limit on a key or user name, in bytes.
	maxKey = 250
	// maxSecret is the protocol's limit on a secret, in bytes.
	maxSecret = 250
)

// Ops, as the first field of a request and as the op an answer is
// matched by.
const (
	opAcquire byte = 'A'
	opRelease byte = 'R'
	opRenew   byte = 'K'
	opStatus  byte = 'S'
	opQuery   byte = 'Q'
	opAuth    byte = 'U'
	opWatch   byte = 'W' // protocol 1.2
	opValue   byte = 'V' // protocol 1.2
)

// checkField applies the key rules (to keys and user names): 1 to 250
// bytes, no space, no control byte, no DEL.
func checkField(what, field string) error {
	if field == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	}
	if len(field) > maxKey {
		return fmt.Errorf("%w: %s of %d bytes, over the protocol's %d", ErrInvalid, what, len(field), maxKey)
	}
	if i := strings.IndexFunc(field, func(r rune) bool { return r == ' ' || r < 0x20 || r == 0x7f }); i >= 0 {
		return fmt.Errorf("%w: %s has a space or a control byte at %d", ErrInvalid, what, i)
	}
	return nil
}

// checkSecret: 1 to 250 bytes, no space, no control byte.
func checkSecret(secret string) error {
	if secret == "" || len(secret) > maxSecret {
		return fmt.Errorf("%w: a secret has 1 to %d bytes", ErrInvalid, maxSecret)
	}
	if strings.ContainsFunc(secret, func(r rune) bool { return r == ' ' || r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%w: a secret has no space or control byte", ErrInvalid)
	}
	return nil
}

// ceilMs is d in milliseconds rounded up, so that a non-zero duration
// never becomes 0 (the node's maximum for a wait, refused for a lease).
func ceilMs(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64((d + time.Millisecond - 1) / time.Millisecond)
}

// appendSeconds writes ms as the protocol's seconds: digits, and at most
// three after a point ("30", "1.5", "0.001").
func appendSeconds(b []byte, ms uint64) []byte {
	b = strconv.AppendUint(b, ms/1000, 10)
	frac := ms % 1000
	if frac == 0 {
		return b
	}
	digits := []byte{'.', byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
	return append(b, bytes.TrimRight(digits, "0")...)
}

// finish ends a request line and refuses one the node would refuse for
// its length.
func finish(line []byte) ([]byte, error) {
	line = append(line, '\n')
	if len(line) > maxRequestLine {
		return nil, fmt.Errorf("%w (%d bytes)", ErrLineTooLong, len(line))
	}
	return line, nil
}

// encodeAcquire writes A; options is "" or protocol 1.2's options, each
// after a space (" permits=3 value=x").
func encodeAcquire(key string, waitMs, leaseMs uint64, options string) ([]byte, error) {
	line := make([]byte, 0, len(key)+32+len(options))
	line = append(append(append(line, "A "...), key...), ' ')
	line = append(appendSeconds(line, waitMs), ' ')
	return finish(append(appendSeconds(line, leaseMs), options...))
}

func encodeRelease(key string, token uint64) ([]byte, error) {
	line := make([]byte, 0, len(key)+24)
	line = append(append(append(line, "R "...), key...), ' ')
	return finish(strconv.AppendUint(line, token, 10))
}

func encodeRenew(key string, token, leaseMs uint64) ([]byte, error) {
	line := make([]byte, 0, len(key)+40)
	line = append(append(append(line, "K "...), key...), ' ')
	line = append(strconv.AppendUint(line, token, 10), ' ')
	return finish(appendSeconds(line, leaseMs))
}

func encodeQuery(key string) ([]byte, error) {
	return finish(append([]byte("Q "), key...))
}

func encodeAuth(user, secret string) ([]byte, error) {
	return finish([]byte("U " + user + " " + secret))
}

var statusLine = []byte("S\n")

// response is one answer line, parsed.
type response struct {
	kind   byte   // the line's first field: A T R K N M E S Q U
	op     byte   // the op it answers, for matching ('?' when unknown)
	key    string // the key it names ("" for S)
	token  uint64 // A
	addr   string // M: the node to resend to, "" for "-"
	reason string // E: the node's words
	fields string // S: the fields; Q: token=.. lease=.. waiters=..
}

var errBadLine = errors.New("baton: a line from the node does not parse")

// parseResponse reads one line without its LF (and CR).
func parseResponse(line []byte) (response, error) {
	text := string(line)
	kind, rest, _ := strings.Cut(text, " ")
	if len(kind) != 1 {
		return response{}, fmt.Errorf("%w: %q", errBadLine, text)
	}
	r := response{kind: kind[0], op: kind[0]}
	var ok bool
	switch r.kind {
	case 'A':
		var token string
		r.key, token, ok = strings.Cut(rest, " ")
		if ok {
			r.token, ok = parseToken(token)
		}
	case 'T':
		r.op, r.key, ok = opAcquire, rest, rest != "" && !strings.Contains(rest, " ")
	case 'R', 'K', 'U', 'V':
		r.key, ok = rest, rest != "" && !strings.Contains(rest, " ")
	case 'N':
		r.op, r.key, ok = opAndKey(rest)
	case 'M':
		ok = parseMoved(&r, rest)
	case 'E':
		ok = parseErrorReply(&r, rest)
	case 'S':
		r.fields, ok = rest, true
	case 'Q', 'W':
		r.key, r.fields, ok = strings.Cut(rest, " ")
	}
	if !ok {
		return response{}, fmt.Errorf("%w: %q", errBadLine, text)
	}
	if r.op == opStatus {
		r.key = "" // S answers carry no key (an E S names ?): matched in order
	}
	return r, nil
}

func parseToken(field string) (uint64, bool) {
	t, err := strconv.ParseUint(field, 10, 64)
	return t, err == nil && t > 0
}

// opAndKey reads "<op> <key>".
func opAndKey(rest string) (byte, string, bool) {
	op, key, ok := strings.Cut(rest, " ")
	return firstByte(op), key, ok && len(op) == 1 && key != "" && !strings.Contains(key, " ")
}

func firstByte(s string) byte {
	if s == "" {
		return '?'
	}
	return s[0]
}

// parseMoved reads "<op> <key> <addr>"; addr "-" means no active node known.
func parseMoved(r *response, rest string) bool {
	head, addr, ok := cutLast(rest)
	if !ok || addr == "" {
		return false
	}
	if r.op, r.key, ok = opAndKey(head); !ok {
		return false
	}
	if addr != "-" {
		r.addr = addr
	}
	return true
}

// parseErrorReply reads "<op> <key> <reason>", reason to the end.
func parseErrorReply(r *response, rest string) bool {
	op, rest, ok1 := strings.Cut(rest, " ")
	key, reason, ok2 := strings.Cut(rest, " ")
	r.op, r.key, r.reason = firstByte(op), key, reason
	return ok1 && ok2 && len(op) == 1
}

func cutLast(s string) (string, string, bool) {
	i := strings.LastIndexByte(s, ' ')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// KeyState is what Query (and Watch) report about one key, as the
// serving node sees it.
type KeyState struct {
	// Token is the live grant's token (the newest holder's, when several
	// hold the key); 0 while the key is free.
	Token uint64
	// LeaseLeft is what is left of that grant's lease (0 while free).
	LeaseLeft time.Duration
	// Waiters is the number of acquires queued on the key.
	Waiters uint64
	// Protocol 1.2, for a key that is not plain (a semaphore, shared
	// holders, or a holder's value); zero values otherwise.
	Permits int      // the key's permits (1 unless a semaphore)
	Mode    string   // "exclusive" or "shared" ("" on a 1.1 node or a plain key)
	Holders []Holder // every holder, oldest first (at most 16 listed)
	// HolderCount is the number of holders (Holders may list fewer).
	HolderCount int
	// Tag names the holders: equal tags, same holders and values ("-":
	// none). Opaque; Watch uses it.
	Tag string
}

// Holder is one grant of a key that several may hold, or a holder with a value.
type Holder struct {
	Token     uint64
	LeaseLeft time.Duration
	Value     string // "" when none
}

// Held reports whether the key had a live grant.
func (s KeyState) Held() bool { return s.Token != 0 }

// parseKeyState reads "token=<t|-> lease=<s|-> waiters=<n>" and, from a
// protocol 1.2 node, the fields after them; it ignores fields it does not
// know (a later protocol adds some).
func parseKeyState(fields string) (KeyState, error) {
	var s KeyState
	seen := 0
	for _, field := range strings.Split(fields, " ") {
		name, value, _ := strings.Cut(field, "=")
		var err error
		switch name {
		case "token":
			if value != "-" {
				if t, ok := parseToken(value); ok {
					s.Token = t
				} else {
					err = errBadLine
				}
			}
		case "lease":
			s.LeaseLeft, err = parseLeaseLeft(value)
		case "waiters":
			s.Waiters, err = strconv.ParseUint(value, 10, 64)
		default:
			if err := s.parseExtension(name, value); err != nil {
				return KeyState{}, fmt.Errorf("%w: field %q", errBadLine, field)
			}
			continue
		}
		if err != nil {
			return KeyState{}, fmt.Errorf("%w: Q field %q", errBadLine, field)
		}
		seen++
	}
	if seen < 3 {
		return KeyState{}, fmt.Errorf("%w: Q answer %q", errBadLine, fields)
	}
	if s.Tag == "" { // a plain key: its tag is its token
		s.Tag = "-"
		if s.Token != 0 {
			s.Tag = strconv.FormatUint(s.Token, 10)
		}
	}
	if s.Permits == 0 {
		s.Permits = 1
	}
	return s, nil
}

func parseLeaseLeft(value string) (time.Duration, error) {
	if value == "-" {
		return 0, nil
	}
	secs, err := strconv.ParseFloat(value, 64)
	return time.Duration(secs * float64(time.Second)), err
}

// parseExtension reads one of protocol 1.2's Q and W fields.
func (s *KeyState) parseExtension(name, value string) error {
	var err error
	switch name {
	case "permits":
		s.Permits, err = strconv.Atoi(value)
	case "mode":
		s.Mode = value
	case "holders":
		s.HolderCount, err = strconv.Atoi(value)
	case "state":
		s.Tag = value
	case "holder":
		// <token>,<lease>,<value|->: the value is last and may hold commas.
		parts := strings.SplitN(value, ",", 3)
		if len(parts) != 3 {
			return errBadLine
		}
		h := Holder{}
		var ok bool
		if h.Token, ok = parseToken(parts[0]); !ok {
			return errBadLine
		}
		if h.LeaseLeft, err = parseLeaseLeft(parts[1]); err != nil {
			return err
		}
		if parts[2] != "-" {
			h.Value = parts[2]
		}
		s.Holders = append(s.Holders, h)
	}
	return err
}
