//go:build loadfloor

package main

// scripts/load.sh builds with -tags loadfloor: its gateway also serves the
// floor under a first copy (internal/loadfloor).
import _ "github.com/idemgate/idemgate/internal/loadfloor"
