package stampede

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"

	"github.com/redis/go-redis/v9"

	"github.com/jobfence/jobfence/internal/redistest"
)

// TestColdKeyComputedOnce starts 1,000 goroutines on a cold key, spread over
// guards with their own Redis clients (as separate instances would be), and
// checks that one of them computed the value and all got it.
func TestColdKeyComputedOnce(t *testing.T) {
	for _, instances := range []int{1, 8} {
		t.Run(fmt.Sprintf("%d instances", instances), func(t *testing.T) {
			_, prefix := redistest.Client(t)
			guards := make([]*Guard[string], instances)
			for i := range guards {
				c, _ := redistest.Client(t)
				guards[i] = newGuard[string](t, c, prefix, Options{WaitTimeout: time.Minute})
			}
			var computed atomic.Int64
			compute := func(context.Context) (string, error) {
				n := computed.Add(1)
				time.Sleep(50 * time.Millisecond) // an expensive computation
				return fmt.Sprintf("value #%d", n), nil
			}

			const callers = 1000
			start := make(chan struct{})
			results := make([]string, callers)
			errs := make([]error, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() {
					<-start
					results[i], errs[i] = guards[i%instances].Get(t.Context(), "report", time.Minute, compute)
				})
			}
			close(start)
			wg.Wait()

			for i := range callers {
				if errs[i] != nil || results[i] != "value #1" {
					t.Fatalf("caller %d got %q, %v; want %q", i, results[i], errs[i], "value #1")
				}
			}
			var total Stats
			for _, g := range guards {
				s := g.Stats()
				total.Calls += s.Calls
				total.Computations += s.Computations
				total.FailOpens += s.FailOpens
			}
			if computed.Load() != 1 || total.Computations != 1 {
				t.Fatalf("computed %d times (Stats.Computations %d); want 1", computed.Load(), total.Computations)
			}
			if total.Calls != callers || total.FailOpens != 0 {
				t.Fatalf("stats = %+v; want %d calls and no fail-opens", total, callers)
			}
		})
	}
}

func TestHitDoesNotCompute(t *testing.T) {
	client, prefix := redistest.Client(t)
	g := newGuard[[]int](t, client, prefix, Options{Beta: -1})
	calls := 0
	compute := func(context.Context) ([]int, error) { calls++; return []int{1, 2, calls}, nil }
	for range 3 {
		v, err := g.Get(t.Context(), "k", time.Minute, compute)
		if err != nil || fmt.Sprint(v) != "[1 2 1]" {
			t.Fatalf("Get = %v, %v; want [1 2 1]", v, err)
		}
	}
	s := g.Stats()
	if calls != 1 || s.Misses != 1 || s.Hits != 2 || s.Computations != 1 {
		t.Fatalf("calls %d, stats %+v; want 1 computation, 1 miss, 2 hits", calls, s)
	}
	ttl, err := client.PTTL(t.Context(), prefix+"stampede:val:k").Result()
	if err != nil || ttl <= 0 || ttl > time.Minute {
		t.Fatalf("value TTL = %v, %v; want within (0, 1m]", ttl, err)
	}
	if n, _ := client.Exists(t.Context(), prefix+"stampede:lock:k").Result(); n != 0 {
		t.Fatal("lock left behind after the computation")
	}
}

func TestComputeErrorIsReturnedAndNotStored(t *testing.T) {
	client, prefix := redistest.Client(t)
	g := newGuard[string](t, client, prefix, Options{})
	boom := errors.New("upstream unavailable")
	_, err := g.Get(t.Context(), "k", time.Minute, func(context.Context) (string, error) { return "", boom })
	if err != boom {
		t.Fatalf("Get error = %v; want the compute's error as is", err)
	}
	if n, _ := client.Exists(t.Context(), prefix+"stampede:val:k", prefix+"stampede:lock:k").Result(); n != 0 {
		t.Fatalf("%d keys left after a failed computation; want none", n)
	}
	v, err := g.Get(t.Context(), "k", time.Minute, func(context.Context) (string, error) { return "ok", nil })
	if err != nil || v != "ok" {
		t.Fatalf("Get after failure = %q, %v", v, err)
	}
}

