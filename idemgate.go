// Package idemgate registers the idempotency gateway's Caddy modules (the
// `idempotency` HTTP handler and directive, the admin API, the CLI
// subcommand) when imported, so a Caddy build adds it in one step:
//
//	xcaddy build --with github.com/idemgate/idemgate
//
// The code lives in caddymodule (the Caddy adapter), keying and cache.
package idemgate

import (
	"runtime/debug"
	"strings"

	_ "github.com/idemgate/idemgate/caddymodule"
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
