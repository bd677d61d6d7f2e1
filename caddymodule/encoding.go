package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

// A platform that sends Accept-Encoding reads the backend's answer
// decoded: Alipay's "success" gzipped is still "success" to Alipay. A
// success rule that reads the body judges the decoded bytes; what is
// remembered and replayed stays the bytes the backend sent, with their
// Content-Encoding.

// judgedDecoded wraps a success rule so that it sees the body decoded
// (gzip, deflate, br, zstd, in the order the header names them), at most
// limit bytes of it. A body that cannot be decoded, is encoded otherwise,
// or decodes past limit is judged as empty: the platform could not read
// it either, so only a rule that ignores the body can find it a success.
func judgedDecoded(rule func(int, http.Header, []byte) bool, limit int64) func(int, http.Header, []byte) bool {
	return func(status int, h http.Header, body []byte) bool {
		if encs := h.Values("Content-Encoding"); len(encs) > 0 && len(body) > 0 {
			body = decodeBody(body, encs, limit)
		}
		return rule(status, h, body)
	}
}

// decodeBody undoes the encodings named by Content-Encoding values, last
// applied first; nil when it cannot.
func decodeBody(body []byte, values []string, limit int64) []byte {
	var encs []string
	for _, v := range values {
		for _, e := range strings.Split(v, ",") {
			if e = strings.ToLower(strings.TrimSpace(e)); e != "" && e != "identity" {
				encs = append(encs, e)
			}
		}
	}
	for i := len(encs) - 1; i >= 0; i-- {
		var err error
		if body, err = decodeOne(encs[i], body, limit); err != nil {
			return nil
		}
	}
	return body
}

// errUndecodable: an encoding not known, or a body past the limit.
type errUndecodable struct{}

func (errUndecodable) Error() string { return "body cannot be decoded within the limit" }

func decodeOne(enc string, body []byte, limit int64) ([]byte, error) {
	var r io.Reader
	switch enc {
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		r = zr
	case "deflate":
		// HTTP's deflate is zlib-wrapped; some servers send it raw.
		zr, err := zlib.NewReader(bytes.NewReader(body))
		if err != nil {
			fr := flate.NewReader(bytes.NewReader(body))
			defer fr.Close()
			r = fr
		} else {
			defer zr.Close()
			r = zr
		}
	case "br":
		r = brotli.NewReader(bytes.NewReader(body))
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(uint64(limit)+1<<20), zstd.WithDecoderMaxWindow(8<<20))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		r = zr
	default:
		return nil, errUndecodable{}
	}
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(out)) > limit {
		return nil, errUndecodable{}
	}
	return out, nil
}
