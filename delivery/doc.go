// Package delivery is `deliver async`, free of Caddy: the gateway answers
// the platform (the ack) once the notification is durable in the store's
// delivery queue, and an Engine takes it from there to the backend.
//
// It attaches to the gate at gate.Queue: an async route's gate hands a
// won claim to Engine.Enqueue instead of the backend (receipt.go: hold
// the claim, queue, ack), and a copy of a queued key to Engine.Copy. The
// engine's workers (engine.go) take deliveries from the queue, send each
// to the backend once (send.go) and settle the key's claim by the
// outcome (attempt.go), as the synchronous path does: gate.Classify
// decides what an attempt came to, and package journal words it as the
// forward's attempts are. The route reaches in only through Config
// (settings as plain values), Route (its store, journal cut, success rule
// and re-signer) and Observer (its metrics, logs and events; none by
// default); the Caddy adapter builds them and registers the engine with
// the config's app.
package delivery
