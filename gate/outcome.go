package gate

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Action is what the adapter does with a request.
type Action int

const (
	// Refuse answers Status with Msg (and Retry-After when RetryAfter).
	Refuse Action = iota + 1
	// Drop answers nothing: the platform hung up (499).
	Drop
	// Forward sends the first copy to the backend under Claim (Forward).
	Forward
	// Pass forwards unprotected: the store failed and on_store_error is
	// pass.
	Pass
	// Replay answers with Record's remembered answer.
	Replay
	// Ack answers with the route's acknowledgement (deliver async).
	Ack
)

// Label is what a request came to: a bounded metric label and the
// {idempotency.outcome} value. The adapter's registry takes its outcomes from these.
type Label string

// The labels.
const (
	Forwarded          Label = "forwarded"
	Replayed           Label = "replayed"
	Waited             Label = "waited"
	InFlight           Label = "in_flight"
	BackendFailed      Label = "backend_failed"
	BackendUnreachable Label = "backend_unreachable"
	Ambiguous          Label = "ambiguous"
	Conflict           Label = "conflict"
	RejectedSignature  Label = "rejected_signature"
	BadRequest         Label = "bad_request"
	TooLarge           Label = "too_large"
	StoreError         Label = "store_error"
	Passed             Label = "passed"
	Canceled           Label = "canceled"
	Queued             Label = "queued"
	Acked              Label = "acked"
	RejectedMerchant   Label = "rejected_merchant" // signed, for a merchant the route does not accept
)

// Outcome is what the gate decided for one request, and, once settled,
// what became of it: the adapter acts on it and records it once.
type Outcome struct {
	Action Action
	Label  Label
	Key    string
	KeyID  string // the key that verified the notification, if named
	// Verified is the metric label of the key that verified it.
	Verified string
	Copies   int64
	Err      error // for the log, never the sender

	// Refuse: the status, what the sender is told and its detail (Cause,
	// else Err), and the headers.
	Status     int
	Msg        string
	Cause      error
	RetryAfter bool
	Allow      string
	// StoreOp names the store operation that failed, for its counter.
	StoreOp string
	// Body is the body the gate read of a refused request (nil when it
	// was not read: too large by its declared length), for the list of
	// refused notifications.
	Body []byte

	Claim  Claim         // Forward
	Record *store.Record // Replay

	// Settled forwards: how long the backend took, and for a failure
	// answer (Status is the backend's) how another success rule would
	// have taken it.
	Backend time.Duration
	Hint    string
}

// What a platform is told when the gateway refuses a notification: one
// line naming the reason class, never an internal address, file path or
// driver message. The full reason is in the decision's log line.
const (
	MsgSignature   = "signature verification failed"
	MsgMerchant    = "merchant not accepted"
	MsgStore       = "store unavailable, retry later"
	MsgReadingBody = "reading the body failed"
	MsgConflict    = "same key, different fingerprint"
)

// refuse is a refusal of status, msg being safe to show.
func refuse(label Label, status int, msg string, err error) Outcome {
	return Outcome{Action: Refuse, Label: label, Status: status, Msg: msg, Err: err, Cause: err}
}

// tryLater is a refusal with Retry-After. A 503 is a store failure, whose
// detail (addresses, driver messages) stays in the log; a 409's err is
// the gateway's own sentence.
func tryLater(label Label, status int, err error) Outcome {
	msg := err.Error()
	if status == http.StatusServiceUnavailable {
		msg = MsgStore
	}
	o := refuse(label, status, msg, err)
	o.RetryAfter = true
	return o
}

// StoreFailure is a 503 with Retry-After for a failed store operation
// op: err is logged, cause (err in a sentence) goes with the refusal.
func StoreFailure(op string, err, cause error) Outcome {
	o := tryLater(StoreError, http.StatusServiceUnavailable, cause)
	o.Err, o.StoreOp = err, op
	return o
}

// TryLater is a 409 with Retry-After: the gateway's own sentence, no
// error to log.
func TryLater(copies int64, msg string) Outcome {
	o := tryLater(InFlight, http.StatusConflict, errors.New(msg))
	o.Copies, o.Err = copies, nil
	return o
}

// Dropped is a request whose platform hung up.
func Dropped(copies int64, err error) Outcome {
	return Outcome{Action: Drop, Label: Canceled, Copies: copies, Err: err, Status: 499}
}

// Acknowledged is an ack (deliver async): label Queued or Acked.
func Acknowledged(label Label, copies int64) Outcome {
	return Outcome{Action: Ack, Label: label, Copies: copies}
}

// publicLine makes a request-describing error (a field missing, a body
// that is not JSON) one bounded line for the sender. Only errors about the
// request's own content go through it: they carry nothing internal.
func publicLine(err error) string {
	s := err.Error()
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	const maxLen = 200
	if len(s) > maxLen {
		s = strings.ToValidUTF8(s[:maxLen], "") + "…"
	}
	return s
}
