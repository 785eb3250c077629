// Fencing on the protected resource's side: the resource keeps the
// highest token it has seen and refuses lower ones, in the same atomic
// step as the write (docs/fencing.md).

package baton

import (
	"errors"
	"fmt"
	"sync"
)

// ErrStaleToken: a newer holder's token was seen; the caller's lease
// lapsed and someone else holds (or held) the lock since. Stop.
var ErrStaleToken = errors.New("baton: stale fencing token")

// StaleTokenError says which token was refused and the highest seen.
// errors.Is(err, ErrStaleToken) holds for it.
type StaleTokenError struct {
	Key     string // the lock's key, when the fence knows it
	Token   uint64 // the token presented
	Highest uint64 // the newest token seen
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("baton: token %d for %q is older than %d, the newest seen", e.Token, e.Key, e.Highest)
}

func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// Fence keeps the highest token seen for each key and admits an
// operation only with a token at least as high: an in-memory resource's
// side of fencing. The zero value is ready to use.
type Fence struct {
	mu      sync.Mutex
	highest map[string]uint64
}

// Admit records token for key if it is at least the highest seen, else
// returns a *StaleTokenError. The same holder may be admitted again with
// its token.
func (f *Fence) Admit(key string, token uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.admit(key, token)
}

func (f *Fence) admit(key string, token uint64) error {
	if f.highest == nil {
		f.highest = map[string]uint64{}
	}
	if h := f.highest[key]; token < h {
		return &StaleTokenError{Key: key, Token: token, Highest: h}
	}
	f.highest[key] = token
	return nil
}

// Do admits token for key and runs write while holding the fence, so
// that no newer holder's write can come between the check and the
// write. It returns the refusal or write's error.
func (f *Fence) Do(key string, token uint64, write func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.admit(key, token); err != nil {
		return err
	}
	return write()
}

// Highest is the newest token seen for key (0: none).
func (f *Fence) Highest(key string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.highest[key]
}
