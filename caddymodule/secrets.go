package caddymodule

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// maxPEM bounds a key or certificate file read at start.
const maxPEM = 1 << 20

// resolveSecret renders a secret-bearing field ({env.*}, {file.*}) once, at
// start. A template that renders empty is an error naming what was empty —
// the unset variable or the missing file — rather than a preset that later
// fails with an unrelated message or, worse, runs without its secret.
// The value itself never appears in an error.
func resolveSecret(repl *caddy.Replacer, field, tmpl string) (string, error) {
	if tmpl == "" {
		return "", nil
	}
	var empty []string
	_, err := repl.ReplaceFunc(tmpl, func(name string, val any) (any, error) {
		// Unknown placeholders stay as written (ReplaceKnown below), as
		// they always have; only known ones that render empty are errors.
		if _, known := repl.Get(name); known && caddy.ToString(val) == "" {
			empty = append(empty, describeEmpty(name))
		}
		return val, nil
	})
	if err != nil {
		return "", fmt.Errorf("%s: %v", field, err)
	}
	if len(empty) > 0 {
		return "", fmt.Errorf("%s: %s", field, strings.Join(empty, "; "))
	}
	return repl.ReplaceKnown(tmpl, ""), nil
}

// describeEmpty says why placeholder name rendered empty.
func describeEmpty(name string) string {
	if path, ok := strings.CutPrefix(name, "file."); ok {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return fmt.Sprintf("{%s}: file %s does not exist", name, path)
		} else if err != nil {
			return fmt.Sprintf("{%s}: %v", name, err)
		}
		return fmt.Sprintf("{%s}: file %s is empty", name, path)
	}
	if env, ok := strings.CutPrefix(name, "env."); ok {
		if _, set := os.LookupEnv(env); !set {
			return fmt.Sprintf("{%s} is empty (%s is not set)", name, env)
		}
	}
	return fmt.Sprintf("{%s} is empty", name)
}

// readPEM reads the PEM file a field names (the path may be a placeholder),
// bounded, with an error that names the field and the path.
func readPEM(repl *caddy.Replacer, field, tmpl string) ([]byte, error) {
	path, err := resolveSecret(repl, field, tmpl)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: file %s does not exist", field, path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", field, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPEM+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: reading %s: %v", field, path, err)
	case len(data) > maxPEM:
		return nil, fmt.Errorf("%s: %s is larger than %d bytes: not a key or certificate", field, path, maxPEM)
	case len(data) == 0:
		return nil, fmt.Errorf("%s: file %s is empty", field, path)
	}
	return data, nil
}
