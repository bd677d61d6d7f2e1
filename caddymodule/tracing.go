package caddymodule

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/caddymodule/app"
)

const instrumentationName = "github.com/idemgate/idemgate/caddymodule"

// spanEnder ends the decision span with what was decided.
type spanEnder struct{ span trace.Span }

// startSpan starts the decision span as a child of the request's span.
// Caddy's tracing module puts its span in the request context but does not
// set the global TracerProvider, so the provider comes from that span; with
// no tracing configured it is a no-op provider and this costs nothing.
//
// The context it returns is the one the decision's metrics are recorded
// with, where the SDK looks for a sampled span to attach as an exemplar.
// With no span, it is the background: the SDK would otherwise walk the
// request's whole context chain (Caddy's values) for each
// histogram, only to find none.
func startSpan(r *http.Request, platform string) (context.Context, spanEnder) {
	parent := trace.SpanFromContext(r.Context())
	if !parent.SpanContext().IsValid() {
		return context.Background(), spanEnder{}
	}
	ctx, span := parent.TracerProvider().Tracer(instrumentationName).Start(r.Context(), "idempotency",
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String("idempotency.platform", platform)))
	return ctx, spanEnder{span: span}
}

func (s spanEnder) end(d *result) {
	if s.span == nil {
		return
	}
	s.span.SetAttributes(attribute.String("idempotency.outcome", string(d.outcome)))
	if d.key != "" {
		// Always hashed: traces leave the machine more often than logs.
		s.span.SetAttributes(attribute.String("idempotency.key_hash", app.HashKey(d.key)))
	}
	if d.copies > 0 {
		s.span.SetAttributes(attribute.Int64("idempotency.copies", d.copies))
	}
	if d.err != nil {
		s.span.RecordError(d.err)
		switch d.outcome {
		case outcomeStoreError, outcomeConflict, outcomeAmbiguous:
			s.span.SetStatus(codes.Error, string(d.outcome))
		}
	}
	s.span.End()
}
