package caddymodule

import (
	"fmt"
	"io"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// What a platform is told when the gateway refuses a notification: one
// line naming the reason class ("401 signature verification failed",
// "503 store unavailable, retry later"), never an internal address, file
// path or driver message. The full reason is in the decision's log line.

// refusal is an error whose text is safe to show the sender; its cause,
// with the detail, is for the log.
type refusal struct {
	msg   string
	cause error
}

func (e *refusal) Error() string { return e.msg }
func (e *refusal) Unwrap() error { return e.cause }

// refuse answers status with msg (safe to show), cause being the detail;
// body is what the gate read of the request (nil if it read none).
// When the server has error routes (handle_errors), the error goes there,
// and {err.message} is msg. Without them Caddy would answer an empty
// body, so the handler writes "<status> <msg>" itself.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, status int, msg string, cause error, body []byte) error {
	h.keepRefusal(r, status, msg, body) // refusal_kept.go
	err := caddyhttp.Error(status, &refusal{msg: msg, cause: cause})
	srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || (srv.Errors != nil && len(srv.Errors.Routes) > 0) {
		return err
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/plain; charset=utf-8")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Del("Content-Length")
	w.WriteHeader(status)
	_, werr := io.WriteString(w, fmt.Sprintf("%d %s\n", status, msg))
	return werr
}
