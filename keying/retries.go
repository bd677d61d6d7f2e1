package keying

import "time"

// Schedule is a platform's retry schedule: the waits between its copies of
// one notification that was not answered with success, the first wait
// counted from the first copy, each next one from the copy before.
type Schedule []time.Duration

// The platforms' published schedules. Where a platform publishes only a
// span and a shape (Stripe, PayPal), the waits are an estimate of that
// shape, and say so.
var schedules = map[string]Schedule{
	// Alipay, 异步通知说明 (opendocs.alipay.com/open/203/105286): "程序执
	// 行完后必须打印输出 success … 如果商户反馈给支付宝的字符不是 success
	// 这 7 个字符，支付宝服务器会不断重发通知，直到超过 24 小时 22 分钟。
	// 一般情况下，25 小时以内完成 8 次通知（通知的间隔频率一般是：4m、10m、
	// 10m、1h、2h、6h、15h）".
	"alipay": {4 * time.Minute, 10 * time.Minute, 10 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour, 15 * time.Hour},
	// WeChat Pay API v3, 支付通知 (pay.weixin.qq.com/docs/merchant/apis/
	// jsapi-payment/payment-notice.html): "通知频率为
	// 15s/15s/30s/3m/10m/20m/30m/30m/30m/60m/3h/3h/3h/6h/6h - 总计 24h4m";
	// the v2 notify (pay.weixin.qq.com/wiki/doc/api/jsapi.php?chapter=9_7)
	// publishes the same frequencies.
	"wechatpay":    wechat,
	"wechatpay_v2": wechat,
	// Stripe, "Retry behavior" (docs.stripe.com/webhooks#retries): "In live
	// mode, Stripe attempts to deliver a given event to your webhook
	// endpoint for up to 3 days with an exponential back off." The waits
	// are not published: doubling from one hour, at most a day, ending
	// within the three days.
	"stripe": expBackoff(time.Hour, 24*time.Hour, 72*time.Hour-10*time.Minute),
	// PayPal, "Webhooks" (developer.paypal.com/api/rest/webhooks/): "PayPal
	// retries … up to 25 times over the course of 3 days" (a non-2xx
	// answer). The waits are not published: doubling from one minute,
	// at most 3h55m, 25 of them (just under 3 days).
	"paypal": expCount(time.Minute, 3*time.Hour+55*time.Minute, 25),
	// Standard Webhooks, "Retry schedule" (github.com/standard-webhooks/
	// standard-webhooks, spec/standard-webhooks.md, Svix's schedule): the
	// first attempt immediately, then after 5 seconds, 5 minutes, 30
	// minutes, 2 hours, 5 hours, 10 hours and 10 hours.
	"standard_webhooks": {5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour},
}

var wechat = Schedule{15 * time.Second, 15 * time.Second, 30 * time.Second, 3 * time.Minute, 10 * time.Minute, 20 * time.Minute,
	30 * time.Minute, 30 * time.Minute, 30 * time.Minute, time.Hour, 3 * time.Hour, 3 * time.Hour, 3 * time.Hour, 6 * time.Hour, 6 * time.Hour}

// expBackoff doubles from first, each wait at most ceil, until the waits
// add up to span (the last one shortened to end there).
func expBackoff(first, ceil, span time.Duration) Schedule {
	var s Schedule
	total, w := time.Duration(0), first
	for total < span {
		w = min(w, ceil, span-total)
		s = append(s, w)
		total += w
		w *= 2
	}
	return s
}

// expCount is n waits doubling from first, each at most ceil.
func expCount(first, ceil time.Duration, n int) Schedule {
	s := make(Schedule, n)
	w := first
	for i := range s {
		s[i] = min(w, ceil)
		w *= 2
	}
	return s
}

// RetrySchedule is the retry schedule of platform (a preset's name); nil
// for generic, whose sender is unknown.
func RetrySchedule(platform string) Schedule { return schedules[platform] }

// Total is how long after the first copy the last retry comes.
func (s Schedule) Total() time.Duration {
	var t time.Duration
	for _, w := range s {
		t += w
	}
	return t
}

// Retries is what a schedule leaves of a failed notification's retries,
// estimated from the copies seen: how many are left, when the next and the
// last are due.
type Retries struct {
	Left int
	Next time.Time // zero when none is left
	Last time.Time // when the last retry is (or was) due
}

// RetryGrace is how late a platform's retry may arrive and still count as
// the one expected: a retry is sent after the previous copy failed, and the
// backend's time and the network's come on top of the wait.
const RetryGrace = time.Minute

// Estimate reads the schedule from the last copy seen: copies (the first
// included) tell which wait comes next. A retry that was due but never
// came (the platform's clock, a lost connection) is counted as spent, so
// the estimate never promises a retry whose time has passed.
func (s Schedule) Estimate(last time.Time, copies int64, now time.Time) Retries {
	i := int(max(copies, 1)) - 1 // waits already spent
	if i >= len(s) {
		return Retries{Last: last}
	}
	next := last.Add(s[i])
	for now.After(next.Add(RetryGrace)) && i < len(s)-1 {
		i++
		next = next.Add(s[i])
	}
	end := next
	for _, w := range s[i+1:] {
		end = end.Add(w)
	}
	if now.After(next.Add(RetryGrace)) {
		// Even the last one is overdue.
		return Retries{Last: next}
	}
	return Retries{Left: len(s) - i, Next: next, Last: end}
}
