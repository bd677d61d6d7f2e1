package idemgate

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/idemgate/idemgate/internal/testenv"
)

// TestXcaddyBuild builds Caddy the way `xcaddy build --with
// github.com/idemgate/idemgate=<checkout>` does: a throw-away main module
// that imports Caddy's command and this root package only, with a replace
// pointing at this checkout. The build must list all three of idemgate's
// modules and have its CLI.
func TestXcaddyBuild(t *testing.T) {
	testenv.Slow(t, "builds the binary with xcaddy")
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caddyVersion := depVersion(t, "github.com/caddyserver/caddy/v2")
	files := map[string]string{
		"main.go": `package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/idemgate/idemgate"
)

func main() { caddycmd.Main() }
`,
		"go.mod": `module example.com/caddybuild

go 1.26

require (
	github.com/caddyserver/caddy/v2 ` + caddyVersion + `
	github.com/idemgate/idemgate v0.0.0
)

replace github.com/idemgate/idemgate => ` + repo + `
`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// This module's go.sum covers every dependency the build needs, so it
	// resolves from the local module cache.
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "caddy")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	// -mod=mod lets go complete go.mod's requirements as xcaddy's `go get`
	// does; GOWORK=off keeps an outer workspace out of it.
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of a Caddy main importing only the root package: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "list-modules").CombinedOutput()
	if err != nil {
		t.Fatalf("list-modules: %v\n%s", err, out)
	}
	mods := strings.Fields(string(out))
	for _, want := range []string{"http.handlers.idempotency", "http.handlers.idempotency_console", "admin.api.idempotency"} {
		found := false
		for _, m := range mods {
			found = found || m == want
		}
		if !found {
			t.Errorf("list-modules of the xcaddy-style build does not show %s:\n%s", want, out)
		}
	}
	if out, err := exec.Command(bin, "idempotency", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "redeliver") {
		t.Errorf("the xcaddy-style build has no idempotency subcommand: %v\n%s", err, out)
	}
}

// TestBinaryLinksNoTestCode: the shipped binary links neither the testing
// package nor a test-support package of this module (the platforms' bill
// writers among them).
func TestBinaryLinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./cmd/idemgate").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case dep == "testing",
			strings.HasPrefix(dep, ModulePath+"/internal/") && slices.Contains(testSupport, strings.TrimPrefix(dep, ModulePath+"/internal/")),
			strings.HasPrefix(dep, ModulePath+"/platforms/") && strings.HasSuffix(dep, "bill"):
			t.Errorf("cmd/idemgate links %s", dep)
		}
	}
}

// testSupport are the internal packages only tests may import.
var testSupport = []string{"gatewaytest", "platformtest", "platformapi", "redistest", "faultystore", "testenv",
	"billtest", "billsample", "billcheck", "sdkbackend", "loadfloor"}

// depVersion is the version of a dependency this module requires.
func depVersion(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", path).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", path, err)
	}
	return strings.TrimSpace(string(out))
}

func TestVersionOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"main module, tagged", debug.BuildInfo{Main: debug.Module{Path: ModulePath, Version: "v1.2.3"}}, "v1.2.3"},
		{"main module, revision", debug.BuildInfo{
			Main:     debug.Module{Path: ModulePath, Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "4bfbd7e"}, {Key: "vcs.modified", Value: "true"}},
		}, "(devel) 4bfbd7e+dirty"},
		{"main module, nothing stamped", debug.BuildInfo{Main: debug.Module{Path: ModulePath, Version: "(devel)"}}, "(devel)"},
		{"dependency of a Caddy build", debug.BuildInfo{
			Main: debug.Module{Path: "caddy"},
			Deps: []*debug.Module{{Path: "github.com/caddyserver/caddy/v2", Version: "v2.11.9"}, {Path: ModulePath, Version: "v0.4.0"}},
		}, "v0.4.0"},
		{"replaced by a checkout", debug.BuildInfo{
			Main: debug.Module{Path: "caddy"},
			Deps: []*debug.Module{{Path: ModulePath, Version: "v0.0.0", Replace: &debug.Module{Path: "/src/idemgate"}}},
		}, "(devel) => /src/idemgate"},
		{"not in the binary", debug.BuildInfo{Main: debug.Module{Path: "other"}}, "(devel)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionOf(&tc.bi); got != tc.want {
				t.Errorf("versionOf = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDocLinks: every relative link in README.md and docs/*.md points at a
// file of the repository, and every #anchor at a heading of its file.
func TestDocLinks(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, "README.md")
	checked := 0
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, link := range markdownLinks(string(text)) {
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(link, "#")
			target := doc
			if path != "" {
				target = filepath.Join(filepath.Dir(doc), filepath.FromSlash(path))
				if abs, err := filepath.Abs(target); err != nil || !inside(root, abs) {
					t.Errorf("%s: link %q leaves the repository", doc, link)
					continue
				}
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s: link %q: %v", doc, link, err)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			body, err := os.ReadFile(target)
			if err != nil {
				t.Errorf("%s: link %q: %v", doc, link, err)
				continue
			}
			if !slices.Contains(headingAnchors(string(body)), anchor) {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", doc, link, target, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the link pattern is broken")
	}
}

// inside reports whether path is root or below it.
func inside(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// TestNoOutsideReferences: nothing in the repository's docs, scripts,
// examples or Go files names a file outside it — the product notes, the
// shared benchmark harness — so every reference a reader follows resolves
// in a clone.
func TestNoOutsideReferences(t *testing.T) {
	// Spelled in pieces so that this file does not match itself.
	outside := []string{"../" + "shared", "DESIGN" + ".md", "STYLE" + ".md", "peer" + ".sh"}
	exts := []string{".md", ".go", ".sh", ".lua", ".Caddyfile", ".example", ".yml", ".json"}
	checked := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !slices.Contains(exts, filepath.Ext(path)) {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		for n, line := range strings.Split(string(text), "\n") {
			for _, ref := range outside {
				if strings.Contains(line, ref) {
					t.Errorf("%s:%d names %s, outside the repository: %s", path, n+1, ref, strings.TrimSpace(line))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d files: the walk is broken", checked)
	}
}

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdFence = regexp.MustCompile("(?ms)^```.*?^```")
)

// markdownLinks lists the targets of [text](target) outside code blocks.
func markdownLinks(text string) []string {
	text = mdFence.ReplaceAllString(text, "")
	var out []string
	for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// headingAnchors lists the anchors GitHub gives a file's headings: lower
// case, punctuation other than "-" and "_" dropped, spaces as "-".
func headingAnchors(text string) []string {
	text = mdFence.ReplaceAllString(text, "")
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}