func TestComputePanicIsAnError(t *testing.T) {
	client, prefix := redistest.Client(t)
	g := newGuard[string](t, client, prefix, Options{})
	_, err := g.Get(t.Context(), "k", time.Minute, func(context.Context) (string, error) { panic("bad math") })
	if !errors.Is(err, ErrComputePanicked) || !strings.HasPrefix(err.Error(), `stampede: compute panicked: key "k": bad math`) {
		t.Fatalf("Get error = %v; want ErrComputePanicked with the panic value", err)
	}
	if n, _ := client.Exists(t.Context(), prefix+"stampede:lock:k").Result(); n != 0 {
		t.Fatal("lock left behind after a panic")
	}
}

func TestCodecErrorIsReturned(t *testing.T) {
	client, prefix := redistest.Client(t)
	g := newGuard[func()](t, client, prefix, Options{})
	_, err := g.Get(t.Context(), "k", time.Minute, func(context.Context) (func(), error) { return func() {}, nil })
	want := `stampede: codec: encode value of key "k": json: unsupported type: func()`
	if !errors.Is(err, ErrCodec) || err.Error() != want {
		t.Fatalf("Get error = %v; want %q", err, want)
	}
}

func TestUndecodableEntryIsRecomputed(t *testing.T) {
	client, prefix := redistest.Client(t)
	var logs logbuf.Buffer
	g := newGuard[int](t, client, prefix, Options{Logger: textLogger(&logs)})
	for _, garbage := range []string{"not an entry", string(entry{expiry: time.Now().Add(time.Hour), payload: []byte(`"a string"`)}.encode())} {
		if err := client.Set(t.Context(), prefix+"stampede:val:k", garbage, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		v, err := g.Get(t.Context(), "k", time.Minute, func(context.Context) (int, error) { return 42, nil })
		if err != nil || v != 42 {
			t.Fatalf("Get = %v, %v; want 42", v, err)
		}
		v, err = g.Get(t.Context(), "k", time.Minute, func(context.Context) (int, error) { return 0, errors.New("recomputed again") })
		if err != nil || v != 42 {
			t.Fatalf("Get after repair = %v, %v; want the stored 42", v, err)
		}
	}
	if s := g.Stats(); s.DecodeErrors < 2 || s.Computations != 2 {
		t.Fatalf("stats %+v; want >= 2 decode errors and 2 computations", s)
	}
	if !strings.Contains(logs.String(), "cannot decode stored value") {
		t.Fatalf("log lacks the decode error:\n%s", logs.String())
	}
}

// TestWaiterTakesOverFailedHolder: a caller waiting on another's lock takes
// the lock itself when the holder gives up without a value.
func TestWaiterTakesOverFailedHolder(t *testing.T) {
	c1, prefix := redistest.Client(t)
	c2, _ := redistest.Client(t)
	a := newGuard[string](t, c1, prefix, Options{})
	b := newGuard[string](t, c2, prefix, Options{WaitTimeout: time.Minute, PollInterval: 10 * time.Millisecond})

	entered, fail := make(chan struct{}), make(chan struct{})
	aErr := make(chan error, 1)
	go func() {
		_, err := a.Get(context.Background(), "k", time.Minute, func(context.Context) (string, error) {
			close(entered)
			<-fail
			return "", errors.New("holder failed")
		})
		aErr <- err
	}()
	<-entered
	bDone := make(chan string, 1)
	go func() {
		v, err := b.Get(context.Background(), "k", time.Minute, func(context.Context) (string, error) { return "from b", nil })
		if err != nil {
			t.Errorf("b.Get: %v", err)
		}
		bDone <- v
	}()
	until(t, "b waits", func() bool { return b.Stats().Waits == 1 })
	close(fail)
	if err := <-aErr; err == nil || err.Error() != "holder failed" {
		t.Fatalf("a.Get error = %v", err)
	}
	if v := <-bDone; v != "from b" {
		t.Fatalf("b.Get = %q", v)
	}
	if s := b.Stats(); s.Computations != 1 || s.FailOpens != 0 {
		t.Fatalf("b stats %+v; want 1 computation under the lock, no fail-open", s)
	}
}

// TestFailOpenAfterWaitTimeout: a lock held by someone who never stores a
// value delays callers by WaitTimeout, then they compute themselves, and the
// other's lock is left alone.
func TestFailOpenAfterWaitTimeout(t *testing.T) {
	client, prefix := redistest.Client(t)
	var logs logbuf.Buffer
	g := newGuard[string](t, client, prefix, Options{WaitTimeout: 200 * time.Millisecond, PollInterval: 20 * time.Millisecond, Logger: textLogger(&logs)})
	lock := prefix + "stampede:lock:k"
	if err := client.Set(t.Context(), lock, "someone else", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	v, err := g.Get(t.Context(), "k", time.Minute, func(context.Context) (string, error) { return "computed anyway", nil })
	if err != nil || v != "computed anyway" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if s := g.Stats(); s.Waits != 1 || s.FailOpens != 1 || s.Computations != 1 {
		t.Fatalf("stats %+v; want 1 wait, 1 fail-open, 1 computation", s)
	}
	if owner, _ := client.Get(t.Context(), lock).Result(); owner != "someone else" {
		t.Fatalf("other's lock = %q after fail-open; want it untouched", owner)
	}
	if !strings.Contains(logs.String(), "gave up waiting") {
		t.Fatalf("fail-open not logged:\n%s", logs.String())
	}
	// The value computed without the lock is stored for others.
	v, err = g.Get(t.Context(), "k", time.Minute, func(context.Context) (string, error) { return "", errors.New("not expected") })
	if err != nil || v != "computed anyway" {
		t.Fatalf("second Get = %q, %v", v, err)
	}
}

// TestReleaseAfterExpiryKeepsNewHolder: a holder whose lock expired while it
// computed and was then taken by another does not free the other's lock.
func TestReleaseAfterExpiryKeepsNewHolder(t *testing.T) {
	client, prefix := redistest.Client(t)
	first := newGuard[string](t, client, prefix, Options{LockTTL: 100 * time.Millisecond})
	second := newGuard[string](t, client, prefix, Options{LockTTL: time.Hour})
	lock := prefix + "stampede:lock:k"

	a, err := first.acquire(t.Context(), "k", "first")
	if err != nil || !a.held {
		t.Fatalf("first acquire = %+v, %v", a, err)
	}
	if a2, err := second.acquire(t.Context(), "k", "second"); err != nil || a2.held {
		t.Fatalf("second acquire while held = %+v, %v; want not held", a2, err)
	}
	until(t, "the first lock expires", func() bool { return client.Exists(t.Context(), lock).Val() == 0 })
	if a2, err := second.acquire(t.Context(), "k", "second"); err != nil || !a2.held {
		t.Fatalf("second acquire after expiry = %+v, %v; want held", a2, err)
	}
	if ok, err := first.extend(t.Context(), "k", "first"); err != nil || ok {
		t.Fatalf("first extend = %v, %v; want false", ok, err)
	}
	if ok, err := first.release(t.Context(), "k", "first"); err != nil || ok {
		t.Fatalf("first release = %v, %v; want false", ok, err)
	}
	if owner, _ := client.Get(t.Context(), lock).Result(); owner != "second" {
		t.Fatalf("lock owner = %q after the first holder's release; want %q", owner, "second")
	}
	if ttl := client.PTTL(t.Context(), lock).Val(); ttl < 30*time.Minute {
		t.Fatalf("second's lock TTL = %v; the first holder must not have touched it", ttl)
	}
	if ok, err := second.release(t.Context(), "k", "second"); err != nil || !ok {
		t.Fatalf("second release = %v, %v; want true", ok, err)
	}
}

// TestLockLostWhileComputing runs the same story through Get: the first
// holder's lock expires mid-computation (forced with DEL), a second guard
// takes it and computes, the first one's watchdog counts the loss, and the
// first one's release leaves the second's lock in place.
func TestLockLostWhileComputing(t *testing.T) {
	c1, prefix := redistest.Client(t)
	c2, _ := redistest.Client(t)
	var logs logbuf.Buffer
	first := newGuard[string](t, c1, prefix, Options{LockTTL: 300 * time.Millisecond, Logger: textLogger(&logs)})
	second := newGuard[string](t, c2, prefix, Options{LockTTL: time.Hour})
	lock := prefix + "stampede:lock:k"

	firstIn, firstGo := make(chan struct{}), make(chan struct{})
	firstOut := make(chan string, 1)
	go func() {
		v, _ := first.Get(context.Background(), "k", time.Minute, func(context.Context) (string, error) {
			close(firstIn)
			<-firstGo
			return "first", nil
		})
		firstOut <- v
	}()
	<-firstIn
	firstToken := c1.Get(t.Context(), lock).Val()
	c1.Del(t.Context(), lock) // expire it now

	secondIn, secondGo := make(chan struct{}), make(chan struct{})
	secondOut := make(chan string, 1)
	go func() {
		v, _ := second.Get(context.Background(), "k", time.Minute, func(context.Context) (string, error) {
			close(secondIn)
			<-secondGo
			return "second", nil
		})
		secondOut <- v
	}()
	<-secondIn
	secondToken := c1.Get(t.Context(), lock).Val()
	if secondToken == "" || secondToken == firstToken {
		t.Fatalf("second holder's token %q (first %q)", secondToken, firstToken)
	}
	until(t, "the first watchdog sees the loss", func() bool { return first.Stats().LockLost == 1 })

	close(firstGo)
	if v := <-firstOut; v != "first" {
		t.Fatalf("first Get = %q", v)
	}
	if owner := c1.Get(t.Context(), lock).Val(); owner != secondToken {
		t.Fatalf("lock = %q after the first holder finished; want the second's %q", owner, secondToken)
	}
	close(secondGo)
	if v := <-secondOut; v != "second" {
		t.Fatalf("second Get = %q", v)
	}
	if n := c1.Exists(t.Context(), lock).Val(); n != 0 {
		t.Fatal("second holder did not release its lock")
	}
	if !strings.Contains(logs.String(), "lock lost") {
		t.Fatalf("lock loss not logged:\n%s", logs.String())
	}
}

// TestWatchdogKeepsLongComputationLocked: a computation five times longer
// than LockTTL keeps its lock, so a second instance waits instead of
// computing.
func TestWatchdogKeepsLongComputationLocked(t *testing.T) {
	c1, prefix := redistest.Client(t)
	c2, _ := redistest.Client(t)
	const lockTTL = time.Second
	holder := newGuard[string](t, c1, prefix, Options{LockTTL: lockTTL})
	waiter := newGuard[string](t, c2, prefix, Options{WaitTimeout: time.Minute})
	lock := prefix + "stampede:lock:k"

	in := make(chan struct{})
	var finished atomic.Bool
	holderOut := make(chan string, 1)
	go func() {
		v, _ := holder.Get(context.Background(), "k", time.Minute, func(context.Context) (string, error) {
			close(in)
			time.Sleep(5 * lockTTL)
			finished.Store(true)
			return "slow value", nil
		})
		holderOut <- v
	}()
	<-in
	token := c1.Get(t.Context(), lock).Val()
	waiterOut := make(chan string, 1)
	go func() {
		v, _ := waiter.Get(context.Background(), "k", time.Minute, func(context.Context) (string, error) {
			return "duplicate", nil
		})
		waiterOut <- v
	}()

	// Until the holder is done, its lock must stay in place.
	var v string
	for done := false; !done; {
		select {
		case v = <-holderOut:
			done = true
		case <-time.After(50 * time.Millisecond):
			// Read finished first: the lock is released only after it is set.
			if f := finished.Load(); !f && c1.Get(t.Context(), lock).Val() != token {
				owner := c1.Get(t.Context(), lock).Val()
				t.Fatalf("lock = %q during the computation; want the holder's %q", owner, token)
			}
		}
	}
	if v != "slow value" {
		t.Fatalf("holder Get = %q", v)
	}
	if w := <-waiterOut; w != "slow value" {
		t.Fatalf("waiter Get = %q; want the holder's value", w)
	}
	if s := holder.Stats(); s.LockLost != 0 || s.Computations != 1 {
		t.Fatalf("holder stats %+v", s)
	}
	if s := waiter.Stats(); s.Computations != 0 || s.Waits != 1 || s.FailOpens != 0 {
		t.Fatalf("waiter stats %+v; want a wait and no computation", s)
	}
}

// TestRedisStopped: values keep coming when Redis goes away, even in the
// middle of a computation that holds the lock.
func TestRedisStopped(t *testing.T) {
	r := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	t.Cleanup(func() { client.Close() })
	var logs logbuf.Buffer
	g := newGuard[string](t, client, "", Options{LockTTL: 300 * time.Millisecond, Logger: textLogger(&logs)})

	in, proceed := make(chan struct{}), make(chan struct{})
	out := make(chan string, 1)
	go func() {
		v, err := g.Get(context.Background(), "mid", time.Minute, func(context.Context) (string, error) {
			close(in)
			<-proceed
			return "computed while redis died", nil
		})
		if err != nil {
			t.Errorf("Get mid-computation: %v", err)
		}
		out <- v
	}()
	<-in
	r.Stop()
	close(proceed)
	if v := <-out; v != "computed while redis died" {
		t.Fatalf("Get = %q", v)
	}

	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			key := fmt.Sprintf("down-%d", i%10)
			v, err := g.Get(context.Background(), key, time.Minute, func(context.Context) (string, error) { return "direct " + key, nil })
			if err != nil || v != "direct "+key {
				t.Errorf("Get(%s) with redis down = %q, %v", key, v, err)
			}
		})
	}
	wg.Wait()
	if s := g.Stats(); s.RedisErrors < 10 || s.Computations < 11 {
		t.Fatalf("stats %+v; want redis errors counted and direct computations", s)
	}
	if !strings.Contains(logs.String(), "redis error") {
		t.Fatalf("redis errors not logged:\n%s", logs.String())
	}
}

