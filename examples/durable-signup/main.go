// Command durable-signup runs the signup and order service of package
// signup (durable jobs: steps, a two-day sleep, a webhook's signal, an
// awaited result) against a throwaway PostgreSQL, behind its HTTP API.
// Its tests (signup/signup_test.go) stop a worker mid-signup and resume
// it on another client, each step's effect happening once.
//
//	go run ./examples/durable-signup -followup-after=2s          # serves, signs up and orders through the API, then exits
//	go run ./examples/durable-signup -serve -addr=127.0.0.1:8080 # serves until you press Ctrl-C
//
// With -serve, try:
//
//	curl -XPOST localhost:8080/signups -d '{"email":"ann@example.com"}'
//	curl 'localhost:8080/signups/1?wait=30s'
//	curl -XPOST localhost:8080/orders -d '{"order":"A-1","email":"ann@example.com","cents":1999}'
//	curl -XPOST localhost:8080/webhooks/warehouse -d '{"order":"A-1","carrier":"ups","tracking":"1Z999"}'
//	curl 'localhost:8080/orders/2?wait=30s'
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/examples/durable-signup/signup"
	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/migrations"
)

func main() {
	// FOLLOWUP_AFTER in the environment, or the flag, shortens the
	// signup's two-day sleep for a demo.
	followUp := 48 * time.Hour
	if s := os.Getenv("FOLLOWUP_AFTER"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			log.Fatalf("FOLLOWUP_AFTER: %v", err)
		}
		followUp = d
	}
	flag.DurationVar(&followUp, "followup-after", followUp, "how long after the welcome email the follow-up goes (env FOLLOWUP_AFTER)")
	serve := flag.Bool("serve", false, "serve until interrupted instead of running the demo")
	addr := flag.String("addr", "127.0.0.1:0", "the HTTP API's address")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *serve, followUp); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, addr string, serve bool, followUp time.Duration) error {
	dbURL := os.Getenv("DATABASE_URL")
	if dbURL == "" {
		env, err := devserver.Start(ctx, devserver.Options{Postgres: true})
		if err != nil {
			return err
		}
		defer env.Close()
		dbURL = env.DatabaseURL
	}
	if err := migrations.Up(ctx, dbURL); err != nil {
		return err
	}
	poolCfg, err := jobfence.PoolConfig(dbURL, signup.Queues)
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := jobfence.NewRegistry()
	signup.Register(reg, &signup.FakeProvider{Log: slog.Default()}, signup.Options{FollowUpAfter: followUp})
	client, err := jobfence.NewClient(pool, jobfence.Config{Queues: signup.Queues, Handlers: reg, Logger: slog.Default()})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	// Stopped last: a job running then is put back, and another instance
	// (or this one, restarted) resumes it at its next unrecorded step.
	defer client.Stop(context.Background())

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: signup.Handler(client), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	base := "http://" + ln.Addr().String()
	slog.Info("serving", "url", base, "follow-up after", followUp)
	if serve {
		<-ctx.Done()
		return nil
	}
	return demo(ctx, base, followUp)
}

// demo is a caller of the API: it signs up, orders, plays the warehouse's
// webhook, and awaits both results.
func demo(ctx context.Context, base string, followUp time.Duration) error {
	var s, o struct{ ID int64 }
	if err := call(ctx, "POST", base+"/signups", map[string]string{"email": "ann@example.com"}, &s); err != nil {
		return err
	}
	if err := call(ctx, "POST", base+"/orders", signup.Order{Order: "A-1", Email: "ann@example.com", Cents: 1999}, &o); err != nil {
		return err
	}
	// The order charges, then waits for this, holding no worker.
	if err := call(ctx, "POST", base+"/webhooks/warehouse",
		map[string]string{"order": "A-1", "carrier": "ups", "tracking": "1Z999"}, nil); err != nil {
		return err
	}
	var shipped signup.Shipped
	if err := call(ctx, "GET", fmt.Sprintf("%s/orders/%d?wait=30s", base, o.ID), nil, &shipped); err != nil {
		return err
	}
	fmt.Printf("order A-1: charged %s, shipped by %s as %s\n", shipped.ChargeID, shipped.Carrier, shipped.Tracking)
	if followUp > 30*time.Second {
		fmt.Printf("signup %d sends its follow-up in %s: await it with GET %s/signups/%d?wait=60s, or run with -followup-after=2s\n",
			s.ID, followUp, base, s.ID)
		return nil
	}
	var acct signup.Account
	if err := call(ctx, "GET", fmt.Sprintf("%s/signups/%d?wait=%s", base, s.ID, followUp+30*time.Second), nil, &acct); err != nil {
		return err
	}
	fmt.Printf("signup ann@example.com: customer %s, tenant %s, welcomed and followed up\n", acct.CustomerID, acct.TenantID)
	return nil
}

// errNotDone is a result the wait did not see the end of.
var errNotDone = errors.New("not done within the wait")

// call sends in as JSON and decodes the answer into out.
func call(ctx context.Context, method, url string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusAccepted && method == "GET":
		return fmt.Errorf("%s %s: %w: %s", method, url, errNotDone, b)
	case resp.StatusCode >= 300:
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, b)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}
