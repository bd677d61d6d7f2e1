package gatewaytest

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// moduleRoot is the directory of the module's go.mod, found from this
// file's own path.
func moduleRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information to find the module root")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// StatusQueryRecipe is the status-query route of docs/platforms.md as
// written there, on the test's backend and store.
func StatusQueryRecipe(t testing.TB, backend, store string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "platforms.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "  handle /orders/query {\n")
	block, _, ok2 := strings.Cut(rest, "\n  }\n")
	if !ok || !ok2 {
		t.Fatal("docs/platforms.md has no status-query recipe (handle /orders/query)")
	}
	lines := []string{"\thandle /orders/query {"}
	for _, l := range strings.Split(block, "\n") {
		l = strings.TrimPrefix(l, "  ")
		switch strings.TrimSpace(l) {
		case "reverse_proxy 127.0.0.1:9090":
			l = "\t\treverse_proxy " + backend
		case "scope alipay":
			l += "\n\t\t\t" + store
		}
		lines = append(lines, "\t"+l)
	}
	return strings.Join(append(lines, "\t}"), "\n")
}
