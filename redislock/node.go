package redislock

import (
	"context"
	"embed"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua
var lua embed.FS

// script is lua/name.lua, after the prelude its name's scripts share.
func script(name string) *redis.Script {
	prelude, err := lua.ReadFile("lua/prelude.lua")
	if err != nil {
		panic(err)
	}
	body, err := lua.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return redis.NewScript(string(prelude) + string(body))
}

var (
	acquireScript = script("acquire")
	extendScript  = script("extend")
	releaseScript = script("release")
	leaveScript   = script("leave")
	waitingScript = script("waiting")
)

// keys names a lock's keys. They share the hash tag {prefix:name}, so that Redis Cluster keeps
// them on one node: whatever braces the name holds, every key of the name starts with the same
// bytes, so the tag each key yields is the same.
// (The prefix holds no ':', so no other prefix and name make the same keys.)
type keys struct{ lock, info, token, queue, alive string }

func keysOf(prefix, name string) keys {
	tag := "{" + prefix + ":" + name + "}:"
	return keys{lock: tag + "lock", info: tag + "info", token: tag + "token", queue: tag + "queue", alive: tag + "alive"}
}

// releasedBy is the mark holder's release leaves, under the name's tag.
func (k keys) releasedBy(holder string) string { return k.lock + ":released:" + holder }

// minReleaseMark is the least a release's mark lasts, for the same release sent again (go-redis
// retries a command whose answer was lost, after its timeouts) to find; it lasts the TTL when
// that is longer.
const minReleaseMark = 10 * time.Second

// node is one Redis server (or cluster) and the scripts run on it.
type node struct {
	client  redis.UniversalClient
	cfg     *config
	channel string // where releases wake waiters
}

// attempt is the answer to one attempt to take a lock.
type attempt struct {
	held    bool
	token   int64
	retryIn time.Duration // until the holder's lease ends, when held by another; 0 if unknown
}

// attempt tries once to take name for holder; a waiter ("" for a try) keeps its place in the
// queue; fair lets only the first waiter take it.
func (n *node) attempt(ctx context.Context, name, holder, waiter string, fair, fenced bool) (attempt, error) {
	k := keysOf(n.cfg.prefix, name)
	reply, err := acquireScript.Run(ctx, n.client, []string{k.lock, k.info, k.token, k.queue, k.alive},
		holder, n.cfg.timing.TTL.Milliseconds(), waiter, n.cfg.place.Milliseconds(), flag(fair), flag(fenced),
		n.cfg.instance, n.cfg.metadata).Int64Slice()
	if err != nil {
		return attempt{}, errorf("acquire %q: %w", name, err)
	}
	if len(reply) != 2 {
		return attempt{}, errorf("acquire %q: unexpected answer %v", name, reply)
	}
	if reply[0] == 1 {
		return attempt{held: true, token: reply[1]}, nil
	}
	return attempt{retryIn: max(0, time.Duration(reply[1])*time.Millisecond)}, nil
}

// extend renews holder's lock on name for ttl: 1 renewed, 0 gone, -1 another's.
func (n *node) extend(ctx context.Context, name, holder string, ttl time.Duration) (int64, error) {
	k := keysOf(n.cfg.prefix, name)
	state, err := extendScript.Run(ctx, n.client, []string{k.lock, k.info}, holder, ttl.Milliseconds()).Int64()
	if err != nil {
		return 0, errorf("renew %q: %w", name, err)
	}
	return state, nil
}

// retake sets holder's lock on name again where it is gone, as on a node restarted empty.
func (n *node) retake(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	taken, err := n.client.SetNX(ctx, keysOf(n.cfg.prefix, name).lock, holder, ttl).Result()
	if err != nil {
		return false, errorf("renew %q: %w", name, err)
	}
	return taken, nil
}

// release frees name if holder holds it (any holder, for ""), and wakes its first waiter. A
// holder's release leaves a mark, unless it gives back what a failed attempt took (giveBack).
func (n *node) release(ctx context.Context, name, holder string, giveBack bool) (bool, error) {
	k := keysOf(n.cfg.prefix, name)
	mark := max(minReleaseMark, n.cfg.timing.TTL)
	if giveBack || holder == "" {
		mark = 0
	}
	released, err := releaseScript.Run(ctx, n.client, []string{k.lock, k.info, k.queue, k.alive, k.releasedBy(holder)},
		holder, n.channel, mark.Milliseconds()).Int64()
	if err != nil {
		return false, errorf("release %q: %w", name, err)
	}
	return released == 1, nil
}

// leave takes a waiter that gave up out of name's queue.
func (n *node) leave(ctx context.Context, name, waiter string) error {
	k := keysOf(n.cfg.prefix, name)
	return leaveScript.Run(ctx, n.client, []string{k.lock, k.queue, k.alive}, waiter, n.channel).Err()
}

// waiting counts the waiters that keep their place in name's queue.
func (n *node) waiting(ctx context.Context, name string) (int, error) {
	k := keysOf(n.cfg.prefix, name)
	count, err := waitingScript.Run(ctx, n.client, []string{k.queue, k.alive}).Int()
	if err != nil {
		return 0, errorf("waiting for %q: %w", name, err)
	}
	return count, nil
}

// listen delivers the waiters a release on this node wakes (their ids) to wake, until ctx
// ends. go-redis's PubSub reconnects and subscribes again after a failure; a message sent
// meanwhile is lost, which the waiters' polls make up for.
func (n *node) listen(ctx context.Context, wake func(waiter string)) {
	sub := n.client.Subscribe(ctx, n.channel)
	defer sub.Close()
	messages := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-messages:
			if !ok {
				return
			}
			wake(m.Payload)
		}
	}
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
