// A fake node on 127.0.0.1 for the cases a real node cannot produce:
// answers out of order, redirects to strangers, silence, refusals. Each
// test gives it a handler that sees every request line and answers (or
// not) as the case needs.

package baton

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeNode struct {
	t      *testing.T
	ln     net.Listener
	addr   string
	handle func(fc *fakeConn, line string)

	mu      sync.Mutex
	conns   []*fakeConn
	lines   []string // every request line, in arrival order
	accepts []time.Time
}

// fakeConn is one client connection to the fake node.
type fakeConn struct {
	node *fakeNode
	nc   net.Conn
	id   int
	mu   sync.Mutex
	// authed: a U came first, for handlers that require it.
	authed bool
}

func (fc *fakeConn) send(lines ...string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.nc.Write([]byte(strings.Join(lines, "\n") + "\n"))
}

func (fc *fakeConn) close() { fc.nc.Close() }

// newFakeNode listens on a free loopback port; handle answers each line
// (nil: the default, which answers S and nothing else).
func newFakeNode(t *testing.T, handle func(fc *fakeConn, line string)) *fakeNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if handle == nil {
		handle = answerStatus
	}
	f := &fakeNode{t: t, ln: ln, addr: ln.Addr().String(), handle: handle}
	go f.accept()
	t.Cleanup(f.shutdown)
	return f
}

func (f *fakeNode) accept() {
	for {
		nc, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		fc := &fakeConn{node: f, nc: nc, id: len(f.conns)}
		f.conns = append(f.conns, fc)
		f.accepts = append(f.accepts, time.Now())
		f.mu.Unlock()
		go f.serve(fc)
	}
}

func (f *fakeNode) serve(fc *fakeConn) {
	rd := bufio.NewReader(fc.nc)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSuffix(line, "\n")
		f.mu.Lock()
		f.lines = append(f.lines, line)
		handle := f.handle
		f.mu.Unlock()
		handle(fc, line)
	}
}

func (f *fakeNode) setHandler(h func(fc *fakeConn, line string)) {
	f.mu.Lock()
	f.handle = h
	f.mu.Unlock()
}

func (f *fakeNode) shutdown() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fc := range f.conns {
		fc.nc.Close()
	}
}

// closeAll cuts every connection (the listener stays).
func (f *fakeNode) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fc := range f.conns {
		fc.nc.Close()
	}
}

func (f *fakeNode) connCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

func (f *fakeNode) acceptTimes() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.accepts...)
}

// received lists the request lines that start with prefix.
func (f *fakeNode) received(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, l := range f.lines {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// answerStatus answers S like a single node and ignores the rest.
func answerStatus(fc *fakeConn, line string) {
	if line == "S" {
		fc.send("S role=single mode=single self=" + fc.node.addr + " active=" + fc.node.addr + " token=1 locks=0 waiters=0 version=0.0.0")
	}
}

// opNode answers S like a single node and every other request with the
// handler of its op, given the request's fields (no handler: no answer).
func opNode(t *testing.T, ops map[string]func(fc *fakeConn, fields []string)) *fakeNode {
	return newFakeNode(t, func(fc *fakeConn, line string) {
		fields := strings.Fields(line)
		if answer, ok := ops[fields[0]]; ok {
			answer(fc, fields)
		} else {
			answerStatus(fc, line)
		}
	})
}

// echo answers a request with its op and key (R, K, V succeed).
func echo(fc *fakeConn, fields []string) { fc.send(fields[0] + " " + fields[1]) }

// grantWith answers every A with token.
func grantWith(token string) func(fc *fakeConn, fields []string) {
	return func(fc *fakeConn, fields []string) { fc.send("A " + fields[1] + " " + token) }
}

// grantingNode answers S, grants every A with the next token, and
// answers R, K and Q as a node whose keys are all held by their grant.
func grantingNode(t *testing.T) *fakeNode {
	var mu sync.Mutex
	token := uint64(1000)
	return newFakeNode(t, func(fc *fakeConn, line string) {
		f := strings.Fields(line)
		switch f[0] {
		case "A":
			mu.Lock()
			token++
			tk := token
			mu.Unlock()
			fc.send("A " + f[1] + " " + itoa(tk))
		case "R", "K":
			fc.send(f[0] + " " + f[1])
		case "Q":
			fc.send("Q " + f[1] + " token=- lease=- waiters=0")
		default:
			answerStatus(fc, line)
		}
	})
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
