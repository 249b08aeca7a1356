package stampede

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseScript deletes a lock only if it still holds the caller's token, so
// a holder whose lock expired and was taken by another never frees the other's
// lock.
var releaseScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0`)

// extendScript resets a lock's expiry only if it still holds the caller's
// token.
var extendScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0`)

// attempt is the answer to one try at the lock.
type attempt struct {
	// held is true when the lock holds our token.
	held bool
	// value is the stored entry, nil if there is none.
	value []byte
}

func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// acquire tries to take the lock of key with token and reads the lock and the
// value in the same round trip:
//
//	SET <lock> <token> PX <LockTTL> NX
//	GET <lock>
//	GET <value>
//
// Reading the lock back makes the answer right even when the client retried a
// SET NX whose first attempt landed but whose reply was lost. On error the lock
// may or may not be held: the caller must treat it as possibly held and free
// it only with release.
func (g *Guard[V]) acquire(ctx context.Context, key, token string) (attempt, error) {
	pipe := g.client.Pipeline()
	set := pipe.Do(ctx, "set", g.lockKey(key), token, "px", g.opts.LockTTL.Milliseconds(), "nx")
	owner := pipe.Get(ctx, g.lockKey(key))
	val := pipe.Get(ctx, g.valueKey(key))
	_, _ = pipe.Exec(ctx)
	for _, err := range []error{set.Err(), owner.Err(), val.Err()} {
		if err != nil && !errors.Is(err, redis.Nil) {
			return attempt{}, err
		}
	}
	a := attempt{held: owner.Val() == token}
	if val.Err() == nil {
		a.value = []byte(val.Val())
	}
	return a, nil
}

// release deletes the lock of key if it holds token. It reports whether it
// did.
func (g *Guard[V]) release(ctx context.Context, key, token string) (bool, error) {
	n, err := releaseScript.Run(ctx, g.client, []string{g.lockKey(key)}, token).Int()
	return n == 1, err
}

// extend resets the lock's expiry to LockTTL if it holds token. It reports
// whether it did.
func (g *Guard[V]) extend(ctx context.Context, key, token string) (bool, error) {
	n, err := extendScript.Run(ctx, g.client, []string{g.lockKey(key)}, token, g.opts.LockTTL.Milliseconds()).Int()
	return n == 1, err
}

// watch extends the lock every LockTTL/3 until stop is closed or the lock is
// found lost. It closes done when it returns.
func (g *Guard[V]) watch(ctx context.Context, key, token string, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(g.opts.LockTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ok, err := g.extend(ctx, key, token)
		switch {
		case err != nil:
			// The lock may still be ours; try again at the next tick.
			g.redisError("extend lock", key, err)
		case !ok:
			g.stats.lockLost.Add(1)
			g.opts.Logger.Warn("stampede: lock lost while computing; another caller may compute too",
				"key", key)
			return
		}
	}
}
