// The kit for tests against real batond processes: single nodes,
// priority and Raft clusters on free loopback ports, as the Rust tests'
// kit (tests/src) starts them. batond is $BATOND_BIN, else the
// workspace's target/debug/batond (cargo build -p batond).

package baton

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const startTimeout = 20 * time.Second

func batondBin(t *testing.T) string {
	t.Helper()
	path := os.Getenv("BATOND_BIN")
	if path == "" {
		path = filepath.Join("..", "..", "target", "debug", "batond")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("batond not found at %s: build it first (cargo build -p batond) or set BATOND_BIN", path)
	}
	abs, _ := filepath.Abs(path)
	return abs
}

// node is one batond process.
type node struct {
	t    *testing.T
	bin  string
	addr string
	args []string
	dir  string
	cmd  *exec.Cmd
	log  *os.File
}

// startNode starts batond with args on a free port (or the --listen
// address given as listen), waiting for its "listening" line.
func startNode(t *testing.T, listen string, args ...string) *node {
	t.Helper()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	n := &node{t: t, bin: batondBin(t), addr: listen, args: args, dir: t.TempDir()}
	n.launch()
	t.Cleanup(n.kill)
	return n
}

func (n *node) launch() {
	n.t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		err := n.launchOnce(deadline)
		if err == nil {
			return
		}
		// A fixed port may still be held by the last process's socket.
		if strings.HasSuffix(n.addr, ":0") || time.Now().After(deadline) {
			n.t.Fatalf("batond %s did not start: %v\n%s", n.addr, err, n.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *node) launchOnce(deadline time.Time) error {
	log, err := os.OpenFile(filepath.Join(n.dir, "batond.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(n.bin, append([]string{"--listen", n.addr}, n.args...)...)
	cmd.Stderr = log
	cmd.Env = append(os.Environ(), "RUST_LOG=warn")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	lines := make(chan string, 1)
	go func() {
		rd := bufio.NewReader(out)
		line, _ := rd.ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = rd.WriteTo(discard{})
	}()
	select {
	case line := <-lines:
		addr, ok := strings.CutPrefix(line, "listening ")
		if !ok {
			cmd.Process.Kill()
			cmd.Wait()
			return fmt.Errorf("first stdout line %q", line)
		}
		n.addr, n.cmd, n.log = addr, cmd, log
		return nil
	case <-time.After(time.Until(deadline)):
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("no listening line within %v", startTimeout)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func (n *node) logTail() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "batond.log"))
	lines := strings.Split(string(b), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

func (n *node) running() bool { return n.cmd != nil && n.cmd.ProcessState == nil }

// kill is kill -9.
func (n *node) kill() {
	if n.running() {
		n.cmd.Process.Signal(syscall.SIGCONT)
		n.cmd.Process.Kill()
		n.cmd.Wait()
		n.log.Close()
	}
}

// stop is a graceful stop (SIGTERM), waited for.
func (n *node) stop() {
	n.t.Helper()
	if !n.running() {
		return
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { n.cmd.Wait(); close(done) }()
	select {
	case <-done:
		n.log.Close()
	case <-time.After(15 * time.Second):
		n.t.Fatalf("batond %s did not stop on SIGTERM", n.addr)
	}
}

// pause is SIGSTOP, waited for: the signal is delivered asynchronously,
// and a node still running would answer the next request.
func (n *node) pause() {
	n.t.Helper()
	n.cmd.Process.Signal(syscall.SIGSTOP)
	eventually(n.t, 5*time.Second, "every thread of batond stopped", func() bool { return n.threadsAre('T') })
}

// resume is SIGCONT, waited for.
func (n *node) resume() {
	n.t.Helper()
	n.cmd.Process.Signal(syscall.SIGCONT)
	eventually(n.t, 5*time.Second, "batond running again", func() bool { return !n.threadsAre('T') })
}

// threadsAre reports whether every thread of the node is in state
// (from /proc/<pid>/task/*/stat).
func (n *node) threadsAre(state byte) bool {
	dir := fmt.Sprintf("/proc/%d/task", n.cmd.Process.Pid)
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		// The state follows the command name in parentheses, which may
		// itself hold spaces or parentheses.
		i := strings.LastIndex(string(stat), ") ")
		if err != nil || i < 0 || i+2 >= len(stat) || stat[i+2] != state {
			return false
		}
	}
	return true
}

// restart starts the node again on the same address.
func (n *node) restart() {
	n.t.Helper()
	n.kill()
	n.launch()
}

// freeAddrs are n distinct loopback addresses whose ports were free.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var ls []net.Listener
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return addrs
}

// startCluster starts one batond per address, mode priority or raft,
// with a shared cluster key (and a data directory each for raft).
func startCluster(t *testing.T, mode string, size int, extra ...string) []*node {
	t.Helper()
	peers := freeAddrs(t, size)
	keyFile := filepath.Join(t.TempDir(), "cluster.key")
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var nodes []*node
	for _, addr := range peers {
		args := []string{"--mode", mode, "--peers", strings.Join(peers, ","), "--cluster-key-file", keyFile}
		if mode == "raft" {
			args = append(args, "--data-dir", t.TempDir())
		}
		nodes = append(nodes, startNode(t, addr, append(args, extra...)...))
	}
	return nodes
}

func addrsOf(nodes []*node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.addr)
	}
	return out
}

// eventually polls cond every 50 ms until it holds, failing after within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serving waits until one of the nodes reports itself active or leader;
// its index.
func serving(t *testing.T, nodes []*node, within time.Duration) int {
	t.Helper()
	found := -1
	eventually(t, within, "a node serves", func() bool {
		for i, n := range nodes {
			if !n.running() {
				continue
			}
			if role := roleOf(n.addr); role == "active" || role == "leader" {
				found = i
				return true
			}
		}
		return false
	})
	return found
}

// roleOf asks one node its role over a bare socket ("" if it does not answer).
func roleOf(addr string) string {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(time.Second))
	nc.Write([]byte("S\n"))
	line, err := bufio.NewReader(nc).ReadString('\n')
	if err != nil {
		return ""
	}
	return parseStatus(strings.TrimPrefix(strings.TrimSpace(line), "S ")).Role
}

func dialTest(t *testing.T, addrs []string, opts ...Option) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, addrs, opts...)
	if err != nil {
		t.Fatalf("dial %v: %v", addrs, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func bg(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