// TestCallerCancelDoesNotFailOthers: a caller that gives up returns its
// context's error; callers sharing its computation still get the value.
func TestCallerCancelDoesNotFailOthers(t *testing.T) {
	client, prefix := redistest.Client(t)
	g := newGuard[string](t, client, prefix, Options{})
	in, proceed := make(chan struct{}), make(chan struct{})
	compute := func(ctx context.Context) (string, error) {
		close(in)
		<-proceed
		return "v", ctx.Err() // fails if the cancelled caller's ctx reached it
	}
	ctx, cancel := context.WithCancel(t.Context())
	firstErr := make(chan error, 1)
	go func() {
		_, err := g.Get(ctx, "k", time.Minute, compute)
		firstErr <- err
	}()
	<-in
	other := make(chan string, 1)
	go func() {
		v, _ := g.Get(t.Context(), "k", time.Minute, compute)
		other <- v
	}()
	until(t, "the second caller joins", func() bool { return g.Stats().Calls == 2 })
	cancel()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller error = %v", err)
	}
	close(proceed)
	if v := <-other; v != "v" {
		t.Fatalf("other caller got %q", v)
	}
	if s := g.Stats(); s.Computations != 1 {
		t.Fatalf("stats %+v; want 1 computation", s)
	}
}

// TestValueExpires: a value lives for its ttl, then the next Get computes it
// again.
func TestValueExpires(t *testing.T) {
	client, prefix := redistest.Client(t)
	g := newGuard[int](t, client, prefix, Options{Beta: -1})
	n := 0
	compute := func(context.Context) (int, error) { n++; return n, nil }
	if v, err := g.Get(t.Context(), "k", 50*time.Millisecond, compute); err != nil || v != 1 {
		t.Fatalf("Get = %d, %v", v, err)
	}
	until(t, "the value expires", func() bool { return client.Exists(t.Context(), g.valueKey("k")).Val() == 0 })
	if v, err := g.Get(t.Context(), "k", time.Minute, compute); err != nil || v != 2 {
		t.Fatalf("Get after expiry = %d, %v; want a recomputed 2", v, err)
	}
}
