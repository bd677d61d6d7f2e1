package delivery

import (
	"fmt"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/store"
)

// An ack is a promise: the platform, answered, never sends the
// notification again, so until it is delivered it lives only in the
// store. On a Redis with appendonly no a Redis restart loses it with no
// record, so an async route on Redis needs AOF on every master: it
// refuses to start without it (Durability.Check), and while a later
// check of the store (the adapter's background check, store.Redis's
// Checked) finds it off, its acks fail closed (Durability.Ackable), unless
// the route accepts the loss (`durability volatile`).

// Durability is an async route's look at its store's persistence. Its
// zero value with Volatile, Scope and Logger set is ready.
type Durability struct {
	// Volatile: the route accepts a Redis without AOF (`durability
	// volatile`).
	Volatile bool
	// Scope and Logger are the route's, for the warnings.
	Scope  string
	Logger *zap.Logger
	// refusing: the acks are refused now, the store's Redis having no AOF.
	refusing atomic.Bool
}

// checkedStore is a store that keeps its server's last complete check (a
// Redis store).
type checkedStore interface{ Checked() *store.RedisReport }

// LastCheck is st's last complete check of its Redis; nil for another
// store, or when no check has reached the server yet (the background
// check then decides).
func LastCheck(st store.Store) *store.RedisReport {
	if cs, ok := st.(checkedStore); ok {
		return cs.Checked()
	}
	return nil
}

// noAOF says why the store's Redis cannot keep this route's acks across
// its restart (a master with appendonly off), or nil: it can, the route
// accepts it (durability volatile), or nothing is known yet.
func (d *Durability) noAOF(rep *store.RedisReport) error {
	if rep == nil || d.Volatile {
		return nil
	}
	no := rep.WithoutAOF()
	if len(no) == 0 {
		return nil
	}
	return fmt.Errorf("Redis at %s has appendonly no: an acked notification lives only in Redis's memory until it is delivered, "+
		"and a Redis restart loses it with no record while the platform, answered, never sends it again. "+
		"Turn on appendonly yes on the server (CONFIG SET appendonly yes, and in its configuration file), "+
		"or write `durability volatile` in the route's deliver async block to accept losing acked notifications on a Redis restart",
		store.Addrs(no))
}

// Check is the start's look at the store's persistence (rep, its last
// check; nil: none yet): a Redis without AOF stops the route (unless
// durability volatile); an AOF that reaches the disk only every second or
// when the system flushes, or a setting the server would not tell, is
// warned about.
func (d *Durability) Check(rep *store.RedisReport) error {
	if rep == nil {
		return nil
	}
	if err := d.noAOF(rep); err != nil {
		return fmt.Errorf("deliver async: %w", err)
	}
	scope := zap.String("scope", d.Scope)
	if no := rep.WithoutAOF(); len(no) > 0 {
		d.Logger.Warn("deliver async with durability volatile: Redis has appendonly no, so a Redis restart loses the acked notifications not yet delivered, with no record",
			scope, zap.String("masters", store.Addrs(no)))
		return nil
	}
	if un := rep.AOFUnknown(); len(un) > 0 && !d.Volatile {
		d.Logger.Warn("deliver async: could not read whether Redis has appendonly on (its INFO does not say and CONFIG is refused); "+
			"without it a Redis restart loses acked notifications", scope, zap.String("masters", store.Addrs(un)))
	}
	if ms, f := rep.SyncingLeast(); f == "everysec" || f == "no" {
		d.Logger.Warn("deliver async: Redis has appendfsync "+f+": "+FsyncMeaning(f), scope,
			zap.String("masters", store.Addrs(ms)), zap.String("appendfsync", f))
	}
	return nil
}

// Ackable says why this route's acks are refused now, or nil: a later
// check of st found its Redis without AOF. It logs the turn, at error
// when the acks stop, when they resume.
func (d *Durability) Ackable(st store.Store) error {
	err := d.noAOF(LastCheck(st))
	switch {
	case err != nil && d.refusing.CompareAndSwap(false, true):
		d.Logger.Error("deliver async: acks refused (503, the platform retries) until Redis has appendonly yes again: "+err.Error(),
			zap.String("scope", d.Scope), zap.String("appendonly", "no"))
	case err == nil && d.refusing.Load() && d.refusing.CompareAndSwap(true, false):
		d.Logger.Warn("deliver async: Redis has appendonly yes again: acks resume", zap.String("scope", d.Scope))
	}
	return err
}

// FsyncMeaning says what an appendfsync setting risks for acked writes.
func FsyncMeaning(f string) string {
	switch f {
	case "everysec":
		return "the AOF reaches the disk once a second, so a crash of the host (power, kernel) can lose up to a second of acked notifications, two when the disk stalls; " +
			"a crash of Redis alone normally loses none. appendfsync always closes this, at the cost of an fsync per write"
	case "no":
		return "the AOF reaches the disk when the operating system flushes it (about every 30 seconds on Linux), so a crash of the host can lose that long of acked notifications; " +
			"a crash of Redis alone loses none. appendfsync everysec bounds it to a second, always closes it"
	}
	return "every write is on the disk before it is answered"
}

// AckContentType names an ack body's type: XML, JSON or text.
func AckContentType(body string) string {
	switch b := strings.TrimSpace(body); {
	case strings.HasPrefix(b, "<"):
		return "application/xml"
	case strings.HasPrefix(b, "{"), strings.HasPrefix(b, "["):
		return "application/json"
	}
	return "text/plain; charset=utf-8"
}
