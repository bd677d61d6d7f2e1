// Command legacy-backend runs the stand-in legacy merchant backend on its own:
// a backend with no idempotency check, which renews an order on every
// notification it receives. Put idemgate in front of it to stop the duplicates.
//
//	go run ./examples/legacy-backend -listen 127.0.0.1:9090 -delay 200ms -fail-first 1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/examples/legacy"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9090", "address to listen on")
	delay := flag.Duration("delay", 0, "how long each renewal takes (simulates a slow backend)")
	failFirst := flag.Int("fail-first", 0, `answer "fail" (500) to the first N notifications`)
	quiet := flag.Bool("quiet", false, "do not log each renewal (for load tests)")
	returnPage := flag.Bool("return-page", false, "GET /return shows the result page only; the notify alone renews (as Alipay asks merchants)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Usage: legacy-backend [flags]

A stand-in legacy merchant backend WITHOUT an idempotency check.
  POST /notify  renews the order (out_trade_no or order_id; form, JSON or XML)
                and answers "success" (XML bodies: return_code SUCCESS)
  GET  /return  browser return: renews too, answers an HTML result page
                (-return-page: the page only, the notify alone renews)
  GET  /stats   renewals per order as JSON;  POST /reset  clears them
Orders whose id starts with %q always answer "fail" (500).

Flags:
`, legacy.FailPrefix)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}

	cfg := legacy.Config{Delay: *delay, FailFirst: *failFirst, ReturnPage: *returnPage}
	if *quiet {
		cfg.Log = io.Discard
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("legacy-backend: %v", err)
	}
	srv := &http.Server{Handler: legacy.New(cfg), ReadHeaderTimeout: 10 * time.Second}
	log.Printf("legacy-backend: listening on http://%s (delay %v, fail-first %d)", ln.Addr(), *delay, *failFirst)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("legacy-backend: %v", err)
	}
}
