// The Go adapter of the client-behaviour suite (tests/client-behaviour):
// every scenario there is played by the scripted node, which orders the
// client calls, checks every line the client sends and every outcome
// reported, and gives the verdict. The adapter knows nothing of the
// scenarios and drives the client through its public API only, as a
// program would. `go test -run TestClientBehaviour/<scenario>` plays one.

package baton_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	scenarioDir = "../../tests/client-behaviour"
	// scenariosAtOnce keeps the run short; the scenarios' bounds are
	// generous enough for three at once on two loaded cores.
	scenariosAtOnce = 3
	// scenarioBound: a node that gives no verdict by then is killed, so a
	// stuck scenario fails instead of eating the whole test timeout.
	scenarioBound = 3 * time.Minute
	// maxOrderLine bounds one order from the node (its keys are at most a
	// few kilobytes, as the lines a client may send).
	maxOrderLine = 1 << 20
)

// scriptNodeBin is $SCRIPT_NODE_BIN, else the workspace's
// target/debug/script-node; without it the suite fails rather than skips.
func scriptNodeBin(t *testing.T) string {
	t.Helper()
	path := os.Getenv("SCRIPT_NODE_BIN")
	if path == "" {
		path = filepath.Join("..", "..", "target", "debug", "script-node")
	}
	abs, err := filepath.Abs(path)
	if err == nil {
		_, err = os.Stat(abs)
	}
	if err != nil {
		t.Fatalf("script-node not found at %s: build it (cargo build --bin script-node) or set SCRIPT_NODE_BIN", path)
	}
	return abs
}

// TestClientBehaviour plays every scenario, a few at once, one subtest each.
func TestClientBehaviour(t *testing.T) {
	bin := scriptNodeBin(t)
	files, err := filepath.Glob(filepath.Join(scenarioDir, "*.scn"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario in %s (%v)", scenarioDir, err)
	}
	queue := make(chan string)
	var players sync.WaitGroup
	for range scenariosAtOnce {
		players.Add(1)
		go func() {
			defer players.Done()
			for file := range queue {
				name := strings.TrimSuffix(filepath.Base(file), ".scn")
				t.Run(name, func(t *testing.T) { playScenario(t, bin, file) })
			}
		}()
	}
	for _, file := range files {
		queue <- file
	}
	close(queue)
	players.Wait()
}

// playScenario runs the node on file, obeys its orders and judges its verdict.
func playScenario(t *testing.T, bin, file string) {
	node := exec.Command(bin, file)
	var transcript bytes.Buffer
	node.Stderr = &transcript // copied to the end by exec, read after Wait
	orders, err := node.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	reports, err := node.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start(); err != nil {
		t.Fatalf("cannot start %s: %v", bin, err)
	}
	bound := time.AfterFunc(scenarioBound, func() { node.Process.Kill() })
	defer bound.Stop()

	a := newAdapter(reports)
	verdict := a.obey(orders)
	a.discard()
	reports.Close()
	io.Copy(io.Discard, orders)
	waitErr := node.Wait()

	var exit *exec.ExitError
	code := 0
	if errors.As(waitErr, &exit) {
		code = exit.ExitCode()
	} else if waitErr != nil {
		t.Fatalf("script-node: %v\n%s", waitErr, transcript.String())
	}
	switch {
	case verdict == "verdict pass" && code == 0:
	case strings.HasPrefix(verdict, "verdict skip"):
		// The Go client has every action of the protocol: no skip is expected.
		t.Fatalf("%s (exit %d)\n%s", verdict, code, transcript.String())
	case verdict == "":
		t.Fatalf("the node's orders ended without a verdict (exit %d)\n%s", code, transcript.String())
	default:
		t.Fatalf("%s (exit %d)\n%s", verdict, code, transcript.String())
	}
}

// obey reads the node's orders until its verdict, which it returns ("" if
// the orders end without one).
func (a *adapter) obey(orders io.Reader) string {
	lines := bufio.NewScanner(orders)
	lines.Buffer(make([]byte, 0, 4096), maxOrderLine)
	for lines.Scan() {
		line := lines.Text()
		verb, rest, _ := strings.Cut(line, " ")
		switch verb {
		case "verdict":
			return line
		case "do":
			id, order, _ := strings.Cut(rest, " ")
			a.start(id, order)
		case "cancel":
			a.cancel(rest)
		default:
			return "adapter: an order it does not know: " + line
		}
	}
	return ""
}
