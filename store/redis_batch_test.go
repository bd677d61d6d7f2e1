package store

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// passHooks is a go-redis hook that changes nothing; the test hooks
// below embed it and wrap pipelines alone.
type passHooks struct{}

func (passHooks) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (passHooks) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// pipelineCounter counts the pipelines a client sends, and their
// commands: a hook on the real client.
type pipelineCounter struct {
	passHooks
	pipelines, cmds atomic.Int64
}

func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.pipelines.Add(1)
		p.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Concurrent callers share batches, each caller gets its own replies, and
// a lone caller sends at once.
func TestBatcherSharesBatches(t *testing.T) {
	c := redistest.Start(t).Client()
	var pc pipelineCounter
	c.AddHook(&pc)
	b := NewBatcher(c)
	ctx := context.Background()
	// The pipelines' connection and its own set-up.
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	pc.pipelines.Store(0)
	pc.cmds.Store(0)

	// Alone: one pipeline of its own two commands.
	set, get := redis.NewCmd(ctx, "set", "alone", "v"), redis.NewStringCmd(ctx, "get", "alone")
	if err := b.Do(ctx, onceCmd{set}, get); err != nil || set.Err() != nil || get.Val() != "v" {
		t.Fatalf("alone: %v %v %q", err, set.Err(), get.Val())
	}
	if n := pc.pipelines.Load(); n != 1 {
		t.Fatalf("alone: %d pipelines, want 1", n)
	}

	const callers, each = 64, 50
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range each {
				k := "k:" + strconv.Itoa(g)
				incr := redis.NewIntCmd(ctx, "incr", k)
				echo := redis.NewStringCmd(ctx, "echo", k+":"+strconv.Itoa(i))
				if err := b.Do(ctx, incr, echo); err != nil {
					t.Error(err)
					return
				}
				if incr.Val() != int64(i+1) || echo.Val() != k+":"+strconv.Itoa(i) {
					t.Errorf("%s: got %d %q, want %d and its own echo", k, incr.Val(), echo.Val(), i+1)
					return
				}
			}
		})
	}
	wg.Wait()
	p, n := pc.pipelines.Load()-1, pc.cmds.Load()-2
	if n != callers*each*2 {
		t.Fatalf("%d commands sent, want %d", n, callers*each*2)
	}
	if p >= callers*each {
		t.Fatalf("%d pipelines for %d calls: none shared", p, callers*each)
	}
	t.Logf("%d calls in %d pipelines (%.1f a pipeline)", callers*each, p, float64(callers*each)/float64(p))
}

// A caller that gives up while queued returns with its context's error at
// once, its commands are never sent, and the queue behind it still goes
// out when the batch on the wire comes back: giving up never stalls the
// others, and the next batch is led by a caller still waiting.
//
// Both kinds of context: a timer's, and CallContext's, which has no Done
// (the Batcher's own timer wakes its caller); beside the latter waits a
// caller whose deadline is far, which the timer must not end.
func TestBatcherCallerGivingUpWhileQueued(t *testing.T) {
	c := redistest.Start(t).Client()
	for _, kind := range bothContexts {
		t.Run(kind.name, func(t *testing.T) { testGivingUpWhileQueued(t, c, kind.ctx) })
	}
}

// bothContexts are the two kinds of context a caller of a Batcher may
// bring: one with a timer, and CallContext's for Redis.
var bothContexts = []struct {
	name string
	ctx  func(time.Duration) (context.Context, context.CancelFunc)
}{
	{"timer", func(d time.Duration) (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), d)
	}},
	{"deadline only", func(d time.Duration) (context.Context, context.CancelFunc) {
		return deadlineContext{time.Now().Add(d)}, func() {}
	}},
}

