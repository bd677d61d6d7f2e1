package caddymodule

import (
	"sync"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The decision line is written after the answer, not before it: record
// runs in ServeHTTP's defer, and the answer leaves when ServeHTTP returns,
// so a line encoded and written there (a JSON encode and a write(2) on
// Caddy's log, which is unbuffered) held every answer back. The route's
// decision logger hands its entries to a goroutine that writes them
// through Caddy's own core, in order, as soon as it gets them: the level,
// the logger's name, Caddy's filters, encoder and writer apply as before.
//
// What it may lose: the lines of decisions made in the instant before the
// process died (a line handed over but not yet written). Never a journal
// entry, a claim or an answer: those are the store's, written before the
// answer is sent. A full queue writes the line on the request path rather
// than drop it (the decision line is the audit trail), and Cleanup writes
// what is left: a graceful stop or a reload loses no line.
//
// Cleanup is the hook that can, as Caddy (v2.11: caddy.go, context.go,
// logging.go) runs a config's end. Its log writers are not closed when
// the config is unloaded or stopped: Logging.openLogs registers closeLogs
// with OnCancel on its own copy of the config's Context, and the config's
// cancel runs the OnCancel functions of the context it was made from, not
// those; a module's OnCancel at Provision is dropped the same way, so
// OnCancel is no hook here. The writers stay open (pooled, shared with
// the next config naming them) until the process exits. At a graceful
// stop (exitProcess → Stop → unsyncedStop) every app's Stop runs first,
// the HTTP app's waiting for the requests in flight, then the config's
// cancel calls each module's Cleanup, and only then does the process
// exit: Cleanup's close writes the queue while the log still writes, and
// the stop waits for it. At a reload the old config's servers are told to
// shut down, not waited for, and its Cleanup runs: a request still
// finishing on the old routes then writes its own line (the queue is
// closed). An app's Stop would be too early: the apps stop in map order,
// and the HTTP servers may still answer after it. Should a Caddy upgrade
// close the writers before Cleanup, TestDecisionLinesAtStopAndReload fails.

// lineQueueSize bounds the lines waiting: ~0.5 s of a busy gateway's
// decisions; past it the request writes its own line.
const lineQueueSize = 4096

// lineQueue is one route's writer of decision lines. Requests append to
// lines; the writer takes them all at once and writes them in order, so a
// busy gateway wakes it once per batch, not once per line.
type lineQueue struct {
	mu     sync.Mutex
	lines  []queuedLine
	spare  []queuedLine // the writer's: the batch before, emptied
	closed bool
	wake   chan struct{} // 1: lines are waiting, or close
	start  sync.Once
	done   chan struct{}
}

type queuedLine struct {
	core   zapcore.Core
	entry  zapcore.Entry
	fields []zapcore.Field
}

func newLineQueue() *lineQueue {
	return &lineQueue{wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// logger is base whose entries q writes.
func (q *lineQueue) logger(base *zap.Logger) *zap.Logger {
	return base.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return &queuedCore{Core: c, q: q} }))
}

// put hands a line to the writer, or writes it now when the queue is full
// or closed. The writer starts with the first line (Provision starts
// nothing: `caddy validate` provisions too).
func (q *lineQueue) put(l queuedLine) {
	q.start.Do(func() { go q.write() })
	q.mu.Lock()
	if q.closed || len(q.lines) >= lineQueueSize {
		q.mu.Unlock()
		l.write()
		return
	}
	q.lines = append(q.lines, l)
	first := len(q.lines) == 1
	q.mu.Unlock()
	if first {
		q.signal()
	}
}

func (q *lineQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default: // already signalled
	}
}

func (q *lineQueue) write() {
	defer close(q.done)
	for range q.wake {
		for {
			q.mu.Lock()
			batch := q.lines
			if len(batch) > 0 {
				q.lines = q.spare[:0] // the other array: batch is read below
			}
			closed := q.closed
			q.mu.Unlock()
			if len(batch) == 0 {
				if closed {
					return
				}
				break
			}
			for _, l := range batch {
				l.write()
			}
			clear(batch)
			q.spare = batch
		}
	}
}

// close writes the lines left and stops the writer; later lines are
// written by their requests.
func (q *lineQueue) close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	q.mu.Unlock()
	q.signal()
	q.start.Do(func() { close(q.done) }) // never started: nothing to wait for
	<-q.done
}

// write runs Caddy's core on the line, as the logger would have: its
// Check (level and the log's include/exclude by logger name), then Write.
func (l queuedLine) write() {
	if ce := l.core.Check(l.entry, nil); ce != nil {
		ce.Write(l.fields...)
	}
}

// queuedCore is Caddy's core with its writes queued.
type queuedCore struct {
	zapcore.Core
	q *lineQueue
}

func (c *queuedCore) With(fields []zapcore.Field) zapcore.Core {
	return &queuedCore{Core: c.Core.With(fields), q: c.q}
}

func (c *queuedCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Core.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// Write queues the entry (its time taken at the decision) and its fields,
// kept as they are: record builds them afresh for each line, of values
// nothing changes after (strings, numbers, an error).
func (c *queuedCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	c.q.put(queuedLine{core: c.Core, entry: e, fields: fields})
	return nil
}
