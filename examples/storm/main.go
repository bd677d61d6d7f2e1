// Command storm fires many copies of one payment notification at once — what a
// platform's retries, a racing browser return and a manual resend look like to
// a backend — and reports how many times the backend actually ran.
//
//	go run ./examples/storm                                   # through the gateway
//	go run ./examples/storm -url http://127.0.0.1:9090/notify # straight to the backend
//
// It exits 1 when the backend renewed the order more than once or any copy
// got no 2xx answer, so it doubles as a smoke test.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

func main() {
	target := flag.String("url", "http://localhost:8080/notify", "where to send the notifications (the gateway)")
	n := flag.Int("n", 100, "how many copies to send at once")
	order := flag.String("order", "", "order id (out_trade_no); default: a random o-… id")
	backend := flag.String("backend", "http://127.0.0.1:9090", "the legacy backend, to read its /stats; empty skips the check")
	timeout := flag.Duration("timeout", 30*time.Second, "time limit for each copy")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Usage: storm [flags]

Sends -n identical copies of one form-encoded payment notification
(out_trade_no=<order>) to -url concurrently, all released at the same instant,
then reports the answers and how many times the backend renewed the order.
Exit status: 0 ok; 1 the backend ran more than once, or a copy got no 2xx
answer (an error status, or none at all); 2 usage or setup error.

Flags:
`)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 || *n < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if *order == "" {
		*order = "o-" + strings.ToLower(rand.Text()[:10])
	}
	code, err := run(*target, *n, *order, strings.TrimRight(*backend, "/"), *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
	}
	os.Exit(code)
}

type answer struct {
	status   int
	replayed bool
	err      error
}

func run(target string, n int, order, backend string, timeout time.Duration) (int, error) {
	// One connection per copy, so the copies really arrive together rather
	// than queueing behind a small connection pool.
	client := &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               nil, // the demo is local; never detour through a proxy
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: n,
		},
	}
	defer client.CloseIdleConnections()

	before, err := renewals(client, backend, order)
	if err != nil {
		return 2, fmt.Errorf("reading the backend's stats (is it running? use -backend '' to skip): %v", err)
	}

	body := url.Values{
		"out_trade_no": {order},
		"trade_status": {"TRADE_SUCCESS"},
		"total_amount": {"9.90"},
	}.Encode()
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i] = send(client, target, body)
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(began)

	after, err := renewals(client, backend, order)
	if err != nil {
		return 2, fmt.Errorf("reading the backend's stats: %v", err)
	}

	ran := "(backend not checked)"
	if backend != "" {
		ran = fmt.Sprintf("backend renewed order %s %d time(s)", order, after-before)
	}
	fmt.Printf("%d copies sent → %s; %s  [%v]\n", n, ran, summarize(answers), elapsed.Round(time.Millisecond))
	if backend != "" && after-before > 1 {
		fmt.Printf("FAIL: order %s was renewed %d times — duplicates reached the backend\n", order, after-before)
		return 1, nil
	}
	if !slices.ContainsFunc(answers, func(a answer) bool { return a.err == nil }) {
		fmt.Println("FAIL: no copy got an answer — is the gateway running at", target+"?")
		return 1, nil
	}
	if bad := notOK(answers); bad > 0 {
		fmt.Printf("FAIL: %d of %d copies got no 2xx answer\n", bad, n)
		return 1, nil
	}
	if backend != "" && after-before == 0 && !strings.HasPrefix(order, "fail-") {
		fmt.Println("note: the backend never ran for this order (not the backend behind -url, or every copy was refused)")
	}
	return 0, nil
}

// notOK counts the copies that got an error status or no answer.
func notOK(answers []answer) int {
	bad := 0
	for _, a := range answers {
		if a.err != nil || a.status/100 != 2 {
			bad++
		}
	}
	return bad
}

func send(client *http.Client, target, body string) answer {
	req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
}

// summarize renders "100 × 200 (99 replayed)", statuses in ascending order,
// then transport errors grouped by message.
func summarize(answers []answer) string {
	byStatus := map[int]int{}
	replayed := map[int]int{}
	errs := map[string]int{}
	for _, a := range answers {
		if a.err != nil {
			errs[shortErr(a.err)]++
			continue
		}
		byStatus[a.status]++
		if a.replayed {
			replayed[a.status]++
		}
	}
	var parts []string
	statuses := make([]int, 0, len(byStatus))
	for s := range byStatus {
		statuses = append(statuses, s)
	}
	slices.Sort(statuses)
	for _, s := range statuses {
		p := fmt.Sprintf("%d × %d", byStatus[s], s)
		if replayed[s] > 0 || s/100 == 2 {
			p += fmt.Sprintf(" (%d replayed)", replayed[s])
		}
		parts = append(parts, p)
	}
	msgs := make([]string, 0, len(errs))
	for m := range errs {
		msgs = append(msgs, m)
	}
	slices.Sort(msgs)
	for _, m := range msgs {
		parts = append(parts, fmt.Sprintf("%d × error (%s)", errs[m], m))
	}
	return strings.Join(parts, ", ")
}

func shortErr(err error) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	if errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err) {
		return "timeout"
	}
	return err.Error()
}

// renewals reads how often the backend has renewed order; 0 when backend is "".
func renewals(client *http.Client, backend, order string) (int, error) {
	if backend == "" {
		return 0, nil
	}
	resp, err := client.Get(backend + "/stats")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s/stats: %s", backend, resp.Status)
	}
	var stats struct {
		Renewals map[string]int `json:"renewals"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&stats); err != nil {
		return 0, fmt.Errorf("GET %s/stats: %v", backend, err)
	}
	return stats.Renewals[order], nil
}
