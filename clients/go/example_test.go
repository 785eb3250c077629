package baton_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	baton "example.invalid/baton/clients/go"
)

// TestMain starts the batond the examples talk to ($BATOND_BIN, else the
// workspace's target/debug/batond) on a free loopback port.
func TestMain(m *testing.M) {
	bin := os.Getenv("BATOND_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "target", "debug", "batond")
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "RUST_LOG=error")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "cannot start %s (cargo build -p batond, or set BATOND_BIN): %v\n", bin, err)
		os.Exit(1)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	os.Setenv("BATON_EXAMPLE_ADDR", strings.TrimPrefix(strings.TrimSpace(line), "listening "))
	code := m.Run()
	cmd.Process.Kill()
	cmd.Wait()
	os.Exit(code)
}

// nodeAddr is a node's client address, such as "127.0.0.1:7411".
func nodeAddr() string { return os.Getenv("BATON_EXAMPLE_ADDR") }

func Example() {
	ctx := context.Background()
	client, err := baton.Dial(ctx, []string{nodeAddr()})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Releases whatever is still held before the program exits.
	defer client.Close(ctx)

	// Wait up to 5 s for the lock; hold it 30 s, renewed in the
	// background for as long as the work takes.
	lock, err := client.Acquire(ctx, "orders/42", baton.AcquireOptions{
		Wait: 5 * time.Second, Lease: 30 * time.Second, KeepAlive: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	work := func(token uint64) <-chan struct{} {
		done := make(chan struct{})
		// ... write to the protected resource with the token ...
		close(done)
		return done
	}
	select {
	case <-work(lock.Token()):
		fmt.Println("work done with a token above zero:", lock.Token() > 0)
	case <-lock.Lost():
		fmt.Println("lock lost, stop:", lock.Err())
		return
	}
	if err := lock.Release(ctx); err != nil {
		fmt.Println(err)
	}
	// Output: work done with a token above zero: true
}

func ExampleClient_TryAcquire() {
	ctx := context.Background()
	client, err := baton.Dial(ctx, []string{nodeAddr()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close(ctx)
	first, _ := client.TryAcquire(ctx, "jobs/nightly", baton.AcquireOptions{Lease: time.Minute})
	_, err = client.TryAcquire(ctx, "jobs/nightly", baton.AcquireOptions{Lease: time.Minute})
	fmt.Println("held by someone else:", errors.Is(err, baton.ErrTimedOut))
	first.Release(ctx)
	// Output: held by someone else: true
}

func ExampleClient_Query() {
	ctx := context.Background()
	client, err := baton.Dial(ctx, []string{nodeAddr()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close(ctx)
	lock, _ := client.Acquire(ctx, "reports/q3", baton.AcquireOptions{})
	state, _ := client.Query(ctx, "reports/q3")
	fmt.Println("held:", state.Held(), "by this grant:", state.Token == lock.Token(), "waiters:", state.Waiters)
	lock.Release(ctx)
	state, _ = client.Query(ctx, "reports/q3")
	fmt.Println("held:", state.Held())
	// Output:
	// held: true by this grant: true waiters: 0
	// held: false
}

func ExampleDial_errors() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Port 1 on loopback: nothing listens there.
	_, err := baton.Dial(ctx, []string{"127.0.0.1:1"}, baton.WithConnectTimeout(time.Second))
	switch {
	case errors.Is(err, baton.ErrNoServer):
		fmt.Println("no node reachable")
	case errors.Is(err, baton.ErrAuth), errors.Is(err, baton.ErrTLS):
		fmt.Println("fix the configuration:", err)
	}
	// Output: no node reachable
}

func ExampleFence() {
	var fence baton.Fence // the resource's side: one per protected resource
	fmt.Println(fence.Admit("orders/42", 1057))
	fmt.Println(fence.Admit("orders/42", 1060)) // a newer holder
	err := fence.Admit("orders/42", 1057)       // the old holder, back from a pause
	fmt.Println(errors.Is(err, baton.ErrStaleToken))
	// Output:
	// <nil>
	// <nil>
	// true
}

func ExampleFencedUpdate() {
	// db is a *sql.DB (or a *sql.Tx) of any driver, here PostgreSQL with
	// a table accounts(id, balance, fence numeric(20) NOT NULL DEFAULT 0).
	var db baton.DB
	var lock *baton.Lock
	if db == nil || lock == nil {
		return // (a sketch: no database here)
	}
	ctx := context.Background()
	err := baton.FencedUpdate{
		Table:     "accounts",
		Set:       []baton.Column{{Name: "balance", Value: 90}},
		Where:     []baton.Column{{Name: "id", Value: 42}},
		Token:     lock.Token(),
		Dialect:   baton.PostgreSQL,
		WideFence: true,
	}.Exec(ctx, db)
	if errors.Is(err, baton.ErrStaleToken) {
		return // a newer holder wrote: the lease lapsed; roll back and stop
	}
}
