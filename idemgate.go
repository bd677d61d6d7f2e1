// Package idemgate registers every piece of the idempotency gateway when
// imported, so a Caddy build adds it in one step:
//
//	xcaddy build --with github.com/idemgate/idemgate
//
// It brings the `idempotency` HTTP handler and directive
// (http.handlers.idempotency, package caddymodule), the operator's console
// (http.handlers.idempotency_console and its directive, caddymodule/console),
// the admin API (admin.api.idempotency, caddymodule/admin) and the
// `idemgate idempotency …` CLI (caddymodule/command). caddymodule's package
// doc is the map of the whole project.
package idemgate

import (
	"runtime/debug"
	"strings"

	// Each module package registers itself, as caddy-l4's imports.go
	// lists its modules: the handler, the admin API, the console, the CLI.
	_ "github.com/idemgate/idemgate/caddymodule"
	_ "github.com/idemgate/idemgate/caddymodule/admin"
	_ "github.com/idemgate/idemgate/caddymodule/command"
	_ "github.com/idemgate/idemgate/caddymodule/console"
)

// ModulePath is this module's import path.
const ModulePath = "github.com/idemgate/idemgate"

// Version is idemgate's version as the Go toolchain recorded it in the
// binary: the module version when idemgate is a dependency (an xcaddy
// build), else the main module's version or its VCS revision, else
// "(devel)".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	mod := &bi.Main
	for _, dep := range bi.Deps {
		if dep.Path == ModulePath {
			mod = dep
			break
		}
	}
	if mod.Path != ModulePath {
		return "(devel)"
	}
	v := mod.Version
	if mod.Replace != nil {
		// A replaced module (xcaddy --with …=<checkout>) has no version of
		// its own unless the replacement names one.
		v = mod.Replace.Version
		if v == "" {
			v = "(devel) => " + mod.Replace.Path
		}
	}
	if v != "" && v != "(devel)" {
		return v
	}
	// Built inside a checkout: the revision the toolchain stamped, if any.
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if rev != "" && mod == &bi.Main {
		return "(devel) " + strings.TrimSpace(rev) + modified
	}
	return "(devel)"
}
