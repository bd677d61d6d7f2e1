package caddymodule

import (
	"io"
	"net/http"
	"strconv"
)

// platformAck is what this route's platform takes as "received, stop
// retrying", for a duplicate whose own answer is not at hand: Alipay
// `success`, WeChat Pay v2's SUCCESS XML, 200 for the rest.
func (h *Handler) platformAck() AckAnswer {
	if h.async() {
		return h.dlv.ack
	}
	if a := h.preset().Ack; a.Status != 0 {
		return AckAnswer(a)
	}
	return AckAnswer{Status: http.StatusOK}
}

// writeAck writes a, marked Idempotent-Replayed when replayed.
func writeAck(w http.ResponseWriter, r *http.Request, a AckAnswer, replayed bool) error {
	if a.ContentType != "" {
		w.Header().Set("Content-Type", a.ContentType)
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(a.Body)))
	w.WriteHeader(a.Status)
	if r.Method == http.MethodHead || a.Body == "" {
		return nil
	}
	_, err := io.WriteString(w, a.Body)
	return err
}
