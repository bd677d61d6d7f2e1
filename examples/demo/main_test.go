package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestOwnDataDir: after ownDataDir, everything Caddy keeps on disk — the
// storage (where the embedded store and locks go), the data directory and
// the config directory (autosave.json) — is under .idemgate-demo/ in the
// current directory, not in the user's Caddy directories.
func TestOwnDataDir(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("XDG_DATA_HOME", "/nonexistent/user-data")
	t.Setenv("XDG_CONFIG_HOME", "/nonexistent/user-config")
	saved := caddy.DefaultStorage.Path
	t.Cleanup(func() { caddy.DefaultStorage.Path = saved })
	if err := ownDataDir(); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, dataDir) + string(filepath.Separator)
	for what, path := range map[string]string{
		"storage":    caddy.DefaultStorage.Path,
		"data dir":   caddy.AppDataDir(),
		"config dir": caddy.AppConfigDir(),
	} {
		if !strings.HasPrefix(path, want) {
			t.Errorf("%s is %s, not under %s", what, path, want)
		}
	}
}
