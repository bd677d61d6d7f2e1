package wechatpay

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// signedAt reads Wechatpay-Timestamp, the time WeChat Pay signed the
// notification (Unix seconds): wechatpay-go's notify handler refuses the
// notification 5 minutes after it, whenever it arrives.
func signedAt(hdr http.Header) (time.Time, bool) {
	v := strings.TrimSpace(hdr.Get("Wechatpay-Timestamp"))
	if v == "" || len(v) > 12 {
		return time.Time{}, false
	}
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil || s <= 0 {
		return time.Time{}, false
	}
	return time.Unix(s, 0), true
}