func testGivingUpWhileQueued(t *testing.T, c *redis.Client, within func(time.Duration) (context.Context, context.CancelFunc)) {
	b := NewBatcher(c)
	ctx := context.Background()
	if err := c.Del(ctx, "batch:abandoned", "batch:patient", "batch:far").Err(); err != nil {
		t.Fatal(err)
	}

	// The batch on the wire: a BLPOP that blocks Redis's answer for 400ms.
	onWire := make(chan error, 1)
	go func() {
		blpop := redis.NewCmd(ctx, "blpop", "batch:nothing", "0.4")
		onWire <- b.Do(ctx, blpop)
	}()
	waitBusy(t, b)

	// Queued behind it: one whose deadline is far, callers that give up
	// after 30ms, then one that waits.
	far := make(chan error, 1)
	farIncr := redis.NewIntCmd(ctx, "incr", "batch:far")
	go func() {
		fctx, cancel := within(5 * time.Second)
		defer cancel()
		far <- b.Do(fctx, farIncr)
	}()
	var gaveUp sync.WaitGroup
	for range 5 {
		gaveUp.Go(func() {
			short, cancel := within(30 * time.Millisecond)
			defer cancel()
			start := time.Now()
			err := b.Do(short, redis.NewIntCmd(ctx, "incr", "batch:abandoned"))
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 300*time.Millisecond {
				t.Errorf("gave up: %v after %v, want its deadline's error at ~30ms", err, time.Since(start))
			}
		})
	}
	gaveUp.Wait()
	patient := redis.NewIntCmd(ctx, "incr", "batch:patient")
	if err := b.Do(ctx, patient); err != nil || patient.Val() != 1 {
		t.Fatalf("patient caller: %v %d", err, patient.Val())
	}
	if err := <-onWire; err != nil {
		t.Fatal(err)
	}
	if err := <-far; err != nil || farIncr.Val() != 1 {
		t.Fatalf("the caller with a far deadline: %v %d, want its reply", err, farIncr.Val())
	}
	if n, err := c.Get(ctx, "batch:abandoned").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("abandoned commands ran: batch:abandoned = %q %v", n, err)
	}
	// The wire is free again: a lone caller leads at once.
	if b.busyNow() {
		t.Fatal("the wire is still held")
	}
}

// Under callers that give up at random moments, with Redis paused and
// resumed meanwhile, every caller returns (no lost wake-up, no wire left
// held), and each INCR that reported success ran.
func TestBatcherGivingUpUnderPauses(t *testing.T) {
	rs := redistest.Start(t)
	c := rs.Client()
	for _, kind := range bothContexts {
		t.Run(kind.name, func(t *testing.T) { testGivingUpUnderPauses(t, rs, c, kind.ctx) })
	}
}

func testGivingUpUnderPauses(t *testing.T, rs *redistest.Server, c *redis.Client, within func(time.Duration) (context.Context, context.CancelFunc)) {
	b := NewBatcher(c)
	ctx := context.Background()
	if err := c.Del(ctx, "batch:count").Err(); err != nil {
		t.Fatal(err)
	}
	var ok, tries atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d := time.Duration(1+(g*7+i)%20) * time.Millisecond
				cctx, cancel := within(d)
				incr := redis.NewIntCmd(ctx, "incr", "batch:count")
				tries.Add(1)
				if err := b.Do(cctx, incr); err == nil && incr.Err() == nil {
					ok.Add(1)
				}
				cancel()
			}
		})
	}
	for range 4 {
		time.Sleep(100 * time.Millisecond)
		rs.Pause()
		time.Sleep(50 * time.Millisecond)
		rs.Resume()
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("callers still blocked 10s after the last resume")
	}
	// Commands abandoned after their batch went out may have run: the
	// count lies between the successes and the tries.
	n, err := c.Get(ctx, "batch:count").Int64()
	if err != nil || n < ok.Load() || n > tries.Load() || ok.Load() == 0 {
		t.Fatalf("count %d (%v): %d reported done, %d tried", n, err, ok.Load(), tries.Load())
	}
	if b.busyNow() {
		t.Fatal("the wire is still held")
	}
	t.Logf("%d tries, %d done, %d ran", tries.Load(), ok.Load(), n)
}

func (b *Batcher) busyNow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.busy
}

func waitBusy(t *testing.T, b *Batcher) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !b.busyNow(); {
		if time.Now().After(deadline) {
			t.Fatal("no batch went out")
		}
		time.Sleep(time.Millisecond)
	}
}

