package app

import "github.com/idemgate/idemgate/keying"

// HashKey is a key as logs and spans show it unless log_keys is on: the
// first 16 hex digits of its SHA-256.
func HashKey(key string) string { return keying.Digest([]byte(key))[:16] }
