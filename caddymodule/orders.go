package caddymodule

// Orders (package orders) attach to the route here, as the gate's
// Route.OrderRun (serve.go: orders.RunOf); the replay decision is orders.AcceptsAnswer
// (replay.go), and order_ttl's default and check are the handler's
// (handler.go).