// On Cluster a master that stops answering holds up only the commands for
// its own slots: claims of keys on the other masters go on at once while
// the paused master's time out.
func TestBatchesPerClusterMaster(t *testing.T) {
	testenv.Slow(t, "starts a Redis Cluster and pauses a master")
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client()
	s := NewRedis(cc, RedisOptions{})
	defer s.Close()
	ctx := context.Background()
	paused := cl.Servers[0]
	// Keys by where they live, and every master's batch warmed up.
	var on, off []string
	for i := 0; len(on) < 8 || len(off) < 8; i++ {
		key := "percluster:" + strconv.Itoa(i)
		node, err := cc.MasterForKey(ctx, s.hashKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if node.Options().Addr == paused.Addr() {
			on = append(on, key)
		} else {
			off = append(off, key)
		}
		if r, err := s.Claim(ctx, key+":warm", "fp", time.Minute); err != nil || r.Outcome != Won {
			t.Fatalf("warm-up claim: %+v %v", r, err)
		}
	}
	paused.Pause()
	resume := paused.Resumer()
	defer resume()

	var wg sync.WaitGroup
	for _, key := range on[:8] {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := s.Claim(cctx, key, "fp", time.Minute); err == nil {
				t.Errorf("%s: claimed on a paused master", key)
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // the paused master's batch is on the wire
	for _, key := range off[:8] {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			start := time.Now()
			r, err := s.Claim(cctx, key, "fp", time.Minute)
			if err != nil || r.Outcome != Won || time.Since(start) > 500*time.Millisecond {
				t.Errorf("%s, on a master that answers: %+v %v after %v", key, r, err, time.Since(start))
			}
		})
	}
	wg.Wait()
}

// panicHook panics in the pipeline that carries ECHO boom, before it is
// sent: a client that fails in the middle of a batch.
type panicHook struct{ passHooks }

func (panicHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if a := c.Args(); len(a) == 2 && a[0] == "echo" && a[1] == "boom" {
				panic("boom")
			}
		}
		return next(ctx, cmds)
	}
}

// A leader whose client panics while sending still hands the wire on and
// wakes its batch's other callers, each command failed, never read as an
// answer: the INCRs queued with it did not run and report an error.
func TestBatcherLeaderPanics(t *testing.T) {
	c := redistest.Start(t).Client()
	c.AddHook(panicHook{})
	b := NewBatcher(c)
	ctx := context.Background()

	onWire := make(chan error, 1)
	go func() { onWire <- b.Do(ctx, redis.NewCmd(ctx, "blpop", "batch:nothing", "0.3")) }()
	waitBusy(t, b)
	// Queued in order: the caller that will lead the next batch and
	// panic, then two whose commands ride in it.
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_ = b.Do(ctx, redis.NewStringCmd(ctx, "echo", "boom"))
	}()
	waitQueued(t, b, 1)
	incrs := []*redis.IntCmd{redis.NewIntCmd(ctx, "incr", "batch:after"), redis.NewIntCmd(ctx, "incr", "batch:after")}
	var wg sync.WaitGroup
	for i, incr := range incrs {
		wg.Go(func() {
			if err := b.Do(ctx, incr); err != nil {
				t.Error(err)
			}
		})
		waitQueued(t, b, 2+i)
	}
	if err := <-onWire; err != nil {
		t.Fatal(err)
	}
	if p := <-panicked; p != "boom" {
		t.Fatalf("the leader's panic: %v", p)
	}
	wg.Wait()
	for _, incr := range incrs {
		if !errors.Is(incr.Err(), errBatchPanicked) {
			t.Fatalf("a command of the batch that panicked: %d %v, want errBatchPanicked", incr.Val(), incr.Err())
		}
	}
	if n, err := c.Get(ctx, "batch:after").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("batch:after = %q %v: the panicked batch ran", n, err)
	}
	// The wire is free again.
	incr := redis.NewIntCmd(ctx, "incr", "batch:after")
	if err := b.Do(ctx, incr); err != nil || incr.Val() != 1 || b.busyNow() {
		t.Fatalf("after the panic: %d %v, busy %v", incr.Val(), err, b.busyNow())
	}
}

func waitQueued(t *testing.T, b *Batcher, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		b.mu.Lock()
		q := len(b.queue)
		b.mu.Unlock()
		if q >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBatchContext(t *testing.T) {
	bg := context.Background()
	soon, c1 := context.WithTimeout(bg, time.Second)
	defer c1()
	late, c2 := context.WithTimeout(bg, time.Minute)
	defer c2()
	call := func(ctx context.Context) *batchCall { return &batchCall{ctx: ctx} }
	for _, c := range []struct {
		name  string
		batch []*batchCall
		want  context.Context
	}{
		{"the latest deadline", []*batchCall{call(soon), call(late), call(soon)}, late},
		{"the latest deadline, first", []*batchCall{call(late), call(soon)}, late},
		{"a caller without one", []*batchCall{call(soon), call(bg), call(late)}, bg},
		{"the leader without one", []*batchCall{call(bg), call(late)}, bg},
	} {
		if got := batchContext(c.batch); got != c.want {
			t.Errorf("%s: got another context", c.name)
		}
	}
}
