package store

import (
	_ "embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed claim.lua
	claimLua string
	//go:embed complete.lua
	completeLua string
	//go:embed release.lua
	releaseLua string
	//go:embed renew.lua
	renewLua string
	//go:embed delete.lua
	deleteLua string
	//go:embed leave.lua
	leaveLua string
	//go:embed clock.lua
	clockLua string
	//go:embed journal.lua
	journalLua string
	//go:embed reopen.lua
	reopenLua string
	//go:embed keep.lua
	keepLua string
	//go:embed held.lua
	heldLua string
	//go:embed record.lua
	recordLua string
	//go:embed load.lua
	loadLua string

	// The claim is the one script that makes a new record: at maxmemory
	// it is refused (see writeScript); the others settle, renew or drop a
	// record that exists.
	// Each script carries only the helpers it calls: a helper is a
	// closure the script makes anew on every call.
	claimScript    = newWriteScript("", clockLua, recordLua, keepLua, claimLua)
	completeScript = newWriteScript("allow-oom", clockLua, recordLua, heldLua, journalLua, completeLua)
	releaseScript  = newWriteScript("allow-oom", clockLua, recordLua, loadLua, heldLua, journalLua, releaseLua)
	leaveScript    = newWriteScript("allow-oom", clockLua, recordLua, loadLua, heldLua, keepLua, journalLua, leaveLua)
	renewScript    = newWriteScript("allow-oom", clockLua, recordLua, loadLua, heldLua, keepLua, renewLua)
	deleteScript   = newWriteScript("allow-oom", clockLua, recordLua, deleteLua)
	reopenScript   = newWriteScript("allow-oom", clockLua, recordLua, loadLua, keepLua, journalLua, reopenLua)
)

// writeScript is one of the store's write scripts in the two forms a
// server may take. Redis 7 reads a shebang line with the script's flags
// and, for a script that declares no allow-oom, refuses the whole script
// when the server is at maxmemory, before it runs. Redis 6 has no shebang
// (the line would not compile) and judges memory at a script's first write
// only: a write that cannot grow memory (DEL) lets every later one past
// maxmemory. So the scripts are written to make their first write one that
// Redis refuses at maxmemory, and on Redis 7 they declare it as well.
type writeScript struct {
	legacy, flagged *redis.Script
}

// newWriteScript composes a script from parts (clock.lua first, as every
// script's helpers); the shebang, when the server reads it, must be the
// very first line. flags are Redis 7's script flags ("" for none:
// refused at maxmemory).
func newWriteScript(flags string, parts ...string) *writeScript {
	src := strings.Join(parts, "")
	shebang := "#!lua\n"
	if flags != "" {
		shebang = "#!lua flags=" + flags + "\n"
	}
	return &writeScript{legacy: redis.NewScript(src), flagged: redis.NewScript(shebang + src)}
}

// script picks the form of sc this store's server reads.
func (s *Redis) script(sc *writeScript) *redis.Script {
	if s.flagged.Load() {
		return sc.flagged
	}
	return sc.legacy
}

// UseServerVersion tells the store the major version of its Redis (the
// lowest of a Cluster's masters): from 7 on, its write scripts go out
// with their flags. Until it is told, the store sends the form every
// version reads.
func (s *Redis) UseServerVersion(major int) { s.flagged.Store(major >= 7) }
